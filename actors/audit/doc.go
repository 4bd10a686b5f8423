// Package audit writes runtimed's audit log: one JSON object per line
// ([Event], schema version [Version], documented in docs/audit.md) for
// connections, sessions, process starts and exits, filesystem changes,
// http/request and refusals. It knows nothing of actors or the wire; the
// actors feed it through actors.Auditor.
//
// # Usage
//
//	l, err := audit.Open(path, audit.Options{Logger: log}) // "-": stdout
//	defer l.Close()
//	l.Audit(audit.Event{Type: audit.ProcessStart, Token: "alice", Argv: argv})
//	l.Reopen() // on SIGHUP, after logrotate moved the file
//
// # Concurrency
//
// One owner goroutine (run) owns the file and writes every line; Audit and
// Reopen only send to it. The dropped counter is atomic.
//
// # Failure semantics
//
// A write error (full disk, closed pipe) drops that event: it is counted
// ([Log.Dropped]) and logged (first failure, then at most once a minute),
// and writing goes on with the next event. A failed reopen keeps the old
// file. Close drains what is queued (bounded by Options.CloseWait) and
// closes the file.
//
// # Backpressure
//
// The queue holds Options.Queue events (default 4096). Audit never blocks:
// when the queue is full (a stalled pipe, a slow disk) the event is
// dropped and counted, so an audit sink can never slow a process.
package audit
