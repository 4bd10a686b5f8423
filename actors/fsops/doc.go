// Package fsops serves the filesystem methods of PROTOCOL.md section 5
// (fs/readFile, fs/writeFile, fs/createDirectory, fs/getMetadata,
// fs/canonicalize, fs/readDirectory, fs/remove, fs/copy, fs/open,
// fs/readBlock, fs/close) on the local filesystem, confined to a set of
// root directories. It has no goroutines and no actors of its own: the
// connection actor calls [Handle] and owns the connection's [Handles].
//
// # Usage
//
//	roots, err := fsops.NewRoots(cfg.FsRoots) // once, at start-up; nil: whole filesystem
//	var handles fsops.Handles                 // one per connection, owned by its actor
//	defer handles.CloseAll()                  // handles close with the connection
//	if fsops.IsFsMethod(msg.Method) {         // handshake family "filesystem"
//		result, werr := fsops.Handle(msg.Method, msg.Params, roots, &handles)
//		reply(msg.ID, result, werr)
//	}
//
// Every path argument is an absolute path or a file: URI. It is resolved
// to its physical form (symbolic links followed, ".." applied to the
// physical parent as the kernel does; components that do not exist yet
// are appended as they are) and must then be one of the roots or lie
// inside one, else -32600 "path {path} is outside the allowed roots".
// fs/remove and fs/getMetadata, and the source of fs/copy, do not follow a
// final link (they act on, or report, the link itself); fs/getMetadata
// then resolves the link's target, which must be allowed too. The
// operation uses the resolved path, never the argument again, so the path
// checked is the path used. Escapes through "..", absolute links and
// relative links all end up outside and are refused.
//
// Semantics where PROTOCOL.md is silent: fs/writeFile is atomic (a
// temporary file in the same directory, fsync, rename, fsync of the
// directory), keeps a replaced file's mode and owner, creates no parent
// directories, and refuses to replace a directory or a FIFO/device.
// fs/readFile and fs/open accept regular files only. fs/copy copies a
// source link as a link, needs recursive for a directory, refuses a
// destination inside the source, merges into an existing destination
// directory, copies links inside a tree as links (target text unchanged)
// and files atomically with their mode bits, and stops at a FIFO, socket
// or device. fs/remove refuses to remove a root itself. fs/readDirectory
// sorts entries by name (bytewise) and reports a link entry by what it
// resolves to (neither directory nor file if it dangles or leads outside
// the roots).
//
// # Concurrency
//
// [Roots] is immutable after [NewRoots] and safe for concurrent use.
// [Handles] has no mutex: it belongs to the connection actor's goroutine,
// the only one that may pass it to [Handle] (fs/open, fs/readBlock,
// fs/close) or call [Handles.CloseAll]. The other methods touch no shared
// state (see [UsesHandles]), so the connection may run them on a waiter
// goroutine, concurrently with each other, to keep a slow copy from
// stalling its reader. Concurrent operations on the same files are not
// serialized: the last rename wins, and a reader sees a file either before
// or after a write, never half of it.
//
// Confinement is checked on the resolved path and the operation then uses
// that path, but between the two a process that can write inside a root
// could still swap a directory for a link (time of check to time of use).
// The roots keep a client's paths where they belong; they are not a
// sandbox against local processes that race them (and a client that may
// start processes can reach the whole filesystem anyway).
//
// # Failure semantics
//
// Every failure is a *wire.Error for that request alone; nothing is
// latched and the connection goes on. Decode failures are -32602 naming
// the field, a relative path -32602 "path must be absolute: {path}". OS
// errors carry the OS error text (with the client's spelling of the path)
// and are classed as PROTOCOL.md says: not found (ENOENT) -32004, invalid
// input (EINVAL) or permission denied (EACCES, EPERM) -32600, anything else
// -32603. A failed write leaves the old file intact and removes its
// temporary file. A failed copy or recursive remove may have done part of
// its work. A failed fs/readBlock closes its handle, as the Codex
// exec-server does. An unknown handle is -32004 for fs/readBlock and
// fs/close alike.
//
// # Backpressure
//
// Requests are bounded, not queued: fs/readFile returns at most 64 MiB
// (-32600 beyond, pointing to fs/open and fs/readBlock), fs/readBlock at
// most 1 MiB, fs/readDirectory at most 50 000 entries (-32600 beyond, never
// a truncated list), and a connection holds at most 128 handles. A handle
// is only an open file descriptor; nothing is read ahead. fs/copy and
// recursive fs/remove have no size bound: they run until done, on whatever
// goroutine called Handle, which is why that goroutine should not be the
// one that reads the connection.
package fsops
