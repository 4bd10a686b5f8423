package fsops

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// Confinement by the kernel. A path argument is resolved and checked
// against the roots by path (roots.go); the operation then opens it again,
// and in between a process that can write inside a root could swap a
// directory for a link to the outside. So every operation on a resolved
// path goes through the methods below, which map the physical path to a
// root handle (an [os.Root] opened once, in NewRoots) and the path
// relative to it, in one place ([Roots.at]), and let the root handle do
// the I/O: each component is opened beneath the root, a link met on the
// way is followed only as far as the root, and one that leads out (an
// absolute link, ".." above the root) fails. That failure is an
// *outsideError, which the answer turns into the usual -32600 "path {path}
// is outside the allowed roots". With no roots configured (the whole
// filesystem) the methods are the plain os functions, as before.
// A replacement (a write, each file of a copy, fs/open in mode replace)
// opens the destination's directory once beneath the root ([dir]) and does
// its steps there by name.
//
// Errors read as the os functions' do (op and physical path: "open
// /r/x: no such file or directory"), so that an answer does not depend on
// whether roots are configured.

// outsideError is an operation that would have left the roots: a link
// swapped in after the path was checked, or a path under no root.
type outsideError struct{ path string } // physical path of the operation

func (e *outsideError) Error() string { return "path " + e.path + " is outside the allowed roots" }

// at maps the physical path phys to the handle of the innermost root that
// holds it and the path relative to that root ("." for the root itself).
// With no roots configured the handle is nil and phys is returned as it
// is. A path under no root is an *outsideError.
func (r Roots) at(phys string) (*os.Root, string, error) {
	if len(r.dirs) == 0 {
		return nil, phys, nil
	}
	best := -1
	for i, d := range r.dirs {
		if (d == "/" || phys == d || strings.HasPrefix(phys, d+"/")) && (best < 0 || len(d) > len(r.dirs[best])) {
			best = i
		}
	}
	if best < 0 || r.handles[best] == nil {
		return nil, "", &outsideError{path: phys}
	}
	rel := strings.TrimLeft(phys[len(r.dirs[best]):], "/")
	if rel == "" {
		rel = "."
	}
	return r.handles[best], rel, nil
}

// rootError rewrites an error of an os.Root method as the os function
// would have reported it: op and the physical path (partial paths, as
// MkdirAll reports them, are joined to the root's). Leaving the root is
// an *outsideError.
func rootError(err error, op string, root *os.Root, rel, phys string) error {
	if err == nil {
		return nil
	}
	if escapes(err) {
		return &outsideError{path: phys}
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		p := phys
		if pe.Path != rel && pe.Path != "" {
			p = filepath.Join(root.Name(), pe.Path)
		}
		return &fs.PathError{Op: op, Path: p, Err: pe.Err}
	}
	return err
}

// escapes reports whether err is an os.Root refusing to leave its
// directory. os has no exported sentinel for it ("path escapes from
// parent"); TestBeneathRefusesEscapes fails if its text changes.
func escapes(err error) bool {
	for err != nil {
		if err.Error() == "path escapes from parent" {
			return true
		}
		err = errors.Unwrap(err)
	}
	return false
}

// openFile is os.OpenFile beneath the roots.
func (r Roots) openFile(phys string, flag int, perm fs.FileMode) (*os.File, error) {
	root, rel, err := r.at(phys)
	if err != nil {
		return nil, err
	}
	if root == nil {
		return os.OpenFile(phys, flag, perm)
	}
	f, err := root.OpenFile(rel, flag, perm)
	return f, rootError(err, "open", root, rel, phys)
}

// lstat is os.Lstat beneath the roots.
func (r Roots) lstat(phys string) (fs.FileInfo, error) {
	root, rel, err := r.at(phys)
	if err != nil {
		return nil, err
	}
	if root == nil {
		return os.Lstat(phys)
	}
	fi, err := root.Lstat(rel)
	return fi, rootError(err, "lstat", root, rel, phys)
}

// stat is os.Stat beneath the roots: a final link is followed, within
// the root only.
func (r Roots) stat(phys string) (fs.FileInfo, error) {
	root, rel, err := r.at(phys)
	if err != nil {
		return nil, err
	}
	if root == nil {
		return os.Stat(phys)
	}
	fi, err := root.Stat(rel)
	return fi, rootError(err, "stat", root, rel, phys)
}

// mkdir is os.Mkdir beneath the roots.
func (r Roots) mkdir(phys string, perm fs.FileMode) error {
	root, rel, err := r.at(phys)
	if err != nil {
		return err
	}
	if root == nil {
		return os.Mkdir(phys, perm)
	}
	return rootError(root.Mkdir(rel, perm), "mkdir", root, rel, phys)
}

// mkdirAll is os.MkdirAll beneath the roots, step for step (so its errors
// are os.MkdirAll's): nothing to do for a directory, ENOTDIR for another
// file, else the parent first and then the directory.
func (r Roots) mkdirAll(phys string, perm fs.FileMode) error {
	if root, _, err := r.at(phys); err != nil || root == nil {
		if err != nil {
			return err
		}
		return os.MkdirAll(phys, perm)
	}
	if fi, err := r.stat(phys); err == nil {
		if fi.IsDir() {
			return nil
		}
		return &fs.PathError{Op: "mkdir", Path: phys, Err: syscall.ENOTDIR}
	} else if isOutside(err) {
		return err
	}
	if parent := filepath.Dir(phys); parent != phys && !r.isRoot(phys) {
		if err := r.mkdirAll(parent, perm); err != nil {
			return err
		}
	}
	if err := r.mkdir(phys, perm); err != nil {
		if fi, lerr := r.lstat(phys); lerr == nil && fi.IsDir() {
			return nil
		}
		return err
	}
	return nil
}

// remove is os.Remove beneath the roots.
func (r Roots) remove(phys string) error {
	root, rel, err := r.at(phys)
	if err != nil {
		return err
	}
	if root == nil {
		return os.Remove(phys)
	}
	return rootError(root.Remove(rel), "remove", root, rel, phys)
}

// removeAll is os.RemoveAll beneath the roots. (With roots, an error
// names the path removed rather than the entry inside it that failed:
// os.Root does not report that one.)
func (r Roots) removeAll(phys string) error {
	root, rel, err := r.at(phys)
	if err != nil {
		return err
	}
	if root == nil {
		return os.RemoveAll(phys)
	}
	return rootError(root.RemoveAll(rel), "unlinkat", root, rel, phys)
}

// readlink is os.Readlink beneath the roots.
func (r Roots) readlink(phys string) (string, error) {
	root, rel, err := r.at(phys)
	if err != nil {
		return "", err
	}
	if root == nil {
		return os.Readlink(phys)
	}
	s, err := root.Readlink(rel)
	return s, rootError(err, "readlink", root, rel, phys)
}

// symlink is os.Symlink beneath the roots: the link is created beneath a
// root; its text (target) is not checked, as a link is never followed out
// of the roots.
func (r Roots) symlink(target, phys string) error {
	root, rel, err := r.at(phys)
	if err != nil {
		return err
	}
	if root == nil {
		return os.Symlink(target, phys)
	}
	err = root.Symlink(target, rel)
	switch {
	case err == nil:
		return nil
	case escapes(err):
		return &outsideError{path: phys}
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return &os.LinkError{Op: "symlink", Old: target, New: phys, Err: le.Err}
	}
	return err
}

// chmod is os.Chmod beneath the roots.
func (r Roots) chmod(phys string, mode fs.FileMode) error {
	root, rel, err := r.at(phys)
	if err != nil {
		return err
	}
	if root == nil {
		return os.Chmod(phys, mode)
	}
	return rootError(root.Chmod(rel, mode), "chmod", root, rel, phys)
}

// readDir is os.ReadDir beneath the roots: the entries sorted by name.
// (Entries of a directory opened beneath a root carry their FileInfo,
// read with fstatat relative to the directory, so Info never goes back
// to the path.)
func (r Roots) readDir(phys string) ([]fs.DirEntry, error) {
	f, err := r.openFile(phys, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	list, err := f.ReadDir(-1)
	slices.SortFunc(list, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return list, err
}

// isOutside reports whether err is an operation refused for leaving the
// roots.
func isOutside(err error) bool {
	var oe *outsideError
	return errors.As(err, &oe)
}

// dir is a directory that several operations use by name, one after the
// other: the directory of a file being replaced (its temporary file, the
// rename, the fsync). With roots it is opened beneath them once, as an
// os.Root of its own: each name is then a single step for the kernel, and
// every operation happens in that very directory. Without roots it is its
// path. The caller closes it.
type dir struct {
	path string   // physical
	root *os.Root // nil without roots
}

// parentOf opens the directory holding phys and returns it with phys's
// name in it.
func (r Roots) parentOf(phys string) (dir, string, error) {
	parent, name := filepath.Dir(phys), filepath.Base(phys)
	root, rel, err := r.at(parent)
	if err != nil || root == nil {
		return dir{path: parent}, name, err
	}
	sub, err := root.OpenRoot(rel)
	if err != nil {
		return dir{}, name, rootError(err, "open", root, rel, parent)
	}
	return dir{path: parent, root: sub}, name, nil
}

func (d dir) close() {
	if d.root != nil {
		d.root.Close()
	}
}

// join returns the physical path of name in d.
func (d dir) join(name string) string { return filepath.Join(d.path, name) }

func (d dir) lstat(name string) (fs.FileInfo, error) {
	if d.root == nil {
		return os.Lstat(d.join(name))
	}
	fi, err := d.root.Lstat(name)
	return fi, rootError(err, "lstat", d.root, name, d.join(name))
}

func (d dir) openFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	if d.root == nil {
		return os.OpenFile(d.join(name), flag, perm)
	}
	f, err := d.root.OpenFile(name, flag, perm)
	return f, rootError(err, "open", d.root, name, d.join(name))
}

func (d dir) remove(name string) error {
	if d.root == nil {
		return os.Remove(d.join(name))
	}
	return rootError(d.root.Remove(name), "remove", d.root, name, d.join(name))
}

func (d dir) rename(oldName, newName string) error {
	if d.root == nil {
		return os.Rename(d.join(oldName), d.join(newName))
	}
	err := d.root.Rename(oldName, newName)
	switch {
	case err == nil:
		return nil
	case escapes(err):
		return &outsideError{path: d.join(newName)}
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return &os.LinkError{Op: "rename", Old: d.join(oldName), New: d.join(newName), Err: le.Err}
	}
	return err
}

// sync fsyncs the directory, best effort.
func (d dir) sync() {
	if f, err := d.openFile(".", os.O_RDONLY, 0); err == nil {
		_ = f.Sync()
		f.Close()
	}
}
