package fsops

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/runtimed/runtimed/wire"
)

// walkOpts are fs/walk options with generous limits.
func walkOpts(follow bool) obj {
	return obj{"maxDepth": 64, "maxDirectories": 10_000, "maxEntries": 50_000, "followDirectorySymlinks": follow}
}

func walkCall(t *testing.T, roots Roots, path string, opts obj) wire.FsWalkResult {
	t.Helper()
	return mustCall(t, roots, nil, wire.MethodFsWalk, obj{"path": path, "options": opts}).(wire.FsWalkResult)
}

// listing renders a walk result as "kind path" lines with paths relative
// to base (in the form the request used).
func listing(res wire.FsWalkResult, base string) []string {
	var out []string
	for _, e := range res.Entries {
		out = append(out, e.Kind+" "+strings.TrimPrefix(e.Path, base))
	}
	return out
}

func wantListing(t *testing.T, what string, res wire.FsWalkResult, base string, truncated bool, want ...string) {
	t.Helper()
	got := listing(res, base)
	if !slices.Equal(got, want) || res.Truncated != truncated {
		t.Errorf("%s:\n got %q truncated=%v\nwant %q truncated=%v", what, got, res.Truncated, want, truncated)
	}
}

// tree builds:
//
//	.hid/x/h.txt  a/b/c.txt  dangle -> /nonexistent  f.txt  fifo
//	la -> a  lf -> f.txt  loop/self -> ../loop  selfloop -> selfloop
func tree(t *testing.T) string {
	dir := tmp(t)
	mustMkdir(t, filepath.Join(dir, ".hid/x"))
	mustMkdir(t, filepath.Join(dir, "a/b"))
	mustMkdir(t, filepath.Join(dir, "loop"))
	writeTestFile(t, filepath.Join(dir, ".hid/x/h.txt"), "h", 0o644)
	writeTestFile(t, filepath.Join(dir, "a/b/c.txt"), "c", 0o644)
	writeTestFile(t, filepath.Join(dir, "f.txt"), "f", 0o644)
	mustSymlink(t, "/nonexistent", filepath.Join(dir, "dangle"))
	mustSymlink(t, "a", filepath.Join(dir, "la"))
	mustSymlink(t, "f.txt", filepath.Join(dir, "lf"))
	mustSymlink(t, "../loop", filepath.Join(dir, "loop/self"))
	mustSymlink(t, "selfloop", filepath.Join(dir, "selfloop"))
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The answers below are those of the Codex 0.169 exec-server on the same
// tree (breadth first, names sorted, only files and directories).
func TestWalkOrderAndKinds(t *testing.T) {
	dir := tree(t)
	uri := wire.FileURI(dir)

	res := walkCall(t, all, uri, walkOpts(false))
	wantListing(t, "links not followed", res, uri, false,
		"directory /.hid", "directory /a", "file /f.txt", "directory /loop",
		"directory /.hid/x", "directory /a/b",
		"file /.hid/x/h.txt", "file /a/b/c.txt")
	if len(res.Errors) != 0 {
		t.Errorf("errors: %+v", res.Errors)
	}

	// Followed: la is listed (as a directory) but a, read first, is not
	// read again under la; loop/self leads back up and is not read either.
	res = walkCall(t, all, uri, walkOpts(true))
	wantListing(t, "links followed", res, uri, false,
		"directory /.hid", "directory /a", "file /f.txt", "directory /la", "directory /loop",
		"directory /.hid/x", "directory /a/b", "directory /loop/self",
		"file /.hid/x/h.txt", "file /a/b/c.txt")

	// A native path gets native answers; a file: URI with host localhost
	// gets URIs without it; ".." is applied to the spelling.
	res = walkCall(t, all, filepath.Join(dir, "a"), walkOpts(false))
	wantListing(t, "native", res, dir, false, "directory /a/b", "file /a/b/c.txt")
	res = walkCall(t, all, "file://localhost"+dir+"/a/b/..", walkOpts(false))
	wantListing(t, "localhost", res, uri, false, "directory /a/b", "file /a/b/c.txt")

	// The root given as a link: walked under the link's path when
	// following, empty otherwise; a file root is empty.
	res = walkCall(t, all, uri+"/la", walkOpts(true))
	wantListing(t, "link root followed", res, uri, false, "directory /la/b", "file /la/b/c.txt")
	res = walkCall(t, all, uri+"/la", walkOpts(false))
	wantListing(t, "link root not followed", res, uri, false)
	res = walkCall(t, all, uri+"/f.txt", walkOpts(true))
	wantListing(t, "file root", res, uri, false)
	if res.Entries == nil || res.Errors == nil {
		t.Errorf("empty answer must carry [] not null: %+v", res)
	}
}

func TestWalkLimits(t *testing.T) {
	dir := tree(t)
	uri := wire.FileURI(dir)
	opts := func(depth, dirs, entries int) obj {
		return obj{"maxDepth": depth, "maxDirectories": dirs, "maxEntries": entries, "followDirectorySymlinks": false}
	}
	root := []string{"directory /.hid", "directory /a", "file /f.txt", "directory /loop"}

	// maxDepth 0: the root's entries only, not truncated (depth is a choice).
	wantListing(t, "maxDepth 0", walkCall(t, all, uri, opts(0, 100, 100)), uri, false, root...)
	wantListing(t, "maxDepth 1", walkCall(t, all, uri, opts(1, 100, 100)), uri, false,
		append(root, "directory /.hid/x", "directory /a/b")...)
	// maxDirectories 1: only the root is read; its directories are listed.
	wantListing(t, "maxDirectories 1", walkCall(t, all, uri, opts(10, 1, 100)), uri, true, root...)
	wantListing(t, "maxDirectories 3", walkCall(t, all, uri, opts(10, 3, 100)), uri, true,
		append(root, "directory /.hid/x", "directory /a/b")...)
	// maxEntries counts every entry examined except links that lead
	// nowhere (dangle, selfloop): .hid a f.txt fifo | la lf loop.
	wantListing(t, "maxEntries 3", walkCall(t, all, uri, opts(10, 100, 3)), uri, true, root[:3]...)
	wantListing(t, "maxEntries 4", walkCall(t, all, uri, opts(10, 100, 4)), uri, true, root[:3]...)
	wantListing(t, "maxEntries 7", walkCall(t, all, uri, opts(10, 100, 7)), uri, true, root...)
	// Exactly as many entries as there are is not truncated.
	wantListing(t, "maxEntries exact", walkCall(t, all, uri+"/a", opts(10, 2, 2)), uri, false, "directory /a/b", "file /a/b/c.txt")

	for _, o := range []obj{opts(0, 0, 1), opts(0, 1, 0)} {
		_, werr := call(t, all, nil, wire.MethodFsWalk, obj{"path": uri, "options": o})
		wantErr(t, werr, wire.CodeInvalidRequest, "filesystem walk limits must be greater than zero", true)
	}
	for _, o := range []obj{opts(65, 1, 1), opts(0, 10_001, 1), opts(0, 1, 50_001)} {
		_, werr := call(t, all, nil, wire.MethodFsWalk, obj{"path": uri, "options": o})
		wantErr(t, werr, wire.CodeInvalidRequest, "filesystem walk limits exceed maximums: depth=64, directories=10000, entries=50000", true)
	}
	// The maxima themselves are accepted.
	walkCall(t, all, uri, opts(64, 10_000, 50_000))
}

func TestWalkResponseBudget(t *testing.T) {
	defer func(b int) { walkResponseBudget = b }(walkResponseBudget)
	walkResponseBudget = 64 << 10
	dir := tmp(t)
	// 300 files of 250-byte names two 200-byte directories down: some
	// 220 KB of answer, within the entry and directory limits.
	long := strings.Repeat("d", 200)
	p := filepath.Join(dir, long, long)
	mustMkdir(t, p)
	name := strings.Repeat("f", 246)
	for i := range 300 {
		f, err := os.Create(filepath.Join(p, fmt.Sprintf("%s%04d", name, i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	res := walkCall(t, all, dir, walkOpts(false))
	if !res.Truncated {
		t.Fatalf("a walk answer beyond its budget must be truncated; got %d entries", len(res.Entries))
	}
	size := 0
	for _, e := range res.Entries {
		size += len(e.Path) + walkItemOverhead
	}
	if size > walkResponseBudget || size < walkResponseBudget-5000 {
		t.Errorf("answer size %d, want just under %d", size, walkResponseBudget)
	}
}

func TestWalkPruneHidden(t *testing.T) {
	dir := tree(t)
	o := walkOpts(false)
	o["pruneHiddenDirectories"] = true
	wantListing(t, "pruned", walkCall(t, all, dir, o), dir, false,
		"directory /.hid", "directory /a", "file /f.txt", "directory /loop",
		"directory /a/b", "file /a/b/c.txt")
	// A hidden root is walked: only entries below are pruned.
	wantListing(t, "hidden root", walkCall(t, all, filepath.Join(dir, ".hid"), o), dir, false,
		"directory /.hid/x", "file /.hid/x/h.txt")
}

// A chain of links that leads back up never loops, whether the loop is a
// link to an ancestor or two directories linking to each other.
func TestWalkSymlinkLoops(t *testing.T) {
	dir := tmp(t)
	mustMkdir(t, filepath.Join(dir, "p/q"))
	mustSymlink(t, "../../p", filepath.Join(dir, "p/q/up"))
	mustMkdir(t, filepath.Join(dir, "m"))
	mustMkdir(t, filepath.Join(dir, "n"))
	mustSymlink(t, "../n", filepath.Join(dir, "m/ton"))
	mustSymlink(t, "../m", filepath.Join(dir, "n/tom"))
	res := walkCall(t, all, dir, walkOpts(true))
	wantListing(t, "loops followed", res, dir, false,
		"directory /m", "directory /n", "directory /p",
		"directory /m/ton", "directory /n/tom", "directory /p/q",
		"directory /p/q/up")
	res = walkCall(t, all, dir, walkOpts(false))
	wantListing(t, "loops not followed", res, dir, false,
		"directory /m", "directory /n", "directory /p", "directory /p/q")
}

// --fs-root confinement: the root must be inside, and a followed link
// never takes the walk outside (it is reported in errors instead).
func TestWalkConfined(t *testing.T) {
	base := tmp(t)
	root := filepath.Join(base, "root")
	outside := filepath.Join(base, "outside")
	mustMkdir(t, filepath.Join(root, "in"))
	mustMkdir(t, filepath.Join(outside, "secret"))
	writeTestFile(t, filepath.Join(outside, "secret/s.txt"), "s", 0o644)
	mustSymlink(t, outside, filepath.Join(root, "in/out"))
	mustSymlink(t, "../in", filepath.Join(root, "in/back"))
	roots, err := NewRoots([]string{root})
	if err != nil {
		t.Fatal(err)
	}
	res := walkCall(t, roots, wire.FileURI(root), walkOpts(true))
	wantListing(t, "confined", res, wire.FileURI(root), false, "directory /in", "directory /in/back")
	want := []wire.FsWalkError{{Path: wire.FileURI(root) + "/in/out", Message: "path " + wire.FileURI(root) + "/in/out is outside the allowed roots"}}
	if !slices.Equal(res.Errors, want) {
		t.Errorf("errors %+v, want %+v", res.Errors, want)
	}
	_, werr := call(t, roots, nil, wire.MethodFsWalk, obj{"path": outside, "options": walkOpts(true)})
	wantErr(t, werr, wire.CodeInvalidRequest, "is outside the allowed roots", false)
	_, werr = call(t, roots, nil, wire.MethodFsWalk, obj{"path": filepath.Join(root, "in/out"), "options": walkOpts(true)})
	wantErr(t, werr, wire.CodeInvalidRequest, "is outside the allowed roots", false)
	// Not following, the link root is simply not walked.
	res = walkCall(t, roots, filepath.Join(root, "in/out"), walkOpts(false))
	wantListing(t, "link root not followed", res, root, false)
}

func TestWalkParams(t *testing.T) {
	dir := tmp(t)
	cases := []struct {
		params obj
		code   int
		msg    string
	}{
		{obj{"path": dir}, wire.CodeInvalidParams, "missing field `options`"},
		{obj{"options": walkOpts(false)}, wire.CodeInvalidParams, "missing field `path`"},
		{obj{"path": dir, "options": obj{}}, wire.CodeInvalidParams, "missing field `maxDepth`"},
		{obj{"path": dir, "options": obj{"maxDepth": 1, "maxDirectories": 1, "maxEntries": 1}}, wire.CodeInvalidParams, "missing field `followDirectorySymlinks`"},
		{obj{"path": dir, "options": obj{"maxDepth": -1, "maxDirectories": 1, "maxEntries": 1, "followDirectorySymlinks": true}}, wire.CodeInvalidParams, "invalid type for field `maxDepth`"},
		{obj{"path": "relative", "options": walkOpts(false)}, wire.CodeInvalidParams, "path must be absolute: relative"},
		{obj{"path": "file://host" + dir, "options": walkOpts(false)}, wire.CodeInvalidParams, "file URI must not name a remote host"},
		{obj{"path": dir + "/nope", "options": walkOpts(false)}, wire.CodeNotFound, "no such file or directory"},
	}
	for _, c := range cases {
		_, werr := call(t, all, nil, wire.MethodFsWalk, c.params)
		wantErr(t, werr, c.code, c.msg, false)
	}
	// A sandbox is accepted (and, for now, not enforced).
	mustCall(t, all, nil, wire.MethodFsWalk, obj{"path": dir, "options": walkOpts(false), "sandbox": obj{"permissions": obj{"type": "disabled"}}})
	mustCall(t, all, nil, wire.MethodFsWalk, obj{"path": dir, "options": walkOpts(false), "sandbox": nil})
}

// An unreadable directory goes to errors and the walk goes on; an
// unreadable root is an answer with one error. Permission bits do not stop
// root, so as root the test runs itself again as nobody.
func TestWalkUnreadable(t *testing.T) {
	if os.Geteuid() == 0 {
		runAsNobody(t, "TestWalkUnreadable")
		return
	}
	dir, err := os.MkdirTemp("", "fsops-walk-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Chmod(filepath.Join(dir, "closed"), 0o755)
		os.RemoveAll(dir)
	})
	mustMkdir(t, filepath.Join(dir, "closed/inner"))
	mustMkdir(t, filepath.Join(dir, "open/sub"))
	writeTestFile(t, filepath.Join(dir, "open/sub/f"), "f", 0o644)
	if err := os.Chmod(filepath.Join(dir, "closed"), 0); err != nil {
		t.Fatal(err)
	}
	res := walkCall(t, all, wire.FileURI(dir), walkOpts(false))
	wantListing(t, "unreadable", res, wire.FileURI(dir), false, "directory /closed", "directory /open", "directory /open/sub", "file /open/sub/f")
	want := []wire.FsWalkError{{Path: wire.FileURI(dir) + "/closed", Message: "open " + dir + "/closed: permission denied"}}
	if !slices.Equal(res.Errors, want) {
		t.Errorf("errors %+v, want %+v", res.Errors, want)
	}
	res = walkCall(t, all, filepath.Join(dir, "closed"), walkOpts(false))
	if len(res.Entries) != 0 || len(res.Errors) != 1 || res.Errors[0].Path != filepath.Join(dir, "closed") {
		t.Errorf("unreadable root: %+v", res)
	}
	// Below an unreadable directory even the root cannot be looked at.
	_, werr := call(t, all, nil, wire.MethodFsWalk, obj{"path": filepath.Join(dir, "closed/inner"), "options": walkOpts(false)})
	wantErr(t, werr, wire.CodeInvalidRequest, "permission denied", false)
}

// runAsNobody runs the test named name again in a copy of this test binary
// as uid/gid 65534 and fails t if it fails (or skips if it skipped).
func runAsNobody(t *testing.T, name string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "fsops-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "fsops.test")
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(bin, os.O_WRONLY|os.O_CREATE, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	dst.Close()
	cmd := exec.Command(bin, "-test.run=^"+name+"$", "-test.v", "-test.count=1")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "TMPDIR=/tmp", "HOME=/tmp"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s as nobody: %v\n%s", name, err, out)
	}
	if strings.Contains(string(out), "--- SKIP") || !strings.Contains(string(out), "--- PASS: "+name) {
		t.Skipf("%s as nobody did not run:\n%s", name, out)
	}
}
