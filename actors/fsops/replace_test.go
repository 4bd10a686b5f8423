package fsops

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/runtimed/runtimed/wire"
)

// dirNames lists the names in dir, sorted.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	list, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range list {
		names = append(names, e.Name())
	}
	return names
}

func writeBlock(t *testing.T, h *Handles, id string, offset int, data string) {
	t.Helper()
	mustCall(t, all, h, wire.MethodFsWriteBlock, obj{"handleId": id, "offset": offset, "chunk": []byte(data)})
}

func TestReplaceWritesAtOffsetsAndRenamesOnClose(t *testing.T) {
	dir := tmp(t)
	path := filepath.Join(dir, "new")
	var h Handles
	defer h.CloseAll()
	res := mustCall(t, all, &h, wire.MethodFsOpen, obj{"handleId": "w", "path": wire.FileURI(path), "mode": "replace"})
	if res.(wire.FsHandleResult).HandleID != "w" {
		t.Fatalf("open answered %+v", res)
	}
	// Nothing appears at the destination before close: only a temporary
	// file next to it.
	names := dirNames(t, dir)
	if len(names) != 1 || !strings.HasPrefix(names[0], ".new.runtimed-") {
		t.Fatalf("after open: %q, want one temporary file", names)
	}
	writeBlock(t, &h, "w", 0, "hello")
	writeBlock(t, &h, "w", 10, "world") // a hole of zeros
	writeBlock(t, &h, "w", 2, "XX")     // overwrite inside
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("destination exists before close: %v", err)
	}
	mustCall(t, all, &h, wire.MethodFsClose, obj{"handleId": "w"})
	if got, want := readTestFile(t, path), "heXXo\x00\x00\x00\x00\x00world"; got != want {
		t.Errorf("content %q, want %q", got, want)
	}
	if names := dirNames(t, dir); len(names) != 1 || names[0] != "new" {
		t.Errorf("after close: %q, want only the file", names)
	}
	if h.Len() != 0 {
		t.Errorf("%d handles left", h.Len())
	}
	// A replace that writes nothing truncates; the file keeps its mode.
	writeTestFile(t, path, "old contents", 0o640)
	mustCall(t, all, &h, wire.MethodFsOpen, obj{"handleId": "e", "path": path, "mode": "replace"})
	if got := readTestFile(t, path); got != "old contents" {
		t.Errorf("an open replace changed the file: %q", got)
	}
	mustCall(t, all, &h, wire.MethodFsClose, obj{"handleId": "e"})
	fi, err := os.Stat(path)
	if err != nil || fi.Size() != 0 || fi.Mode().Perm() != 0o640 {
		t.Errorf("after an empty replace: %v %v", fi, err)
	}
	// Through a link the target is replaced and the link stays.
	mustSymlink(t, "new", filepath.Join(dir, "link"))
	mustCall(t, all, &h, wire.MethodFsOpen, obj{"handleId": "l", "path": filepath.Join(dir, "link"), "mode": "replace"})
	writeBlock(t, &h, "l", 0, "via link")
	mustCall(t, all, &h, wire.MethodFsClose, obj{"handleId": "l"})
	if got := readTestFile(t, path); got != "via link" {
		t.Errorf("target %q", got)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "link")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced: %v %v", fi, err)
	}
}

// A replace never closed leaves no trace when the connection ends: no
// destination, no temporary file, and an existing destination unchanged.
func TestReplaceLeftOpenLeavesNothing(t *testing.T) {
	dir := tmp(t)
	writeTestFile(t, filepath.Join(dir, "kept"), "old", 0o644)
	var h Handles
	mustCall(t, all, &h, wire.MethodFsOpen, obj{"handleId": "a", "path": filepath.Join(dir, "fresh"), "mode": "replace"})
	mustCall(t, all, &h, wire.MethodFsOpen, obj{"handleId": "b", "path": filepath.Join(dir, "kept"), "mode": "replace"})
	writeBlock(t, &h, "a", 0, "partial")
	writeBlock(t, &h, "b", 0, "partial")
	if n := len(dirNames(t, dir)); n != 3 {
		t.Fatalf("%d names before the end, want kept and two temporary files", n)
	}
	h.CloseAll()
	if names := dirNames(t, dir); len(names) != 1 || names[0] != "kept" {
		t.Errorf("after the connection ended: %q, want only kept", names)
	}
	if got := readTestFile(t, filepath.Join(dir, "kept")); got != "old" {
		t.Errorf("kept changed: %q", got)
	}
}

func TestReplaceErrors(t *testing.T) {
	dir := tmp(t)
	file := filepath.Join(dir, "f")
	writeTestFile(t, file, "data", 0o644)
	var h Handles
	defer h.CloseAll()
	mustCall(t, all, &h, wire.MethodFsOpen, obj{"handleId": "r", "path": file})
	mustCall(t, all, &h, wire.MethodFsOpen, obj{"handleId": "r2", "path": file, "mode": nil}) // null: read
	mustCall(t, all, &h, wire.MethodFsOpen, obj{"handleId": "r3", "path": file, "mode": "read"})
	mustCall(t, all, &h, wire.MethodFsOpen, obj{"handleId": "w", "path": file, "mode": "replace"})

	cases := []struct {
		method string
		params obj
		code   int
		msg    string
	}{
		{wire.MethodFsOpen, obj{"handleId": "x", "path": file, "mode": "append"}, wire.CodeInvalidParams, "unknown variant `append`, expected `read` or `replace`"},
		{wire.MethodFsOpen, obj{"handleId": "x", "path": file, "mode": "Read"}, wire.CodeInvalidParams, "unknown variant `Read`, expected `read` or `replace`"},
		{wire.MethodFsOpen, obj{"handleId": "x", "path": file, "mode": 1}, wire.CodeInvalidParams, "invalid type for field `mode`: expected string, got number"},
		{wire.MethodFsOpen, obj{"handleId": "w", "path": file, "mode": "replace"}, wire.CodeInvalidRequest, "file handle `w` already exists"},
		{wire.MethodFsOpen, obj{"handleId": "x", "path": dir, "mode": "replace"}, wire.CodeInternal, "open " + dir + ": is a directory"},
		{wire.MethodFsOpen, obj{"handleId": "x", "path": filepath.Join(dir, "no/such"), "mode": "replace"}, wire.CodeNotFound, "open " + filepath.Join(dir, "no/such") + ": no such file or directory"},
		{wire.MethodFsOpen, obj{"handleId": "x", "path": "rel", "mode": "replace"}, wire.CodeInvalidParams, "path must be absolute: rel"},
		{wire.MethodFsWriteBlock, obj{"handleId": "nope", "offset": 0, "chunk": "eA=="}, wire.CodeNotFound, "unknown file handle `nope`"},
		{wire.MethodFsWriteBlock, obj{"handleId": "r", "offset": 0, "chunk": "eA=="}, wire.CodeInternal, "fs/writeBlock: file handle `r` was opened with mode read: bad file descriptor"},
		{wire.MethodFsReadBlock, obj{"handleId": "w", "offset": 0, "len": 1}, wire.CodeInternal, "fs/readBlock: file handle `w` was opened with mode replace: bad file descriptor"},
		{wire.MethodFsWriteBlock, obj{"handleId": "w", "offset": 0, "chunk": ""}, wire.CodeInvalidRequest, "file write block length must be between 1 and 1048576"},
		{wire.MethodFsWriteBlock, obj{"handleId": "w", "offset": 0, "chunk": make([]byte, wire.FsMaxWriteBlockLen+1)}, wire.CodeInvalidRequest, "file write block length must be between 1 and 1048576"},
		{wire.MethodFsWriteBlock, obj{"handleId": "w", "offset": uint64(1) << 63, "chunk": "eA=="}, wire.CodeInvalidRequest, "file write range exceeds the signed 64-bit file offset limit"},
		{wire.MethodFsWriteBlock, obj{"handleId": "w", "offset": -1, "chunk": "eA=="}, wire.CodeInvalidParams, "invalid type for field `offset`"},
		{wire.MethodFsWriteBlock, obj{"handleId": "w", "offset": 0, "chunk": "!!"}, wire.CodeInvalidParams, "invalid base64 in field `chunk`"},
		{wire.MethodFsWriteBlock, obj{"handleId": "w", "offset": 0}, wire.CodeInvalidParams, "missing field `chunk`"},
		{wire.MethodFsWriteBlock, obj{"handleId": "w", "chunk": "eA=="}, wire.CodeInvalidParams, "missing field `offset`"},
	}
	for _, c := range cases {
		_, werr := call(t, all, &h, c.method, c.params)
		wantErr(t, werr, c.code, c.msg, false)
	}
	// None of those errors dropped a handle or touched the file.
	if h.Len() != 4 {
		t.Errorf("%d handles, want 4", h.Len())
	}
	// The largest chunk and the largest offset are accepted.
	mustCall(t, all, &h, wire.MethodFsWriteBlock, obj{"handleId": "w", "offset": 0, "chunk": make([]byte, wire.FsMaxWriteBlockLen)})
	if got := readBlock(t, &h, "r", 0, 10); string(got.Chunk) != "data" {
		t.Errorf("the destination changed before close: %q", got.Chunk)
	}
	mustCall(t, all, &h, wire.MethodFsClose, obj{"handleId": "w"})
	if fi, err := os.Stat(file); err != nil || fi.Size() != wire.FsMaxWriteBlockLen {
		t.Errorf("after close: %v %v", fi, err)
	}
	// The open read handle still reads the old file.
	if got := readBlock(t, &h, "r", 0, 10); string(got.Chunk) != "data" {
		t.Errorf("read handle followed the path: %q", got.Chunk)
	}

	// A FIFO is not replaced.
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	_, werr := call(t, all, &h, wire.MethodFsOpen, obj{"handleId": "x", "path": fifo, "mode": "replace"})
	wantErr(t, werr, wire.CodeInvalidRequest, fifo+" is not a regular file", true)
	// A destination that became a directory by close time is not replaced
	// either; the handle and its temporary file are gone all the same.
	late := filepath.Join(dir, "late")
	mustCall(t, all, &h, wire.MethodFsOpen, obj{"handleId": "late", "path": late, "mode": "replace"})
	mustMkdir(t, late)
	_, werr = call(t, all, &h, wire.MethodFsClose, obj{"handleId": "late"})
	wantErr(t, werr, wire.CodeInternal, "open "+late+": is a directory", true)
	for _, n := range dirNames(t, dir) {
		if strings.Contains(n, "runtimed-") {
			t.Errorf("temporary file %s left", n)
		}
	}
	_, werr = call(t, all, &h, wire.MethodFsClose, obj{"handleId": "late"})
	wantErr(t, werr, wire.CodeNotFound, "unknown file read handle `late`", true)
}

// Reads and replaces share the one limit of 128 handles.
func TestHandleLimitCountsBothModes(t *testing.T) {
	dir := tmp(t)
	file := filepath.Join(dir, "f")
	writeTestFile(t, file, "x", 0o644)
	var h Handles
	defer h.CloseAll()
	for i := range wire.FsMaxHandles {
		params := obj{"handleId": fmt.Sprint(i), "path": file}
		if i%2 == 1 {
			params["mode"] = "replace"
			params["path"] = filepath.Join(dir, fmt.Sprint("w", i))
		}
		mustCall(t, all, &h, wire.MethodFsOpen, params)
	}
	_, werr := call(t, all, &h, wire.MethodFsOpen, obj{"handleId": "r", "path": file})
	wantErr(t, werr, wire.CodeInvalidRequest, "at most 128 file reads may be open per connection", true)
	_, werr = call(t, all, &h, wire.MethodFsOpen, obj{"handleId": "w", "path": filepath.Join(dir, "w"), "mode": "replace"})
	wantErr(t, werr, wire.CodeInvalidRequest, "at most 128 file handles may be open per connection", true)
	// A refused replace left no temporary file.
	if n := len(dirNames(t, dir)); n != 1+wire.FsMaxHandles/2 {
		t.Errorf("%d names, want the file and 64 temporary files", n)
	}
	mustCall(t, all, &h, wire.MethodFsClose, obj{"handleId": "1"}) // a replace handle frees a slot
	mustCall(t, all, &h, wire.MethodFsOpen, obj{"handleId": "r", "path": file})
}

// Confinement applies to replace as to every other method.
func TestReplaceConfined(t *testing.T) {
	base := tmp(t)
	root := filepath.Join(base, "root")
	mustMkdir(t, root)
	mustSymlink(t, base, filepath.Join(root, "up"))
	roots, err := NewRoots([]string{root})
	if err != nil {
		t.Fatal(err)
	}
	var h Handles
	defer h.CloseAll()
	for _, p := range []string{filepath.Join(base, "x"), filepath.Join(root, "up/x"), filepath.Join(root, "../x")} {
		_, werr := call(t, roots, &h, wire.MethodFsOpen, obj{"handleId": "x", "path": p, "mode": "replace"})
		wantErr(t, werr, wire.CodeInvalidRequest, "is outside the allowed roots", false)
	}
	if names := dirNames(t, base); len(names) != 1 {
		t.Errorf("something was created outside the root: %q", names)
	}
}

// A failed write drops the handle and its temporary file, leaving the
// destination as it was.
func TestWriteBlockFailureDropsHandle(t *testing.T) {
	dir := tmp(t)
	dst := filepath.Join(dir, "d")
	writeTestFile(t, dst, "old", 0o644)
	var h Handles
	defer h.CloseAll()
	mustCall(t, all, &h, wire.MethodFsOpen, obj{"handleId": "w", "path": dst, "mode": "replace"})
	// Make the temporary file unwritable behind the handle's back: the
	// descriptor is write-only, so swap it for a read-only one.
	f := h.files["w"]
	ro, err := os.Open(f.f.Name())
	if err != nil {
		t.Fatal(err)
	}
	f.f.Close()
	f.f = ro
	_, werr := call(t, all, &h, wire.MethodFsWriteBlock, obj{"handleId": "w", "offset": 0, "chunk": "eA=="})
	wantErr(t, werr, wire.CodeInternal, "write "+dst+": bad file descriptor", true)
	if h.Len() != 0 {
		t.Errorf("the handle survived a failed write")
	}
	if names := dirNames(t, dir); len(names) != 1 || readTestFile(t, dst) != "old" {
		t.Errorf("after a failed write: %q %q", names, readTestFile(t, dst))
	}
}
