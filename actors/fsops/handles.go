package fsops

import (
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"

	"github.com/runtimed/runtimed/wire"
)

// Handles are the open fs/open handles of one connection, keyed by the id
// the client chose: read handles (mode read) and replace handles (mode
// replace), at most wire.FsMaxHandles (128) of both kinds together. A
// Handles is owned by one goroutine, the connection's fs worker, and has
// no mutex: only that goroutine may pass it to [Handle] or call CloseAll.
// The zero value is ready to use; the connection calls CloseAll when it
// ends.
type Handles struct {
	files map[string]*handle
}

// handle is one open file. A replace handle writes tmp, a new file next
// to dst that fs/close renames over dst; until then dst is untouched.
type handle struct {
	f       *os.File
	replace bool
	roots   Roots  // what tmp and dst are beneath (replace)
	tmp     string // physical path of the temporary file (replace)
	dst     string // physical destination (replace)
	t       target // the fs/open path, for messages (replace)
}

func (h *handle) mode() string {
	if h.replace {
		return wire.FsModeReplace
	}
	return wire.FsModeRead
}

// discard closes the file and, for a replace handle, removes the
// temporary file: the destination is left as it was.
func (h *handle) discard() {
	h.f.Close()
	if h.replace {
		h.roots.remove(h.tmp)
	}
}

// Len returns the number of open handles.
func (h *Handles) Len() int { return len(h.files) }

// CloseAll closes every handle; the ids become unknown. A replace handle
// that was never closed leaves no trace: its temporary file is removed and
// its destination keeps the old contents (or stays absent).
func (h *Handles) CloseAll() {
	for id, f := range h.files {
		f.discard()
		delete(h.files, id)
	}
}

func (h *Handles) open(raw json.RawMessage, roots Roots) (any, *wire.Error) {
	var p wire.FsOpenParams
	if werr := wire.DecodeParams(raw, &p); werr != nil {
		return nil, werr
	}
	replace := false
	if p.Mode != nil {
		switch *p.Mode {
		case wire.FsModeRead:
		case wire.FsModeReplace:
			replace = true
		default:
			return nil, wire.ErrUnknownOpenMode(*p.Mode)
		}
	}
	t, werr := roots.resolveArg(p.Path, true)
	if werr != nil {
		return nil, werr
	}
	acc := accessRead
	if replace {
		acc = accessWrite
	}
	if werr := checkSandbox(p.Sandbox, acc, t); werr != nil {
		return nil, werr
	}
	if _, ok := h.files[p.HandleID]; ok {
		return nil, wire.ErrHandleExists(p.HandleID)
	}
	if len(h.files) >= wire.FsMaxHandles {
		if replace {
			return nil, wire.ErrTooManyFileHandles()
		}
		return nil, wire.ErrTooManyHandles()
	}
	var nh *handle
	if replace {
		// The destination must be replaceable now (not a directory or a
		// FIFO); its mode and owner are taken when it is replaced.
		tmp, tmpPath, err := roots.startReplace(t.phys)
		if err != nil {
			return nil, replaceError(err, t)
		}
		nh = &handle{f: tmp, replace: true, roots: roots, tmp: tmpPath, dst: t.phys, t: t}
	} else {
		f, _, werr := roots.openRegular(t)
		if werr != nil {
			return nil, werr
		}
		nh = &handle{f: f}
	}
	if h.files == nil {
		h.files = make(map[string]*handle)
	}
	h.files[p.HandleID] = nh
	return wire.FsHandleResult{HandleID: p.HandleID}, nil
}

func (h *Handles) readBlock(raw json.RawMessage) (any, *wire.Error) {
	var p wire.FsReadBlockParams
	if werr := wire.DecodeParams(raw, &p); werr != nil {
		return nil, werr
	}
	if p.Len < 1 || p.Len > wire.FsMaxReadBlockLen {
		return nil, wire.ErrReadBlockLen()
	}
	f, ok := h.files[p.HandleID]
	if !ok {
		return nil, wire.ErrUnknownHandle(p.HandleID)
	}
	if f.replace {
		return nil, wire.ErrHandleMode(wire.MethodFsReadBlock, p.HandleID, f.mode())
	}
	if p.Offset > math.MaxInt64-uint64(p.Len) {
		return nil, wire.ErrReadOffset(p.Offset)
	}
	buf := make([]byte, p.Len)
	n, err := f.f.ReadAt(buf, int64(p.Offset)) // loops until len bytes or an error
	if err != nil && !errors.Is(err, io.EOF) {
		// As the Codex exec-server does: a failed read closes the handle.
		f.discard()
		delete(h.files, p.HandleID)
		return nil, osError(err)
	}
	return wire.FsReadBlockResult{Chunk: buf[:n], EOF: n < len(buf)}, nil
}

func (h *Handles) writeBlock(raw json.RawMessage) (any, *wire.Error) {
	var p wire.FsWriteBlockParams
	if werr := wire.DecodeParams(raw, &p); werr != nil {
		return nil, werr
	}
	if len(p.Chunk) < 1 || len(p.Chunk) > wire.FsMaxWriteBlockLen {
		return nil, wire.ErrWriteBlockLen()
	}
	if p.Offset > math.MaxInt64-uint64(len(p.Chunk)) {
		return nil, wire.ErrWriteRange()
	}
	f, ok := h.files[p.HandleID]
	if !ok {
		return nil, wire.ErrUnknownFileHandle(p.HandleID)
	}
	if !f.replace {
		return nil, wire.ErrHandleMode(wire.MethodFsWriteBlock, p.HandleID, f.mode())
	}
	if _, err := f.f.WriteAt(p.Chunk, int64(p.Offset)); err != nil {
		// The replacement can no longer be complete: drop it, leaving the
		// destination as it was (as a failed read closes its handle).
		f.discard()
		delete(h.files, p.HandleID)
		return nil, osError(retarget(err, "write", f.dst), f.t)
	}
	return empty{}, nil
}

func (h *Handles) close(raw json.RawMessage) (any, *wire.Error) {
	var p wire.FsHandleParams
	if werr := wire.DecodeParams(raw, &p); werr != nil {
		return nil, werr
	}
	f, ok := h.files[p.HandleID]
	if !ok {
		return nil, wire.ErrUnknownHandle(p.HandleID)
	}
	delete(h.files, p.HandleID)
	if !f.replace {
		f.f.Close()
		return empty{}, nil
	}
	// The destination's mode and owner as they are now; a destination that
	// became a directory or a FIFO meanwhile is not replaced.
	if err := f.roots.endReplace(f.f, f.tmp, f.dst); err != nil {
		return nil, replaceError(err, f.t)
	}
	return empty{}, nil
}
