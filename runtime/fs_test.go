package runtime

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runtimed/runtimed/wire"
)

// --fs-root confinement reaches the fs methods of a real server connection.
func TestServerFsRootConfinement(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	c, _ := newWSBackend(t, Config{FsRoots: []string{root}}, nil)
	ctx := ctxT(t)
	if err := c.call(ctx, wire.MethodFsWriteFile, map[string]any{"path": filepath.Join(root, "f"), "dataBase64": "aGk="}, nil); err != nil {
		t.Fatalf("write inside the root: %v", err)
	}
	var got struct{ DataBase64 wire.Base64 }
	if err := c.call(ctx, wire.MethodFsReadFile, map[string]any{"path": filepath.Join(root, "f")}, &got); err != nil || string(got.DataBase64) != "hi" {
		t.Fatalf("read inside the root: %q %v", got.DataBase64, err)
	}
	for _, p := range []string{filepath.Join(outside, "secret"), filepath.Join(root, "..", filepath.Base(outside), "secret"), filepath.Join(root, "link"), "/etc/passwd"} {
		var raw json.RawMessage
		err := c.call(ctx, wire.MethodFsReadFile, map[string]any{"path": p}, &raw)
		re, ok := err.(*RPCError)
		if !ok || re.Code != wire.CodeInvalidRequest {
			t.Errorf("read %s outside the root: %v %s; want -32600", p, err, raw)
		}
	}
	if err := (Config{FsRoots: []string{filepath.Join(root, "missing")}}).Validate(); err == nil {
		t.Error("Validate accepted a missing fs root")
	}
}

// With FsRoots, a process's cwd must lie inside a root on every backend
// (Local checks it as the server does).
func TestFsRootsConfineCwd(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	for _, bc := range backendsWith(Config{FsRoots: []string{root}}) {
		t.Run(bc.name, func(t *testing.T) {
			b := bc.make(t)
			ctx := ctxT(t)
			_, err := b.Start(ctx, Spec{Argv: []string{"pwd"}, Dir: outside})
			var re *RPCError
			if !errors.As(err, &re) || re.Code != wire.CodeInvalidRequest || !strings.Contains(re.Message, "outside the allowed roots") {
				t.Fatalf("cwd outside the root: %v; want -32600 outside the allowed roots", err)
			}
			p, err := b.Start(ctx, Spec{Argv: []string{"pwd"}, Dir: root})
			if err != nil {
				t.Fatalf("cwd inside the root: %v", err)
			}
			if st, err := p.Wait(ctx); err != nil || st.Code != 0 {
				t.Fatalf("wait: %v %v", st, err)
			}
		})
	}
}
