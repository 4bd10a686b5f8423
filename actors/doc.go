// Package actors holds the actor kit and the actors of runtimed: the process
// actor, the connection actor and the session registry, plus the supervisor
// that tracks their goroutines. It is not part of the public API; embed
// runtimed through package runtime.
//
// # Usage
//
//	sup := actors.NewSupervisor(cfg)            // starts the registry, the budget actor and the reclaimer
//	res, err := sup.Start(ctx, owner, req)      // admission: every check, then the child and its actor
//	ref, err := sup.Spawn(id, spec, &sub)       // tests: a resolved Spec, no admission (charged as a first start)
//	err = sup.ServeConn(ctx, transport, opts)   // a connection actor, until it ends (charged too)
//	sup.Stop(); sup.Wait(ctx)                   // graceful stop (Kill: forced)
//
// # Concurrency
//
// One goroutine owns each piece of mutable state; each struct comment says
// who. A process actor (process.run) owns its session, phase and
// deadlines, seq counter, ring buffer, pending long polls, writeId memory
// and subscriber cursor (files by concern: process.go types and
// ProcessRef; process_fsm.go the state machine, kill path and loop;
// process_output.go output, retention, subscribers and reads;
// process_requests.go the mailbox's messages; process_io.go helpers). Helper goroutines only report facts: one reader per output stream
// (outputReadMsg, streamEndedMsg), one waiter (exit code on exitCh), one
// stdin writer (writes and closes stdin in order). Readers wait in the
// runtime poller and the waiter reaps through a pidfd, so an idle child
// costs no thread. A connection actor (ServeConn's goroutine) owns the
// handshake state, the session's routing table and the app-server handles;
// its fs worker goroutine (started on the first fs request) runs fs/*
// requests, and environmentConfig/read and the capability discovery
// methods (codexcfg.go, reading the disk through actors/codexhome), in
// arrival order and owns the connection's fsops.Worker: the
// fs/open handles and the fs/watchMissing watches, whose fs/missingChanged
// it queues after the answer that armed them. The connection's queue
// goroutine (outbound.go), started by the reader before the first request
// that lets another goroutine write (so an idle connection is its reader
// alone), owns the outbound fifo, its byte count and the slow-consumer
// watchdog; its writer goroutine, started on the first batch, encodes and
// writes one batch at a time. The transport's write side
// belongs to whoever holds the connection's one-slot write token: the queue
// goroutine (lending it to the writer with each batch) while anything is
// queued, or a goroutine answering a request when the token is free; nobody
// ever waits for the token but the queue. Each app-server process has an adapter goroutine owning the
// dialect's caps and buffers. The http manager goroutine (started on the
// first http/request) owns the connection's http client (its connection
// pool), the count of requests in flight and the requestIds of streams in
// flight; each request runs on its own goroutine, which answers it and
// queues its body deltas, and reports its end back to the manager. The registry owns which sessions are attached and the
// detached ones with their deadlines. A [SessionTable] has exactly one owner
// at a time, moved by registry messages. The budget actor (budget.go) owns
// the server-wide usage: connections and process starts ask it for their
// charge (SpawnCharged, AcquireConnection); it returns a process's charge
// when it sees the process closed (its actor ended, for retained output),
// sweeping its list when a request would be refused and every 256 starts.
// The reclaimer goroutine (reclaim.go) owns only its timer: poked by a
// connection that read a message of 8 MiB or more, it collects and returns
// memory to the OS once a second until the heap is back where it was.
//
// Supervisor.Start (admission) runs on its caller's goroutine (a
// connection's reader, a Local's caller) and calls the Owner's methods
// there, so the owner's table needs no lock of its own unless several
// goroutines start into it (Local guards its table with a mutex, never
// held across the spawn); its only hand-offs are the budget actor's
// charge and, for a sandboxed start, the spawning thread.
//
// Mailboxes are bounded channels of a closed message set (procMsg, regMsg).
// Requests carry a reply channel of capacity 1, so an actor never blocks
// replying. Every send selects on the caller's ctx and the actor's done
// channel (send, await, ask in kit.go). Nobody closes a mailbox; an actor
// closes only its own done channel.
//
// Replay and live are one path: output is addressed by seq. A subscriber is
// a cursor; the actor delivers the event at the cursor (from the ring, or
// the exit/close event) whenever the subscriber's queue has room.
// [ProcessRef.Attach] registers the cursor at the next unassigned seq in one
// actor step; process/read serves any retained suffix.
//
// Measurements go through the [Metrics] interface in Config.Metrics
// (package runtime implements it with Prometheus; nil means [NopMetrics]):
// the supervisor times spawns, each process actor reports its output,
// evictions, exit reason and the time it held output back for a slow
// subscriber, the registry its session counts, and the connection each
// request's latency (when its answer is queued, by a waiter or the fs
// worker for deferred ones) and every error answer (a refusal by a limit
// carries wire.Error.Limit). Implementations must not block.
//
// A start with a managed network (StartRequest.Network, process/start's
// networkProxy) gets its own netproxy proxies before the child starts
// (managednet.go): Config.NetPlacer places their listeners (HostPlacer: in
// the command's own empty network namespace, which the sandbox helper
// starts it in; the host sets it only where the namespaces level is
// enforced, and nil refuses such starts), the child's environment names
// them, and the child's waiter closes them right after the exit, before
// the exit is reported. Each decision is counted ([Metrics.NetworkDecision]),
// logged with the process id, and handed to a forwarder goroutine per
// process that sends network/policyDecision; a connection's asker
// goroutine (netask.go) owns its pending network/policyRequest (a request
// from the server to the client) and the reader hands it the answers.
//
// # Failure semantics
//
// A connection latches one failure (context.WithCancelCause; the first
// cause wins, a [*ConnError] with a [Reason]). Its Done channel is every
// attached process actor's Subscriber.Done, so the failure fans out to each
// of them exactly once: each forgets the subscriber and keeps retaining
// output. The connection then hands its session to the registry: detached
// for the detach TTL (websocket), or discarded at once (stdio, TTL 0).
// The registry keeps each attached session's connection latch (its Done
// channel): a resume that finds the session attached to a connection whose
// latch fired is parked (one per session) until that connection detaches
// it, ResumeDetachWait (2 s) at most, and then gets the table directly; a
// live holder gets a 100 ms grace, then -32010. The parked resume is
// answered even if its own connection ends meanwhile (that connection
// then detaches what it was handed), so a session is never lost in flight.
// Expiry and discard kill the session's processes (the kill path: SIGKILL
// to each tree) and let their actors end once the ending was delivered.
//
// The ending is never lost: a process actor ends only after its process is
// closed and its subscriber was handed exited and closed, or was dropped
// (its connection ended: the latched cause is the reason; or Kill, logged).
// The closed retention runs from that moment; zero or negative means the
// actor ends right after delivery. Lag-mode listeners are not waited for:
// one that lagged is closed and resubscribes from its seq, which fails
// with ErrStopped if the process has been forgotten meanwhile (reported to
// the stream's reader as a failure, never silent). Stop therefore waits for attached subscribers
// to take the ending (a server's Shutdown gives them until its deadline,
// then Kills); Kill drops them.
//
// Shutdown order (runtime.Server): stop accepting; Stop (every tree:
// SIGTERM or SIGHUP, SIGKILL after the grace); wait for the actors; cancel
// the connections, whose writer then flushes what it already holds
// (connFlushTimeout) and closes the transport, which ends the reader. The
// reader reads with a context the latch does not cancel, because cancelling
// a websocket read closes the connection under the last flush.
//
// Panics are isolated. A panic in a process actor is recovered: logged with
// its stack, the tree is SIGKILLed, the outputs closed, Closed and Done
// released, [ProcessRef.Failure] returns a [*ProcessFailedError] (matching
// [ErrProcessFailed]) and requests about the process are answered -32603
// with it; its subscriber is handed an EventFailed at its cursor (on the
// wire: process/closed with an ext "failure"). A failed process keeps its
// id in its session. A panic in a connection's reader (while handling a
// request), writer, fs worker, long-poll or write waiter, or app-server
// adapter answers the request being handled -32603 and latches that
// connection's failure (ReasonInternal); its session is detached as for
// any drop. Nothing else is affected. [SetTestHooks] injects panics in
// tests; the hooks are nil in production and unreachable from the wire.
//
// A process actor is never restarted: its OS process cannot be rebuilt. Its
// lifecycle is one state machine (process_fsm.go, drawn in
// ARCHITECTURE.md): starting, running, stopping, exited, draining, closed,
// retained, gone. The phase changes only in process.transition, only
// forward, each change with a typed reason; an illegal transition is logged
// as a bug and refused. Closed comes only after the exit and the end of
// every output stream and takes the highest seq. Every kill (terminate, a
// SIGKILL signal, detach-TTL expiry, the connection's end, a resource
// limit, Spec.Timeout, shutdown) takes one kill path: SIGTERM (SIGHUP on a
// PTY) and SIGKILL after the grace while the child runs, SIGKILL at once
// once it was reaped, then at most DrainAfterTerminate for the output
// streams, which are then closed by force, so closed follows promptly even
// when a descendant that left the group holds them. Every deadline of the
// actor comes from ProcConfig.Clock (tests drive a fake one); a
// connection's slow-consumer watchdog takes its time from Config.Clock.
// Admission is Supervisor.Start (admission.go), the one place a process
// is admitted: the exec-server's process/start, the app-server's
// process/spawn and runtime.Local decode their request into a
// StartRequest and call it. Its checks run in one documented order; the
// first failure is a [*StartError] naming the step (Check) and field, and
// [StartError.Wire] is the one mapping to a JSON-RPC error. Nothing is
// started or charged for a refused start, and the owner's id is free
// again.
// Spawn failures are *osproc.SpawnError values carrying the OS error
// (the OS half, fork/exec, pipes, PTY, pidfd and env, is package osproc;
// this package holds actors only).
//
// Descriptors are released when they stop being needed, never by the
// garbage collector: the child's os.Process handle (a pidfd since Go 1.23)
// right after the start, the cgroup directory once the child was cloned
// into it; a running process holds its output pipes (or PTY master), its
// stdin pipe and the waiter's pidfd, which the waiter closes at the reap;
// the transition to closed closes the outputs and, after queued writes,
// stdin. A closed process retained for process/read holds none, so
// terminating thousands of processes returns the server to its idle count
// at once (tests: TestEndedProcessesReleaseDescriptors in actors and
// cmd/runtimed). Once Stop
// has returned, Spawn starts nothing (a child started meanwhile is killed
// and reaped).
//
// Budgets refuse, they never wait: a start or a connection over a budget
// gets a [*BudgetError] (-32011 naming the limit, its value and its flag),
// nothing is started and nobody else is slowed. A start from a session with
// fewer than [FirstStarts] active processes, and any connection, may use the
// reserve (descriptors, and room for [ReservedFirstStarts] processes); other
// starts must leave it, so a greedy session is refused while a new
// connection and its first start still work. A spawn that still fails with
// EMFILE/ENFILE is reported as the open-files budget. A refused connection
// gets an error with id null and a close frame 1008.
//
// How a connection ends depends on its latched reason: a protocol
// violation is answered with a websocket close frame 1002 and the reason,
// after the responses already queued; a shutdown with 1001; a slow
// consumer (no outbound progress for Budgets.SlowConsumerTimeout while a
// batch is being written, resumable connections only: a connection with
// nothing to write is never one, however long it is quiet) is closed at once (a full receive window cannot take a
// frame) and detached like any dropped connection. The reader never reads
// under the connection's context: closing the transport is what unblocks
// it.
//
// The connection's end cancels its http requests (their context is the
// connection's): the remote server sees them go away, and the manager
// waits for their goroutines before closing the connection pool.
//
// # Backpressure
//
//   - Inbound requests (inbound.go): a message that outgrows 64 KiB waits,
//     before the transport reads on, for the budget actor to admit it
//     against Budgets.MaxInboundBytes and ConnInboundBytes (charged at the
//     message limit while read, then its buffer until answered). The queue
//     of waiting admissions holds at most one per connection, served in
//     order; the reader waiting there reads nothing, so TCP or the pipe
//     pushes back on the client. After InboundAdmitWait (a minute by
//     default) the message is refused (-32011) and the rest of it dropped.
//   - Requests into a process actor: bounded mailbox (64); senders wait,
//     bounded by their ctx.
//   - Output from the child: each read takes what is available up to 64
//     KiB as one chunk (so retention, which evicts whole chunks, keeps at
//     least its byte bound less 64 KiB); readers send facts into a bounded
//     channel (16). The actor stops taking facts while one more read could
//     make retention evict output the session's client has not read
//     (process_output.go defines "read": acknowledged by a process/read's
//     afterSeq or a process/ack's seq, or, unless the connection
//     acknowledges with process/ack (ack mode), handed to the live
//     connection); readers then block, the
//     pipe or PTY fills, and the child blocks on write, as on a slow
//     terminal. Attached: undelivered output fills at most half of
//     retention (the other half keeps the newest output handed to the
//     connection, what a drop may lose in flight), so a slow client slows
//     its own processes, never another's, and no event is dropped while
//     the connection lives; delivered output is evicted (counted in the
//     evictions metric). In ack mode delivered output is evicted only once
//     acknowledged: the client's acknowledgements are the flow control. Detached: nothing the client has not acknowledged
//     is evicted; a producer that fills retention blocks until a resume
//     reads it or the detach TTL ends (the session is then discarded and
//     its output flows and is dropped with the process). Trade-off: a
//     detached fast producer blocks, for up to the TTL, rather than lose
//     output. After a resume the backlog (from the last acknowledged seq up
//     to the first live one) is held the same way until the client reads
//     past it, 10 s after an answer carried it at most, the TTL at most in
//     all. Not held: a process discarded or shutting down, one whose
//     streams were closed by force (a killed process's bounded drain), or
//     one that never had a connection (Local), which read at full speed
//     and evict the oldest output.
//   - The connection's outbound queue: events (from its processes and
//     http streams) and responses go through unbuffered channels to the
//     queue goroutine, which takes an item only while the bytes it holds
//     (queued and being written) are under Budgets.OutboundQueueBytes
//     (256 KiB by default), so it holds at most that plus one message. Beyond
//     it process actors wait to deliver (and stop taking output: their
//     children block on the pipe), reply producers wait. The writer blocks
//     on the transport (TCP/pipe backpressure). Large results are encoded
//     by the writer, so a waiting producer holds no encoded copy.
//     When the connection ends, the last flush writes what is queued
//     (answers, and the endings of processes that finished during a
//     shutdown) for at most 250 ms; a peer that does not read gets nothing
//     more.
//   - Lag-mode listeners (Subscribe): the actor never blocks on them; a
//     full one is closed (lagged) and resubscribes.
//     Long polls and writes are answered by waiter goroutines, at most 4096
//     in flight per connection; beyond that the reader stops reading.
//   - Server-wide budgets are not queues: over a budget a request is
//     refused at once.
//   - http/request: at most 64 requests in flight per connection (one
//     more is answered -32600 at once, so a long stream never stalls the
//     reader); up to 16 validated requests wait for the http manager (the
//     reader waits beyond that). A streamed body's deltas (at most 64 KiB
//     each) and its result share the events queue with process output, in
//     order: when the queue is full the request goroutine stops reading the
//     body and TCP slows the remote server. A buffered body holds at most
//     Config.HTTP.MaxBodyBytes (beyond it: an error, nothing dropped).
//   - Filesystem: fs requests wait for the fs worker in a bounded queue
//     (64); a full queue makes the reader wait. fs/missingChanged goes to
//     the responses queue like a response (one per watch, at most 128
//     watches per connection).
//   - Stdin: writes go to the stdin writer through a bounded channel (64);
//     further writes wait in the actor, each holding its requester's reply,
//     so a child that does not read stdin slows only its writers.
//   - Managed network: a process's decisions wait for its forwarder in a
//     bounded queue (256); a full queue drops the notification and counts
//     it (the decision was enforced, counted and logged). A connection
//     holds at most 1024 pending network/policyRequest (mailbox 64); an
//     ask beyond that, without an answer in time, or after the connection
//     ended is a deny. The proxies' own bounds are netproxy.Limits.
package actors
