package fsops

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/runtimed/runtimed/wire"
)

// watchWait bounds the wait for an inotify event.
const watchWait = 10 * time.Second

// watchTest drives a Worker the way the connection's fs worker does.
type watchTest struct {
	t     *testing.T
	w     *Worker
	fired []string // watchIds notified so far, as JSON
}

func newWatchTest(t *testing.T, roots Roots) *watchTest {
	x := &watchTest{t: t, w: NewWorker(roots)}
	t.Cleanup(x.w.Close)
	return x
}

func (x *watchTest) watch(params obj) (bool, *wire.Error) {
	x.t.Helper()
	raw, err := json.Marshal(params)
	if err != nil {
		x.t.Fatal(err)
	}
	res, werr := x.w.Handle(wire.MethodFsWatchMissing, raw)
	x.collect()
	if werr != nil {
		return false, werr
	}
	return res.(wire.FsWatchMissingResult).Watching, nil
}

func (x *watchTest) mustWatch(id any, missing []string, present any, want bool) {
	x.t.Helper()
	if missing == nil {
		missing = []string{}
	}
	got, werr := x.watch(obj{"watchId": id, "missing": missing, "present": present})
	if werr != nil {
		x.t.Fatalf("watch %v: %d %s", id, werr.Code, werr.Message)
	}
	if got != want {
		x.t.Fatalf("watch %v: watching=%v, want %v", id, got, want)
	}
}

func (x *watchTest) collect() {
	for _, n := range x.w.Notifications() {
		x.fired = append(x.fired, string(n.WatchID))
	}
}

// waitFired handles events until the watchIds in want (JSON) have fired,
// then checks that exactly those fired since the last call.
func (x *watchTest) waitFired(want ...string) {
	x.t.Helper()
	deadline := time.After(watchWait)
	for {
		x.collect()
		done := true
		for _, id := range want {
			if !slices.Contains(x.fired, id) {
				done = false
			}
		}
		if done {
			break
		}
		select {
		case ev, ok := <-x.w.Events():
			x.w.Event(ev, ok)
		case err, ok := <-x.w.Errors():
			x.w.Error(err, ok)
		case <-deadline:
			x.t.Fatalf("no fs/missingChanged for %q within %v (fired: %q)", want, watchWait, x.fired)
		}
	}
	got := slices.Clone(x.fired)
	slices.Sort(got)
	want = slices.Clone(want)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		x.t.Fatalf("fired %q, want exactly %q", got, want)
	}
	x.fired = nil
}

// sync proves that every event caused before it has been handled: a
// sentinel watch on a fresh path in dir fires after them (one inotify
// queue delivers in order). Whatever else fired is returned.
func (x *watchTest) sync(dir string) []string {
	x.t.Helper()
	p := filepath.Join(dir, fmt.Sprintf(".sentinel-%d", time.Now().UnixNano()))
	x.mustWatch("sentinel", []string{p}, nil, true)
	writeTestFile(x.t, p, "", 0o644)
	deadline := time.After(watchWait)
	for !slices.Contains(x.fired, `"sentinel"`) {
		select {
		case ev, ok := <-x.w.Events():
			x.w.Event(ev, ok)
		case err, ok := <-x.w.Errors():
			x.w.Error(err, ok)
		case <-deadline:
			x.t.Fatalf("sentinel did not fire within %v", watchWait)
		}
		x.collect()
	}
	os.Remove(p)
	others := slices.DeleteFunc(x.fired, func(s string) bool { return s == `"sentinel"` })
	x.fired = nil
	return others
}

func (x *watchTest) dirsOf(id string) []string {
	key, _, _ := watchKey(json.RawMessage(id))
	if w := x.w.watches.byKey[key]; w != nil {
		return w.dirs
	}
	return nil
}

func TestWatchMissingAppears(t *testing.T) {
	dir := tmp(t)
	x := newWatchTest(t, all)
	target := filepath.Join(dir, "a/b/c")
	x.mustWatch(1, []string{wire.FileURI(target)}, nil, true)
	if got := x.dirsOf("1"); !slices.Equal(got, []string{dir}) {
		t.Fatalf("armed on %q, want the nearest existing directory %s", got, dir)
	}
	// Intermediate directories move the watch down without firing it.
	mustMkdir(t, filepath.Join(dir, "a"))
	if others := x.sync(dir); len(others) != 0 {
		t.Fatalf("fired early: %q", others)
	}
	if got := x.dirsOf("1"); !slices.Equal(got, []string{filepath.Join(dir, "a")}) {
		t.Fatalf("armed on %q after mkdir a", got)
	}
	mustMkdir(t, filepath.Join(dir, "a/b"))
	writeTestFile(t, target, "", 0o644)
	x.waitFired("1")
	if x.w.Watching() != 0 || x.w.Events() != nil {
		t.Errorf("a fired watch must end (and with it the inotify instance): %d watching", x.w.Watching())
	}
	// A dangling link counts as appearing; a string watchId is echoed.
	x.mustWatch("s", []string{filepath.Join(dir, "link")}, nil, true)
	mustSymlink(t, "/nonexistent", filepath.Join(dir, "link"))
	x.waitFired(`"s"`)
}

func TestWatchPresentDisappears(t *testing.T) {
	dir := tmp(t)
	x := newWatchTest(t, all)
	present := filepath.Join(dir, "present")
	moved := filepath.Join(dir, "moved")
	writeTestFile(t, present, "", 0o644)
	writeTestFile(t, moved, "", 0o644)
	x.mustWatch(1, []string{filepath.Join(dir, "never")}, wire.FileURI(present), true)
	x.mustWatch(2, nil, moved, true) // present alone
	if err := os.Remove(present); err != nil {
		t.Fatal(err)
	}
	x.waitFired("1")
	if err := os.Rename(moved, filepath.Join(dir, "elsewhere")); err != nil {
		t.Fatal(err)
	}
	x.waitFired("2")
	// A present directory that goes away with its contents.
	mustMkdir(t, filepath.Join(dir, "d/e"))
	x.mustWatch(3, nil, filepath.Join(dir, "d/e"), true)
	if err := os.RemoveAll(filepath.Join(dir, "d")); err != nil {
		t.Fatal(err)
	}
	x.waitFired("3")
}

// As the Codex exec-server answers: a condition that already holds is
// {"watching": false} and no notification.
func TestWatchAlreadySatisfied(t *testing.T) {
	dir := tmp(t)
	x := newWatchTest(t, all)
	writeTestFile(t, filepath.Join(dir, "here"), "", 0o644)
	x.mustWatch(1, []string{filepath.Join(dir, "nope"), filepath.Join(dir, "here")}, nil, false)
	x.mustWatch(2, []string{filepath.Join(dir, "nope")}, filepath.Join(dir, "gone"), false)
	x.mustWatch(3, nil, filepath.Join(dir, "here/under-a-file"), false)
	if x.w.Watching() != 0 || len(x.fired) != 0 || x.w.Events() != nil {
		t.Errorf("watching %d, fired %q", x.w.Watching(), x.fired)
	}
}

// A path created after the check but before inotify watches its directory
// sends no event; the check after arming must catch it.
func TestWatchRaceCreatedBeforeArming(t *testing.T) {
	dir := tmp(t)
	x := newWatchTest(t, all)
	target := filepath.Join(dir, "t")
	x.w.watches.beforeAdd = func(string) { writeTestFile(t, target, "", 0o644) }
	x.mustWatch(1, []string{target}, nil, true)
	// Fired at once, with no event handled.
	if !slices.Equal(x.fired, []string{"1"}) {
		t.Fatalf("fired %q right after the answer, want [1]", x.fired)
	}
	x.fired = nil

	// The same when re-arming deeper: a/b is created after a appeared and
	// before the watch moved down to a.
	deep := filepath.Join(dir, "a/b")
	x.w.watches.beforeAdd = nil
	x.mustWatch(2, []string{deep}, nil, true)
	x.w.watches.beforeAdd = func(d string) {
		if d == filepath.Join(dir, "a") {
			writeTestFile(t, deep, "", 0o644)
		}
	}
	mustMkdir(t, filepath.Join(dir, "a"))
	x.waitFired("2")
}

func TestWatchReplacedAndEnded(t *testing.T) {
	dir := tmp(t)
	x := newWatchTest(t, all)
	old, repl := filepath.Join(dir, "old"), filepath.Join(dir, "new")
	x.mustWatch(1, []string{old}, nil, true)
	x.mustWatch(1, []string{repl}, nil, true) // replaces: old is no longer watched
	if x.w.Watching() != 1 {
		t.Fatalf("%d watches, want 1", x.w.Watching())
	}
	writeTestFile(t, old, "", 0o644)
	if others := x.sync(dir); len(others) != 0 {
		t.Fatalf("the replaced watch fired: %q", others)
	}
	writeTestFile(t, repl, "", 0o644)
	x.waitFired("1")

	// Ended by missing [] and present null: nothing fires afterwards, and
	// the inotify instance is gone once nothing is armed.
	x.mustWatch(5, []string{filepath.Join(dir, "x")}, nil, true)
	x.mustWatch(6, []string{filepath.Join(dir, "y")}, nil, true)
	x.mustWatch(5, nil, nil, false)
	writeTestFile(t, filepath.Join(dir, "x"), "", 0o644)
	if others := x.sync(dir); len(others) != 0 {
		t.Fatalf("the ended watch fired: %q", others)
	}
	x.mustWatch(6, nil, nil, false)
	x.mustWatch(7, nil, nil, false) // ending an unknown watch is fine
	if x.w.Watching() != 0 || x.w.Events() != nil {
		t.Errorf("after ending every watch: %d watching, inotify open=%v", x.w.Watching(), x.w.Events() != nil)
	}
	// Replacing with a condition that already holds ends it too.
	x.mustWatch(8, []string{filepath.Join(dir, "z")}, nil, true)
	x.mustWatch(8, []string{old}, nil, false)
	if x.w.Watching() != 0 {
		t.Errorf("%d watching", x.w.Watching())
	}
}

// The connection's end closes every watch without a notification (and
// goleak sees the inotify goroutine gone).
func TestWatchConnectionEnd(t *testing.T) {
	dir := tmp(t)
	w := NewWorker(all)
	for i := range 3 {
		raw, _ := json.Marshal(obj{"watchId": i, "missing": []string{filepath.Join(dir, fmt.Sprint(i))}})
		if res, werr := w.Handle(wire.MethodFsWatchMissing, raw); werr != nil || !res.(wire.FsWatchMissingResult).Watching {
			t.Fatalf("watch %d: %v %v", i, res, werr)
		}
	}
	events := w.Events()
	w.Close()
	if w.Watching() != 0 || w.Events() != nil || len(w.Notifications()) != 0 {
		t.Errorf("after Close: %d watching", w.Watching())
	}
	writeTestFile(t, filepath.Join(dir, "0"), "", 0o644)
	select {
	case ev, ok := <-events:
		if ok {
			t.Errorf("an event after Close: %v", ev)
		}
	case <-time.After(watchWait):
		t.Errorf("the closed watcher's channel was not closed")
	}
}

// A lost event (queue overflow) or a dead watcher makes every watch check
// again rather than miss its path.
func TestWatchOverflowAndBrokenWatcher(t *testing.T) {
	dir := tmp(t)
	x := newWatchTest(t, all)
	x.mustWatch(1, []string{filepath.Join(dir, "a")}, nil, true)
	x.mustWatch(2, []string{filepath.Join(dir, "b")}, nil, true)
	writeTestFile(t, filepath.Join(dir, "a"), "", 0o644)
	x.w.Error(fsnotify.ErrEventOverflow, true) // as if a's event was lost
	x.collect()
	if !slices.Equal(x.fired, []string{"1"}) {
		t.Fatalf("after an overflow: fired %q, want [1]", x.fired)
	}
	x.fired = nil
	x.w.Event(fsnotify.Event{}, false) // the watcher's channel closed
	if x.w.Events() == nil || x.w.Watching() != 1 {
		t.Fatalf("not re-armed after the watcher broke")
	}
	writeTestFile(t, filepath.Join(dir, "b"), "", 0o644)
	x.waitFired("2")
}

func TestWatchParamsAndLimits(t *testing.T) {
	dir := tmp(t)
	x := newWatchTest(t, all)
	cases := []struct {
		params obj
		code   int
		msg    string
	}{
		{obj{"missing": []string{}}, wire.CodeInvalidParams, "missing field `watchId`"},
		{obj{"watchId": 1}, wire.CodeInvalidParams, "missing field `missing`"},
		{obj{"watchId": nil, "missing": []string{}}, wire.CodeInvalidParams, "missing field `watchId`"},
		{obj{"watchId": -1, "missing": []string{}}, wire.CodeInvalidParams, "invalid type for field `watchId`: expected non-negative integer or string"},
		{obj{"watchId": 1.5, "missing": []string{}}, wire.CodeInvalidParams, "invalid type for field `watchId`"},
		{obj{"watchId": true, "missing": []string{}}, wire.CodeInvalidParams, "invalid type for field `watchId`"},
		{obj{"watchId": obj{}, "missing": []string{}}, wire.CodeInvalidParams, "invalid type for field `watchId`"},
		{obj{"watchId": 1, "missing": "x"}, wire.CodeInvalidParams, "invalid type for field `missing`"},
		{obj{"watchId": 1, "missing": []string{"rel"}}, wire.CodeInvalidParams, "path must be absolute: rel"},
		{obj{"watchId": 1, "missing": []string{"file://h/x"}}, wire.CodeInvalidParams, "file URI must not name a remote host"},
		{obj{"watchId": 1, "missing": []string{}, "present": "rel"}, wire.CodeInvalidParams, "path must be absolute: rel"},
		{obj{"watchId": 1, "missing": make([]string, wire.FsMaxWatchPaths), "present": dir}, wire.CodeInvalidRequest, "fs/watchMissing watches at most 256 paths (missing and present together)"},
	}
	for _, c := range cases {
		_, werr := x.watch(c.params)
		wantErr(t, werr, c.code, c.msg, false)
	}
	// Up to the limit of active watches; a replacement is always allowed.
	for i := range wire.FsMaxWatches {
		x.mustWatch(i, []string{filepath.Join(dir, fmt.Sprint("m", i))}, nil, true)
	}
	_, werr := x.watch(obj{"watchId": "one more", "missing": []string{filepath.Join(dir, "x")}})
	wantErr(t, werr, wire.CodeInvalidRequest, "at most 128 file watches may be active per connection", true)
	x.mustWatch(0, []string{filepath.Join(dir, "other")}, nil, true)
	x.mustWatch(1, nil, nil, false)
	// 1 and "1" are two watches: the string one is new, so it is refused
	// while the number's slot is taken by "one more".
	x.mustWatch("one more", []string{filepath.Join(dir, "x")}, nil, true)
	_, werr = x.watch(obj{"watchId": "1", "missing": []string{filepath.Join(dir, "x")}})
	wantErr(t, werr, wire.CodeInvalidRequest, "at most 128 file watches may be active per connection", true)
	if x.w.Watching() != wire.FsMaxWatches {
		t.Errorf("%d watching", x.w.Watching())
	}
	// 255 missing paths and a present one are accepted.
	many := make([]string, wire.FsMaxWatchPaths-1)
	for i := range many {
		many[i] = filepath.Join(dir, fmt.Sprint("p", i))
	}
	x.mustWatch(2, many, dir, true)
	if got := x.dirsOf("2"); !slices.Equal(got, []string{filepath.Dir(dir), dir}) {
		t.Errorf("armed on %q", got)
	}
}

func TestWatchConfined(t *testing.T) {
	base := tmp(t)
	root := filepath.Join(base, "root")
	mustMkdir(t, root)
	mustSymlink(t, base, filepath.Join(root, "up"))
	roots, err := NewRoots([]string{root})
	if err != nil {
		t.Fatal(err)
	}
	x := newWatchTest(t, roots)
	for _, p := range []string{filepath.Join(base, "x"), filepath.Join(root, "up/x"), wire.FileURI(root) + "/../x"} {
		_, werr := x.watch(obj{"watchId": 1, "missing": []string{p}})
		wantErr(t, werr, wire.CodeInvalidRequest, "is outside the allowed roots", false)
		_, werr = x.watch(obj{"watchId": 1, "missing": []string{}, "present": p})
		wantErr(t, werr, wire.CodeInvalidRequest, "is outside the allowed roots", false)
	}
	x.mustWatch(1, []string{filepath.Join(root, "in/side")}, nil, true)
	if got := x.dirsOf("1"); !slices.Equal(got, []string{root}) {
		t.Errorf("armed on %q", got)
	}
	if strings.Contains(strings.Join(x.dirsOf("1"), ""), "up") {
		t.Errorf("armed through a link")
	}
}

// A directory swapped for a link to the outside between the check and
// inotify's arming (which takes a path): the check after the arming, made
// beneath the root, moves the watch to where the directory is as the root
// sees it, and nothing outside can make the watch fire.
func TestWatchSwappedWhileArming(t *testing.T) {
	base := tmp(t)
	root := filepath.Join(base, "root")
	outside := filepath.Join(base, "outside")
	mustMkdir(t, filepath.Join(root, "sub"))
	mustMkdir(t, outside)
	roots, err := NewRoots([]string{root})
	if err != nil {
		t.Fatal(err)
	}
	x := newWatchTest(t, roots)
	sub := filepath.Join(root, "sub")
	swapped := false
	x.w.watches.beforeAdd = func(d string) {
		if d == sub && !swapped {
			swapped = true
			if err := os.Rename(sub, sub+"-moved"); err != nil {
				t.Error(err)
			}
			mustSymlink(t, outside, sub)
		}
	}
	x.mustWatch(1, []string{filepath.Join(sub, "x")}, nil, true)
	if !swapped {
		t.Fatal("the swap did not happen")
	}
	if got := x.dirsOf("1"); !slices.Equal(got, []string{root}) {
		t.Errorf("armed on %q, want the root only", got)
	}
	for d := range x.w.watches.armed {
		if d != root {
			t.Errorf("inotify still armed on %s", d)
		}
	}
	// Appearing outside, under the link's name, is not appearing inside.
	writeTestFile(t, filepath.Join(outside, "x"), "", 0o644)
	if others := x.sync(root); len(others) != 0 {
		t.Errorf("fired %q for a file outside", others)
	}
}
