package fsops

import (
	"path/filepath"
	"testing"

	"github.com/runtimed/runtimed/wire"
)

// Answers carry paths in the form the request used.
func TestCanonicalizeKeepsPathForm(t *testing.T) {
	dir := tmp(t)
	mustMkdir(t, filepath.Join(dir, "real dir"))
	mustSymlink(t, "real dir", filepath.Join(dir, "link"))
	want := filepath.Join(dir, "real dir")
	cases := map[string]string{
		filepath.Join(dir, "link"):                               want,
		wire.FileURI(filepath.Join(dir, "link")):                 wire.FileURI(want),
		"file://localhost" + dir + "/link/../link":               wire.FileURI(want),
		"file:" + dir + "/link":                                  wire.FileURI(want),
		wire.FileURI(filepath.Join(dir, "link")) + "/./missing/": wire.FileURI(want + "/missing"),
	}
	for in, out := range cases {
		res, werr := call(t, all, nil, wire.MethodFsCanonicalize, obj{"path": in})
		if out == wire.FileURI(want+"/missing") {
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
