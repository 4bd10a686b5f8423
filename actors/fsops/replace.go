package fsops

import (
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/runtimed/runtimed/wire"
)

// Atomic replacement of a file: fs/writeFile and fs/copy in one call, an
// fs/open handle in mode replace across several requests. The new contents
// go to a temporary file in the destination's directory, which is renamed
// over the destination only when complete, so a reader sees the old file
// or the new one, never a part.

// errNotRegular is returned when the destination exists and is neither a
// regular file nor a directory (a FIFO, a device): renaming over it would
// destroy it, writing into it could block.
type errNotRegular struct{ path string }

func (e *errNotRegular) Error() string { return e.path + " is not a regular file" }

func replaceError(err error, ts ...target) *wire.Error {
	var nr *errNotRegular
	if errors.As(err, &nr) {
		return wire.ErrNotRegularFile(display(nr.path, ts...))
	}
	return osError(err, ts...)
}

// replaceMeta is what a replacement carries over to the new file.
type replaceMeta struct {
	mode     fs.FileMode
	hasMode  bool
	uid, gid int // -1: keep the creator's
}

// prepareReplace checks that dst (physical) may be replaced and returns
// what the new file keeps. With mode nil a replaced file keeps its mode
// bits and, where permitted, its owner, and a new file gets 0666 less the
// umask; with a mode the file gets exactly those bits. A symbolic link at
// dst is replaced, not followed (only a race puts one there: dst was
// resolved).
func prepareReplace(dst string, mode *fs.FileMode) (replaceMeta, error) {
	m := replaceMeta{uid: -1, gid: -1}
	if mode != nil {
		m.mode, m.hasMode = *mode&modeBits, true
	}
	switch fi, err := os.Lstat(dst); {
	case err == nil && fi.IsDir():
		return m, &fs.PathError{Op: "open", Path: dst, Err: syscall.EISDIR}
	case err == nil && fi.Mode()&fs.ModeSymlink != 0:
	case err == nil && !fi.Mode().IsRegular():
		return m, &errNotRegular{path: dst}
	case err == nil:
		if !m.hasMode {
			m.mode, m.hasMode = fi.Mode()&modeBits, true
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
				m.uid, m.gid = int(st.Uid), int(st.Gid)
			}
		}
	case !errors.Is(err, fs.ErrNotExist):
		return m, err
	}
	return m, nil
}

// finishReplace gives the temporary file tmp the metadata m, optionally
// fsyncs it, closes it and renames it over dst (then fsyncs the
// directory). On failure tmp is closed and removed.
func finishReplace(tmp *os.File, dst string, m replaceMeta, sync bool) (err error) {
	name := tmp.Name()
	closed := false
	defer func() {
		if err != nil {
			if !closed {
				tmp.Close()
			}
			os.Remove(name)
		}
	}()
	if m.hasMode {
		if err = tmp.Chmod(m.mode); err != nil {
			return retarget(err, "chmod", dst)
		}
	}
	if m.uid >= 0 {
		_ = tmp.Chown(m.uid, m.gid) // best effort: only root may give a file away
		if m.mode&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
			_ = tmp.Chmod(m.mode) // chown clears set-id bits
		}
	}
	if sync {
		if err = tmp.Sync(); err != nil {
			return retarget(err, "sync", dst)
		}
	}
	closed = true
	if err = tmp.Close(); err != nil {
		return retarget(err, "close", dst)
	}
	if err = os.Rename(name, dst); err != nil {
		return retarget(err, "rename", dst)
	}
	if sync {
		if d, derr := os.Open(filepath.Dir(dst)); derr == nil {
			_ = d.Sync() // the rename is durable once the directory is
			d.Close()
		}
	}
	return nil
}

// replaceFile atomically replaces (or creates) the regular file dst with
// the contents of r (see prepareReplace for mode and owner).
func replaceFile(dst string, r io.Reader, mode *fs.FileMode, sync bool) error {
	m, err := prepareReplace(dst, mode)
	if err != nil {
		return err
	}
	tmp, err := createTemp(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(tmp, r); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return retarget(err, "write", dst)
	}
	return finishReplace(tmp, dst, m, sync)
}

// createTemp creates a new file next to dst, named after it, with mode
// 0666 less the umask (os.CreateTemp would make it 0600). Errors name dst.
func createTemp(dst string) (*os.File, error) {
	dir, base := filepath.Split(dst)
	if len(base) > 64 {
		base = base[:64] // stay well under NAME_MAX
	}
	for i := 0; ; i++ {
		name := filepath.Join(dir, "."+base+".runtimed-"+strconv.FormatUint(rand.Uint64(), 36)+".tmp")
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_CLOEXEC, 0o666)
		if errors.Is(err, fs.ErrExist) && i < 100 {
			continue
		}
		if err != nil {
			return nil, retarget(err, "open", dst)
		}
		return f, nil
	}
}

// retarget names dst in an error about the temporary file.
func retarget(err error, op, dst string) error {
	var pe *fs.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		return &fs.PathError{Op: op, Path: dst, Err: pe.Err}
	case errors.As(err, &le):
		return &fs.PathError{Op: op, Path: dst, Err: le.Err}
	}
	return err
}
