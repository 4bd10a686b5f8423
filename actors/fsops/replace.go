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

// prepareReplace checks that name in d may be replaced and returns what
// the new file keeps. With mode nil a replaced file keeps its mode bits
// and, where permitted, its owner, and a new file gets 0666 less the
// umask; with a mode the file gets exactly those bits. A symbolic link
// there is replaced, not followed (only a race puts one there: the path
// was resolved).
func (d dir) prepareReplace(name string, mode *fs.FileMode) (replaceMeta, error) {
	m := replaceMeta{uid: -1, gid: -1}
	if mode != nil {
		m.mode, m.hasMode = *mode&modeBits, true
	}
	switch fi, err := d.lstat(name); {
	case err == nil && fi.IsDir():
		return m, &fs.PathError{Op: "open", Path: d.join(name), Err: syscall.EISDIR}
	case err == nil && fi.Mode()&fs.ModeSymlink != 0:
	case err == nil && !fi.Mode().IsRegular():
		return m, &errNotRegular{path: d.join(name)}
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

// finishReplace gives the temporary file tmp (tmpName in d) the metadata
// m, optionally fsyncs it, closes it and renames it over name (then fsyncs
// d). On failure tmp is closed and removed. Errors name the destination.
func (d dir) finishReplace(tmp *os.File, tmpName, name string, m replaceMeta, sync bool) (err error) {
	dst := d.join(name)
	closed := false
	defer func() {
		if err != nil {
			if !closed {
				tmp.Close()
			}
			d.remove(tmpName)
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
	if err = d.rename(tmpName, name); err != nil {
		return retarget(err, "rename", dst)
	}
	if sync {
		d.sync() // the rename is durable once the directory is
	}
	return nil
}

// replaceFile atomically replaces (or creates) the regular file dst
// (physical) with the contents of src (see prepareReplace for mode and
// owner). Its directory is opened once, beneath the roots, for the whole
// replacement.
func (r Roots) replaceFile(dst string, src io.Reader, mode *fs.FileMode, sync bool) error {
	if r.isRoot(dst) {
		// A root is a directory (and its parent may be outside).
		return &fs.PathError{Op: "open", Path: dst, Err: syscall.EISDIR}
	}
	d, name, err := r.parentOf(dst)
	if err != nil {
		return retarget(err, "open", dst)
	}
	defer d.close()
	m, err := d.prepareReplace(name, mode)
	if err != nil {
		return err
	}
	tmp, tmpName, err := d.createTemp(name)
	if err != nil {
		return err
	}
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		d.remove(tmpName)
		return retarget(err, "write", dst)
	}
	return d.finishReplace(tmp, tmpName, name, m, sync)
}

// startReplace begins the replacement of dst (physical) that an fs/open
// in mode replace spreads over requests: dst must be replaceable now, and
// the temporary file is created next to it and returned with its
// physical path.
func (r Roots) startReplace(dst string) (*os.File, string, error) {
	if r.isRoot(dst) {
		return nil, "", &fs.PathError{Op: "open", Path: dst, Err: syscall.EISDIR}
	}
	d, name, err := r.parentOf(dst)
	if err != nil {
		return nil, "", retarget(err, "open", dst)
	}
	defer d.close()
	if _, err := d.prepareReplace(name, nil); err != nil {
		return nil, "", err
	}
	tmp, tmpName, err := d.createTemp(name)
	if err != nil {
		return nil, "", err
	}
	return tmp, d.join(tmpName), nil
}

// endReplace finishes it: tmp (at tmpPath, next to dst) takes dst's mode
// and owner as they are now and is renamed over dst. A dst that became a
// directory or a FIFO meanwhile is not replaced. On failure tmp is closed
// and removed, and dst is left as it was.
func (r Roots) endReplace(tmp *os.File, tmpPath, dst string) error {
	fail := func(err error) error {
		tmp.Close()
		r.remove(tmpPath)
		return err
	}
	if r.isRoot(dst) {
		return fail(&fs.PathError{Op: "open", Path: dst, Err: syscall.EISDIR})
	}
	d, name, err := r.parentOf(dst)
	if err != nil {
		return fail(retarget(err, "rename", dst))
	}
	defer d.close()
	m, err := d.prepareReplace(name, nil)
	if err != nil {
		return fail(err)
	}
	return d.finishReplace(tmp, filepath.Base(tmpPath), name, m, true)
}

// createTemp creates a new file in d named after name, with mode 0666
// less the umask (os.CreateTemp would make it 0600), and returns it with
// its name. Errors name the destination.
func (d dir) createTemp(name string) (*os.File, string, error) {
	base := name
	if len(base) > 64 {
		base = base[:64] // stay well under NAME_MAX
	}
	for i := 0; ; i++ {
		tmpName := "." + base + ".runtimed-" + strconv.FormatUint(rand.Uint64(), 36) + ".tmp"
		f, err := d.openFile(tmpName, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_CLOEXEC, 0o666)
		if errors.Is(err, fs.ErrExist) && i < 100 {
			continue
		}
		if err != nil {
			return nil, "", retarget(err, "open", d.join(name))
		}
		return f, tmpName, nil
	}
}

// retarget names dst in an error about the temporary file.
func retarget(err error, op, dst string) error {
	var pe *fs.PathError
	var le *os.LinkError
	var oe *outsideError
	switch {
	case errors.As(err, &oe):
		return &outsideError{path: dst}
	case errors.As(err, &pe):
		return &fs.PathError{Op: op, Path: dst, Err: pe.Err}
	case errors.As(err, &le):
		return &fs.PathError{Op: op, Path: dst, Err: le.Err}
	}
	return err
}
