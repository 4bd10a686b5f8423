package fsops

import (
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"

	"github.com/runtimed/runtimed/wire"
)

// Handles are the open fs/open read handles of one connection, keyed by
// the id the client chose; at most wire.FsMaxHandles (128) at a time. A
// Handles is owned by one goroutine, the connection actor (ServeConn's
// goroutine), and has no mutex: only that goroutine may pass it to
// [Handle] or call CloseAll. The zero value is ready to use; the
// connection calls CloseAll when it ends.
type Handles struct {
	files map[string]*os.File
}

// Len returns the number of open handles.
func (h *Handles) Len() int { return len(h.files) }

// CloseAll closes every handle; the ids become unknown.
func (h *Handles) CloseAll() {
	for id, f := range h.files {
		f.Close()
		delete(h.files, id)
	}
}

func (h *Handles) open(raw json.RawMessage, roots Roots) (any, *wire.Error) {
	var p wire.FsOpenParams
	if werr := wire.DecodeParams(raw, &p); werr != nil {
		return nil, werr
	}
	t, werr := roots.resolveArg(p.Path, true)
	if werr != nil {
		return nil, werr
	}
	if _, ok := h.files[p.HandleID]; ok {
		return nil, wire.ErrHandleExists(p.HandleID)
	}
	if len(h.files) >= wire.FsMaxHandles {
		return nil, wire.ErrTooManyHandles()
	}
	f, _, werr := openRegular(t)
	if werr != nil {
		return nil, werr
	}
	if h.files == nil {
		h.files = make(map[string]*os.File)
	}
	h.files[p.HandleID] = f
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
	if p.Offset > math.MaxInt64-uint64(p.Len) {
		return nil, wire.ErrReadOffset(p.Offset)
	}
	buf := make([]byte, p.Len)
	n, err := f.ReadAt(buf, int64(p.Offset)) // loops until len bytes or an error
	if err != nil && !errors.Is(err, io.EOF) {
		// As the Codex exec-server does: a failed read closes the handle.
		f.Close()
		delete(h.files, p.HandleID)
		return nil, osError(err)
	}
	return wire.FsReadBlockResult{Chunk: buf[:n], EOF: n < len(buf)}, nil
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
	f.Close()
	delete(h.files, p.HandleID)
	return empty{}, nil
}
