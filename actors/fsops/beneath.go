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

// rename is os.Rename beneath the roots; both paths must be under the
// same root (a temporary file and its destination share a directory).
func (r Roots) rename(oldPhys, newPhys string) error {
	root, oldRel, err := r.at(oldPhys)
	if err != nil {
		return err
	}
	if root == nil {
		return os.Rename(oldPhys, newPhys)
	}
	newRoot, newRel, err := r.at(newPhys)
	if err != nil {
		return err
	}
	if newRoot != root {
		return &os.LinkError{Op: "rename", Old: oldPhys, New: newPhys, Err: syscall.EXDEV}
	}
	err = root.Rename(oldRel, newRel)
	switch {
	case err == nil:
		return nil
	case escapes(err):
		return &outsideError{path: newPhys}
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return &os.LinkError{Op: "rename", Old: oldPhys, New: newPhys, Err: le.Err}
	}
	return err
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

// syncDir fsyncs the directory phys, best effort.
func (r Roots) syncDir(phys string) {
	if d, err := r.openFile(phys, os.O_RDONLY, 0); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// isOutside reports whether err is an operation refused for leaving the
// roots.
func isOutside(err error) bool {
	var oe *outsideError
	return errors.As(err, &oe)
}
