package fsops

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/runtimed/runtimed/wire"
)

// fs/walk (PROTOCOL.md section 7.4) lists what lies under a directory,
// breadth first: the root's entries sorted by name (bytewise), then those of
// each of its directories in the order they were listed, and so on, so a
// directory always comes before its contents. It answers as the Codex
// exec-server does:
//
//   - Only regular files ("file") and directories ("directory") are listed.
//     A symbolic link is left out unless followDirectorySymlinks is set and
//     it leads to a directory, which is then listed (under the link's own
//     path) and walked; a link to a file, a dangling or looping link, a
//     FIFO, a socket or a device is left out. (PROTOCOL.md also allows the
//     kinds "symlink" and "other", but Codex 0.169 fails to read a walk
//     answer that holds them, so they are never sent.)
//   - A root that is not a directory (or is a link that is not followed)
//     gives an empty answer; a root that does not exist is an error.
//   - maxDepth 0 lists the root's entries only; every level descends one
//     more. maxDirectories counts the directories read, the root included:
//     a directory that would exceed it is still listed, not read, and sets
//     truncated. maxEntries counts entries examined, listed or left out,
//     except links that lead nowhere (the Codex exec-server never sees
//     those); the walk stops at the limit with truncated set. The answer
//     itself is bounded to about 4 MiB the same way.
//   - pruneHiddenDirectories lists a directory whose name starts with "."
//     but does not read it.
//   - A directory that cannot be read goes to errors and the walk goes on.
//
// Loops: every directory is read at most once, known by its device and
// inode (the root included). A directory met again (through a link that
// leads back up, a second link to it, or a bind mount) is listed but not
// read again, so the walk never loops and never lists a subtree twice; the
// first path in walk order is the one its contents are listed under. This
// is the Codex exec-server's rule (it keys on canonical paths), and it
// covers a chain of ancestors.
//
// Confinement: the walk reads physical directories under the roots only. A
// followed link whose target lies outside the roots is not listed; it goes
// to errors as "path {path} is outside the allowed roots".

// walkResponseBudget bounds the estimated size of an answer (4 MiB); an
// entry or error costs its text plus walkItemOverhead. A variable only so
// that tests can lower it.
var walkResponseBudget = 4 << 20

const walkItemOverhead = 64

// walkDir is a directory waiting to be read.
type walkDir struct {
	phys  string // physical path, read
	show  string // absolute path in the client's spelling (native), reported
	depth uint64 // depth of its entries (the root's are at 0)
}

// fileID is a file's identity: device and inode.
type fileID struct{ dev, ino uint64 }

// walker is the state of one walk.
type walker struct {
	roots   Roots
	t       target // the root argument: its form is the answers' form
	opts    wire.FsWalkOptions
	out     wire.FsWalkResult
	dirs    uint64 // directories read or queued, the root included
	entries uint64 // entries examined
	budget  int    // bytes of answer left
	queue   []walkDir
	seen    map[fileID]bool // directories read or queued
}

func walk(raw json.RawMessage, roots Roots) (any, *wire.Error) {
	var p wire.FsWalkParams
	if werr := wire.DecodeParams(raw, &p); werr != nil {
		return nil, werr
	}
	var opts wire.FsWalkOptions
	if werr := wire.DecodeParams(p.Options, &opts); werr != nil {
		return nil, werr
	}
	if opts.MaxDirectories == 0 || opts.MaxEntries == 0 {
		return nil, wire.ErrWalkLimitsZero()
	}
	if opts.MaxDepth > wire.FsWalkMaxDepth || opts.MaxDirectories > wire.FsWalkMaxDirectories || opts.MaxEntries > wire.FsWalkMaxEntries {
		return nil, wire.ErrWalkLimitsExceeded()
	}
	link, werr := roots.resolveArg(p.Path, false)
	if werr != nil {
		return nil, werr
	}
	if werr := checkSandbox(p.Sandbox, accessRead, link); werr != nil {
		return nil, werr
	}
	w := &walker{
		roots:  roots,
		t:      link,
		opts:   opts,
		out:    wire.FsWalkResult{Entries: []wire.FsWalkEntry{}, Errors: []wire.FsWalkError{}},
		budget: walkResponseBudget,
	}
	fi, err := roots.lstat(link.phys)
	if err != nil {
		return nil, osError(err, link)
	}
	root := link
	if fi.Mode()&fs.ModeSymlink != 0 {
		if !opts.FollowDirectorySymlinks {
			return w.out, nil
		}
		if root, werr = roots.resolveArg(p.Path, true); werr != nil {
			return nil, werr
		}
		if fi, err = roots.stat(root.phys); err != nil {
			return nil, osError(err, root)
		}
	}
	if !fi.IsDir() {
		return w.out, nil
	}
	w.dirs = 1
	w.seen = map[fileID]bool{idOf(fi): true}
	// Entries are shown under the argument as spelled, cleaned (a file: URI
	// is normalized the same way by a URL parser), not under its target.
	w.queue = append(w.queue, walkDir{phys: root.phys, show: filepath.Clean(link.abs)})
	for len(w.queue) > 0 {
		d := w.queue[0]
		w.queue = w.queue[1:]
		if !w.readDir(d) {
			break
		}
	}
	return w.out, nil
}

// readDir lists one directory; it reports false when the walk must stop.
func (w *walker) readDir(d walkDir) bool {
	list, err := w.roots.readDir(d.phys) // sorted by name
	if err != nil {
		return w.addError(d.show, d.phys, err)
	}
	for _, e := range list {
		name := e.Name()
		phys := filepath.Join(d.phys, name)
		// A link is resolved (physically, as the roots see it) even when it
		// is not followed: one that leads nowhere is not an entry at all.
		var dest string
		var target fs.FileInfo
		if e.Type()&fs.ModeSymlink != 0 {
			var err error
			if dest, err = resolve(phys, true); err == nil {
				target, err = w.statDest(dest)
			}
			if err != nil {
				continue
			}
		}
		if w.entries == w.opts.MaxEntries {
			w.out.Truncated = true
			return false
		}
		w.entries++
		if !w.entry(d, e, phys, dest, target) {
			return false
		}
	}
	return true
}

// entry examines one directory entry at phys (a link's resolved dest and
// target are given); it reports false when the walk must stop.
func (w *walker) entry(d walkDir, e fs.DirEntry, phys, dest string, target fs.FileInfo) bool {
	name := e.Name()
	show := filepath.Join(d.show, name)
	typ := e.Type()
	switch {
	case typ.IsRegular():
		return w.add(show, wire.FsKindFile)
	case typ.IsDir():
		return w.directory(d, phys, show, name, e.Info)
	case typ&fs.ModeSymlink != 0 && w.opts.FollowDirectorySymlinks && target.IsDir():
		if !w.roots.Contains(dest) {
			return w.addErrorText(show, wire.ErrOutsideRoots(w.t.show(show)).Message)
		}
		return w.directory(d, dest, show, name, func() (fs.FileInfo, error) { return target, nil })
	}
	return true // a link not followed or to a file, a FIFO, a socket, a device
}

// directory lists a directory entry found at show (read at phys) and
// queues it to be read if the limits, pruning and its chain allow. info
// describes the directory itself (it is only needed to descend).
func (w *walker) directory(d walkDir, phys, show, name string, info func() (fs.FileInfo, error)) bool {
	if !w.add(show, wire.FsKindDirectory) {
		return false
	}
	if d.depth >= w.opts.MaxDepth || (w.opts.PruneHiddenDirectories && strings.HasPrefix(name, ".")) {
		return true
	}
	fi, err := info()
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return true // removed since it was listed
		}
		return w.addError(show, phys, err)
	}
	id := idOf(fi)
	if w.seen[id] {
		return true // read already, or an ancestor: a loop
	}
	w.seen[id] = true
	if w.dirs == w.opts.MaxDirectories {
		w.out.Truncated = true
		return true
	}
	w.dirs++
	w.queue = append(w.queue, walkDir{phys: phys, show: show, depth: d.depth + 1})
	return true
}

// add appends an entry; it reports false (and sets truncated) when the
// answer would exceed its budget.
func (w *walker) add(show, kind string) bool {
	p := w.t.show(show)
	if !w.spend(len(p)) {
		return false
	}
	w.out.Entries = append(w.out.Entries, wire.FsWalkEntry{Path: p, Kind: kind})
	return true
}

// statDest describes what a link resolved to: beneath the roots when it
// lies inside them; outside, only to tell a directory (listed as an error
// when followed) from anything else (left out), never to read it.
func (w *walker) statDest(dest string) (fs.FileInfo, error) {
	if w.roots.Contains(dest) {
		return w.roots.stat(dest)
	}
	return os.Stat(dest)
}

// addError records a directory that could not be read: the OS error text
// with the path in the client's spelling (a directory the root handle
// refused to leave the roots for is outside them).
func (w *walker) addError(show, phys string, err error) bool {
	if isOutside(err) {
		return w.addErrorText(show, wire.ErrOutsideRoots(w.t.show(show)).Message)
	}
	msg := err.Error()
	var pe *fs.PathError
	if errors.As(err, &pe) {
		msg = pe.Op + " " + strings.Replace(pe.Path, phys, show, 1) + ": " + pe.Err.Error()
	}
	return w.addErrorText(show, msg)
}

func (w *walker) addErrorText(show, msg string) bool {
	p := w.t.show(show)
	if !w.spend(len(p) + len(msg)) {
		return false
	}
	w.out.Errors = append(w.out.Errors, wire.FsWalkError{Path: p, Message: msg})
	return true
}

func (w *walker) spend(n int) bool {
	n += walkItemOverhead
	if n > w.budget {
		w.out.Truncated = true
		return false
	}
	w.budget -= n
	return true
}

// idOf returns the identity of a file.
func idOf(fi fs.FileInfo) fileID {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fileID{dev: uint64(st.Dev), ino: st.Ino}
	}
	return fileID{}
}
