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
// The attach form is [Cmd], like os/exec's: io.Reader and io.Writers for
// stdin, stdout and stderr, Run, Start and Wait, Output, CombinedOutput;
// its output copy starts at seq 0, so nothing written before the copy
// began is lost:
//
//	out, err := runtime.Command(b, "uname", "-a").Output()
//	var ee *runtime.ExitError // errors.As: ran and failed
//
// [Attacher]: both backends hand out a handle on a process by id; a Client
// that resumed a detached session (ClientOptions.ResumeSessionID) attaches
// to the processes another connection started, its Events starting at
// seq 1 from retained output (what `runtimed attach` does).
//
// A Server is used like net/http's: NewServer(cfg), Serve(listener) or
// ServeTransport(t, resumable), Shutdown(ctx) to stop gracefully, Close to
// stop now. Shutdown stops accepting, terminates every process tree
// (SIGTERM, SIGKILL after Config.ShutdownGrace), waits until each process
// has handed its ending (exited, closed) to its connection, then ends the
// connections, whose writers flush what they hold (bounded, 250 ms) before
// closing; past ctx it kills at once. Close ends the connections first and
// then kills, so a client sees its connection drop, never the kill.
//
// TLS: serve on tls.NewListener(l, r.TLSConfig()) with a [CertReloader] r
// (run r.Run in a goroutine; r.Reload on SIGHUP); clients Dial a wss://
// URL with ClientOptions.TLSConfig from [LoadCA], or the system roots.
// Observability: Config.Metrics keeps Prometheus metrics in a registry of
// the server's own (no global registry); [Server.ObservabilityHandler]
// serves /metrics, /healthz, /readyz and optionally /debug/pprof/.
// docs/operations.md lists the metrics.
//
// Defaults (a zero Config means all of them): detach TTL 30 s, retention
// 1 MiB and 50 000 chunks per process, closed processes kept 30 s (from
// the moment their ending was delivered; a negative ClosedRetention
// forgets them right after delivery), shutdown grace 2 s, inbound
// messages up to 64 MiB, http/request enabled with buffered bodies up to
// 16 MiB, 4096 processes per session. The server-wide budgets
// (connections, processes, descriptors and their reserve, retained
// output, outbound queues: see Config) default to values derived from the
// machine by [ProbeMachine] (RLIMIT_NOFILE, memory or the cgroup's
// limit); [Server.Budgets] returns them. Local applies the same limits, as
// one session.
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
// one client core (wire.Client: a reader and a writer goroutine) per
// connection, a watcher of the core's failure and a pump of requests
// queued while no connection was usable. A CertReloader has
// one goroutine (Run) that loads pairs; TLS handshakes read the current
// pair through an atomic pointer. The metrics are Prometheus collectors,
// safe for concurrent use; the actors call them through the
// actors.Metrics interface and never import Prometheus.
//
// # Contexts
//
// A ctx bounds a call, never the life of what the call creates, on Local
// and on a Client alike: ending a ctx never kills a process (use
// Terminate), except the ctx given to CommandContext, which, as in
// os/exec, bounds the command's life. When a ctx ends first, the method
// returns ctx.Err() unwrapped.
//
//	Method                          ctx bounds
//	Backend.Start                   the start only; if ctx ends first, Start
//	                                returns its error and leaves nothing running
//	Process.Write, CloseStdin,      the request only; an ended ctx does not undo
//	Resize, Signal, Terminate       a request the backend already took
//	Process.Read                    the request, its long poll (ReadOptions.Wait) included
//	Process.Wait                    the waiting; the process runs on
//	Process.Events                  the subscription; each EventStream.Next takes its own ctx
//	Pipe                            every Read, Write and Close of the pipe
//	CommandContext                  Cmd.Start and the process's life: killed when ctx ends
//	Dial, NewClient                 connecting and the handshake; the Client outlives ctx
//	Local.Shutdown, Server.Shutdown the graceful part; past ctx, processes are killed
//
// Errors are the same on both backends and are matched with errors.Is:
// ErrUnknownProcess (a process the backend forgot), ErrNotPTY,
// ErrStdinClosed, ErrProcessExists (a duplicate Spec.ID), ErrProcessFailed
// (a *ProcessError), ErrInvalidOption (an [*OptionError] naming the option
// and field), ErrClosed and ErrDisconnected.
//
// Bad input: every option is checked before anything runs or goes on the
// wire (validate.go), so Local and a Client refuse the same mistakes with
// the same *OptionError, e.g. "runtime: invalid Spec.Size: rows and cols
// must both be positive, or both zero for 24x80, got 0x80": Spec (every
// field, its Sandbox, Limits and EnvPolicy included) at Start, ReadOptions
// at Read, PipeOptions at Pipe, WalkOptions at Walk, ClientOptions at
// Dial and NewClient, Service and Backoff at Supervisor.Add, Config at
// Config.Validate (NewLocal's Starts and a Server's Serve return the same
// error). Each field's doc comment says what its zero value means. Where a
// server checks the same field for other clients (process/start's argv,
// cwd, env, envPolicy, sandbox), its -32602 names it in the protocol's words.
//
// # Failure semantics
//
// Errors answered by a server are [*RPCError] values with the protocol's
// code and message; Local returns the same values for the same mistakes,
// including budget refusals (-32011, "limit reached: ..."), in the same
// order (both are answered by one admission, actors.Supervisor.Start). A
// Start whose child could not be started is -32603 with the OS's text and
// matches, on both backends, exec.ErrNotFound (no such command),
// fs.ErrNotExist (no such command or cwd), fs.ErrPermission and the
// syscall.Errno through errors.Is.
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
// applies each once). Only if that fails does it latch. A resume the server
// refuses because it no longer has the session (its detach TTL ran out, it
// restarted) latches an error matching both ErrDisconnected and
// [ErrSessionGone], with the server's [*RPCError] in its chain; Dial with
// ClientOptions.ResumeSessionID returns the same; a server that cannot be
// reached gives ErrDisconnected (or the dial error) without ErrSessionGone. Against a runtimed
// server (capability runtimedOutputAck) the client acknowledges the output
// it receives (process/ack, every 128 KiB and 20 ms after the last), so the
// server keeps what was in flight at a drop and the catch-up is lossless at
// any retention size; the server's producer waits while retention holds
// only output this client has not acknowledged. Output the server evicted
// while the client was away (a server without process/ack) comes as an
// [EventGap].
//
// Process failure: if the runtime fails one process (an internal error: a
// recovered panic in its actor; the tree is killed), its Wait returns a
// [*ProcessError] matching [ErrProcessFailed] and its event streams end
// with an EventFailed carrying it; the other methods of both backends
// return it too (a Client maps the server's -32603 answer to it). Every
// other process, connection and caller is unaffected.
//
// Endings: Wait always returns (the exit status, a *ProcessError, or the
// latched disconnect). A subscriber made right after Start
// sees every event from seq 1 even if the process was already forgotten
// (Local registers its first subscriber's queue at spawn; a Client keeps
// its own history, below).
//
// A runtime that dies without shutting down (runtimed serve killed with
// SIGKILL, an embedding program that crashed or called os.Exit) leaves its
// process trees running, reparented to pid 1: nothing of the dead process
// can stop them. Each tree stays findable: in its cgroup (the default
// containment where the host allows it; a cgroup holds every descendant)
// or, with subreaper and process-group containment, by the record of its
// process group in Config.StateDir. The next NewServer or NewLocal on the
// machine (same user, same cgroup, same StateDir) kills what runtimes of
// processes no longer running left, logs each tree (pid of the dead
// runtime, cgroup or record, pids killed), and removes their directories;
// a program that wants this at start-up without a runtime calls
// [ReclaimOrphans]. Not found after a crash: with process-group
// containment, descendants that left the group (setsid); runtimes of live
// processes are never touched.
//
// Supervisor: a lost backend is not an exit. A service whose Start or
// Wait fails with ErrDisconnected or ErrClosed is [ServiceLost] (its
// LastError wraps [ErrBackendLost], its LastExit is nil: how the process
// ended is unknown); nothing more is started on that backend and its
// restart intensity is not charged. With SupervisorOptions.Redial the
// supervisor makes a new backend (at once, then with backoff on its
// Clock) and starts the lost services on it; without it they stay lost
// until Stop. Every state change carries a [ServiceReason]; the table of
// legal changes is in supervise_fsm.go.
//
// Dial refuses a URL that is not ws:// or wss:// with [ErrBadURL] (the
// message suggests the fix) and a 401 with [ErrUnauthorized]. A TLS pair
// that fails to load is an error from NewCertReloader; later a failed
// reload is logged and the previous pair stays in use.
//
// # Backpressure
//
// Every EventStream has its own bounded queue (256 events; Local's first
// one 16). The producer never blocks on it: when it is full the queue is
// dropped, the stream yields an [EventLagged] marker and re-reads what it
// missed from retained history, so the subscriber still sees every seq
// exactly once, or an [EventGap] for output that retention evicted
// meanwhile. A Client keeps its own history of each process's newest
// events (256 KiB of output, 4096 events, dropped 10 s after the process
// closed) and recovers a lagged or late subscriber from it before it asks
// the server; a subscriber further behind than that, on a server that has
// already forgotten the process, ends with an EventFailed (reported, not
// silent). A Client's requests go through one bounded queue (256) to its
// writer; callers wait with their ctx. A Client holds notifications that
// arrive ahead of a missing seq in a reorder buffer (65 536 per process);
// when it is full, it reads the hole back with process/read instead of
// dropping or stalling, and what the server no longer retains arrives as
// an EventGap (a reported, typed loss). A Cmd's copy to a blocking Stdout
// or Stderr holds only its own stream back: it lags and re-reads
// retention, and output evicted meanwhile makes Wait return ErrOutputLost
// (never silently). A Supervisor never waits on a Subscribe queue (its
// buf): an event that does not fit is dropped and counted, and the next
// event that subscriber gets says how many it missed
// (ServiceEvent.Dropped); Status has the current state. The server side's
// policies are in package actors.
package runtime
