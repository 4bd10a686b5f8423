// Command runtimed is the runtimed daemon, its command-line client and its
// benchmark.
//
// # Usage
//
//	runtimed serve [--listen ws://127.0.0.1:0 | wss://IP:PORT | stdio://] [flags]   the daemon
//	runtimed exec [--connect URL] [-t] -- CMD ARGS...                run a command, exit with its code
//	runtimed stdio [--connect URL] -- CMD ARGS...                    bridge stdin/stdout byte for byte
//	runtimed ps --connect URL --session ID                           list a session's processes
//	runtimed attach --connect URL SESSION PROCESS                    re-attach to a process of a detached session
//	runtimed fs cat|put|ls|stat [--connect URL] PATH                 files on the server (or here)
//	runtimed fs config [--connect URL] [--key K.K]... [DIR]         what the executor reports about its Codex home
//	runtimed bench (--connect URL | --spawn CMD [--stdio])           measure a compatible server
//	runtimed version                                                 build information
//	runtimed bench --soak (--connect URL --pid PID | --spawn CMD)    hostile clients: RSS, fds, latency
//	runtimed bench --spawn CMD --vs OTHER --echo                     round trips side by side, with ratios
//
// Without --connect, exec, stdio and fs run through an embedded runtime.
// Client commands take --token-file and --ca; serve's TLS, metrics and
// exposure flags are in serve_net.go (docs/operations.md describes them).
// serve's --http-requests=false refuses http/request, and
// --http-max-body-bytes caps a buffered http/request body; the budget flags
// (--max-connections, --max-processes-total, --max-open-files, --fd-reserve,
// --max-retained-bytes, --max-outbound-bytes, --outbound-queue-bytes,
// --slow-consumer-timeout) default to values derived from the machine and
// are logged at start-up (README lists every flag).
//
// # Concurrency
//
// serve runs one runtime.Server; each command is a short-lived client. In
// stdio mode stdout carries only the protocol; logs always go to stderr.
// With wss:// one goroutine reloads the TLS pair (file changes, SIGHUP) and
// another forwards SIGHUP to it; --metrics-listen adds one HTTP server.
//
// # Failure semantics
//
// Usage errors exit 2 with a message on stderr that names the flag to set
// (a URL without a scheme, a 401 without --token-file, an unknown CA
// without --ca, a non-loopback listen without a token or TLS); -h exits 0.
// exec, stdio and attach exit with the process's own code (128+N when
// killed by signal N), as docker run does: 125 when runtimed itself fails
// (cannot connect, refused, unknown session or process, protocol error,
// lost connection), 126 when the command cannot be invoked, 127 when it
// is not found. ps exits 125 when it cannot show the list. serve exits 0 after a graceful
// shutdown on SIGINT/SIGTERM, the same on every transport and within
// --shutdown-grace plus one second: it stops accepting, children get
// SIGTERM then SIGKILL after the grace, and every client is sent its
// processes' exited and closed before its connection ends. Over stdio,
// stdin is reopened non-blocking through /proc/self/fd (a new open file
// description: the parent's flags are left alone) so that a signal ends a
// pending read instead of waiting for EOF.
//
// # Backpressure
//
// exec, stdio and attach forward stdin with writes that wait for the server to
// accept them, so a child that does not read slows the local reader; output
// is streamed through runtime.EventStream, which recovers from lag without
// losing or repeating bytes.
package main
