package fsops

import (
	"path/filepath"
	"testing"

	"github.com/runtimed/runtimed/wire"
)

func TestFileURI(t *testing.T) {
	cases := map[string]string{
		"/":                      "file:///",
		"/a/b.txt":               "file:///a/b.txt",
		"/a b/c#d?e%f":           "file:///a%20b/c%23d%3Fe%25f",
		"/x/é":                   "file:///x/%C3%A9",
		"/q\"<>`{}\\|":           "file:///q%22%3C%3E%60%7B%7D%5C|",
		"/keep/!$&'()*+,;=:@~_-": "file:///keep/!$&'()*+,;=:@~_-",
		"/ctl/\x01\x7f":          "file:///ctl/%01%7F",
	}
	for in, want := range cases {
		got := fileURI(in)
		if got != want {
			t.Errorf("fileURI(%q) = %q, want %q", in, got, want)
		}
		back, werr := parsePath(got)
		if werr != nil || back != in {
			t.Errorf("parsePath(%q) = %q %v, want %q", got, back, werr, in)
		}
	}
}

// Answers carry paths in the form the request used.
func TestCanonicalizeKeepsPathForm(t *testing.T) {
	dir := tmp(t)
	mustMkdir(t, filepath.Join(dir, "real dir"))
	mustSymlink(t, "real dir", filepath.Join(dir, "link"))
	want := filepath.Join(dir, "real dir")
	cases := map[string]string{
		filepath.Join(dir, "link"):                          want,
		fileURI(filepath.Join(dir, "link")):                 fileURI(want),
		"file://localhost" + dir + "/link/../link":          fileURI(want),
		"file:" + dir + "/link":                             fileURI(want),
		fileURI(filepath.Join(dir, "link")) + "/./missing/": fileURI(want + "/missing"),
	}
	for in, out := range cases {
		res, werr := call(t, all, nil, wire.MethodFsCanonicalize, obj{"path": in})
		if out == fileURI(want+"/missing") {
			wantErr(t, werr, wire.CodeNotFound, "missing", false)
			continue
		}
		if werr != nil || res.(wire.FsPathResult).Path != out {
			t.Errorf("canonicalize %q = %v %v, want %q", in, res, werr, out)
		}
	}
	_, werr := call(t, all, nil, wire.MethodFsCanonicalize, obj{"path": "file://example.com" + dir})
	wantErr(t, werr, wire.CodeInvalidParams, "file URI must not name a remote host: file://example.com"+dir, true)
}
