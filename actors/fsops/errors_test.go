package fsops

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"github.com/runtimed/runtimed/wire"
)

// TestMain doubles as a helper: with FSOPS_HELPER_REQUESTS set (a JSON
// array of {method, params}), the test binary serves those requests and
// prints their errors as a JSON array. The permission test runs it as an
// unprivileged user when the tests run as root (root is never denied).
func TestMain(m *testing.M) {
	if reqs := os.Getenv("FSOPS_HELPER_REQUESTS"); reqs != "" {
		var list []helperRequest
		if err := json.Unmarshal([]byte(reqs), &list); err != nil {
			os.Exit(3)
		}
		var errs []*wire.Error
		for _, r := range list {
			_, werr := Handle(r.Method, r.Params, Roots{}, &Handles{})
			errs = append(errs, werr)
		}
		b, _ := json.Marshal(errs)
		os.Stdout.Write(b)
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

type helperRequest struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

func TestParamErrors(t *testing.T) {
	cases := []struct {
		method string
		raw    string
		code   int
		msg    string
	}{
		{wire.MethodFsReadFile, `{"path":"relative/x"}`, wire.CodeInvalidParams, "path must be absolute: relative/x"},
		{wire.MethodFsReadFile, `{"path":""}`, wire.CodeInvalidParams, "path must be absolute: "},
		{wire.MethodFsReadFile, `{"path":"file:relative"}`, wire.CodeInvalidParams, "path must be absolute: file:relative"},
		{wire.MethodFsReadFile, `{"path":"file://example.com/etc/passwd"}`, wire.CodeInvalidParams, "file URI must not name a remote host: file://example.com/etc/passwd"},
		{wire.MethodFsWriteFile, `{"path":"./x","dataBase64":""}`, wire.CodeInvalidParams, "path must be absolute: ./x"},
		{wire.MethodFsCopy, `{"sourcePath":"/tmp","destinationPath":"x","recursive":true}`, wire.CodeInvalidParams, "path must be absolute: x"},
		{wire.MethodFsReadFile, ``, wire.CodeInvalidParams, "missing field `path`"},
		{wire.MethodFsReadFile, `null`, wire.CodeInvalidParams, "invalid params: expected an object"}, // wire.DecodeParams' text
		{wire.MethodFsReadFile, `{"path":null}`, wire.CodeInvalidParams, "missing field `path`"},
		{wire.MethodFsReadFile, `{"path":7}`, wire.CodeInvalidParams, "invalid type for field `path`: expected string, got number"},
		{wire.MethodFsWriteFile, `{"path":"/tmp/x"}`, wire.CodeInvalidParams, "missing field `dataBase64`"},
		{wire.MethodFsWriteFile, `{"path":"/tmp/x","dataBase64":"not base64!"}`, wire.CodeInvalidParams, "invalid base64 in field `dataBase64`: illegal base64 data at input byte 3"},
		{wire.MethodFsWriteFile, `{"path":"/tmp/x","dataBase64":"YQ"}`, wire.CodeInvalidParams, "invalid base64 in field `dataBase64`: illegal base64 data at input byte 0"},
		{wire.MethodFsCopy, `{"sourcePath":"/tmp"}`, wire.CodeInvalidParams, "missing field `destinationPath`"},
		{wire.MethodFsCreateDirectory, `{"path":"/tmp/x","recursive":"yes"}`, wire.CodeInvalidParams, "invalid type for field `recursive`: expected boolean, got string"},
		{wire.MethodFsOpen, `{"path":"/tmp/x"}`, wire.CodeInvalidParams, "missing field `handleId`"},
		{wire.MethodFsClose, `{}`, wire.CodeInvalidParams, "missing field `handleId`"},
		{wire.MethodFsReadBlock, `{"handleId":"h","offset":0,"len":1048577}`, wire.CodeInvalidParams, "file read block length must be between 1 and 1048576"},
	}
	for _, c := range cases {
		_, werr := Handle(c.method, json.RawMessage(c.raw), Roots{}, &Handles{})
		if werr == nil || werr.Code != c.code || werr.Message != c.msg {
			t.Errorf("%s %s: got %+v, want %d %q", c.method, c.raw, werr, c.code, c.msg)
		}
	}
}

func TestOSErrors(t *testing.T) {
	dir := tmp(t)
	file := filepath.Join(dir, "file")
	writeTestFile(t, file, "0123456789", 0o644)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	mustSymlink(t, "loop2", filepath.Join(dir, "loop1"))
	mustSymlink(t, "loop1", filepath.Join(dir, "loop2"))
	tree := filepath.Join(dir, "tree")
	mustMkdir(t, tree)
	if err := syscall.Mkfifo(filepath.Join(tree, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name   string
		method string
		params obj
		code   int
		msg    string // exact, unless it starts with "~"
	}{
		{"read missing", wire.MethodFsReadFile, obj{"path": dir + "/missing"}, wire.CodeNotFound, "open " + dir + "/missing: no such file or directory"},
		{"read missing parent", wire.MethodFsReadFile, obj{"path": dir + "/no/such"}, wire.CodeNotFound, "open " + dir + "/no/such: no such file or directory"},
		{"read directory", wire.MethodFsReadFile, obj{"path": dir}, wire.CodeInternal, "read " + dir + ": is a directory"},
		{"read fifo", wire.MethodFsReadFile, obj{"path": fifo}, wire.CodeInvalidRequest, fifo + " is not a regular file"},
		{"open fifo", wire.MethodFsOpen, obj{"handleId": "f", "path": fifo}, wire.CodeInvalidRequest, fifo + " is not a regular file"},
		{"read through a file", wire.MethodFsReadFile, obj{"path": file + "/x"}, wire.CodeInternal, "stat " + file + "/x: not a directory"},
		{"read loop", wire.MethodFsReadFile, obj{"path": dir + "/loop1"}, wire.CodeInternal, "resolve " + dir + "/loop1: too many levels of symbolic links"},
		{"NUL byte", wire.MethodFsReadFile, obj{"path": dir + "/a\x00b"}, wire.CodeInvalidRequest, "~invalid argument"},
		{"write missing parent", wire.MethodFsWriteFile, obj{"path": dir + "/no/f", "dataBase64": ""}, wire.CodeNotFound, "open " + dir + "/no/f: no such file or directory"},
		{"write directory", wire.MethodFsWriteFile, obj{"path": dir, "dataBase64": ""}, wire.CodeInternal, "open " + dir + ": is a directory"},
		{"write fifo", wire.MethodFsWriteFile, obj{"path": fifo, "dataBase64": ""}, wire.CodeInvalidRequest, fifo + " is not a regular file"},
		{"mkdir over file", wire.MethodFsCreateDirectory, obj{"path": file}, wire.CodeInternal, "mkdir " + file + ": not a directory"},
		{"metadata missing", wire.MethodFsGetMetadata, obj{"path": dir + "/missing"}, wire.CodeNotFound, "lstat " + dir + "/missing: no such file or directory"},
		{"canonicalize missing", wire.MethodFsCanonicalize, obj{"path": dir + "/missing"}, wire.CodeNotFound, "lstat " + dir + "/missing: no such file or directory"},
		{"list missing", wire.MethodFsReadDirectory, obj{"path": dir + "/missing"}, wire.CodeNotFound, "open " + dir + "/missing: no such file or directory"},
		{"list file", wire.MethodFsReadDirectory, obj{"path": file}, wire.CodeInternal, "~not a directory"},
		{"remove missing strict", wire.MethodFsRemove, obj{"path": dir + "/missing", "force": false}, wire.CodeNotFound, "lstat " + dir + "/missing: no such file or directory"},
		{"remove non-empty", wire.MethodFsRemove, obj{"path": tree, "recursive": false}, wire.CodeInternal, "remove " + tree + ": directory not empty"},
		{"remove root", wire.MethodFsRemove, obj{"path": "/"}, wire.CodeInvalidRequest, "path / is an allowed root and cannot be removed"},
		{"copy missing", wire.MethodFsCopy, obj{"sourcePath": dir + "/missing", "destinationPath": dir + "/c"}, wire.CodeNotFound, "lstat " + dir + "/missing: no such file or directory"},
		{"copy fifo", wire.MethodFsCopy, obj{"sourcePath": fifo, "destinationPath": dir + "/c"}, wire.CodeInvalidRequest, "fs/copy only supports regular files, directories, and symlinks: " + fifo},
		{"copy tree with fifo", wire.MethodFsCopy, obj{"sourcePath": tree, "destinationPath": dir + "/c", "recursive": true}, wire.CodeInvalidRequest, "fs/copy only supports regular files, directories, and symlinks: " + tree + "/pipe"},
		{"copy file onto dir", wire.MethodFsCopy, obj{"sourcePath": file, "destinationPath": tree}, wire.CodeInternal, "open " + tree + ": is a directory"},
		{"copy into missing parent", wire.MethodFsCopy, obj{"sourcePath": file, "destinationPath": dir + "/no/c"}, wire.CodeNotFound, "open " + dir + "/no/c: no such file or directory"},
		{"read block unknown", wire.MethodFsReadBlock, obj{"handleId": "zz", "offset": 0, "len": 4}, wire.CodeNotFound, "unknown file read handle `zz`"},
		{"close unknown", wire.MethodFsClose, obj{"handleId": "zz"}, wire.CodeNotFound, "unknown file read handle `zz`"},
	}
	var h Handles
	defer h.CloseAll()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, werr := call(t, all, &h, c.method, c.params)
			if strings.HasPrefix(c.msg, "~") {
				wantErr(t, werr, c.code, c.msg[1:], false)
			} else {
				wantErr(t, werr, c.code, c.msg, true)
			}
		})
	}
	// Refused writes changed nothing and left no temporary files.
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&fs.ModeNamedPipe == 0 {
		t.Fatal("the FIFO was replaced")
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".runtimed-") {
			t.Fatalf("temporary file left: %s", e.Name())
		}
	}
}

func TestReadFileLimit(t *testing.T) {
	defer func(old int64) { maxReadFileSize = old }(maxReadFileSize)
	maxReadFileSize = 10 // lowered: the real limit (64 MiB) is the same code path
	dir := tmp(t)
	writeTestFile(t, filepath.Join(dir, "at"), "0123456789", 0o644)
	writeTestFile(t, filepath.Join(dir, "over"), "0123456789a", 0o644)
	if res := mustCall(t, all, nil, wire.MethodFsReadFile, obj{"path": dir + "/at"}); string(res.(wire.FsReadFileResult).DataBase64) != "0123456789" {
		t.Fatal("file at the limit")
	}
	_, werr := call(t, all, nil, wire.MethodFsReadFile, obj{"path": dir + "/over"})
	wantErr(t, werr, wire.CodeInvalidRequest, "file "+dir+"/over is larger than the fs/readFile limit of 10 bytes; read it in blocks with fs/open and fs/readBlock", true)
	// A file whose size is not known in advance is bounded while reading.
	if _, err := os.Stat("/dev/zero"); err == nil {
		_, werr = call(t, all, nil, wire.MethodFsReadFile, obj{"path": "/dev/zero"})
		wantErr(t, werr, wire.CodeInvalidRequest, "/dev/zero is not a regular file", true)
	}
	if _, err := os.Stat("/proc/self/status"); err == nil {
		_, werr = call(t, all, nil, wire.MethodFsReadFile, obj{"path": "/proc/self/status"}) // size 0, content > 10 bytes
		wantErr(t, werr, wire.CodeInvalidRequest, "is larger than the fs/readFile limit of 10 bytes", false)
	}
	// The real limit is 64 MiB.
	if old := int64(64 << 20); wire.ErrFileTooLarge("x", old).Message != "file x is larger than the fs/readFile limit of 67108864 bytes; read it in blocks with fs/open and fs/readBlock" {
		t.Fatal("limit message")
	}
}

func TestOSCode(t *testing.T) {
	for errno, code := range map[syscall.Errno]int{
		syscall.ENOENT: wire.CodeNotFound, syscall.EINVAL: wire.CodeInvalidRequest, syscall.EACCES: wire.CodeInvalidRequest,
		syscall.EPERM: wire.CodeInvalidRequest, syscall.ENOSPC: wire.CodeInternal, syscall.EEXIST: wire.CodeInternal,
		syscall.ENOTDIR: wire.CodeInternal, syscall.EIO: wire.CodeInternal,
	} {
		werr := osError(&fs.PathError{Op: "op", Path: "/p", Err: errno}, target{})
		if werr.Code != code || werr.Message != "op /p: "+errno.Error() {
			t.Errorf("%v: %+v, want code %d", errno, werr, code)
		}
	}
	// Physical paths are shown in the client's spelling.
	werr := osError(&fs.PathError{Op: "open", Path: "/real/dir/f", Err: syscall.ENOENT}, target{abs: "/link/dir", phys: "/real/dir"})
	if werr.Message != "open /link/dir/f: no such file or directory" {
		t.Errorf("display: %q", werr.Message)
	}
}

// TestPermissionDenied checks that EACCES is -32600 with the OS text, for
// reads, listings, writes, removals and path resolution. As root, the
// requests are made by a copy of this test binary running as nobody.
func TestPermissionDenied(t *testing.T) {
	base, err := os.MkdirTemp("", "fsops-perm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Chmod(filepath.Join(base, "locked"), 0o755)
		os.RemoveAll(base)
	})
	base, _ = filepath.EvalSymlinks(base)
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, filepath.Join(base, "secret"), "s", 0o600)
	mustMkdir(t, filepath.Join(base, "locked"))
	writeTestFile(t, filepath.Join(base, "locked", "f"), "f", 0o644)
	if err := os.Chmod(filepath.Join(base, "locked"), 0o700); err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, filepath.Join(base, "public"), "p", 0o644)

	cases := []struct {
		method string
		params obj
		msg    string
	}{
		{wire.MethodFsReadFile, obj{"path": base + "/secret"}, "open " + base + "/secret: permission denied"},
		{wire.MethodFsOpen, obj{"handleId": "h", "path": base + "/secret"}, "open " + base + "/secret: permission denied"},
		{wire.MethodFsReadDirectory, obj{"path": base + "/locked"}, "open " + base + "/locked: permission denied"},
		{wire.MethodFsReadFile, obj{"path": base + "/locked/f"}, "lstat " + base + "/locked/f: permission denied"},
		{wire.MethodFsWriteFile, obj{"path": base + "/new", "dataBase64": ""}, "open " + base + "/new: permission denied"},
		{wire.MethodFsWriteFile, obj{"path": base + "/public", "dataBase64": ""}, "open " + base + "/public: permission denied"},
		{wire.MethodFsRemove, obj{"path": base + "/public"}, "remove " + base + "/public: permission denied"},
		{wire.MethodFsCreateDirectory, obj{"path": base + "/d", "recursive": false}, "mkdir " + base + "/d: permission denied"},
	}
	var reqs []helperRequest
	for _, c := range cases {
		raw, _ := json.Marshal(c.params)
		reqs = append(reqs, helperRequest{Method: c.method, Params: raw})
	}
	var errs []*wire.Error
	if os.Geteuid() != 0 {
		for _, r := range reqs {
			_, werr := Handle(r.Method, r.Params, Roots{}, &Handles{})
			errs = append(errs, werr)
		}
	} else {
		exe := filepath.Join(base, "fsops.test")
		copyExecutable(t, exe)
		payload, _ := json.Marshal(reqs)
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), "FSOPS_HELPER_REQUESTS="+string(payload))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.Output()
		if err != nil {
			t.Skipf("cannot run as nobody: %v", err)
		}
		if err := json.Unmarshal(out, &errs); err != nil || len(errs) != len(cases) {
			t.Fatalf("helper output %q: %v", out, err)
		}
	}
	for i, c := range cases {
		werr := errs[i]
		if werr == nil || werr.Code != wire.CodeInvalidRequest || werr.Message != c.msg {
			t.Errorf("%s %v: got %+v, want -32600 %q", c.method, c.params, werr, c.msg)
		}
	}
	if readTestFile(t, filepath.Join(base, "public")) != "p" {
		t.Fatal("a denied write changed the file")
	}
}

func copyExecutable(t *testing.T, dst string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Skip(err)
	}
	in, err := os.Open(self)
	if err != nil {
		t.Skip(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(fmt.Errorf("copy test binary: %w", err))
	}
}
