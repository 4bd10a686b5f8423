package fsops

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runtimed/runtimed/wire"
)

var all Roots // the whole filesystem

func TestIsFsMethod(t *testing.T) {
	for _, m := range []string{
		wire.MethodFsReadFile, wire.MethodFsWriteFile, wire.MethodFsCreateDirectory, wire.MethodFsGetMetadata,
		wire.MethodFsCanonicalize, wire.MethodFsReadDirectory, wire.MethodFsRemove, wire.MethodFsCopy,
		wire.MethodFsOpen, wire.MethodFsReadBlock, wire.MethodFsClose,
	} {
		if !IsFsMethod(m) {
			t.Errorf("IsFsMethod(%q) = false", m)
		}
		if got, want := UsesHandles(m), m == wire.MethodFsOpen || m == wire.MethodFsReadBlock || m == wire.MethodFsClose; got != want {
			t.Errorf("UsesHandles(%q) = %v", m, got)
		}
	}
	for _, m := range []string{"fs/watch", "process/start", "fs/", "initialize"} {
		if IsFsMethod(m) {
			t.Errorf("IsFsMethod(%q) = true", m)
		}
	}
	_, werr := Handle("fs/watch", nil, all, &Handles{})
	wantErr(t, werr, wire.CodeMethodNotFound, "exec-server stub does not implement `fs/watch` yet", true)
}

func TestWriteReadAllByteValues(t *testing.T) {
	dir := tmp(t)
	data := make([]byte, 256*3)
	for i := range data {
		data[i] = byte(i) // every value, three times
	}
	path := filepath.Join(dir, "bytes.bin")
	mustCall(t, all, nil, wire.MethodFsWriteFile, obj{"path": path, "dataBase64": base64.StdEncoding.EncodeToString(data)})
	if got, _ := os.ReadFile(path); !bytes.Equal(got, data) {
		t.Fatalf("file on disk differs from what was written")
	}
	// Read back through a file: URI, and check the wire form too.
	res := mustCall(t, all, nil, wire.MethodFsReadFile, obj{"path": "file://" + path})
	got := res.(wire.FsReadFileResult).DataBase64
	if !bytes.Equal(got, data) {
		t.Fatalf("readFile returned %d bytes, differing from the %d written", len(got), len(data))
	}
	enc, _ := json.Marshal(res)
	if want := `{"dataBase64":"` + base64.StdEncoding.EncodeToString(data) + `"}`; string(enc) != want {
		t.Fatalf("wire form %s", enc)
	}
	// An empty file round-trips too, and nothing else is left in the directory.
	empty := filepath.Join(dir, "empty")
	mustCall(t, all, nil, wire.MethodFsWriteFile, obj{"path": empty, "dataBase64": ""})
	if res := mustCall(t, all, nil, wire.MethodFsReadFile, obj{"path": empty}); len(res.(wire.FsReadFileResult).DataBase64) != 0 {
		t.Fatal("empty file read back non-empty")
	}
	names, _ := os.ReadDir(dir)
	if len(names) != 2 {
		t.Fatalf("temporary files left behind: %v", names)
	}
}

func TestWriteFileKeepsModeAndLinks(t *testing.T) {
	dir := tmp(t)
	path := filepath.Join(dir, "f")
	writeTestFile(t, path, "old", 0o640)
	mustCall(t, all, nil, wire.MethodFsWriteFile, obj{"path": path, "dataBase64": base64.StdEncoding.EncodeToString([]byte("new contents"))})
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o640 || readTestFile(t, path) != "new contents" {
		t.Fatalf("replaced file: mode %v, contents %q", fi.Mode(), readTestFile(t, path))
	}
	// A new file gets 0666 less the umask, like any created file (not the 0600 of a temp file).
	ref := filepath.Join(dir, "ref")
	if err := os.WriteFile(ref, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	created := filepath.Join(dir, "created")
	mustCall(t, all, nil, wire.MethodFsWriteFile, obj{"path": created, "dataBase64": ""})
	rfi, _ := os.Stat(ref)
	cfi, _ := os.Stat(created)
	if rfi.Mode() != cfi.Mode() {
		t.Fatalf("new file mode %v, want %v", cfi.Mode(), rfi.Mode())
	}
	// Writing through a link replaces the target and keeps the link.
	link := filepath.Join(dir, "link")
	mustSymlink(t, "f", link)
	mustCall(t, all, nil, wire.MethodFsWriteFile, obj{"path": link, "dataBase64": base64.StdEncoding.EncodeToString([]byte("via link"))})
	if lfi, _ := os.Lstat(link); lfi.Mode()&os.ModeSymlink == 0 {
		t.Fatal("the link was replaced by a file")
	}
	if readTestFile(t, path) != "via link" {
		t.Fatal("the link's target was not written")
	}
	// A dangling link inside the roots is written through: its target is created.
	mustSymlink(t, "later", filepath.Join(dir, "dangling"))
	mustCall(t, all, nil, wire.MethodFsWriteFile, obj{"path": filepath.Join(dir, "dangling"), "dataBase64": "eA=="})
	if readTestFile(t, filepath.Join(dir, "later")) != "x" {
		t.Fatal("dangling link's target not created")
	}
}

func TestCreateDirectory(t *testing.T) {
	dir := tmp(t)
	deep := filepath.Join(dir, "a", "b", "c")
	mustCall(t, all, nil, wire.MethodFsCreateDirectory, obj{"path": deep}) // recursive by default
	if fi, err := os.Stat(deep); err != nil || !fi.IsDir() {
		t.Fatalf("recursive create: %v", err)
	}
	mustCall(t, all, nil, wire.MethodFsCreateDirectory, obj{"path": deep, "recursive": nil}) // existing, null = default: fine
	_, werr := call(t, all, nil, wire.MethodFsCreateDirectory, obj{"path": filepath.Join(dir, "x", "y"), "recursive": false})
	wantErr(t, werr, wire.CodeNotFound, "no such file or directory", false)
	_, werr = call(t, all, nil, wire.MethodFsCreateDirectory, obj{"path": deep, "recursive": false})
	wantErr(t, werr, wire.CodeInternal, "file exists", false)
	mustCall(t, all, nil, wire.MethodFsCreateDirectory, obj{"path": filepath.Join(dir, "single"), "recursive": false})
	if _, err := os.Stat(filepath.Join(dir, "single")); err != nil {
		t.Fatal(err)
	}
}

func TestGetMetadata(t *testing.T) {
	dir := tmp(t)
	file := filepath.Join(dir, "file")
	writeTestFile(t, file, "12345", 0o644)
	old := time.Date(2020, 1, 2, 3, 4, 5, 678_000_000, time.UTC)
	if err := os.Chtimes(file, old, old); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub")
	mustMkdir(t, sub)
	mustSymlink(t, "file", filepath.Join(dir, "flink"))
	mustSymlink(t, sub, filepath.Join(dir, "dlink"))
	mustSymlink(t, "nowhere", filepath.Join(dir, "dangling"))
	now := time.Now().UnixMilli()

	meta := func(p string) wire.FsMetadataResult {
		return mustCall(t, all, nil, wire.MethodFsGetMetadata, obj{"path": p}).(wire.FsMetadataResult)
	}
	m := meta(file)
	if !m.IsFile || m.IsDirectory || m.IsSymlink || m.Size != 5 || m.ModifiedAtMs != old.UnixMilli() {
		t.Fatalf("file: %+v", m)
	}
	// Birth time is not changed by Chtimes: it is the creation (about now),
	// or the mtime where the filesystem reports none.
	hasBtime := reportsBirthTime(file)
	if hasBtime && (m.CreatedAtMs < now-60_000 || m.CreatedAtMs > now+1000) || !hasBtime && m.CreatedAtMs != old.UnixMilli() {
		t.Fatalf("file createdAtMs %d (now %d, birth time reported: %v)", m.CreatedAtMs, now, hasBtime)
	}
	if m := meta(sub); !m.IsDirectory || m.IsFile || m.IsSymlink || m.ModifiedAtMs == 0 {
		t.Fatalf("dir: %+v", m)
	}
	if m := meta(filepath.Join(dir, "flink")); !m.IsFile || !m.IsSymlink || m.IsDirectory || m.Size != 5 || m.ModifiedAtMs != old.UnixMilli() {
		t.Fatalf("link to file: %+v", m)
	}
	if m := meta(filepath.Join(dir, "dlink")); !m.IsDirectory || !m.IsSymlink || m.IsFile {
		t.Fatalf("link to dir: %+v", m)
	}
	if m := meta(filepath.Join(dir, "dangling")); !m.IsSymlink || m.IsFile || m.IsDirectory {
		t.Fatalf("dangling link: %+v", m)
	}
	enc, _ := json.Marshal(meta(file))
	for _, k := range []string{`"isDirectory":false`, `"isFile":true`, `"isSymlink":false`, `"size":5`, `"createdAtMs":`, fmt.Sprintf(`"modifiedAtMs":%d`, old.UnixMilli())} {
		if !strings.Contains(string(enc), k) {
			t.Fatalf("wire form %s lacks %s", enc, k)
		}
	}
	_, werr := call(t, all, nil, wire.MethodFsGetMetadata, obj{"path": filepath.Join(dir, "missing")})
	wantErr(t, werr, wire.CodeNotFound, "no such file or directory", false)
}

func TestCanonicalize(t *testing.T) {
	dir := tmp(t)
	mustMkdir(t, filepath.Join(dir, "real", "inner"))
	mustSymlink(t, "real", filepath.Join(dir, "link"))
	res := mustCall(t, all, nil, wire.MethodFsCanonicalize, obj{"path": dir + "/link/./inner/../inner"})
	if got := res.(wire.FsPathResult).Path; got != filepath.Join(dir, "real", "inner") {
		t.Fatalf("canonicalize = %q", got)
	}
	// ".." after a link is applied to the link's target, as the kernel does.
	mustMkdir(t, filepath.Join(dir, "other", "deep"))
	mustSymlink(t, filepath.Join(dir, "other", "deep"), filepath.Join(dir, "real", "hop"))
	res = mustCall(t, all, nil, wire.MethodFsCanonicalize, obj{"path": dir + "/real/hop/.."})
	if got := res.(wire.FsPathResult).Path; got != filepath.Join(dir, "other") {
		t.Fatalf("canonicalize through link/.. = %q", got)
	}
	_, werr := call(t, all, nil, wire.MethodFsCanonicalize, obj{"path": dir + "/link/missing"})
	wantErr(t, werr, wire.CodeNotFound, "no such file or directory", false)
}

func TestReadDirectorySorted(t *testing.T) {
	dir := tmp(t)
	for _, n := range []string{"zeta", "Alpha", "beta", "_u", "10", "9"} {
		writeTestFile(t, filepath.Join(dir, n), "", 0o644)
	}
	mustMkdir(t, filepath.Join(dir, "mdir"))
	mustSymlink(t, "mdir", filepath.Join(dir, "ldir"))
	mustSymlink(t, "zeta", filepath.Join(dir, "lfile"))
	mustSymlink(t, "nowhere", filepath.Join(dir, "ldangling"))
	res := mustCall(t, all, nil, wire.MethodFsReadDirectory, obj{"path": dir})
	entries := res.(wire.FsReadDirectoryResult).Entries
	var names []string
	for _, e := range entries {
		names = append(names, e.FileName)
	}
	want := []string{"10", "9", "Alpha", "_u", "beta", "ldangling", "ldir", "lfile", "mdir", "zeta"}
	if !slices.Equal(names, want) {
		t.Fatalf("names %v, want %v", names, want)
	}
	kinds := map[string][2]bool{}
	for _, e := range entries {
		kinds[e.FileName] = [2]bool{e.IsDirectory, e.IsFile}
	}
	for name, k := range map[string][2]bool{"mdir": {true, false}, "ldir": {true, false}, "zeta": {false, true}, "lfile": {false, true}, "ldangling": {false, false}} {
		if kinds[name] != k {
			t.Errorf("%s: isDirectory,isFile = %v, want %v", name, kinds[name], k)
		}
	}
	// An empty directory lists as [], not null.
	mustMkdir(t, filepath.Join(dir, "mdir", "empty"))
	enc, _ := json.Marshal(mustCall(t, all, nil, wire.MethodFsReadDirectory, obj{"path": filepath.Join(dir, "mdir", "empty")}))
	if string(enc) != `{"entries":[]}` {
		t.Fatalf("empty directory: %s", enc)
	}
	_, werr := call(t, all, nil, wire.MethodFsReadDirectory, obj{"path": filepath.Join(dir, "zeta")})
	wantErr(t, werr, wire.CodeInternal, "not a directory", false)
}

// TestReadDirectoryLimit creates 50 001 real empty files (about a second):
// the limit is tested at its true value, not a lowered one.
func TestReadDirectoryLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 50 001 files")
	}
	dir := tmp(t)
	for i := range maxDirEntries {
		fd, err := syscall.Open(filepath.Join(dir, fmt.Sprintf("f%05d", i)), syscall.O_CREAT|syscall.O_WRONLY|syscall.O_CLOEXEC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		syscall.Close(fd)
	}
	res := mustCall(t, all, nil, wire.MethodFsReadDirectory, obj{"path": dir})
	entries := res.(wire.FsReadDirectoryResult).Entries
	if len(entries) != 50_000 || entries[0].FileName != "f00000" || entries[49_999].FileName != "f49999" {
		t.Fatalf("%d entries at the limit", len(entries))
	}
	if err := os.WriteFile(filepath.Join(dir, "one-more"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, werr := call(t, all, nil, wire.MethodFsReadDirectory, obj{"path": dir})
	wantErr(t, werr, wire.CodeInvalidRequest, "directory "+dir+" has more than 50000 entries, the most fs/readDirectory returns", true)
}

func TestRemove(t *testing.T) {
	dir := tmp(t)
	tree := filepath.Join(dir, "tree")
	mustMkdir(t, filepath.Join(tree, "a", "b"))
	writeTestFile(t, filepath.Join(tree, "a", "b", "f"), "x", 0o644)
	writeTestFile(t, filepath.Join(tree, "g"), "y", 0o644)

	// Non-recursive: a non-empty directory stays.
	_, werr := call(t, all, nil, wire.MethodFsRemove, obj{"path": tree, "recursive": false})
	wantErr(t, werr, wire.CodeInternal, "directory not empty", false)
	if _, err := os.Stat(filepath.Join(tree, "g")); err != nil {
		t.Fatal("non-recursive remove removed something")
	}
	// A link to a directory is removed itself; the target keeps its contents.
	keep := filepath.Join(dir, "keep")
	mustMkdir(t, keep)
	writeTestFile(t, filepath.Join(keep, "k"), "k", 0o644)
	mustSymlink(t, keep, filepath.Join(tree, "tolink"))
	mustCall(t, all, nil, wire.MethodFsRemove, obj{"path": filepath.Join(tree, "tolink")})
	if _, err := os.Lstat(filepath.Join(tree, "tolink")); !os.IsNotExist(err) {
		t.Fatal("link not removed")
	}
	if readTestFile(t, filepath.Join(keep, "k")) != "k" {
		t.Fatal("link target damaged")
	}
	// Recursive by default.
	mustSymlink(t, keep, filepath.Join(tree, "a", "inner-link"))
	mustCall(t, all, nil, wire.MethodFsRemove, obj{"path": tree})
	if _, err := os.Lstat(tree); !os.IsNotExist(err) {
		t.Fatal("tree not removed")
	}
	if readTestFile(t, filepath.Join(keep, "k")) != "k" {
		t.Fatal("recursive remove followed a link")
	}
	// Missing: fine with force (default), -32004 without.
	mustCall(t, all, nil, wire.MethodFsRemove, obj{"path": tree})
	_, werr = call(t, all, nil, wire.MethodFsRemove, obj{"path": tree, "force": false})
	wantErr(t, werr, wire.CodeNotFound, "lstat "+tree+": no such file or directory", true)
	// A single file, non-recursive.
	mustCall(t, all, nil, wire.MethodFsRemove, obj{"path": filepath.Join(keep, "k"), "recursive": false, "force": false})
	if _, err := os.Lstat(filepath.Join(keep, "k")); !os.IsNotExist(err) {
		t.Fatal("file not removed")
	}
}

func TestCopyTree(t *testing.T) {
	dir := tmp(t)
	src := filepath.Join(dir, "src")
	mustMkdir(t, filepath.Join(src, "sub", "deeper"))
	writeTestFile(t, filepath.Join(src, "top.txt"), "top", 0o640)
	writeTestFile(t, filepath.Join(src, "sub", "run.sh"), "#!/bin/sh\n", 0o755)
	writeTestFile(t, filepath.Join(src, "sub", "deeper", "d"), "deep", 0o600)
	if err := os.Chmod(filepath.Join(src, "sub"), 0o750); err != nil {
		t.Fatal(err)
	}
	mustSymlink(t, "../top.txt", filepath.Join(src, "sub", "rel-link"))
	mustSymlink(t, "/nonexistent/abs", filepath.Join(src, "abs-dangling"))

	dst := filepath.Join(dir, "dst")
	mustCall(t, all, nil, wire.MethodFsCopy, obj{"sourcePath": src, "destinationPath": dst, "recursive": true})
	for rel, want := range map[string]string{"top.txt": "top", "sub/run.sh": "#!/bin/sh\n", "sub/deeper/d": "deep"} {
		if got := readTestFile(t, filepath.Join(dst, rel)); got != want {
			t.Errorf("%s: %q", rel, got)
		}
		sfi, _ := os.Stat(filepath.Join(src, rel))
		dfi, _ := os.Stat(filepath.Join(dst, rel))
		if sfi.Mode() != dfi.Mode() {
			t.Errorf("%s: mode %v, want %v", rel, dfi.Mode(), sfi.Mode())
		}
	}
	if fi, _ := os.Stat(filepath.Join(dst, "sub")); fi.Mode().Perm() != 0o750 {
		t.Errorf("directory mode %v", fi.Mode())
	}
	for rel, want := range map[string]string{"sub/rel-link": "../top.txt", "abs-dangling": "/nonexistent/abs"} {
		fi, err := os.Lstat(filepath.Join(dst, rel))
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Fatalf("%s is not a link in the copy: %v", rel, err)
		}
		if got, _ := os.Readlink(filepath.Join(dst, rel)); got != want {
			t.Errorf("%s -> %q, want %q", rel, got, want)
		}
	}
	// The copy's relative link points into the copy.
	if readTestFile(t, filepath.Join(dst, "sub", "rel-link")) != "top" {
		t.Error("relative link in copy does not resolve")
	}
	// The source is untouched and independent.
	writeTestFile(t, filepath.Join(dst, "top.txt"), "changed", 0o640)
	if readTestFile(t, filepath.Join(src, "top.txt")) != "top" {
		t.Error("copy shares data with the source")
	}
	// Copy again over the existing copy: merged, files replaced, links replaced.
	mustCall(t, all, nil, wire.MethodFsCopy, obj{"sourcePath": src, "destinationPath": dst, "recursive": true})
	if readTestFile(t, filepath.Join(dst, "top.txt")) != "top" {
		t.Error("second copy did not replace the file")
	}

	// Files: recursive is ignored; the destination is replaced.
	mustCall(t, all, nil, wire.MethodFsCopy, obj{"sourcePath": filepath.Join(src, "sub", "run.sh"), "destinationPath": filepath.Join(dir, "run-copy")})
	if fi, _ := os.Stat(filepath.Join(dir, "run-copy")); fi.Mode().Perm() != 0o755 || readTestFile(t, filepath.Join(dir, "run-copy")) != "#!/bin/sh\n" {
		t.Error("file copy")
	}
	// A link as the source is copied as a link.
	mustCall(t, all, nil, wire.MethodFsCopy, obj{"sourcePath": filepath.Join(src, "sub", "rel-link"), "destinationPath": filepath.Join(dir, "link-copy")})
	if got, _ := os.Readlink(filepath.Join(dir, "link-copy")); got != "../top.txt" {
		t.Errorf("link copy -> %q", got)
	}

	_, werr := call(t, all, nil, wire.MethodFsCopy, obj{"sourcePath": src, "destinationPath": filepath.Join(dir, "x")})
	wantErr(t, werr, wire.CodeInvalidRequest, "fs/copy requires recursive: true when sourcePath is a directory", true)
	if _, err := os.Lstat(filepath.Join(dir, "x")); !os.IsNotExist(err) {
		t.Error("refused copy created its destination")
	}
	for _, into := range []string{src, filepath.Join(src, "sub", "copy"), src + "/sub/../."} {
		_, werr = call(t, all, nil, wire.MethodFsCopy, obj{"sourcePath": src, "destinationPath": into, "recursive": true})
		wantErr(t, werr, wire.CodeInvalidRequest, "fs/copy cannot copy a directory to itself or one of its descendants", true)
	}
	// A sibling whose name merely starts with the source's is fine.
	mustCall(t, all, nil, wire.MethodFsCopy, obj{"sourcePath": src, "destinationPath": src + "2", "recursive": true})
	_, werr = call(t, all, nil, wire.MethodFsCopy, obj{"sourcePath": filepath.Join(dir, "missing"), "destinationPath": filepath.Join(dir, "y")})
	wantErr(t, werr, wire.CodeNotFound, "no such file or directory", false)
}
