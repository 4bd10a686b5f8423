// Package fsops serves the filesystem methods of PROTOCOL.md section 5
// (fs/readFile, fs/writeFile, fs/createDirectory, fs/getMetadata,
// fs/canonicalize, fs/readDirectory, fs/remove, fs/copy, fs/open,
// fs/readBlock, fs/close) and section 7.4 (fs/walk, fs/watchMissing with
// its fs/missingChanged notification, fs/open mode replace and
// fs/writeBlock) on the local filesystem, confined to a set of root
// directories. It has no actors of its own: a connection's fs worker owns
// a [Worker] (its handles and watches) and calls it.
//
// # Usage
//
//	roots, err := fsops.NewRoots(cfg.FsRoots) // once, at start-up (opens each root); nil: whole filesystem
//	w := fsops.NewWorker(roots)               // one per connection, owned by its fs worker
//	defer w.Close()                           // handles, temporary files and watches end with it
//	for {
//		select {
//		case msg := <-fsRequests: // fsops.IsFsMethod(msg.Method); handshake family "filesystem"
//			result, werr := w.Handle(msg.Method, msg.Params)
//			reply(msg.ID, result, werr)
//		case ev, ok := <-w.Events(): // nil while no watch is armed
//			w.Event(ev, ok)
//		case err, ok := <-w.Errors():
//			w.Error(err, ok)
//		}
//		for _, n := range w.Notifications() { // after the reply
//			notify(wire.NotifyFsMissingChanged, n)
//		}
//	}
//
// The package function [Handle] serves every method but fs/watchMissing
// with a caller-owned [Handles] (runtime.Local uses it). [Roots.Allow]
// holds another path to the same roots (process/start's cwd).
//
// Every path argument is an absolute path or a file: URI (host empty or
// localhost; another host is -32602). It is resolved to its physical form
// (symbolic links followed, ".." applied to the physical parent as the
// kernel does; components that do not exist yet are appended as they are)
// and must then be one of the roots or lie inside one, else -32600 "path
// {path} is outside the allowed roots". fs/remove and fs/getMetadata, and
// the source of fs/copy, do not follow a final link (they act on, or
// report, the link itself); fs/getMetadata then resolves the link's
// target, which must be allowed too. The operation uses the resolved path,
// never the argument again, and it uses it beneath the root's handle (an
// [os.Root] opened by NewRoots; beneath.go): the kernel opens every
// component relative to the root, follows a link only as far as the root
// and refuses one that leads out, so a directory swapped for a link after
// the check cannot take the operation outside (it is refused with the same
// -32600). This holds for every method and every step of one: the
// temporary file of a write and its rename, each file and directory of a
// copy or a recursive remove, each directory a walk reads, fs/open's file
// (a handle is a descriptor from then on; a replace handle's rename at
// fs/close goes beneath the root again) and every check of fs/watchMissing.
// Escapes through "..", absolute links and relative links all end up
// outside and are refused; fs/walk never follows a link out of the roots
// either. A root is the directory NewRoots opened: one removed and made
// again later is not seen until the roots are opened again. Paths
// in answers (fs/canonicalize, fs/walk) have the form of the request's
// path: a file: URI (encoded as Codex encodes its own) or a native path.
//
// Semantics where PROTOCOL.md is silent: fs/writeFile is atomic (a
// temporary file in the same directory, fsync, rename, fsync of the
// directory), keeps a replaced file's mode and owner, creates no parent
// directories, and refuses to replace a directory or a FIFO/device. An
// fs/open in mode replace is the same write spread over requests: the
// temporary file is created at fs/open (the destination must be
// replaceable then), written by fs/writeBlock at any offsets (gaps read as
// zeros), and renamed over the destination by fs/close, which takes the
// destination's mode and owner at that moment; until then the destination
// is untouched. fs/readFile and a read fs/open accept regular files only.
// fs/copy copies a source link as a link, needs recursive for a directory,
// refuses a destination inside the source, merges into an existing
// destination directory, copies links inside a tree as links (target text
// unchanged) and files atomically with their mode bits, and stops at a
// FIFO, socket or device. fs/remove refuses to remove a root itself.
// fs/readDirectory sorts entries by name (bytewise) and reports a link
// entry by what it resolves to (neither directory nor file if it dangles or
// leads outside the roots). fs/walk and fs/watchMissing follow the Codex
// exec-server where PROTOCOL.md leaves room; their files (walk.go,
// watch.go) say how, and where PROTOCOL.md made runtimed differ.
//
// The sandbox field of fs requests (section 7.3) is decoded and handed to
// one place, checkSandbox, which holds a request that carries a sandbox to the
// same rules a sandboxed process gets (resolved by package policy).
//
// # Concurrency
//
// [Roots] is immutable after [NewRoots] and safe for concurrent use. A
// [Worker], and the [Handles] inside it, have no mutex: they belong to the
// connection's fs worker goroutine, the only one that may call their
// methods. The only goroutine the package starts is fsnotify's reader,
// inside the inotify instance a Worker holds while at least one watch is
// armed; it only sends on the channels Events and Errors return, and Close
// (or the last watch ending) stops it and waits for it. The methods other
// than fs/open, fs/readBlock, fs/writeBlock, fs/close and fs/watchMissing
// touch no shared state (see [UsesHandles]). Concurrent operations on the
// same files are not serialized: the last rename wins, and a reader sees a
// file either before or after a write, never half of it.
//
// Confinement is checked on the resolved path and then enforced by the
// kernel when the operation runs: a process that can write inside a root
// and swaps a directory for a link meanwhile makes the request fail (the
// outside-roots error, or ENOTDIR/ELOOP when it swaps again in between),
// never reach outside. What stays by path: the resolution itself looks at
// links by lstat and readlink (as it did, to tell where they lead; nothing
// is read or written through them), fs/walk stats the target of a link
// that leads out only to tell a directory (an error entry) from the rest
// (left out), and inotify arms a watch by path (the check that follows
// every arming, beneath the roots, moves a watch armed through a link
// swapped in; an event is only a hint, every decision is a check beneath
// the roots). A client that may
// start processes can reach what those processes can, roots or not; its
// process/start cwd must lie inside the roots ([Roots.Allow]).
//
// # Failure semantics
//
// Every failure is a *wire.Error for that request alone; nothing is
// latched and the connection goes on. Decode failures are -32602 naming
// the field, a relative path -32602 "path must be absolute: {path}", an
// fs/open mode other than read or replace -32602 "unknown variant
// `{mode}`, expected `read` or `replace`". OS errors carry the OS error
// text (with the client's spelling of the path) and are classed as
// PROTOCOL.md says: not found (ENOENT) -32004, invalid input (EINVAL) or
// permission denied (EACCES, EPERM) -32600, anything else -32603; they read
// the same with roots or without (with roots, a failed recursive fs/remove
// names the path removed, not the entry inside that failed). A failed
// write leaves the old file intact and removes its temporary file. A
// failed copy or recursive remove may have done part of its work. A failed
// fs/readBlock closes its handle, as the Codex exec-server does, and a
// failed fs/writeBlock drops its replace handle and temporary file (the
// destination is left as it was). An fs/readBlock on a replace handle or
// an fs/writeBlock on a read handle is -32603 (EBADF, as Codex answers).
// An unreadable directory met by fs/walk is an entry of its errors, not a
// failure. A watch that cannot be armed is refused with the OS reason
// (inotify limits: EMFILE, ENOSPC); one that cannot be re-armed after an
// event fires rather than going silent. When the connection ends, every
// handle closes (a replace handle's temporary file is removed) and every
// watch ends without a notification; a server killed outright leaves its
// temporary files (".NAME.runtimed-*.tmp") behind.
//
// # Backpressure
//
// Requests are bounded, not queued: fs/readFile returns at most 64 MiB
// (-32600 beyond, pointing to fs/open and fs/readBlock), fs/readBlock and
// fs/writeBlock move at most 1 MiB, fs/readDirectory at most 50 000
// entries (-32600 beyond, never a truncated list), fs/walk at most its
// limits (depth 64, 10 000 directories, 50 000 entries, about 4 MiB of
// answer; beyond, truncated), and a connection holds at most 128 handles
// (read and replace together) and 128 watches of at most 256 paths each.
// A handle is only an open file descriptor; nothing is read ahead or
// buffered. Filesystem events wait in the kernel's inotify queue while the
// fs worker is busy (fsnotify's channel is unbuffered); if the queue
// overflows, every watch checks its paths again, so no change is lost. A
// watch sends one notification, queued after the answer that armed it.
// fs/copy, recursive fs/remove and fs/walk of a huge directory have no
// time bound: they run until done on the fs worker, which is why that
// goroutine is not the one that reads the connection.
package fsops
