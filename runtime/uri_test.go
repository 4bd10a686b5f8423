package runtime

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/runtimed/runtimed/wire"
	"github.com/runtimed/runtimed/wire/wiretest"
)

// Issue 23: every method that answers a file: URI spells a path the same
// way (wire.FileURI, the Codex client's own spelling), and each URI reads
// back to the path. Before, environment/info said file:///home/a%5B1%5D
// where fs answers said file:///home/a[1].
func TestFileURIsAgree(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a[1] 100% #é日")
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub", "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	want := wire.FileURI(dir)
	if !strings.Contains(want, "a[1]%20100%25%20%23%C3%A9%E6%97%A5") {
		t.Fatalf("wire.FileURI(%q) = %q", dir, want)
	}
	// environment/info reports the cwd, the home directory and $TMPDIR.
	t.Chdir(dir)
	t.Setenv("HOME", dir)
	t.Setenv("TMPDIR", dir)
	t.Setenv("CODEX_HOME", dir) // environmentConfig/read reports it
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte("[mcp_servers.docs]\nurl = \"http://x\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// With the directory as the only fs root, a link out of it is a walk
	// error, which names the path the way the entries do.
	if err := os.Symlink("/", filepath.Join(dir, "sub", "out")); err != nil {
		t.Fatal(err)
	}
	srv := NewServer(Config{Logger: zaptest.NewLogger(t), FsRoots: []string{dir}})
	ct, st := wiretest.MemPipe(16)
	served := make(chan struct{})
	go func() { _ = srv.ServeTransport(st, false); close(served) }()
	c := wire.NewClient(ct, wire.ClientOptions{})
	t.Cleanup(func() { _ = c.Close(); <-served; _ = srv.Close() })
	ctx := ctxT(t)
	call := func(method string, params any, out any) {
		t.Helper()
		res, err := c.Call(ctx, method, params)
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		if err := json.Unmarshal(res, out); err != nil {
			t.Fatalf("%s: %v", method, err)
		}
	}

	got := map[string]string{} // where → the URI it gave for dir
	var ini struct {
		EnvironmentInfo wire.EnvironmentInfo `json:"environmentInfo"`
	}
	call(wire.MethodInitialize, map[string]any{"clientName": "uri"}, &ini)
	if err := c.Notify(ctx, wire.MethodInitialized, nil); err != nil {
		t.Fatal(err)
	}
	var env wire.EnvironmentInfo
	call(wire.MethodEnvironmentInfo, nil, &env)
	for name, info := range map[string]wire.EnvironmentInfo{"initialize": ini.EnvironmentInfo, "environment/info": env} {
		if info.Cwd != nil {
			got[name+" cwd"] = *info.Cwd
		}
		got[name+" userHomeDir"] = info.UserHomeDir
		got[name+" tempDir"] = info.TempDir
		for _, d := range info.TemporaryDirectories {
			got[name+" temporaryDirectories"] = d
		}
	}
	var cfg struct {
		UserHomeDir  string `json:"userHomeDir"`
		CodexHomeDir string `json:"codexHomeDir"`
		Config       struct {
			Layers []struct {
				BaseDir string `json:"baseDir"`
			} `json:"layers"`
		} `json:"config"`
	}
	call(wire.MethodEnvironmentConfigRead, map[string]any{"cwd": want, "configPaths": [][]string{{"mcp_servers"}}, "requirementsPaths": [][]string{}}, &cfg)
	got["environmentConfig/read userHomeDir"] = cfg.UserHomeDir
	got["environmentConfig/read codexHomeDir"] = cfg.CodexHomeDir
	for _, l := range cfg.Config.Layers {
		got["environmentConfig/read baseDir"] = l.BaseDir
	}
	for _, arg := range []string{dir, want, strings.Replace(want, "[1]", "%5B1%5D", 1), "file://localhost" + strings.TrimPrefix(want, "file://")} {
		var canon wire.FsPathResult
		call(wire.MethodFsCanonicalize, wire.FsPathParams{Path: arg}, &canon)
		if wire.IsFileURI(arg) {
			got["fs/canonicalize "+arg] = canon.Path
		} else if canon.Path != dir {
			t.Errorf("fs/canonicalize of the native path = %q, want %q", canon.Path, dir)
		}
	}
	// fs/walk of the URI: its entries are the URI with the rest appended
	// (the server also keeps its sandbox scratch directories in $TMPDIR).
	var walk wire.FsWalkResult
	call(wire.MethodFsWalk, map[string]any{"path": want, "options": map[string]any{"maxDepth": 3, "maxDirectories": 10, "maxEntries": 20, "followDirectorySymlinks": true}}, &walk)
	n := 0
	for _, e := range walk.Entries {
		switch e.Path {
		case want + "/sub", want + "/sub/f":
			got["fs/walk entry "+e.Path] = strings.TrimSuffix(strings.TrimSuffix(e.Path, "/f"), "/sub")
			n++
		}
	}
	if n != 2 {
		t.Errorf("fs/walk entries %+v, want %s/sub and %s/sub/f among them", walk.Entries, want, want)
	}
	if len(walk.Errors) != 1 || walk.Errors[0].Path != want+"/sub/out" || !strings.Contains(walk.Errors[0].Message, want+"/sub/out") {
		t.Errorf("fs/walk errors %+v, want one for %s/sub/out, in that spelling", walk.Errors, want)
	} else {
		got["fs/walk error"] = strings.TrimSuffix(walk.Errors[0].Path, "/sub/out")
	}
	// A process started in the URI's directory runs there.
	var started wire.StartResult
	call(wire.MethodProcessStart, map[string]any{"processId": "p", "argv": []string{"/bin/sh", "-c", "pwd > pwd.txt"}, "cwd": want, "env": map[string]string{}, "tty": false}, &started)
	var read struct {
		Closed bool `json:"closed"`
	}
	call(wire.MethodProcessRead, map[string]any{"processId": "p", "waitMs": 10000}, &read)
	for i := 0; i < 10 && !read.Closed; i++ {
		call(wire.MethodProcessRead, map[string]any{"processId": "p", "afterSeq": 1, "waitMs": 10000}, &read)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "pwd.txt")); err != nil || strings.TrimSpace(string(b)) != dir {
		t.Errorf("process started with cwd %q ran in %q (%v), want %q", want, b, err, dir)
	}

	if len(got) < 15 {
		t.Errorf("only %d URIs collected: %v", len(got), got)
	}
	for where, u := range got {
		if u != want {
			t.Errorf("%s = %q, want %q", where, u, want)
		}
		if p, err := wire.ParseFileURI(u); err != nil || p != dir {
			t.Errorf("%s: %q reads back as %q, %v; want %q", where, u, p, err, dir)
		}
	}
	// The Go client's EnvironmentInfo converts the URIs back to the path.
	local := NewLocal(Config{Logger: zaptest.NewLogger(t)})
	defer local.Close()
	info, err := local.EnvironmentInfo(ctx)
	if err != nil || info.Cwd != dir || info.UserHomeDir != dir || info.TempDir != dir {
		t.Errorf("Local.EnvironmentInfo = %+v, %v; want %q everywhere", info, err, dir)
	}
}
