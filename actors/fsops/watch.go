package fsops

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"

	"github.com/fsnotify/fsnotify"

	"github.com/runtimed/runtimed/wire"
)

// fs/watchMissing (PROTOCOL.md section 7.4) waits for any of a set of
// missing paths to appear, or for a present path to disappear, and then
// sends one fs/missingChanged. A path that does not exist cannot be
// watched, so each watch arms inotify (through fsnotify) on the nearest
// existing directory above each missing path and on the directory holding
// the present path. Events are only hints: on any creation, removal or
// rename in an armed directory the watches armed there are checked again
// with lstat, and either fire or re-arm (an intermediate directory that
// appeared moves the watch down to it; one that went away moves it up).
// Every arming is followed by a fresh check, so a path created between a
// check and the arming still fires. A watch fires at most once and then
// ends.
//
// Semantics where PROTOCOL.md is silent, as the Codex exec-server answers:
// a watch whose condition already holds when it is registered answers
// {"watching": false} and sends nothing; a missing path "appears" when
// lstat finds it (a dangling link counts); a present path "disappears" when
// lstat no longer finds it. Where PROTOCOL.md is explicit it is followed
// (the Codex exec-server differs): the same watchId replaces the earlier
// watch, and missing [] with present null ends it ({"watching": false}). A
// watch with no missing paths and a present path watches that path alone.
// watchId is a non-negative integer (what Codex sends) or a string, and is
// echoed as sent.
//
// Limits: at most wire.FsMaxWatches (128) active watches per connection
// and wire.FsMaxWatchPaths (256) paths per watch; beyond, -32600 naming the
// limit. The inotify instance exists only while some watch is armed, so an
// idle connection holds none. If arming fails (the kernel's inotify limits)
// the request fails with the OS reason; if re-arming after an event fails,
// the watch fires instead of going silent, and the client's next
// fs/watchMissing gets the error. A queue overflow re-checks every watch.
//
// Not seen: a rename of a directory above the nearest existing one (only
// the directories themselves are watched, not their ancestors).

// watch is one registered watch.
type watch struct {
	key     string          // canonical watchId
	id      json.RawMessage // watchId as sent, for the notification
	missing []string        // physical paths waited for
	present string          // physical path that must stay; "" for none
	dirs    []string        // armed directories, sorted
}

// watches are the watches of one connection, owned by its fs worker like
// [Handles]. The zero value is ready to use.
type watches struct {
	roots   Roots // every check of a path goes beneath them
	byKey   map[string]*watch
	armed   map[string]map[string]bool // armed directory -> keys of the watches armed on it
	inotify *fsnotify.Watcher          // nil while nothing is armed
	fired   []wire.FsMissingChangedParams

	// beforeAdd, if set (by tests), runs just before a directory is added
	// to inotify: what it does to the tree is invisible to the watch but
	// for the check that follows every arming.
	beforeAdd func(dir string)
}

// maxRearm bounds the check-and-arm rounds of one watch per event; a tree
// that keeps changing under it is re-armed on its next event.
const maxRearm = 16

func (ws *watches) watchMissing(raw json.RawMessage) (any, *wire.Error) {
	roots := ws.roots
	var p wire.FsWatchMissingParams
	if werr := wire.DecodeParams(raw, &p); werr != nil {
		return nil, werr
	}
	key, id, ok := watchKey(p.WatchID)
	if !ok {
		return nil, wire.ErrWatchID()
	}
	if len(p.Missing) == 0 && p.Present == nil {
		ws.drop(key)
		return wire.FsWatchMissingResult{Watching: false}, nil
	}
	n := len(p.Missing)
	if p.Present != nil {
		n++
	}
	if n > wire.FsMaxWatchPaths {
		return nil, wire.ErrTooManyWatchPaths()
	}
	w := &watch{key: key, id: id}
	for _, m := range p.Missing {
		t, werr := roots.resolveMissingArg(m)
		if werr != nil {
			return nil, werr
		}
		w.missing = append(w.missing, t.phys)
	}
	if p.Present != nil {
		t, werr := roots.resolveMissingArg(*p.Present)
		if werr != nil {
			return nil, werr
		}
		w.present = t.phys
	}
	if _, replaced := ws.byKey[key]; !replaced && len(ws.byKey) >= wire.FsMaxWatches {
		return nil, wire.ErrTooManyWatches()
	}
	ws.drop(key)
	if w.satisfied(roots) {
		return wire.FsWatchMissingResult{Watching: false}, nil
	}
	if ws.byKey == nil {
		ws.byKey = make(map[string]*watch)
	}
	ws.byKey[key] = w
	if err := ws.arm(w); err != nil {
		ws.drop(key)
		return nil, osError(err)
	}
	// arm may have fired it already (a path created meanwhile): the
	// notification follows this answer.
	return wire.FsWatchMissingResult{Watching: true}, nil
}

// watchKey validates a watchId and returns its canonical key and the form
// echoed in the notification.
func watchKey(raw json.RawMessage) (key string, id json.RawMessage, ok bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", nil, false
		}
		b, _ := json.Marshal(s)
		return "s:" + s, b, true
	}
	n, err := strconv.ParseUint(string(raw), 10, 64)
	if err != nil {
		return "", nil, false
	}
	s := strconv.FormatUint(n, 10)
	return "n:" + s, json.RawMessage(s), true
}

// satisfied reports whether a missing path exists or the present path is
// gone, as seen beneath the roots: a path that a link swapped in since
// would take outside them does not exist there.
func (w *watch) satisfied(roots Roots) bool {
	for _, m := range w.missing {
		if _, err := roots.lstat(m); err == nil {
			return true
		}
	}
	if w.present != "" {
		_, err := roots.lstat(w.present)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || isOutside(err) {
			return true
		}
	}
	return false
}

// wantDirs returns the directories w must be armed on, sorted: the
// nearest existing directory above each missing path (above a path that
// exists but is not a directory, its parent: it must become one first) and
// the directory holding the present path.
func (w *watch) wantDirs(roots Roots) []string {
	var dirs []string
	for _, m := range w.missing {
		p := filepath.Dir(m)
		for {
			fi, err := roots.stat(p)
			if err == nil {
				if !fi.IsDir() {
					p = filepath.Dir(p)
				}
				break
			}
			if p == "/" || roots.isRoot(p) {
				break
			}
			p = filepath.Dir(p)
		}
		dirs = append(dirs, p)
	}
	if w.present != "" {
		dirs = append(dirs, filepath.Dir(w.present))
	}
	slices.Sort(dirs)
	return slices.Compact(dirs)
}

// arm checks w and either fires it or arms it where it must be, checking
// again after every change of its directories.
//
// inotify takes a path, not a descriptor, so a directory swapped for a
// link just before it is armed gets inotify armed on the link's target;
// the check that follows sees (beneath the roots) where the directory
// really is and moves the watch there. Events are only hints: whatever
// inotify is armed on, every decision is a check beneath the roots.
func (ws *watches) arm(w *watch) error {
	for range maxRearm {
		if w.satisfied(ws.roots) {
			ws.fire(w)
			return nil
		}
		want := w.wantDirs(ws.roots)
		if slices.Equal(want, w.dirs) {
			return nil
		}
		if err := ws.setDirs(w, want); err != nil {
			return err
		}
	}
	return nil
}

// setDirs moves w's arming to dirs.
func (ws *watches) setDirs(w *watch, dirs []string) error {
	for _, d := range dirs {
		if slices.Contains(w.dirs, d) {
			continue
		}
		if err := ws.armDir(d, w.key); err != nil {
			return err
		}
		w.dirs = append(w.dirs, d)
	}
	for _, d := range w.dirs {
		if !slices.Contains(dirs, d) {
			ws.disarmDir(d, w.key)
		}
	}
	w.dirs = append(w.dirs[:0], dirs...)
	return nil
}

func (ws *watches) armDir(dir, key string) error {
	if keys := ws.armed[dir]; len(keys) > 0 {
		keys[key] = true
		return nil
	}
	if ws.inotify == nil {
		in, err := fsnotify.NewWatcher()
		if err != nil {
			return &fs.PathError{Op: "watch", Path: dir, Err: unwrapErrno(err)}
		}
		ws.inotify = in
		ws.armed = make(map[string]map[string]bool)
	}
	if ws.beforeAdd != nil {
		ws.beforeAdd(dir)
	}
	if err := ws.inotify.Add(dir); err != nil {
		return &fs.PathError{Op: "watch", Path: dir, Err: unwrapErrno(err)}
	}
	ws.armed[dir] = map[string]bool{key: true}
	return nil
}

// unwrapErrno returns the errno inside an fsnotify error, so that the
// message is the OS reason and the code its class.
func unwrapErrno(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}

func (ws *watches) disarmDir(dir, key string) {
	keys := ws.armed[dir]
	delete(keys, key)
	if len(keys) > 0 {
		return
	}
	delete(ws.armed, dir)
	if ws.inotify != nil {
		_ = ws.inotify.Remove(dir) // gone already if the directory was
	}
	ws.closeIdle()
}

// closeIdle closes the inotify instance once nothing is armed.
func (ws *watches) closeIdle() {
	if ws.inotify != nil && len(ws.armed) == 0 {
		ws.inotify.Close()
		ws.inotify = nil
	}
}

// fire queues w's notification and ends it.
func (ws *watches) fire(w *watch) {
	ws.fired = append(ws.fired, wire.FsMissingChangedParams{WatchID: w.id})
	ws.drop(w.key)
}

// drop ends the watch with key, if any, without a notification.
func (ws *watches) drop(key string) {
	w, ok := ws.byKey[key]
	if !ok {
		return
	}
	delete(ws.byKey, key)
	for _, d := range w.dirs {
		ws.disarmDir(d, key)
	}
	w.dirs = nil
}

// event handles one fsnotify event: the watches armed on the directory it
// happened in (or on the path itself, a directory that went away) are
// checked again.
func (ws *watches) event(ev fsnotify.Event) {
	if !ev.Has(fsnotify.Create) && !ev.Has(fsnotify.Remove) && !ev.Has(fsnotify.Rename) {
		return
	}
	var keys []string
	if self, ok := ws.armed[ev.Name]; ok {
		if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
			// fsnotify has dropped its watch of a directory that went away.
			delete(ws.armed, ev.Name)
			for k := range self {
				if w := ws.byKey[k]; w != nil {
					w.dirs = slices.DeleteFunc(w.dirs, func(d string) bool { return d == ev.Name })
				}
			}
		}
		keys = append(keys, mapKeys(self)...)
	}
	keys = append(keys, mapKeys(ws.armed[filepath.Dir(ev.Name)])...)
	ws.recheck(keys)
	ws.closeIdle()
}

// overflow handles a lost event (a queue overflow or a watcher error):
// every watch is checked again.
func (ws *watches) overflow() {
	ws.recheck(mapKeys(ws.byKey))
}

// broken handles the end of the inotify instance's channels: everything is
// armed again on a new one.
func (ws *watches) broken() {
	if ws.inotify != nil {
		ws.inotify.Close()
		ws.inotify = nil
	}
	ws.armed = nil
	for _, w := range ws.byKey {
		w.dirs = nil
	}
	ws.recheck(mapKeys(ws.byKey))
}

// recheck checks and re-arms the watches with keys (sorted, so that
// notifications go out in a stable order); one that cannot be armed any
// more fires: the client is told to look again rather than left waiting.
func (ws *watches) recheck(keys []string) {
	slices.Sort(keys)
	for _, k := range slices.Compact(keys) {
		w, ok := ws.byKey[k]
		if !ok {
			continue
		}
		if err := ws.arm(w); err != nil {
			if _, still := ws.byKey[k]; still {
				ws.fire(w)
			}
		}
	}
}

// closeAll ends every watch without notifications.
func (ws *watches) closeAll() {
	for k := range ws.byKey {
		ws.drop(k)
	}
	ws.armed = nil
	if ws.inotify != nil {
		ws.inotify.Close()
		ws.inotify = nil
	}
}

func mapKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}
