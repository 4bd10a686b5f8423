package sandbox

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// Resolver resolves the symbolic links of paths as filepath.EvalSymlinks
// does, for the many paths of one policy that share their ancestors (a
// project root and its .git, .codex, .agents and .aws): each directory on
// the way is looked at once (lstat) instead of once per path under it,
// and a path found free of symbolic links is stat'ed with the same call.
// Whatever it does not find plainly free of symbolic links or plainly
// missing (a link on the way, another error) goes to
// filepath.EvalSymlinks and os.Stat, for their exact answer and error. It
// remembers what it saw: use one per check, never across starts. Not safe
// for concurrent use.
type Resolver struct {
	free map[string]os.FileInfo // absolute clean paths with no symbolic link on the way, and their lstat
}

// freeOf returns p's lstat if p is absolute and clean, exists, and neither
// it nor any of its ancestors is a symbolic link (its stat then). When p's
// parent is such a directory and p cannot be lstat'ed, lerr is the
// error, as filepath.EvalSymlinks(p) would return it.
func (r *Resolver) freeOf(p string) (fi os.FileInfo, ok bool, lerr error) {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return nil, false, nil
	}
	if fi, ok := r.free[p]; ok {
		return fi, true, nil
	}
	if parent := filepath.Dir(p); parent != p {
		if _, ok, _ := r.freeOf(parent); !ok {
			return nil, false, nil
		}
	}
	fi, err := os.Lstat(p)
	if err != nil {
		return nil, false, err
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		return nil, false, nil
	}
	if r.free == nil {
		r.free = map[string]os.FileInfo{}
	}
	r.free[p] = fi
	return fi, true, nil
}

// EvalSymlinks is filepath.EvalSymlinks(p).
func (r *Resolver) EvalSymlinks(p string) (string, error) {
	_, ok, lerr := r.freeOf(p)
	switch {
	case ok:
		return p, nil
	case errors.Is(lerr, fs.ErrNotExist):
		// Missing under a directory free of symbolic links: the lstat's
		// error is filepath.EvalSymlinks's.
		return "", lerr
	}
	return filepath.EvalSymlinks(p)
}
