// Package runtime is the public Go API of runtimed: one [Backend] interface
// for starting processes, with an embedded implementation ([Local]) and a
// remote one ([Client], from [Dial] or [NewClient]) that behave the same,
// and the [Server] that serves the protocol on websocket listeners and
// stdio-like transports.
//
// This package is named runtime, like the standard library's. Code that
// needs both imports the standard one as goruntime:
//
//	import goruntime "runtime"
//
// # Usage
//
//	var b runtime.Backend = runtime.NewLocal(runtime.Config{})     // embedded
//	// or: b, err := runtime.Dial(ctx, "ws://127.0.0.1:4500", nil) // remote
//	p, err := b.Start(ctx, runtime.Spec{Argv: []string{"sh", "-c", "echo hi"}, Dir: "/tmp"})
//	events, err := p.Events(ctx) // history, then live, in seq order
//	st, err := p.Wait(ctx)       // like exec.Cmd.Wait, callable many times
//
// A Server is used like net/http's: NewServer(cfg), Serve(listener) or
// ServeTransport(t, resumable), Shutdown(ctx) to stop gracefully (children
// get SIGTERM, then SIGKILL after Config.ShutdownGrace), Close to stop now.
//
// Defaults (a zero Config means all of them): detach TTL 30 s, retention
// 1 MiB and 50 000 chunks per process, closed processes kept 30 s,
// shutdown grace 2 s, inbound messages up to 64 MiB, http/request enabled
// with buffered bodies up to 16 MiB, 4096 processes per session. The
// server-wide budgets (connections, processes, descriptors and their
// reserve, retained output, outbound queues: see Config) default to values
// derived from the machine by [ProbeMachine] (RLIMIT_NOFILE, memory or the
// cgroup's limit); [Server.Budgets] returns them. Local applies the same
// limits, as one session.
//
// Both backends answer EnvironmentInfo(ctx): the machine's login shell,
// runtimed's version, a stable provider id, directories (native paths) and
// the capabilities the build provides. Which capabilities are true is
// decided in one place, the capabilities function in environment.go; a
// Client asks the server (environment/info). Spec.Metadata (thread and
// tool call) is kept with the process and shown by List.
//
// # Concurrency
//
// Backends, Process handles and Servers may be used from any number of
// goroutines. An [EventStream] is read by one goroutine at a time. Local
// runs the actors of package actors in this process; Client runs one actor
// goroutine that owns its pending calls and its view of each process, plus
// one reader and one writer goroutine per transport.
//
// # Failure semantics
//
// Errors answered by a server are [*RPCError] values with the protocol's
// code and message; Local returns the same values for the same mistakes,
// including budget refusals (-32011, "limit reached: ...").
//
// Disconnect: a Client latches the first transport failure, once, with its
// reason. From then on every pending call returns an error wrapping
// [ErrDisconnected], whose text starts with "runtimed transport
// disconnected"; every open process's event streams end with exactly one
// [EventFailed]; pending long polls and Waits return that error; new calls
// fail at once without touching the network, and Start fails too. With
// ClientOptions.Reconnect the client first tries to resume: it reconnects
// within ReconnectWindow, re-initializes with the session id, catches each
// open process up with process/read from its last delivered seq, and
// resends unanswered requests (writes keep their writeId, so the server
// applies each once). Only if that fails does it latch.
//
// # Backpressure
//
// Every EventStream has its own bounded queue (256 events). The producer
// never blocks on it: when it is full the queue is dropped, the stream
// yields an [EventLagged] marker and re-reads what it missed from retained
// history, so the subscriber still sees every seq exactly once, or an
// [EventGap] for output that retention evicted meanwhile. A Client's
// requests go through one bounded queue (256) to its writer; callers wait
// with their ctx. The server side's policies are in package actors.
package runtime
