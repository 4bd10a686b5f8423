package fsops

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"

	"github.com/runtimed/runtimed/wire"
)

// fsSandbox is Codex's workspace-write shape with a deny entry, as the
// sandbox field of an fs request.
func fsSandbox(root string, extra ...obj) obj {
	special := func(kind, access string) obj {
		return obj{"path": obj{"type": "special", "value": obj{"kind": kind}}, "access": access}
	}
	entries := []any{special("root", "read"), special("project_roots", "write"),
		obj{"path": obj{"type": "special", "value": obj{"kind": "project_roots", "subpath": ".git"}}, "access": "read", "missing_path_behavior": "skip"}}
	for _, e := range extra {
		entries = append(entries, e)
	}
	return obj{"permissions": obj{"type": "managed", "network": "restricted",
		"file_system": obj{"type": "restricted", "entries": entries}}, "workspaceRoots": []string{"file://" + root}}
}

// TestFsSandbox: fs requests that carry a sandbox are held to it before
// they touch the disk; without one they are not.
func TestFsSandbox(t *testing.T) {
	base := tmp(t)
	ws, outside := filepath.Join(base, "ws"), filepath.Join(base, "outside")
	mustMkdir(t, filepath.Join(ws, ".git"))
	mustMkdir(t, outside)
	writeTestFile(t, filepath.Join(ws, "secret"), "s", 0o644)
	writeTestFile(t, filepath.Join(outside, "f"), "outside", 0o644)
	deny := obj{"path": obj{"type": "path", "path": filepath.Join(ws, "secret")}, "access": "deny"}
	sb := fsSandbox(ws, deny)
	data := base64.StdEncoding.EncodeToString([]byte("x"))
	h := &Handles{}

	mustCall(t, Roots{}, h, "fs/writeFile", obj{"path": filepath.Join(ws, "in"), "dataBase64": data, "sandbox": sb})
	_, werr := call(t, Roots{}, h, "fs/writeFile", obj{"path": filepath.Join(outside, "out"), "dataBase64": data, "sandbox": sb})
	wantErr(t, werr, wire.CodeInvalidRequest, "writing "+filepath.Join(outside, "out")+": permission denied by the request's sandbox", true)
	_, werr = call(t, Roots{}, h, "fs/writeFile", obj{"path": filepath.Join(ws, ".git", "config"), "dataBase64": data, "sandbox": sb})
	wantErr(t, werr, wire.CodeInvalidRequest, "permission denied by the request's sandbox", false)
	_, werr = call(t, Roots{}, h, "fs/readFile", obj{"path": filepath.Join(ws, "secret"), "sandbox": sb})
	wantErr(t, werr, wire.CodeInvalidRequest, "reading", false)
	mustCall(t, Roots{}, h, "fs/readFile", obj{"path": filepath.Join(outside, "f"), "sandbox": sb}) // root: read
	_, werr = call(t, Roots{}, h, "fs/remove", obj{"path": filepath.Join(outside, "f"), "sandbox": sb})
	wantErr(t, werr, wire.CodeInvalidRequest, "permission denied", false)
	_, werr = call(t, Roots{}, h, "fs/copy", obj{"sourcePath": filepath.Join(ws, "in"), "destinationPath": filepath.Join(outside, "copy"), "recursive": false, "sandbox": sb})
	wantErr(t, werr, wire.CodeInvalidRequest, "permission denied", false)
	_, werr = call(t, Roots{}, h, "fs/createDirectory", obj{"path": filepath.Join(outside, "d"), "sandbox": sb})
	wantErr(t, werr, wire.CodeInvalidRequest, "permission denied", false)
	// A symlink planted in the workspace does not lead a write outside.
	mustSymlink(t, outside, filepath.Join(ws, "link"))
	_, werr = call(t, Roots{}, h, "fs/writeFile", obj{"path": filepath.Join(ws, "link", "via"), "dataBase64": data, "sandbox": sb})
	wantErr(t, werr, wire.CodeInvalidRequest, "permission denied", false)
	for _, f := range []string{"out", "copy", "d", "via"} {
		if _, err := os.Lstat(filepath.Join(outside, f)); err == nil {
			t.Errorf("%s was created outside the sandbox's roots", f)
		}
	}
	if readTestFile(t, filepath.Join(outside, "f")) != "outside" {
		t.Errorf("the outside file changed")
	}
	// Read-only: nothing written anywhere; disabled or null: no check.
	ro := obj{"permissions": obj{"type": "managed", "network": "restricted", "file_system": obj{"type": "restricted",
		"entries": []any{obj{"path": obj{"type": "special", "value": obj{"kind": "root"}}, "access": "read"}}}}}
	_, werr = call(t, Roots{}, h, "fs/writeFile", obj{"path": filepath.Join(ws, "ro"), "dataBase64": data, "sandbox": ro})
	wantErr(t, werr, wire.CodeInvalidRequest, "permission denied", false)
	mustCall(t, Roots{}, h, "fs/writeFile", obj{"path": filepath.Join(outside, "free"), "dataBase64": data, "sandbox": obj{"permissions": obj{"type": "disabled"}}})
	mustCall(t, Roots{}, h, "fs/writeFile", obj{"path": filepath.Join(outside, "free2"), "dataBase64": data, "sandbox": nil})
	// Malformed: -32602 naming the field.
	_, werr = call(t, Roots{}, h, "fs/writeFile", obj{"path": filepath.Join(ws, "x"), "dataBase64": data, "sandbox": obj{"permissions": obj{"type": "weird"}}})
	wantErr(t, werr, wire.CodeInvalidParams, "sandbox.permissions.type", false)
}

// TestFsSandboxMissingEntry: an entry for a path that does not exist yet
// (as Codex 0.135 sends) does not refuse the request; it governs the path.
func TestFsSandboxMissingEntry(t *testing.T) {
	base := tmp(t)
	ws := filepath.Join(base, "ws")
	mustMkdir(t, ws)
	later := filepath.Join(ws, "later")
	sb := fsSandbox(ws, obj{"path": obj{"type": "path", "path": later}, "access": "read"})
	data := base64.StdEncoding.EncodeToString([]byte("x"))
	h := &Handles{}
	mustCall(t, Roots{}, h, "fs/writeFile", obj{"path": filepath.Join(ws, "f"), "dataBase64": data, "sandbox": sb})
	mustMkdir(t, later)
	_, werr := call(t, Roots{}, h, "fs/writeFile", obj{"path": filepath.Join(later, "g"), "dataBase64": data, "sandbox": sb})
	wantErr(t, werr, wire.CodeInvalidRequest, "permission denied", false)
}
