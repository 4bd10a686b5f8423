// Package hostenv describes the host runtimed runs on, as environment/info
// reports it: the daemon user's login shell, runtimed's version, a stable
// provider id, and the working, home and temporary directories. It knows
// nothing of actors or the wire; the connection actor turns an [Info] into
// the protocol's environmentInfo (file: URIs, capabilities).
//
// # Usage
//
//	info := hostenv.Collect()   // once, when the server starts
//
// [LoginShell], [Version] and [ProviderID] are the pieces, exported so their
// rules can be tested with made-up inputs.
//
// # Concurrency
//
// Functions are pure or read the process's own state; all may be called
// concurrently. An Info is a value: copy it freely.
//
// # Failure semantics
//
// Nothing fails: a value that cannot be read is left empty (Cwd, Home) or
// falls back (the shell falls back to $SHELL then /bin/sh, the temporary
// directory to /tmp, the version to "0.0.0-devel").
//
// # Backpressure
//
// None: no queues, no goroutines.
package hostenv
