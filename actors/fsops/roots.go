package fsops

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/runtimed/runtimed/wire"
)

// maxSymlinks bounds the symbolic links followed while resolving one path
// (Linux's MAXSYMLINKS); beyond it resolution fails with ELOOP.
const maxSymlinks = 40

// Roots are the directories the fs/* methods may touch. The zero value (or
// NewRoots(nil)) allows the whole filesystem. Roots is immutable after
// NewRoots and safe for concurrent use.
type Roots struct {
	dirs    []string   // physical (symlink-free) absolute paths; nil: everything
	handles []*os.Root // handles[i] is dirs[i], opened once: every operation goes through it (beneath.go)
}

// NewRoots resolves each directory with filepath.EvalSymlinks (a relative
// one against the working directory), checks that it is a directory and
// opens it (an [os.Root]: the operations happen beneath that handle, and
// keep to the directory it was opened on). An empty list allows the whole
// filesystem. The handles live as long as the Roots is reachable (they
// are closed when it is garbage collected); a daemon holds its Roots for
// its lifetime.
func NewRoots(dirs []string) (Roots, error) {
	var r Roots
	for _, d := range dirs {
		abs, err := filepath.Abs(d)
		if err != nil {
			return Roots{}, fmt.Errorf("fs root %q: %w", d, err)
		}
		phys, err := filepath.EvalSymlinks(abs)
		if err != nil {
			return Roots{}, fmt.Errorf("fs root %q: %w", d, err)
		}
		fi, err := os.Stat(phys)
		if err != nil {
			return Roots{}, fmt.Errorf("fs root %q: %w", d, err)
		}
		if !fi.IsDir() {
			return Roots{}, fmt.Errorf("fs root %q is not a directory", d)
		}
		h, err := os.OpenRoot(phys)
		if err != nil {
			return Roots{}, fmt.Errorf("fs root %q: %w", d, err)
		}
		r.dirs = append(r.dirs, phys)
		r.handles = append(r.handles, h)
	}
	return r, nil
}

// Allow checks a path argument (absolute, or a file: URI) that something
// other than an fs method will use, such as a process's working
// directory: nil if no roots are configured or if it resolves to a root
// or inside one; else the error an fs method gives for it (-32600 "path
// {path} is outside the allowed roots", -32602 for a relative path, or
// the OS error that stopped its resolution).
func (r Roots) Allow(arg string) *wire.Error {
	if len(r.dirs) == 0 {
		return nil
	}
	_, werr := r.resolveArg(arg, true)
	return werr
}

// Dirs returns the resolved roots; empty means the whole filesystem.
func (r Roots) Dirs() []string { return append([]string(nil), r.dirs...) }

// Contains reports whether the physical absolute path p is one of the roots
// or inside one.
func (r Roots) Contains(p string) bool {
	if len(r.dirs) == 0 {
		return true
	}
	for _, d := range r.dirs {
		if d == "/" || p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

// isRoot reports whether p is itself a root ("/" when all is allowed).
func (r Roots) isRoot(p string) bool {
	if len(r.dirs) == 0 {
		return p == "/"
	}
	for _, d := range r.dirs {
		if p == d {
			return true
		}
	}
	return false
}

// target is a path argument after resolution.
type target struct {
	arg  string // as the client sent it: for confinement and usage messages
	abs  string // absolute path (a URI decoded): for OS error messages
	phys string // physical path the operation uses
	uri  bool   // arg is a file: URI: answers carry paths as URIs too
}

// resolveArg parses a path argument, resolves it (following a final
// symbolic link when follow is set) and checks it against the roots.
func (r Roots) resolveArg(arg string, follow bool) (target, *wire.Error) {
	return r.resolveWith(arg, func(abs string) (string, error) { return resolve(abs, follow) })
}

// resolveMissingArg is resolveArg for a path expected not to exist (see
// resolveMissing); a final link is not followed.
func (r Roots) resolveMissingArg(arg string) (target, *wire.Error) {
	return r.resolveWith(arg, resolveMissing)
}

func (r Roots) resolveWith(arg string, res func(string) (string, error)) (target, *wire.Error) {
	abs, werr := parsePath(arg)
	if werr != nil {
		return target{}, werr
	}
	t := target{arg: arg, abs: abs, uri: wire.IsFileURI(arg)}
	phys, err := res(abs)
	if err != nil {
		return target{}, osError(err, t)
	}
	if !r.Contains(phys) {
		return target{}, wire.ErrOutsideRoots(arg)
	}
	t.phys = phys
	return t, nil
}

// parsePath accepts an absolute path or a file: URI (host empty or
// localhost) and returns the absolute path, not yet cleaned: ".." is
// applied during resolution, after the symbolic links before it.
func parsePath(p string) (string, *wire.Error) {
	s, err := wire.NativePath(p)
	if errors.Is(err, wire.ErrFileURIRemote) {
		return "", wire.ErrFileURIHost(p)
	}
	if err != nil {
		return "", wire.ErrPathNotAbsolute(p)
	}
	if !filepath.IsAbs(s) {
		return "", wire.ErrPathNotAbsolute(p)
	}
	return s, nil
}

// resolve returns the physical form of the absolute path p: every symbolic
// link is replaced by its target (the final component's only when follow is
// set) and ".." removes the previous physical component, as the kernel
// does. Components from the first missing one on are appended as they are,
// so a path that does not exist yet resolves to where it would be created.
// Errors other than a missing component (ENOTDIR, EACCES, ELOOP) are
// returned.
func resolve(p string, follow bool) (string, error) {
	return resolvePath(p, follow, false)
}

// resolveMissing is resolve for a path that is expected not to exist
// (fs/watchMissing): a component under a file does not exist either, so
// from there on components are appended as they are rather than refused
// with ENOTDIR.
func resolveMissing(p string) (string, error) {
	return resolvePath(p, false, true)
}

func resolvePath(p string, follow, underFile bool) (string, error) {
	dest := "/"
	rest := p
	links := 0
	for {
		rest = strings.TrimLeft(rest, "/")
		if rest == "" {
			return dest, nil
		}
		comp := rest
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			comp, rest = rest[:i], rest[i:]
		} else {
			rest = ""
		}
		switch comp {
		case ".":
			continue
		case "..":
			dest = filepath.Dir(dest)
			continue
		}
		next := filepath.Join(dest, comp)
		fi, err := os.Lstat(next)
		if errors.Is(err, fs.ErrNotExist) || (underFile && errors.Is(err, syscall.ENOTDIR)) {
			dest = next // missing: not a link, so it can be appended as is
			continue
		}
		if err != nil {
			return "", err
		}
		last := strings.TrimLeft(rest, "/") == ""
		isLink := fi.Mode()&fs.ModeSymlink != 0
		if !isLink && !last && !fi.IsDir() && underFile && rest != "" && !strings.HasPrefix(strings.TrimLeft(rest, "/"), "..") {
			dest = next // "file/x": x does not exist
			continue
		}
		if !isLink && !last && !fi.IsDir() {
			// The kernel refuses "file/x" and "file/.." alike.
			return "", &fs.PathError{Op: "stat", Path: p, Err: syscall.ENOTDIR}
		}
		if !isLink || (last && !follow) {
			dest = next
			continue
		}
		links++
		if links > maxSymlinks {
			return "", &fs.PathError{Op: "resolve", Path: p, Err: syscall.ELOOP}
		}
		link, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(link) {
			dest = "/"
		}
		rest = link + "/" + rest
	}
}
