package fsops

import (
	"encoding/json"

	"github.com/runtimed/runtimed/wire"
)

// IsFsMethod reports whether method is one of the fs/* methods Handle serves.
func IsFsMethod(method string) bool {
	switch method {
	case wire.MethodFsReadFile, wire.MethodFsWriteFile, wire.MethodFsCreateDirectory,
		wire.MethodFsGetMetadata, wire.MethodFsCanonicalize, wire.MethodFsReadDirectory,
		wire.MethodFsRemove, wire.MethodFsCopy, wire.MethodFsWalk, wire.MethodFsWatchMissing:
		return true
	}
	return UsesHandles(method)
}

// UsesHandles reports whether method is fs/open, fs/readBlock,
// fs/writeBlock or fs/close: the methods that touch the connection's
// [Handles] and so must run on the goroutine that owns them. fs/watchMissing
// touches the connection's watches ([Worker]); the other fs methods touch
// no shared state.
func UsesHandles(method string) bool {
	switch method {
	case wire.MethodFsOpen, wire.MethodFsReadBlock, wire.MethodFsWriteBlock, wire.MethodFsClose:
		return true
	}
	return false
}

// Handle serves one fs/* request: it decodes params, confines every path
// to roots and performs the operation synchronously. result is encoded as
// the response's result; err is sent as the error. h is the connection's
// handle table, used only by the methods [UsesHandles] names (it may be nil
// for the others). fs/watchMissing needs a [Worker]. A method that is not
// an fs method gets -32601.
func Handle(method string, params json.RawMessage, roots Roots, h *Handles) (result any, err *wire.Error) {
	if UsesHandles(method) && h == nil {
		return nil, wire.Errorf(wire.CodeInternal, "%s: no file handle table on this connection", method)
	}
	switch method {
	case wire.MethodFsReadFile:
		return readFile(params, roots)
	case wire.MethodFsWriteFile:
		return writeFile(params, roots)
	case wire.MethodFsCreateDirectory:
		return createDirectory(params, roots)
	case wire.MethodFsGetMetadata:
		return getMetadata(params, roots)
	case wire.MethodFsCanonicalize:
		return canonicalize(params, roots)
	case wire.MethodFsReadDirectory:
		return readDirectory(params, roots)
	case wire.MethodFsRemove:
		return remove(params, roots)
	case wire.MethodFsCopy:
		return copyPath(params, roots)
	case wire.MethodFsWalk:
		return walk(params, roots)
	case wire.MethodFsOpen:
		return h.open(params, roots)
	case wire.MethodFsReadBlock:
		return h.readBlock(params)
	case wire.MethodFsWriteBlock:
		return h.writeBlock(params)
	case wire.MethodFsClose:
		return h.close(params)
	case wire.MethodFsWatchMissing:
		// Watches live in a connection's Worker, which answers this itself.
		return nil, wire.Errorf(wire.CodeInternal, "%s: no watch table here", method)
	}
	return nil, wire.ErrUnknownMethod(method)
}
