package runtime

import (
	"encoding/json"
	"os"
	"path/filepath"
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
