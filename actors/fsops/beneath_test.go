package fsops

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/runtimed/runtimed/wire"
)

// outsideState is everything under dir: names, kinds and contents, to
// prove that nothing there changed.
func outsideState(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		b.WriteString(p + " " + fi.Mode().String())
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b.WriteString(" " + string(data))
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestBeneathRefusesEscapes calls every operation of beneath.go with
// physical paths that pass through a link leading out of the root, as a
// path checked a moment earlier would after a directory was swapped for
// such a link: each is refused with an *outsideError by the root handle
// itself (the path resolver is not involved), and nothing outside is read
// or changed.
func TestBeneathRefusesEscapes(t *testing.T) {
	base, root, roots := sandbox(t)
	outside := filepath.Join(base, "outside")
	mustMkdir(t, filepath.Join(outside, "dir"))
	before := outsideState(t, outside)
	for _, link := range []string{"abs", "rel", "in/deeprel", "hop1"} {
		via := filepath.Join(root, link) // leads to outside
		ops := map[string]func() error{
			"openFile read": func() error {
				f, err := roots.openFile(via+"/secret", os.O_RDONLY, 0)
				if err == nil {
					f.Close()
				}
				return err
			},
			"openFile create": func() error {
				f, err := roots.openFile(via+"/new", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
				if err == nil {
					f.Close()
				}
				return err
			},
			"lstat":     func() error { _, err := roots.lstat(via + "/secret"); return err },
			"stat":      func() error { _, err := roots.stat(via); return err },
			"mkdir":     func() error { return roots.mkdir(via+"/d", 0o755) },
			"mkdirAll":  func() error { return roots.mkdirAll(via+"/d/e", 0o755) },
			"remove":    func() error { return roots.remove(via + "/secret") },
			"removeAll": func() error { return roots.removeAll(via + "/dir") },
			"parentOf": func() error {
				d, _, err := roots.parentOf(via + "/x")
				if err == nil {
					d.close()
				}
				return err
			},
			"readlink":    func() error { _, err := roots.readlink(via + "/secret"); return err },
			"symlink":     func() error { return roots.symlink("x", via+"/l") },
			"chmod":       func() error { return roots.chmod(via+"/secret", 0o777) },
			"readDir":     func() error { _, err := roots.readDir(via); return err },
			"replaceFile": func() error { return roots.replaceFile(via+"/secret", strings.NewReader("pwned"), nil, true) },
			"copyFile":    func() error { return roots.copyFile(via+"/secret", root+"/in/copied", 0o644) },
			"copyTree":    func() error { return roots.copyTree(root+"/in", via+"/tree", 0o755, true) },
			"copySymlink": func() error { return roots.copySymlink(root+"/good-link", via+"/l") },
			"startReplace": func() error {
				f, _, err := roots.startReplace(via + "/x")
				if err == nil {
					f.Close()
				}
				return err
			},
			"endReplace": func() error {
				f, tmp, err := roots.startReplace(root + "/in/x")
				if err != nil {
					return err
				}
				return roots.endReplace(f, tmp, via+"/secret")
			},
		}
		for name, op := range ops {
			err := op()
			var oe *outsideError
			if !errors.As(err, &oe) {
				t.Errorf("%s via %s: got %v, want an outsideError", name, link, err)
			}
		}
	}
	if got := outsideState(t, outside); got != before {
		t.Fatalf("outside changed:\n%s\nwas:\n%s", got, before)
	}
	for _, p := range []string{root + "/in/stolen", root + "/in/copied"} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s: something was brought in", p)
		}
	}
	// Links that stay inside are followed, by the handle too.
	if f, err := roots.openFile(root+"/good-dir-link/ok", os.O_RDONLY, 0); err != nil {
		t.Errorf("inside link: %v", err)
	} else {
		f.Close()
	}
	if fi, err := roots.stat(root + "/good-link"); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("stat of an inside link: %v %v", fi, err)
	}
	// The answer names the argument as the client sent it.
	tg := target{arg: "file://" + root + "/x", abs: root + "/x", phys: root + "/x", uri: true}
	werr := osError(&outsideError{path: root + "/x/y"}, tg)
	if werr.Code != wire.CodeInvalidRequest || werr.Message != "path file://"+root+"/x/y is outside the allowed roots" {
		t.Errorf("osError: %+v", werr)
	}
	if werr := osError(retarget(&outsideError{path: root + "/.x.tmp"}, "rename", root+"/x"), tg); werr.Message != "path file://"+root+"/x is outside the allowed roots" {
		t.Errorf("retarget: %+v", werr)
	}
}

// TestBeneathAt checks the mapping of a physical path to a root handle.
func TestBeneathAt(t *testing.T) {
	base := tmp(t)
	outer := filepath.Join(base, "outer")
	inner := filepath.Join(outer, "inner")
	mustMkdir(t, inner)
	roots, err := NewRoots([]string{inner, outer})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		phys, root, rel string
	}{
		{outer, outer, "."},
		{outer + "/x/y", outer, "x/y"},
		{inner, inner, "."},
		{inner + "/z", inner, "z"}, // the innermost root
		{outer + "/innerx", outer, "innerx"},
	}
	for _, c := range cases {
		h, rel, err := roots.at(c.phys)
		if err != nil || h.Name() != c.root || rel != c.rel {
			t.Errorf("at(%s) = %v %q %v, want %s %q", c.phys, h, rel, err, c.root, c.rel)
		}
	}
	for _, p := range []string{base, base + "/outerx", "/", base + "/x"} {
		if _, _, err := roots.at(p); !isOutside(err) {
			t.Errorf("at(%s): %v, want outside", p, err)
		}
	}
	if h, rel, err := all.at("/etc/passwd"); h != nil || rel != "/etc/passwd" || err != nil {
		t.Errorf("no roots: %v %q %v", h, rel, err)
	}
	slash, err := NewRoots([]string{"/"})
	if err != nil {
		t.Fatal(err)
	}
	if h, rel, err := slash.at("/etc/passwd"); err != nil || h.Name() != "/" || rel != "etc/passwd" {
		t.Errorf("root /: %v %q %v", h, rel, err)
	}
	if _, rel, _ := slash.at("/"); rel != "." {
		t.Errorf("root / itself: %q", rel)
	}
}

// TestOSErrorsUnderRoots runs TestOSErrors' requests again with their
// directory as the only root: the answers are the same, word for word.
func TestOSErrorsUnderRoots(t *testing.T) {
	dir := tmp(t)
	rooted, err := NewRoots([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	mk := func() {
		// Emptied, not removed: the root handle stays on the directory.
		for _, e := range dirNames(t, dir) {
			os.RemoveAll(filepath.Join(dir, e))
		}
		mustMkdir(t, filepath.Join(dir, "tree/sub"))
		writeTestFile(t, filepath.Join(dir, "file"), "0123456789", 0o644)
		writeTestFile(t, filepath.Join(dir, "tree/sub/f"), "f", 0o644)
		mustSymlink(t, "loop2", filepath.Join(dir, "loop1"))
		mustSymlink(t, "loop1", filepath.Join(dir, "loop2"))
		mustSymlink(t, "file", filepath.Join(dir, "flink"))
		mustSymlink(t, "missing", filepath.Join(dir, "dangling"))
	}
	reqs := []struct {
		method string
		params obj
	}{
		{wire.MethodFsReadFile, obj{"path": dir + "/missing"}},
		{wire.MethodFsReadFile, obj{"path": dir + "/no/such"}},
		{wire.MethodFsReadFile, obj{"path": dir}},
		{wire.MethodFsReadFile, obj{"path": dir + "/file/x"}},
		{wire.MethodFsReadFile, obj{"path": dir + "/loop1"}},
		{wire.MethodFsReadFile, obj{"path": dir + "/a\x00b"}},
		{wire.MethodFsReadFile, obj{"path": dir + "/" + strings.Repeat("n", 300)}},
		{wire.MethodFsReadFile, obj{"path": dir + strings.Repeat("/d", 3000)}},
		{wire.MethodFsWriteFile, obj{"path": dir + "/no/f", "dataBase64": ""}},
		{wire.MethodFsWriteFile, obj{"path": dir, "dataBase64": ""}},
		{wire.MethodFsWriteFile, obj{"path": dir + "/tree", "dataBase64": ""}},
		{wire.MethodFsWriteFile, obj{"path": dir + "/" + strings.Repeat("n", 300), "dataBase64": ""}},
		{wire.MethodFsCreateDirectory, obj{"path": dir + "/file"}},
		{wire.MethodFsCreateDirectory, obj{"path": dir + "/file/x/y"}},
		{wire.MethodFsCreateDirectory, obj{"path": dir + "/tree", "recursive": false}},
		{wire.MethodFsCreateDirectory, obj{"path": dir + "/no/x", "recursive": false}},
		{wire.MethodFsCreateDirectory, obj{"path": dir + "/new/a/b"}},
		{wire.MethodFsCreateDirectory, obj{"path": dir + "/flink/x"}},
		{wire.MethodFsGetMetadata, obj{"path": dir + "/missing"}},
		{wire.MethodFsGetMetadata, obj{"path": dir + "/dangling"}},
		{wire.MethodFsGetMetadata, obj{"path": dir + "/flink"}},
		{wire.MethodFsCanonicalize, obj{"path": dir + "/missing"}},
		{wire.MethodFsReadDirectory, obj{"path": dir + "/missing"}},
		{wire.MethodFsReadDirectory, obj{"path": dir + "/file"}},
		{wire.MethodFsReadDirectory, obj{"path": dir}},
		{wire.MethodFsRemove, obj{"path": dir + "/missing", "force": false}},
		{wire.MethodFsRemove, obj{"path": dir + "/tree", "recursive": false}},
		{wire.MethodFsRemove, obj{"path": dir + "/tree/sub/f/x", "force": false}},
		{wire.MethodFsRemove, obj{"path": dir + "/tree"}},
		{wire.MethodFsCopy, obj{"sourcePath": dir + "/missing", "destinationPath": dir + "/c"}},
		{wire.MethodFsCopy, obj{"sourcePath": dir + "/file", "destinationPath": dir + "/tree"}},
		{wire.MethodFsCopy, obj{"sourcePath": dir + "/file", "destinationPath": dir + "/no/c"}},
		{wire.MethodFsCopy, obj{"sourcePath": dir + "/tree", "destinationPath": dir + "/file", "recursive": true}},
		{wire.MethodFsCopy, obj{"sourcePath": dir + "/tree", "destinationPath": dir + "/t2/deep", "recursive": true}},
		{wire.MethodFsCopy, obj{"sourcePath": dir + "/flink", "destinationPath": dir + "/tree/sub/f"}},
		{wire.MethodFsOpen, obj{"handleId": "r", "path": dir + "/missing"}},
		{wire.MethodFsOpen, obj{"handleId": "w", "path": dir + "/tree", "mode": "replace"}},
		{wire.MethodFsOpen, obj{"handleId": "w2", "path": dir + "/no/x", "mode": "replace"}},
	}
	run := func(roots Roots) []string {
		mk()
		var h Handles
		defer h.CloseAll()
		var out []string
		for _, r := range reqs {
			res, werr := call(t, roots, &h, r.method, r.params)
			if md, ok := res.(wire.FsMetadataResult); ok {
				md.CreatedAtMs, md.ModifiedAtMs = 0, 0 // the tree is made afresh each run
				res = md
			}
			out = append(out, strings.Join([]string{r.method, errString(werr), jsonString(t, res)}, " "))
		}
		return out
	}
	plain, confined := run(all), run(rooted)
	for i := range plain {
		if plain[i] != confined[i] {
			t.Errorf("request %d differs under roots:\n  no roots: %s\n  roots:    %s", i, plain[i], confined[i])
		}
	}
	if !slices.ContainsFunc(plain, func(s string) bool { return strings.Contains(s, "file name too long") }) {
		t.Error("no request reached ENAMETOOLONG")
	}
}

func errString(werr *wire.Error) string {
	if werr == nil {
		return "ok"
	}
	return werr.Error()
}

func jsonString(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestAllow checks the confinement of paths other than fs arguments (a
// process's working directory): the fs methods' rules and errors.
func TestAllow(t *testing.T) {
	base, root, roots := sandbox(t)
	for _, p := range []string{root, root + "/in", root + "/good-dir-link", "file://" + root + "/in", root + "/not/yet"} {
		if werr := roots.Allow(p); werr != nil {
			t.Errorf("Allow(%s): %s", p, werr.Message)
		}
	}
	for _, p := range []string{base, "/", root + "/..", root + "/abs", root + "/rel/", root + "/hop1", base + "/rootevil", "file://" + base} {
		werr := roots.Allow(p)
		if werr == nil || werr.Code != wire.CodeInvalidRequest || werr.Message != "path "+p+" is outside the allowed roots" {
			t.Errorf("Allow(%s) = %+v, want the outside-roots error", p, werr)
		}
	}
	wantErr(t, roots.Allow("relative"), wire.CodeInvalidParams, "path must be absolute: relative", true)
	wantErr(t, roots.Allow(root+"/in/ok/x"), wire.CodeInternal, "not a directory", false)
	if werr := all.Allow(base); werr != nil {
		t.Errorf("no roots: %s", werr.Message)
	}
}
