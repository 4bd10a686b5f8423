package main_test

// End-to-end tests of the section 7.4 filesystem methods (fs/walk,
// fs/watchMissing, fs/open mode replace with fs/writeBlock) and of the
// path form of answers (section 7.1), through the real binary over both
// transports.

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runtimed/runtimed/wire"
	"github.com/runtimed/runtimed/wire/wiretest"
)

// fsServer starts a server with args and returns a handshaken client and
// the server process (for the websocket transport, further connections
// can be dialled to srv.URL).
func fsServer(t *testing.T, tr transport, args ...string) (*wiretest.Client, *wiretest.Server) {
	t.Helper()
	var c *wiretest.Client
	var srv *wiretest.Server
	if tr.name == "ws" {
		srv = wiretest.StartWS(t, bin, args...)
		c = dial(t, srv.URL, nil)
	} else {
		c = connectStdio(t, args...)
		srv = c.Server
	}
	if _, err := c.Initialize(tctx(t, wait)); err != nil {
		t.Fatalf("initialize: %v", err)
	}
	return c, srv
}

// physTemp is t.TempDir with symlinks resolved (answers carry physical paths).
func physTemp(t *testing.T) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func uriOf(p string) string { return wire.FileURI(p) }

func mustCallInto(t *testing.T, c *wiretest.Client, method string, params, out any) {
	t.Helper()
	res, err := call(tctx(t, wait), c, method, params)
	if err != nil {
		t.Fatalf("%s %v: %v", method, params, err)
	}
	if out != nil {
		if err := json.Unmarshal(res, out); err != nil {
			t.Fatalf("%s: result %s: %v", method, res, err)
		}
	}
}

type walkAnswer struct {
	Entries []struct {
		Path string `json:"path"`
		Kind string `json:"kind"`
	} `json:"entries"`
	Errors []struct {
		Path    string `json:"path"`
		Message string `json:"message"`
	} `json:"errors"`
	Truncated bool `json:"truncated"`
}

func (w walkAnswer) lines(base string) string {
	var out []string
	for _, e := range w.Entries {
		out = append(out, e.Kind+" "+strings.TrimPrefix(e.Path, base))
	}
	for _, e := range w.Errors {
		out = append(out, "error "+strings.TrimPrefix(e.Path, base)+": "+e.Message)
	}
	if w.Truncated {
		out = append(out, "truncated")
	}
	return strings.Join(out, "\n")
}

func TestFsWalk(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		base := physTemp(t)
		root := filepath.Join(base, "root")
		for _, d := range []string{"skills/.agents/s", "skills/a/b", "outside/secret"} {
			if err := os.MkdirAll(filepath.Join(base, "root", d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		os.Rename(filepath.Join(root, "outside"), filepath.Join(base, "outside"))
		for _, f := range []string{"skills/.agents/s/SKILL.md", "skills/a/b/SKILL.md", "skills/top.txt"} {
			if err := os.WriteFile(filepath.Join(root, f), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		os.Symlink("a", filepath.Join(root, "skills/la"))
		os.Symlink(filepath.Join(base, "outside"), filepath.Join(root, "skills/out"))
		os.Symlink("..", filepath.Join(root, "skills/a/up"))
		c, _ := fsServer(t, tr, "--fs-root", root)
		opts := map[string]any{"maxDepth": 10, "maxDirectories": 100, "maxEntries": 100, "followDirectorySymlinks": false}

		// A URI gets URIs, in breadth-first order; links are not listed
		// unless followed.
		var w walkAnswer
		skills := filepath.Join(root, "skills")
		mustCallInto(t, c, "fs/walk", map[string]any{"path": uriOf(skills), "options": opts, "sandbox": nil}, &w)
		want := "directory /.agents\ndirectory /a\nfile /top.txt\ndirectory /.agents/s\ndirectory /a/b\nfile /.agents/s/SKILL.md\nfile /a/b/SKILL.md"
		if got := w.lines(uriOf(skills)); got != want {
			t.Errorf("walk by URI:\n%s\nwant:\n%s", got, want)
		}
		// Followed, with hidden directories pruned: la is listed, not read
		// twice; up leads back up; out leaves the root and is an error.
		opts["followDirectorySymlinks"] = true
		opts["pruneHiddenDirectories"] = true
		w = walkAnswer{}
		mustCallInto(t, c, "fs/walk", map[string]any{"path": skills, "options": opts}, &w)
		want = "directory /.agents\ndirectory /a\ndirectory /la\nfile /top.txt\ndirectory /a/b\ndirectory /a/up\nfile /a/b/SKILL.md\n" +
			"error /out: path " + skills + "/out is outside the allowed roots"
		if got := w.lines(skills); got != want {
			t.Errorf("walk followed, native:\n%s\nwant:\n%s", got, want)
		}
		// Limits cut it short with truncated.
		w = walkAnswer{}
		mustCallInto(t, c, "fs/walk", map[string]any{"path": skills, "options": map[string]any{"maxDepth": 0, "maxDirectories": 1, "maxEntries": 2, "followDirectorySymlinks": false}}, &w)
		if got := w.lines(skills); got != "directory /.agents\ndirectory /a\ntruncated" {
			t.Errorf("walk with limits:\n%s", got)
		}

		ctx := tctx(t, wait)
		_, err := call(ctx, c, "fs/walk", map[string]any{"path": skills, "options": map[string]any{"maxDepth": 65, "maxDirectories": 1, "maxEntries": 1, "followDirectorySymlinks": false}})
		wantRPCError(t, "walk beyond the maxima", err, -32600, "filesystem walk limits exceed maximums: depth=64, directories=10000, entries=50000")
		_, err = call(ctx, c, "fs/walk", map[string]any{"path": skills, "options": map[string]any{"maxDepth": 1}})
		wantRPCError(t, "walk with options missing", err, -32602, "missing field `maxDirectories`")
		_, err = call(ctx, c, "fs/walk", map[string]any{"path": filepath.Join(base, "outside"), "options": opts})
		wantRPCErrorContains(t, "walk outside the root", err, -32600, "outside the allowed roots")
		_, err = call(ctx, c, "fs/walk", map[string]any{"path": "file://elsewhere" + skills, "options": opts})
		wantRPCErrorContains(t, "walk of a foreign host", err, -32602, "file URI must not name a remote host")
	})
}

func TestFsPathForm(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		dir := physTemp(t)
		if err := os.Mkdir(filepath.Join(dir, "real"), 0o755); err != nil {
			t.Fatal(err)
		}
		os.Symlink("real", filepath.Join(dir, "link"))
		c := session(t, tr)
		ctx := tctx(t, wait)
		for in, want := range map[string]string{
			filepath.Join(dir, "link"):                      filepath.Join(dir, "real"),
			uriOf(filepath.Join(dir, "link")):               uriOf(filepath.Join(dir, "real")),
			"file://localhost" + filepath.Join(dir, "link"): uriOf(filepath.Join(dir, "real")),
		} {
			var res struct{ Path string }
			mustCallInto(t, c, "fs/canonicalize", map[string]any{"path": in}, &res)
			if res.Path != want {
				t.Errorf("canonicalize %s = %s, want %s", in, res.Path, want)
			}
		}
		_, err := call(ctx, c, "fs/canonicalize", map[string]any{"path": "file://host.example" + dir})
		wantRPCError(t, "foreign host", err, -32602, "file URI must not name a remote host: file://host.example"+dir)
	})
}

func TestFsReplace(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		dir := physTemp(t)
		dst := filepath.Join(dir, "out.bin")
		c, _ := fsServer(t, tr)
		b64 := base64.StdEncoding.EncodeToString

		mustCallInto(t, c, "fs/open", map[string]any{"handleId": "w1", "path": uriOf(dst), "mode": "replace"}, nil)
		// 3 MiB in 1 MiB blocks, written out of order.
		data := randomBytes(3<<20, 7)
		for _, off := range []int{2 << 20, 0, 1 << 20} {
			mustCallInto(t, c, "fs/writeBlock", map[string]any{"handleId": "w1", "offset": off, "chunk": b64(data[off : off+1<<20])}, nil)
		}
		if _, err := os.Stat(dst); !os.IsNotExist(err) {
			t.Fatalf("destination visible before fs/close: %v", err)
		}
		mustCallInto(t, c, "fs/close", map[string]any{"handleId": "w1"}, nil)
		if got, err := os.ReadFile(dst); err != nil || string(got) != string(data) {
			t.Fatalf("after close: %d bytes %v, want the 3 MiB written", len(got), err)
		}
		// Read it back through a read handle (mode omitted).
		mustCallInto(t, c, "fs/open", map[string]any{"handleId": "r1", "path": dst}, nil)
		var blk struct {
			Chunk string `json:"chunk"`
			EOF   bool   `json:"eof"`
		}
		mustCallInto(t, c, "fs/readBlock", map[string]any{"handleId": "r1", "offset": 3<<20 - 4, "len": 10}, &blk)
		if blk.Chunk != b64(data[len(data)-4:]) || !blk.EOF {
			t.Errorf("readBlock at the end: %+v", blk)
		}
		_, err := call(tctx(t, wait), c, "fs/writeBlock", map[string]any{"handleId": "r1", "offset": 0, "chunk": "eA=="})
		wantRPCError(t, "write to a read handle", err, -32603, "fs/writeBlock: file handle `r1` was opened with mode read: bad file descriptor")
		_, err = call(tctx(t, wait), c, "fs/open", map[string]any{"handleId": "x", "path": dst, "mode": "write"})
		wantRPCError(t, "unknown mode", err, -32602, "unknown variant `write`, expected `read` or `replace`")
		_, err = call(tctx(t, wait), c, "fs/writeBlock", map[string]any{"handleId": "nope", "offset": 0, "chunk": "eA=="})
		wantRPCError(t, "unknown handle", err, -32004, "unknown file handle `nope`")
		_, err = call(tctx(t, wait), c, "fs/writeBlock", map[string]any{"handleId": "r1", "offset": 0, "chunk": ""})
		wantRPCError(t, "empty chunk", err, -32600, "file write block length must be between 1 and 1048576")
	})
}

// A replace left open when the connection ends leaves neither the file
// nor its temporary file; an existing destination keeps its contents.
func TestFsReplaceOpenAtDisconnect(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		dir := physTemp(t)
		kept := filepath.Join(dir, "kept")
		if err := os.WriteFile(kept, []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
		c, srv := fsServer(t, tr)
		for id, p := range map[string]string{"a": filepath.Join(dir, "fresh"), "b": kept} {
			mustCallInto(t, c, "fs/open", map[string]any{"handleId": id, "path": p, "mode": "replace"}, nil)
			mustCallInto(t, c, "fs/writeBlock", map[string]any{"handleId": id, "offset": 0, "chunk": "cGFydGlhbA=="}, nil)
		}
		if n := len(readDirNames(t, dir)); n != 3 {
			t.Fatalf("%d names while open, want kept and two temporary files", n)
		}
		c.Close()
		if tr.name == "stdio" {
			// The server exits with its only connection.
			select {
			case <-srv.Exited():
			case <-tctx(t, wait).Done():
				t.Fatalf("the stdio server did not exit after stdin closed")
			}
		}
		if !pollUntil(wait, func() bool { return len(readDirNames(t, dir)) == 1 }) {
			t.Fatalf("after the connection ended: %q, want only kept", readDirNames(t, dir))
		}
		if got, _ := os.ReadFile(kept); string(got) != "old" {
			t.Errorf("kept changed: %q", got)
		}
	})
}

func readDirNames(t *testing.T, dir string) []string {
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

// inotifyInstances counts the inotify descriptors a process holds.
func inotifyInstances(pid int) int {
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	n := 0
	for _, fd := range fds {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && l == "anon_inode:inotify" {
			n++
		}
	}
	return n
}

func missingChanged(id string) func(string, json.RawMessage) bool {
	return func(method string, params json.RawMessage) bool {
		var p struct {
			WatchID json.RawMessage `json:"watchId"`
		}
		return method == "fs/missingChanged" && json.Unmarshal(params, &p) == nil && string(p.WatchID) == id
	}
}

func TestFsWatchMissing(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		dir := physTemp(t)
		c, srv := fsServer(t, tr)
		watch := func(params map[string]any) bool {
			t.Helper()
			var res struct {
				Watching *bool `json:"watching"`
			}
			mustCallInto(t, c, "fs/watchMissing", params, &res)
			if res.Watching == nil {
				t.Fatalf("fs/watchMissing %v: no watching field", params)
			}
			return *res.Watching
		}
		if n := inotifyInstances(srv.Pid()); n != 0 {
			t.Fatalf("an idle server holds %d inotify instances", n)
		}
		deep := filepath.Join(dir, "a/b/SKILL.md")
		if !watch(map[string]any{"watchId": 1, "missing": []string{uriOf(deep)}, "present": nil}) {
			t.Fatal("watch 1 not watching")
		}
		// Replaced by the same id: its old path no longer fires.
		if !watch(map[string]any{"watchId": 2, "missing": []string{filepath.Join(dir, "old")}}) ||
			!watch(map[string]any{"watchId": 2, "missing": []string{filepath.Join(dir, "new")}}) {
			t.Fatal("watch 2 not watching")
		}
		// Ended by an empty watch.
		if !watch(map[string]any{"watchId": "three", "missing": []string{filepath.Join(dir, "three")}}) {
			t.Fatal("watch three not watching")
		}
		if watch(map[string]any{"watchId": "three", "missing": []string{}, "present": nil}) {
			t.Fatal("an empty watch answered watching")
		}
		// Already true: not watching, no notification.
		if watch(map[string]any{"watchId": 4, "missing": []string{dir}}) {
			t.Fatal("a path that exists was watched")
		}
		if n := inotifyInstances(srv.Pid()); n != 1 {
			t.Errorf("%d inotify instances for the connection's watches, want 1", n)
		}

		for _, p := range []string{"old", "three", "a", "a/b"} {
			if err := os.Mkdir(filepath.Join(dir, p), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(deep, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := c.WaitNotification(tctx(t, wait), missingChanged("1")); err != nil {
			t.Fatalf("no fs/missingChanged for watch 1: %v", err)
		}
		// Notifications follow the events' order, so one caused by old,
		// three or the existing path of 4 would be here by now.
		for _, n := range c.TakeNotifications(nil) {
			t.Errorf("unexpected notification %s %s", n.Method, n.Params)
		}
		if err := os.WriteFile(filepath.Join(dir, "new"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := c.WaitNotification(tctx(t, wait), missingChanged("2")); err != nil {
			t.Fatalf("no fs/missingChanged for watch 2: %v", err)
		}
		for _, n := range c.TakeNotifications(nil) {
			t.Errorf("unexpected notification %s %s", n.Method, n.Params)
		}
		// Every watch has fired or ended: the instance is released.
		if !pollUntil(wait, func() bool { return inotifyInstances(srv.Pid()) == 0 }) {
			t.Errorf("%d inotify instances after the last watch ended", inotifyInstances(srv.Pid()))
		}

		// Watches end with the connection.
		if !watch(map[string]any{"watchId": 5, "missing": []string{filepath.Join(dir, "five")}}) {
			t.Fatal("watch 5 not watching")
		}
		_, err := call(tctx(t, wait), c, "fs/watchMissing", map[string]any{"watchId": -5, "missing": []string{}})
		wantRPCError(t, "negative watchId", err, -32602, "invalid type for field `watchId`: expected non-negative integer or string")
		if tr.name == "ws" {
			c.Close()
			if !pollUntil(wait, func() bool { return inotifyInstances(srv.Pid()) == 0 }) {
				t.Errorf("%d inotify instances after the connection ended", inotifyInstances(srv.Pid()))
			}
		}
	})
}
