package fsops

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runtimed/runtimed/wire"
)

// sandbox lays out base/root (the only root) and base/outside with a
// secret, plus links inside the root that lead out: an absolute one, a
// relative one, a chain, a dangling one whose target would be outside, and
// a sibling directory whose name extends the root's.
func sandbox(t *testing.T) (base, root string, roots Roots) {
	t.Helper()
	base = tmp(t)
	root = filepath.Join(base, "root")
	outside := filepath.Join(base, "outside")
	mustMkdir(t, filepath.Join(root, "in"))
	mustMkdir(t, outside)
	mustMkdir(t, filepath.Join(base, "rootevil"))
	writeTestFile(t, filepath.Join(outside, "secret"), "secret", 0o644)
	writeTestFile(t, filepath.Join(base, "rootevil", "secret"), "secret", 0o644)
	writeTestFile(t, filepath.Join(root, "in", "ok"), "ok", 0o644)
	mustSymlink(t, outside, filepath.Join(root, "abs"))
	mustSymlink(t, "../outside", filepath.Join(root, "rel"))
	mustSymlink(t, "../../outside", filepath.Join(root, "in", "deeprel"))
	mustSymlink(t, "hop2", filepath.Join(root, "hop1"))
	mustSymlink(t, "rel", filepath.Join(root, "hop2"))
	mustSymlink(t, "../outside/created-by-escape", filepath.Join(root, "dangling-out"))
	mustSymlink(t, "in/ok", filepath.Join(root, "good-link"))
	mustSymlink(t, "in", filepath.Join(root, "good-dir-link"))
	r, err := NewRoots([]string{root})
	if err != nil {
		t.Fatal(err)
	}
	return base, root, r
}

func TestConfinementRefusesEscapes(t *testing.T) {
	base, root, roots := sandbox(t)
	outside := filepath.Join(base, "outside")
	escapes := map[string]string{
		"dotdot":         root + "/../outside/secret",
		"dotdot-deep":    root + "/in/../../outside/secret",
		"dotdot-missing": root + "/missing/../../outside/secret",
		"abs-link":       root + "/abs/secret",
		"rel-link":       root + "/rel/secret",
		"rel-link-deep":  root + "/in/deeprel/secret",
		"link-chain":     root + "/hop1/secret",
		"link-then-..":   root + "/good-dir-link/../../outside/secret",
		"out-link-..":    root + "/abs/../outside/secret", // ".." applies to the link's target
		"missing-..":     root + "/missing/../../outside/secret-new",
		"prefix-sibling": base + "/rootevil/secret",
		"uri":            "file://" + root + "/../outside/secret",
		"plain-outside":  outside + "/secret",
	}
	var h Handles
	defer h.CloseAll()
	for name, p := range escapes {
		t.Run(name, func(t *testing.T) {
			newPath := p + "-new"
			attempts := []struct {
				method string
				params obj
			}{
				{wire.MethodFsReadFile, obj{"path": p}},
				{wire.MethodFsGetMetadata, obj{"path": p}},
				{wire.MethodFsCanonicalize, obj{"path": p}},
				{wire.MethodFsReadDirectory, obj{"path": p[:strings.LastIndexByte(p, '/')]}}, // not filepath.Dir: no cleaning
				{wire.MethodFsOpen, obj{"handleId": name, "path": p}},
				{wire.MethodFsWriteFile, obj{"path": p, "dataBase64": "cHduZWQ="}},
				{wire.MethodFsWriteFile, obj{"path": newPath, "dataBase64": "cHduZWQ="}},
				{wire.MethodFsCreateDirectory, obj{"path": newPath}},
				{wire.MethodFsRemove, obj{"path": p}},
				{wire.MethodFsCopy, obj{"sourcePath": p, "destinationPath": root + "/in/stolen"}},
				{wire.MethodFsCopy, obj{"sourcePath": root + "/in/ok", "destinationPath": p}},
				{wire.MethodFsCopy, obj{"sourcePath": root + "/in", "destinationPath": newPath, "recursive": true}},
			}
			for _, a := range attempts {
				_, werr := call(t, roots, &h, a.method, a.params)
				arg, _ := a.params["path"].(string)
				if arg == "" {
					arg, _ = a.params["sourcePath"].(string)
					if arg != p {
						arg, _ = a.params["destinationPath"].(string)
					}
				}
				if werr == nil || werr.Code != wire.CodeInvalidRequest || werr.Message != "path "+arg+" is outside the allowed roots" {
					t.Errorf("%s %v: got %+v, want the outside-roots error", a.method, a.params, werr)
				}
			}
		})
	}
	// Nothing outside changed, and nothing was stolen in.
	if readTestFile(t, filepath.Join(outside, "secret")) != "secret" || readTestFile(t, filepath.Join(base, "rootevil", "secret")) != "secret" {
		t.Fatal("a secret was modified")
	}
	ents, _ := os.ReadDir(outside)
	if len(ents) != 1 {
		t.Fatalf("files appeared outside: %v", ents)
	}
	if _, err := os.Lstat(root + "/in/stolen"); !os.IsNotExist(err) {
		t.Fatal("an outside file was copied in")
	}
	if h.Len() != 0 {
		t.Fatal("an outside file was opened")
	}

	// A dangling link whose target would be outside cannot be written through.
	_, werr := call(t, roots, nil, wire.MethodFsWriteFile, obj{"path": root + "/dangling-out", "dataBase64": "eA=="})
	wantErr(t, werr, wire.CodeInvalidRequest, "path "+root+"/dangling-out is outside the allowed roots", true)
	if _, err := os.Lstat(filepath.Join(outside, "created-by-escape")); !os.IsNotExist(err) {
		t.Fatal("write through a dangling link created a file outside")
	}
	// getMetadata of a link that leads out is refused (it would describe the target).
	_, werr = call(t, roots, nil, wire.MethodFsGetMetadata, obj{"path": root + "/abs"})
	wantErr(t, werr, wire.CodeInvalidRequest, "is outside the allowed roots", false)
	// The root's parent is outside.
	_, werr = call(t, roots, nil, wire.MethodFsReadDirectory, obj{"path": root + "/.."})
	wantErr(t, werr, wire.CodeInvalidRequest, "is outside the allowed roots", false)
}

func TestConfinementCopyCannotBeLedOut(t *testing.T) {
	base, root, roots := sandbox(t)
	// The destination already holds a link to the outside where the source
	// has a directory: merging must not follow it.
	mustMkdir(t, filepath.Join(root, "src", "sub"))
	writeTestFile(t, filepath.Join(root, "src", "sub", "planted"), "x", 0o644)
	mustMkdir(t, filepath.Join(root, "dst"))
	mustSymlink(t, filepath.Join(base, "outside"), filepath.Join(root, "dst", "sub"))
	_, werr := call(t, roots, nil, wire.MethodFsCopy, obj{"sourcePath": root + "/src", "destinationPath": root + "/dst", "recursive": true})
	wantErr(t, werr, wire.CodeInternal, "file exists", false)
	if _, err := os.Lstat(filepath.Join(base, "outside", "planted")); !os.IsNotExist(err) {
		t.Fatal("copy wrote outside the roots through a link in the destination")
	}
	// A link that leads out may be copied (as a link), but not read through.
	mustCall(t, roots, nil, wire.MethodFsCopy, obj{"sourcePath": root + "/abs", "destinationPath": root + "/in/abs-copy"})
	_, werr = call(t, roots, nil, wire.MethodFsReadFile, obj{"path": root + "/in/abs-copy/secret"})
	wantErr(t, werr, wire.CodeInvalidRequest, "is outside the allowed roots", false)
}

func TestConfinementAllowsInside(t *testing.T) {
	base, root, roots := sandbox(t)
	var h Handles
	defer h.CloseAll()
	// Reads through links that stay inside.
	for _, p := range []string{root + "/in/ok", root + "/good-link", root + "/good-dir-link/ok", root + "/in/../in/./ok", "file://" + root + "/good-link", "file://localhost" + root + "/in/ok"} {
		res := mustCall(t, roots, nil, wire.MethodFsReadFile, obj{"path": p})
		if string(res.(wire.FsReadFileResult).DataBase64) != "ok" {
			t.Fatalf("%s read %q", p, res)
		}
	}
	mustCall(t, roots, &h, wire.MethodFsOpen, obj{"handleId": "a", "path": root + "/good-link"})
	mustCall(t, roots, nil, wire.MethodFsWriteFile, obj{"path": root + "/in/new", "dataBase64": "bmV3"})
	mustCall(t, roots, nil, wire.MethodFsCreateDirectory, obj{"path": root + "/made/deep"})
	mustCall(t, roots, nil, wire.MethodFsCopy, obj{"sourcePath": root + "/in", "destinationPath": root + "/made/in-copy", "recursive": true})
	if readTestFile(t, root+"/made/in-copy/new") != "new" {
		t.Fatal("copy inside the root")
	}
	// The root itself may be listed and described, not removed.
	res := mustCall(t, roots, nil, wire.MethodFsReadDirectory, obj{"path": root})
	kinds := map[string][2]bool{}
	for _, e := range res.(wire.FsReadDirectoryResult).Entries {
		kinds[e.FileName] = [2]bool{e.IsDirectory, e.IsFile}
	}
	// Links leading out are listed as neither directory nor file.
	if kinds["abs"] != [2]bool{false, false} || kinds["good-dir-link"] != [2]bool{true, false} || kinds["good-link"] != [2]bool{false, true} {
		t.Fatalf("root listing kinds: %v", kinds)
	}
	if m := mustCall(t, roots, nil, wire.MethodFsGetMetadata, obj{"path": root}).(wire.FsMetadataResult); !m.IsDirectory {
		t.Fatal("root metadata")
	}
	_, werr := call(t, roots, nil, wire.MethodFsRemove, obj{"path": root + "/in/.."})
	wantErr(t, werr, wire.CodeInvalidRequest, "path "+root+"/in/.. is an allowed root and cannot be removed", true)
	// Links that lead out are removed as links; their targets stay.
	for _, l := range []string{"abs", "rel", "hop1", "dangling-out"} {
		mustCall(t, roots, nil, wire.MethodFsRemove, obj{"path": root + "/" + l, "force": false})
		if _, err := os.Lstat(root + "/" + l); !os.IsNotExist(err) {
			t.Fatalf("link %s not removed", l)
		}
	}
	if readTestFile(t, filepath.Join(base, "outside", "secret")) != "secret" {
		t.Fatal("removing a link touched its target")
	}

	// A root given through a link is resolved: both spellings work.
	alias := filepath.Join(base, "alias")
	mustSymlink(t, root, alias)
	aliased, err := NewRoots([]string{alias})
	if err != nil {
		t.Fatal(err)
	}
	if got := aliased.Dirs(); len(got) != 1 || got[0] != root {
		t.Fatalf("Dirs() = %v", got)
	}
	mustCall(t, aliased, nil, wire.MethodFsReadFile, obj{"path": alias + "/in/ok"})
	mustCall(t, aliased, nil, wire.MethodFsReadFile, obj{"path": root + "/in/ok"})
	res = mustCall(t, aliased, nil, wire.MethodFsCanonicalize, obj{"path": alias + "/good-link"})
	if res.(wire.FsPathResult).Path != root+"/in/ok" {
		t.Fatalf("canonicalize = %v", res)
	}

	// Several roots: a path inside any of them is allowed.
	other := filepath.Join(base, "rootevil")
	two, err := NewRoots([]string{root, other})
	if err != nil {
		t.Fatal(err)
	}
	mustCall(t, two, nil, wire.MethodFsReadFile, obj{"path": other + "/secret"})
	mustCall(t, two, nil, wire.MethodFsReadFile, obj{"path": root + "/in/ok"})
	// No roots: the whole filesystem.
	mustCall(t, all, nil, wire.MethodFsReadFile, obj{"path": base + "/outside/secret"})
}

func TestNewRootsErrors(t *testing.T) {
	dir := tmp(t)
	writeTestFile(t, filepath.Join(dir, "file"), "", 0o644)
	if _, err := NewRoots([]string{filepath.Join(dir, "missing")}); err == nil {
		t.Error("a missing root was accepted")
	}
	if _, err := NewRoots([]string{filepath.Join(dir, "file")}); err == nil {
		t.Error("a file root was accepted")
	}
	r, err := NewRoots(nil)
	if err != nil || len(r.Dirs()) != 0 || !r.Contains("/etc") {
		t.Errorf("no roots: %v %v", r.Dirs(), err)
	}
	slash, _ := NewRoots([]string{"/"})
	if !slash.Contains("/anything/at/all") {
		t.Error("root / does not contain everything")
	}
}
