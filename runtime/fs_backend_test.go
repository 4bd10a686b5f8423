package runtime

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runtimed/runtimed/wire"
)

func TestBackendFileSystem(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		fsys := b.(FileSystem)
		ctx := ctxT(t)
		dir := t.TempDir()
		all := make([]byte, 256)
		for i := range all {
			all[i] = byte(i)
		}
		f := filepath.Join(dir, "bytes.bin")
		if err := fsys.WriteFile(ctx, f, all); err != nil {
			t.Fatal(err)
		}
		if got, err := fsys.ReadFile(ctx, "file://"+f); err != nil || !bytes.Equal(got, all) {
			t.Fatalf("round trip: %v %v", got, err)
		}
		if err := fsys.CreateDirectory(ctx, filepath.Join(dir, "a", "b"), true); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(f, filepath.Join(dir, "link")); err != nil {
			t.Fatal(err)
		}
		st, err := fsys.Stat(ctx, filepath.Join(dir, "link"))
		if err != nil || !st.IsSymlink || !st.IsFile || st.Size != 256 || st.Modified.IsZero() {
			t.Fatalf("stat of a symlink to a file: %+v %v", st, err)
		}
		ents, err := fsys.ReadDirectory(ctx, dir)
		if err != nil || len(ents) != 3 || ents[0].Name != "a" || !ents[0].IsDirectory || ents[1].Name != "bytes.bin" || ents[2].Name != "link" {
			t.Fatalf("readDirectory: %+v %v", ents, err)
		}
		if canon, err := fsys.Canonicalize(ctx, filepath.Join(dir, "a", "..", "link")); err != nil || !strings.HasSuffix(canon, "bytes.bin") {
			t.Fatalf("canonicalize: %q %v", canon, err)
		}
		if err := fsys.Copy(ctx, filepath.Join(dir, "a"), filepath.Join(dir, "c"), true); err != nil {
			t.Fatal(err)
		}
		if err := fsys.Remove(ctx, filepath.Join(dir, "c"), true, false); err != nil {
			t.Fatal(err)
		}
		var re *RPCError
		if _, err := fsys.ReadFile(ctx, filepath.Join(dir, "missing")); !errors.As(err, &re) || re.Code != wire.CodeNotFound {
			t.Fatalf("missing file: %v; want -32004", err)
		}
		if _, err := fsys.ReadFile(ctx, "relative/path"); !errors.As(err, &re) || re.Code != wire.CodeInvalidParams || re.Message != "path must be absolute: relative/path" {
			t.Fatalf("relative path: %v", err)
		}

		// Walk: breadth first, in the form of the path given; limits cut it.
		wr, err := fsys.Walk(ctx, "file://"+dir, WalkOptions{MaxDepth: 5, MaxDirectories: 10, MaxEntries: 100})
		if err != nil || wr.Truncated || len(wr.Errors) != 0 {
			t.Fatalf("walk: %+v %v", wr, err)
		}
		var walked []string
		for _, e := range wr.Entries {
			walked = append(walked, fmt.Sprintf("%s %v", strings.TrimPrefix(e.Path, "file://"+dir), e.IsDirectory))
		}
		if got := strings.Join(walked, ","); got != "/a true,/bytes.bin false,/a/b true" {
			t.Fatalf("walk: %s", got)
		}
		wr, err = fsys.Walk(ctx, dir, WalkOptions{MaxDepth: 5, MaxDirectories: 1, MaxEntries: 100, FollowDirectorySymlinks: true})
		if err != nil || !wr.Truncated || len(wr.Entries) != 2 || wr.Entries[0].Path != filepath.Join(dir, "a") {
			t.Fatalf("walk with a directory limit: %+v %v", wr, err)
		}
		if _, err := fsys.Walk(ctx, dir, WalkOptions{}); optionOf(err) != "WalkOptions.MaxDirectories" {
			t.Fatalf("walk without limits: %v; want an *OptionError naming WalkOptions.MaxDirectories", err)
		}

		// Streaming: a file of several blocks through Open, and back through Create.
		big := make([]byte, 3<<20+123)
		rand.Read(big)
		w := fsys.Create(ctx, filepath.Join(dir, "big"))
		if _, err := io.Copy(w, bytes.NewReader(big)); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		r, err := fsys.Open(ctx, filepath.Join(dir, "big"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(r)
		if err != nil || !bytes.Equal(got, big) {
			t.Fatalf("streamed %d bytes, %v; want %d", len(got), err, len(big))
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// A connection's open file handles are closed when it ends.
func TestServerClosesFileHandlesOnDisconnect(t *testing.T) {
	c, _ := newWSBackend(t, Config{}, nil)
	ctx := ctxT(t)
	f := filepath.Join(t.TempDir(), "held")
	if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Open(ctx, f); err != nil {
		t.Fatal(err)
	}
	if n := fdsOpenOn(t, f); n != 1 {
		t.Fatalf("%d descriptors on the file while its handle is open; want 1", n)
	}
	_ = c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for fdsOpenOn(t, f) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the server kept the file open after the connection ended")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func fdsOpenOn(t *testing.T, path string) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	n := 0
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && target == path {
			n++
		}
	}
	return n
}
