package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/runtimed/runtimed/actors/fsops"
	"github.com/runtimed/runtimed/wire"
)

// FileSystem is the fs/* family (PROTOCOL.md section 5) as a Go API. Both
// backends implement it: Local on this machine, Client on the server's.
// Paths are absolute or file: URIs. Errors are *RPCError with the
// protocol's code and OS text (-32004 not found, -32600 invalid or denied
// or outside the allowed roots).
type FileSystem interface {
	// ReadFile returns the whole file (fs/readFile).
	ReadFile(ctx context.Context, path string) ([]byte, error)
	// WriteFile replaces path atomically (temp file + rename).
	WriteFile(ctx context.Context, path string, data []byte) error
	// CreateDirectory makes path (and its parents when recursive).
	CreateDirectory(ctx context.Context, path string, recursive bool) error
	// Stat describes path, following a final symlink.
	Stat(ctx context.Context, path string) (FileInfo, error)
	// Canonicalize resolves path to an absolute path without links.
	Canonicalize(ctx context.Context, path string) (string, error)
	// ReadDirectory lists path's entries.
	ReadDirectory(ctx context.Context, path string) ([]DirEntry, error)
	// Remove removes path (a directory's contents when recursive; no
	// error for a missing path when force).
	Remove(ctx context.Context, path string, recursive, force bool) error
	// Copy copies src to dst (a directory tree when recursive).
	Copy(ctx context.Context, src, dst string, recursive bool) error
	// Open streams a file of any size with fs/open + fs/readBlock.
	Open(ctx context.Context, path string) (io.ReadCloser, error)
	// Create returns a writer whose bytes replace path atomically on Close
	// (one fs/writeFile, so the file must fit in a message: 64 MiB less
	// base64 overhead by default).
	Create(ctx context.Context, path string) io.WriteCloser
	// Walk lists what lies under path, breadth first, within opts's
	// limits (fs/walk). Paths come back in the form path has (native or
	// file: URI).
	Walk(ctx context.Context, path string, opts WalkOptions) (WalkResult, error)
}

// WalkOptions bound a Walk. MaxDepth (0 to 64; 0 lists path's entries
// only); MaxDirectories (1 to 10 000) counts the directories read, path
// included; MaxEntries (1 to 50 000) the entries examined. The zero value
// is an error: Walk checks the limits on both backends before fs/walk
// and names the field (an *OptionError, ErrInvalidOption).
type WalkOptions struct {
	MaxDepth, MaxDirectories, MaxEntries int // see above
	// FollowDirectorySymlinks lists and walks links to directories (never
	// one directory twice); otherwise links are left out.
	FollowDirectorySymlinks bool
	// PruneHiddenDirectories lists directories named ".*" without reading them.
	PruneHiddenDirectories bool
}

// WalkResult is what a Walk found: regular files and directories, the
// directories it could not read, and whether a limit cut it short.
type WalkResult struct {
	Entries   []WalkEntry // breadth first
	Errors    []WalkError // directories it could not read
	Truncated bool        // a limit of WalkOptions cut it short
}

// WalkEntry is one file or directory found by a Walk.
type WalkEntry struct {
	Path        string // in the form the walked path had
	IsDirectory bool   // else a regular file
}

// WalkError is a directory a Walk could not read (or a link it would not
// follow out of the allowed roots); the walk went on without it.
type WalkError struct {
	Path, Message string // the directory and why
}

// FileInfo describes what a path points to.
type FileInfo struct {
	IsDirectory, IsFile, IsSymlink bool      // what kind of file
	Size                           uint64    // bytes
	Created, Modified              time.Time // zero when unknown
}

// DirEntry is one directory entry.
type DirEntry struct {
	Name        string // the base name
	IsDirectory bool   // a directory (a symlink to one is neither)
	IsFile      bool   // a regular file
}

// fsCall performs one fs method; out receives the JSON result. h is the
// handle table of a local reader (nil for remote calls and non-handle methods).
type fsCall func(ctx context.Context, method string, params any, out any, h *fsops.Handles) error

// fsImpl implements FileSystem over an fsCall.
type fsImpl struct {
	call    fsCall
	local   bool
	handles atomic.Uint64
	prefix  string
}

// Client's and Local's FileSystem.
var (
	_ FileSystem = (*Client)(nil)
	_ FileSystem = (*Local)(nil)
)

func (f *fsImpl) ReadFile(ctx context.Context, path string) ([]byte, error) {
	var res wire.FsReadFileResult
	err := f.call(ctx, wire.MethodFsReadFile, wire.FsPathParams{Path: path}, &res, nil)
	return res.DataBase64, err
}

func (f *fsImpl) WriteFile(ctx context.Context, path string, data []byte) error {
	if data == nil {
		data = []byte{}
	}
	return f.call(ctx, wire.MethodFsWriteFile, wire.FsWriteFileParams{Path: path, DataBase64: data}, nil, nil)
}

func (f *fsImpl) CreateDirectory(ctx context.Context, path string, recursive bool) error {
	return f.call(ctx, wire.MethodFsCreateDirectory, wire.FsCreateDirectoryParams{Path: path, Recursive: &recursive}, nil, nil)
}

func (f *fsImpl) Stat(ctx context.Context, path string) (FileInfo, error) {
	var res wire.FsMetadataResult
	if err := f.call(ctx, wire.MethodFsGetMetadata, wire.FsPathParams{Path: path}, &res, nil); err != nil {
		return FileInfo{}, err
	}
	return FileInfo{
		IsDirectory: res.IsDirectory, IsFile: res.IsFile, IsSymlink: res.IsSymlink, Size: res.Size,
		Created: time.UnixMilli(res.CreatedAtMs), Modified: time.UnixMilli(res.ModifiedAtMs),
	}, nil
}

func (f *fsImpl) Canonicalize(ctx context.Context, path string) (string, error) {
	var res wire.FsPathResult
	err := f.call(ctx, wire.MethodFsCanonicalize, wire.FsPathParams{Path: path}, &res, nil)
	return res.Path, err
}

func (f *fsImpl) ReadDirectory(ctx context.Context, path string) ([]DirEntry, error) {
	var res wire.FsReadDirectoryResult
	if err := f.call(ctx, wire.MethodFsReadDirectory, wire.FsPathParams{Path: path}, &res, nil); err != nil {
		return nil, err
	}
	out := make([]DirEntry, len(res.Entries))
	for i, e := range res.Entries {
		out[i] = DirEntry{Name: e.FileName, IsDirectory: e.IsDirectory, IsFile: e.IsFile}
	}
	return out, nil
}

func (f *fsImpl) Remove(ctx context.Context, path string, recursive, force bool) error {
	return f.call(ctx, wire.MethodFsRemove, wire.FsRemoveParams{Path: path, Recursive: &recursive, Force: &force}, nil, nil)
}

func (f *fsImpl) Walk(ctx context.Context, path string, opts WalkOptions) (WalkResult, error) {
	if err := opts.validate(); err != nil {
		return WalkResult{}, err
	}
	wo, err := json.Marshal(wire.FsWalkOptions{
		MaxDepth: uint64(max(opts.MaxDepth, 0)), MaxDirectories: uint64(max(opts.MaxDirectories, 0)),
		MaxEntries: uint64(max(opts.MaxEntries, 0)), FollowDirectorySymlinks: opts.FollowDirectorySymlinks,
		PruneHiddenDirectories: opts.PruneHiddenDirectories,
	})
	if err != nil {
		return WalkResult{}, err
	}
	var res wire.FsWalkResult
	if err := f.call(ctx, wire.MethodFsWalk, wire.FsWalkParams{Path: path, Options: wo}, &res, nil); err != nil {
		return WalkResult{}, err
	}
	out := WalkResult{Truncated: res.Truncated, Entries: make([]WalkEntry, len(res.Entries))}
	for i, e := range res.Entries {
		out.Entries[i] = WalkEntry{Path: e.Path, IsDirectory: e.Kind == wire.FsKindDirectory}
	}
	for _, e := range res.Errors {
		out.Errors = append(out.Errors, WalkError{Path: e.Path, Message: e.Message})
	}
	return out, nil
}

func (f *fsImpl) Copy(ctx context.Context, src, dst string, recursive bool) error {
	return f.call(ctx, wire.MethodFsCopy, wire.FsCopyParams{SourcePath: src, DestinationPath: dst, Recursive: recursive}, nil, nil)
}

// readBlockSize is the block a streaming reader asks for (the protocol's maximum).
const readBlockSize = wire.FsMaxReadBlockLen

func (f *fsImpl) Open(ctx context.Context, path string) (io.ReadCloser, error) {
	id := f.prefix + strconv.FormatUint(f.handles.Add(1), 10)
	var h *fsops.Handles
	if f.local {
		h = new(fsops.Handles) // owned by the reader
	}
	if err := f.call(ctx, wire.MethodFsOpen, wire.FsOpenParams{HandleID: id, Path: path}, nil, h); err != nil {
		return nil, err
	}
	return &fsReader{f: f, ctx: ctx, id: id, h: h}, nil
}

// fsReader reads a file block by block; used by one goroutine at a time.
type fsReader struct {
	f      *fsImpl
	ctx    context.Context
	id     string
	h      *fsops.Handles // local only
	offset uint64
	buf    []byte
	eof    bool
	closed bool
}

func (r *fsReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.eof {
			return 0, io.EOF
		}
		if r.closed {
			return 0, errors.New("runtime: read of a closed file")
		}
		var res wire.FsReadBlockResult
		if err := r.f.call(r.ctx, wire.MethodFsReadBlock, wire.FsReadBlockParams{HandleID: r.id, Offset: r.offset, Len: readBlockSize}, &res, r.h); err != nil {
			return 0, err
		}
		r.buf = res.Chunk
		r.offset += uint64(len(res.Chunk))
		r.eof = res.EOF
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

func (r *fsReader) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	return r.f.call(context.WithoutCancel(r.ctx), wire.MethodFsClose, wire.FsHandleParams{HandleID: r.id}, nil, r.h)
}

func (f *fsImpl) Create(ctx context.Context, path string) io.WriteCloser {
	return &fsWriter{f: f, ctx: ctx, path: path}
}

type fsWriter struct {
	f    *fsImpl
	ctx  context.Context
	path string
	buf  bytes.Buffer
	done bool
}

func (w *fsWriter) Write(p []byte) (int, error) {
	if w.done {
		return 0, errors.New("runtime: write to a closed file")
	}
	return w.buf.Write(p)
}

func (w *fsWriter) Close() error {
	if w.done {
		return nil
	}
	w.done = true
	return w.f.WriteFile(w.ctx, w.path, w.buf.Bytes())
}

// newLocalFS runs the fs methods in this process through the same code a
// server runs (fsops), so Local and Client answer alike.
func newLocalFS(roots fsops.Roots) *fsImpl {
	return &fsImpl{local: true, prefix: "local-", call: func(ctx context.Context, method string, params any, out any, h *fsops.Handles) error {
		raw, err := json.Marshal(params)
		if err != nil {
			return err
		}
		res, rerr := fsops.Handle(method, raw, roots, h)
		if rerr != nil {
			return rpcErr(rerr)
		}
		if out == nil {
			return nil
		}
		b, err := json.Marshal(res)
		if err != nil {
			return err
		}
		return json.Unmarshal(b, out)
	}}
}

// newRemoteFS runs the fs methods on the client's server.
func newRemoteFS(c *Client) *fsImpl {
	return &fsImpl{prefix: c.writePrefix + "file-", call: func(ctx context.Context, method string, params any, out any, _ *fsops.Handles) error {
		return c.call(ctx, method, params, out)
	}}
}
