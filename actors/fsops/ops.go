package fsops

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/runtimed/runtimed/wire"
)

// Limits. They are variables only so that tests can lower them.
var (
	// maxReadFileSize is the largest file fs/readFile returns (64 MiB);
	// larger files are read with fs/open and fs/readBlock.
	maxReadFileSize int64 = 64 << 20
	// maxDirEntries is the most entries fs/readDirectory returns; a larger
	// directory is an error rather than a silently truncated listing.
	maxDirEntries = 50_000
)

// modeBits are the mode bits a write keeps and a copy carries over.
const modeBits = fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky

type empty = struct{}

func readFile(raw json.RawMessage, roots Roots) (any, *wire.Error) {
	var p wire.FsPathParams
	if werr := wire.DecodeParams(raw, &p); werr != nil {
		return nil, werr
	}
	t, werr := roots.resolveArg(p.Path, true)
	if werr != nil {
		return nil, werr
	}
	if werr := checkSandbox(p.Sandbox, accessRead, t); werr != nil {
		return nil, werr
	}
	f, fi, werr := roots.openRegular(t)
	if werr != nil {
		return nil, werr
	}
	defer f.Close()
	if fi.Size() > maxReadFileSize {
		return nil, wire.ErrFileTooLarge(p.Path, maxReadFileSize)
	}
	// The size is a hint only: the file may grow, and /proc files report 0.
	var buf bytes.Buffer
	buf.Grow(int(fi.Size()) + 1)
	if _, err := buf.ReadFrom(io.LimitReader(f, maxReadFileSize+1)); err != nil {
		return nil, osError(err, t)
	}
	if int64(buf.Len()) > maxReadFileSize {
		return nil, wire.ErrFileTooLarge(p.Path, maxReadFileSize)
	}
	return wire.FsReadFileResult{DataBase64: buf.Bytes()}, nil
}

// openRegular opens t for reading and checks that it is a regular file.
// O_NONBLOCK keeps the open of a FIFO from waiting for a writer; it has no
// effect on regular files.
func (r Roots) openRegular(t target) (*os.File, fs.FileInfo, *wire.Error) {
	f, err := r.openFile(t.phys, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, osError(err, t)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, osError(err, t)
	}
	if fi.IsDir() {
		f.Close()
		return nil, nil, osError(&fs.PathError{Op: "read", Path: t.phys, Err: syscall.EISDIR}, t)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, wire.ErrNotRegularFile(t.arg)
	}
	return f, fi, nil
}

func writeFile(raw json.RawMessage, roots Roots) (any, *wire.Error) {
	var p wire.FsWriteFileParams
	if werr := wire.DecodeParams(raw, &p); werr != nil {
		return nil, werr
	}
	t, werr := roots.resolveArg(p.Path, true)
	if werr != nil {
		return nil, werr
	}
	if werr := checkSandbox(p.Sandbox, accessWrite, t); werr != nil {
		return nil, werr
	}
	if err := roots.replaceFile(t.phys, bytes.NewReader(p.DataBase64), nil, true); err != nil {
		return nil, replaceError(err, t)
	}
	return empty{}, nil
}

func createDirectory(raw json.RawMessage, roots Roots) (any, *wire.Error) {
	var p wire.FsCreateDirectoryParams
	if werr := wire.DecodeParams(raw, &p); werr != nil {
		return nil, werr
	}
	t, werr := roots.resolveArg(p.Path, true)
	if werr != nil {
		return nil, werr
	}
	if werr := checkSandbox(p.Sandbox, accessWrite, t); werr != nil {
		return nil, werr
	}
	var err error
	if p.Recursive == nil || *p.Recursive {
		err = roots.mkdirAll(t.phys, 0o777)
	} else {
		err = roots.mkdir(t.phys, 0o777)
	}
	if err != nil {
		return nil, osError(err, t)
	}
	return empty{}, nil
}

func getMetadata(raw json.RawMessage, roots Roots) (any, *wire.Error) {
	var p wire.FsPathParams
	if werr := wire.DecodeParams(raw, &p); werr != nil {
		return nil, werr
	}
	link, werr := roots.resolveArg(p.Path, false)
	if werr != nil {
		return nil, werr
	}
	if werr := checkSandbox(p.Sandbox, accessRead, link); werr != nil {
		return nil, werr
	}
	lfi, err := roots.lstat(link.phys)
	if err != nil {
		return nil, osError(err, link)
	}
	if lfi.Mode()&fs.ModeSymlink == 0 {
		return metadata(roots, link.phys, lfi, false), nil
	}
	// The path is a link: describe its target, which must be allowed too.
	t, werr := roots.resolveArg(p.Path, true)
	if werr != nil {
		return nil, werr
	}
	if werr := checkSandbox(p.Sandbox, accessRead, t); werr != nil {
		return nil, werr
	}
	fi, err := roots.stat(t.phys)
	if errors.Is(err, fs.ErrNotExist) {
		// A dangling link: it exists, but points to nothing.
		return wire.FsMetadataResult{IsSymlink: true, CreatedAtMs: birthMs(roots, link.phys, lfi), ModifiedAtMs: lfi.ModTime().UnixMilli()}, nil
	}
	if err != nil {
		return nil, osError(err, t)
	}
	return metadata(roots, t.phys, fi, true), nil
}

func metadata(roots Roots, phys string, fi fs.FileInfo, isLink bool) wire.FsMetadataResult {
	return wire.FsMetadataResult{
		IsDirectory:  fi.IsDir(),
		IsFile:       fi.Mode().IsRegular(),
		IsSymlink:    isLink,
		Size:         uint64(max(fi.Size(), 0)),
		CreatedAtMs:  birthMs(roots, phys, fi),
		ModifiedAtMs: fi.ModTime().UnixMilli(),
	}
}

func canonicalize(raw json.RawMessage, roots Roots) (any, *wire.Error) {
	var p wire.FsPathParams
	if werr := wire.DecodeParams(raw, &p); werr != nil {
		return nil, werr
	}
	t, werr := roots.resolveArg(p.Path, true)
	if werr != nil {
		return nil, werr
	}
	if werr := checkSandbox(p.Sandbox, accessRead, t); werr != nil {
		return nil, werr
	}
	if _, err := roots.lstat(t.phys); err != nil {
		return nil, osError(err, t)
	}
	return wire.FsPathResult{Path: t.show(t.phys)}, nil
}

func readDirectory(raw json.RawMessage, roots Roots) (any, *wire.Error) {
	var p wire.FsPathParams
	if werr := wire.DecodeParams(raw, &p); werr != nil {
		return nil, werr
	}
	t, werr := roots.resolveArg(p.Path, true)
	if werr != nil {
		return nil, werr
	}
	if werr := checkSandbox(p.Sandbox, accessRead, t); werr != nil {
		return nil, werr
	}
	f, err := roots.openFile(t.phys, os.O_RDONLY, 0)
	if err != nil {
		return nil, osError(err, t)
	}
	defer f.Close()
	var list []fs.DirEntry
	for {
		batch, err := f.ReadDir(1024)
		list = append(list, batch...)
		if len(list) > maxDirEntries {
			return nil, wire.ErrTooManyEntries(p.Path, maxDirEntries)
		}
		if err == io.EOF || (err == nil && len(batch) == 0) {
			break
		}
		if err != nil {
			return nil, osError(err, t)
		}
	}
	slices.SortFunc(list, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	entries := make([]wire.FsDirEntry, 0, len(list))
	for _, e := range list {
		ent := wire.FsDirEntry{FileName: e.Name()}
		switch typ := e.Type(); {
		case typ.IsDir():
			ent.IsDirectory = true
		case typ.IsRegular():
			ent.IsFile = true
		case typ&fs.ModeSymlink != 0:
			ent.IsDirectory, ent.IsFile = linkKind(filepath.Join(t.phys, e.Name()), roots)
		}
		entries = append(entries, ent)
	}
	return wire.FsReadDirectoryResult{Entries: entries}, nil
}

// linkKind says what the link at phys resolves to. A link that dangles,
// loops or leads outside the roots is neither a directory nor a file.
func linkKind(phys string, roots Roots) (isDir, isFile bool) {
	dest, err := resolve(phys, true)
	if err != nil || !roots.Contains(dest) {
		return false, false
	}
	fi, err := roots.stat(dest)
	if err != nil {
		return false, false
	}
	return fi.IsDir(), fi.Mode().IsRegular()
}

func remove(raw json.RawMessage, roots Roots) (any, *wire.Error) {
	var p wire.FsRemoveParams
	if werr := wire.DecodeParams(raw, &p); werr != nil {
		return nil, werr
	}
	recursive := p.Recursive == nil || *p.Recursive
	force := p.Force == nil || *p.Force
	// A link is removed itself, never its target.
	t, werr := roots.resolveArg(p.Path, false)
	if werr != nil {
		return nil, werr
	}
	if roots.isRoot(t.phys) {
		return nil, wire.ErrRemoveRoot(p.Path)
	}
	if werr := checkSandbox(p.Sandbox, accessWrite, t); werr != nil {
		return nil, werr
	}
	fi, err := roots.lstat(t.phys)
	if errors.Is(err, fs.ErrNotExist) && force {
		return empty{}, nil
	}
	if err != nil {
		return nil, osError(err, t)
	}
	if fi.IsDir() && recursive {
		err = roots.removeAll(t.phys)
	} else {
		err = roots.remove(t.phys)
	}
	if err != nil && !(force && errors.Is(err, fs.ErrNotExist)) {
		return nil, osError(err, t)
	}
	return empty{}, nil
}

func copyPath(raw json.RawMessage, roots Roots) (any, *wire.Error) {
	var p wire.FsCopyParams
	if werr := wire.DecodeParams(raw, &p); werr != nil {
		return nil, werr
	}
	// The source is taken as it is (a link is copied as a link); the
	// destination follows links, as a write does.
	src, werr := roots.resolveArg(p.SourcePath, false)
	if werr != nil {
		return nil, werr
	}
	dst, werr := roots.resolveArg(p.DestinationPath, true)
	if werr != nil {
		return nil, werr
	}
	if werr := checkSandbox(p.Sandbox, accessRead, src); werr != nil {
		return nil, werr
	}
	if werr := checkSandbox(p.Sandbox, accessWrite, dst); werr != nil {
		return nil, werr
	}
	fi, err := roots.lstat(src.phys)
	if err != nil {
		return nil, osError(err, src)
	}
	switch mode := fi.Mode(); {
	case mode.IsDir():
		if !p.Recursive {
			return nil, wire.ErrCopyNeedsRecursive()
		}
		if dst.phys == src.phys || strings.HasPrefix(dst.phys, src.phys+"/") {
			return nil, wire.ErrCopyIntoItself()
		}
		err = roots.copyTree(src.phys, dst.phys, mode, true)
	case mode&fs.ModeSymlink != 0:
		err = roots.copySymlink(src.phys, dst.phys)
	case mode.IsRegular():
		err = roots.copyFile(src.phys, dst.phys, mode)
	default:
		return nil, wire.ErrCopyUnsupported(p.SourcePath)
	}
	if err != nil {
		var ue *errUnsupported
		if errors.As(err, &ue) {
			return nil, wire.ErrCopyUnsupported(display(ue.path, src, dst))
		}
		return nil, replaceError(err, src, dst)
	}
	return empty{}, nil
}

// errUnsupported is a FIFO, socket or device met inside a copied tree.
type errUnsupported struct{ path string }

func (e *errUnsupported) Error() string { return fmt.Sprintf("cannot copy %s", e.path) }

// copyTree copies the directory src to dst, which is created (top: with
// its missing parents) or, if it is already a directory, merged into.
// Nothing in the source is followed: links are copied as links. Nothing in
// the destination is followed either: an existing entry that is a link or
// a file where a directory goes is an error (EEXIST), so a copy cannot be
// led out of dst.
func (r Roots) copyTree(src, dst string, mode fs.FileMode, top bool) error {
	created := false
	switch fi, err := r.lstat(dst); {
	case errors.Is(err, fs.ErrNotExist):
		if top {
			if err := r.mkdirAll(filepath.Dir(dst), 0o777); err != nil {
				return err
			}
		}
		// Owner-writable while it is filled; the source's bits at the end.
		if err := r.mkdir(dst, 0o700); err != nil {
			return err
		}
		created = true
	case err != nil:
		return err
	case !fi.IsDir():
		return &fs.PathError{Op: "mkdir", Path: dst, Err: syscall.EEXIST}
	}
	entries, err := r.readDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		s, d := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		typ := e.Type()
		if typ&fs.ModeSymlink != 0 {
			err = r.copySymlink(s, d)
		} else if typ.IsDir() || typ.IsRegular() {
			var fi fs.FileInfo
			if fi, err = e.Info(); err == nil {
				if typ.IsDir() {
					err = r.copyTree(s, d, fi.Mode(), false)
				} else {
					err = r.copyFile(s, d, fi.Mode())
				}
			}
		} else {
			err = &errUnsupported{path: s}
		}
		if err != nil {
			return err
		}
	}
	if created {
		return r.chmod(dst, mode&modeBits)
	}
	return nil
}

// copyFile copies the regular file src over dst, atomically, with src's
// mode bits. O_NOFOLLOW: src was seen as a regular file, not as a link.
func (r Roots) copyFile(src, dst string, mode fs.FileMode) error {
	f, err := r.openFile(src, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return err
	} else if !fi.Mode().IsRegular() {
		return &errUnsupported{path: src}
	}
	return r.replaceFile(dst, f, &mode, false)
}

// copySymlink creates at dst a link with src's target text, replacing a
// file or link already at dst (never a directory).
func (r Roots) copySymlink(src, dst string) error {
	link, err := r.readlink(src)
	if err != nil {
		return err
	}
	if fi, err := r.lstat(dst); err == nil && !fi.IsDir() {
		if err := r.remove(dst); err != nil {
			return err
		}
	}
	return r.symlink(link, dst)
}

// display shows a physical path in the client's spelling when it lies
// under one of the targets.
func display(phys string, ts ...target) string {
	for _, t := range ts {
		if t.phys == "" {
			continue
		}
		if phys == t.phys {
			return t.abs
		}
		if strings.HasPrefix(phys, t.phys+"/") {
			return t.abs + phys[len(t.phys):]
		}
	}
	return phys
}
