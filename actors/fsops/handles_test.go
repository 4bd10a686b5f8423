package fsops

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/runtimed/runtimed/wire"
)

func readBlock(t *testing.T, h *Handles, id string, offset, n int) wire.FsReadBlockResult {
	t.Helper()
	return mustCall(t, all, h, wire.MethodFsReadBlock, obj{"handleId": id, "offset": offset, "len": n}).(wire.FsReadBlockResult)
}

func TestReadBlock(t *testing.T) {
	dir := tmp(t)
	data := make([]byte, 3000)
	for i := range data {
		data[i] = byte(i * 7)
	}
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var h Handles
	defer h.CloseAll()
	res := mustCall(t, all, &h, wire.MethodFsOpen, obj{"handleId": "h1", "path": "file://" + path})
	if res.(wire.FsHandleResult).HandleID != "h1" {
		t.Fatalf("open returned %+v", res)
	}
	cases := []struct {
		offset, n int
		want      []byte
		eof       bool
	}{
		{0, 1024, data[:1024], false},
		{1024, 1024, data[1024:2048], false},
		{1976, 1024, data[1976:], false}, // exactly the end: len bytes returned, not eof
		{2048, 1024, data[2048:], true},  // 952 bytes
		{2999, 1, data[2999:], false},
		{3000, 10, nil, true}, // at the end
		{1 << 40, 10, nil, true},
		{17, wire.FsMaxReadBlockLen, data[17:], true},
		{0, 3001, data, true},
	}
	for _, c := range cases {
		got := readBlock(t, &h, "h1", c.offset, c.n)
		if !bytes.Equal(got.Chunk, c.want) || got.EOF != c.eof {
			t.Errorf("offset %d len %d: %d bytes eof %v, want %d bytes eof %v", c.offset, c.n, len(got.Chunk), got.EOF, len(c.want), c.eof)
		}
	}
	// Reading past eof does not close the handle; close does.
	mustCall(t, all, &h, wire.MethodFsClose, obj{"handleId": "h1"})
	_, werr := call(t, all, &h, wire.MethodFsReadBlock, obj{"handleId": "h1", "offset": 0, "len": 1})
	wantErr(t, werr, wire.CodeNotFound, "unknown file read handle `h1`", true)
	_, werr = call(t, all, &h, wire.MethodFsClose, obj{"handleId": "h1"})
	wantErr(t, werr, wire.CodeNotFound, "unknown file read handle `h1`", true)

	// len out of range, before the handle is even looked up.
	for _, n := range []int{0, -1, wire.FsMaxReadBlockLen + 1} {
		_, werr = call(t, all, &h, wire.MethodFsReadBlock, obj{"handleId": "nope", "offset": 0, "len": n})
		wantErr(t, werr, wire.CodeInvalidParams, "file read block length must be between 1 and 1048576", true)
	}
	_, werr = call(t, all, &h, wire.MethodFsReadBlock, obj{"handleId": "h1", "offset": 0})
	wantErr(t, werr, wire.CodeInvalidParams, "missing field `len`", true)
	_, werr = call(t, all, &h, wire.MethodFsReadBlock, obj{"handleId": "h1", "offset": -1, "len": 1})
	wantErr(t, werr, wire.CodeInvalidParams, "invalid type for field `offset`", false)

	// A handle reads the file it opened, even after the path is replaced.
	mustCall(t, all, &h, wire.MethodFsOpen, obj{"handleId": "h2", "path": path})
	mustCall(t, all, nil, wire.MethodFsWriteFile, obj{"path": path, "dataBase64": "eHl6"})
	if got := readBlock(t, &h, "h2", 0, 5); !bytes.Equal(got.Chunk, data[:5]) {
		t.Errorf("handle followed the path to the new file: %q", got.Chunk)
	}
	_, werr = call(t, all, &h, wire.MethodFsReadBlock, obj{"handleId": "h2", "offset": uint64(1) << 63, "len": 1})
	wantErr(t, werr, wire.CodeInvalidRequest, "file read offset overflowed", false)

	// Opening refuses directories, missing files and relative paths.
	_, werr = call(t, all, &h, wire.MethodFsOpen, obj{"handleId": "d", "path": dir})
	wantErr(t, werr, wire.CodeInternal, "is a directory", false)
	_, werr = call(t, all, &h, wire.MethodFsOpen, obj{"handleId": "m", "path": filepath.Join(dir, "missing")})
	wantErr(t, werr, wire.CodeNotFound, "no such file or directory", false)
	_, werr = call(t, all, &h, wire.MethodFsOpen, obj{"handleId": "r", "path": "rel/path"})
	wantErr(t, werr, wire.CodeInvalidParams, "path must be absolute: rel/path", true)
	if h.Len() != 1 {
		t.Fatalf("failed opens left handles: %d", h.Len())
	}
	if _, werr = Handle(wire.MethodFsOpen, []byte(`{"handleId":"x","path":"/"}`), all, nil); werr == nil || werr.Code != wire.CodeInternal {
		t.Fatalf("open without a handle table: %v", werr)
	}
}

func TestHandleLimit(t *testing.T) {
	dir := tmp(t)
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	var h Handles
	for i := range wire.FsMaxHandles {
		mustCall(t, all, &h, wire.MethodFsOpen, obj{"handleId": fmt.Sprint(i), "path": path})
	}
	_, werr := call(t, all, &h, wire.MethodFsOpen, obj{"handleId": "one-too-many", "path": path})
	wantErr(t, werr, wire.CodeInvalidRequest, "at most 128 file reads may be open per connection", true)
	// A live id cannot be reused, at the limit or below it.
	_, werr = call(t, all, &h, wire.MethodFsOpen, obj{"handleId": "5", "path": path})
	wantErr(t, werr, wire.CodeInvalidRequest, "file handle `5` already exists", true)
	mustCall(t, all, &h, wire.MethodFsClose, obj{"handleId": "5"})
	_, werr = call(t, all, &h, wire.MethodFsOpen, obj{"handleId": "6", "path": path})
	wantErr(t, werr, wire.CodeInvalidRequest, "file handle `6` already exists", true)
	// Closing one frees a slot, and a closed id may be reused.
	mustCall(t, all, &h, wire.MethodFsOpen, obj{"handleId": "5", "path": path})
	if got := readBlock(t, &h, "127", 0, 10); string(got.Chunk) != "abc" || !got.EOF {
		t.Fatalf("read at the limit: %+v", got)
	}
	// CloseAll closes every descriptor and forgets every id.
	fdsBefore := openFDs(t)
	h.CloseAll()
	if h.Len() != 0 {
		t.Fatalf("%d handles after CloseAll", h.Len())
	}
	if closed := fdsBefore - openFDs(t); closed != wire.FsMaxHandles {
		t.Fatalf("CloseAll closed %d descriptors, want %d", closed, wire.FsMaxHandles)
	}
	_, werr = call(t, all, &h, wire.MethodFsReadBlock, obj{"handleId": "0", "offset": 0, "len": 1})
	wantErr(t, werr, wire.CodeNotFound, "unknown file read handle `0`", true)
	mustCall(t, all, &h, wire.MethodFsOpen, obj{"handleId": "0", "path": path})
	h.CloseAll()
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}
