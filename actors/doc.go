// Package actors holds the actor kit and the actors of runtimed: the process
// actor, the connection actor and the session registry, plus the supervisor
// that tracks their goroutines. It is not part of the public API; embed
// runtimed through package runtime.
//
// # Usage
//
//	sup := actors.NewSupervisor(cfg)            // starts the registry
//	ref, err := sup.Spawn(id, spec, &sub)       // a child and its process actor
//	err = sup.ServeConn(ctx, transport, opts)   // a connection actor, until it ends
//	sup.Stop(); sup.Wait(ctx)                   // graceful stop (Kill: forced)
//
// # Concurrency
//
// One goroutine owns each piece of mutable state; each struct comment says
// who. A process actor (process.run) owns its session, seq counter, ring
// buffer, exit state, pending long polls, writeId memory and subscriber
// cursor. Helper goroutines only report facts: one reader per output stream
// (outputReadMsg, streamEndedMsg), one waiter (exit code on exitCh), one
// stdin writer (writes and closes stdin in order). Readers wait in the
// runtime poller and the waiter reaps through a pidfd, so an idle child
// costs no thread. A connection actor (ServeConn's goroutine) owns the
// handshake state, the session's routing table and the app-server handles;
// its fs worker goroutine (started on the first fs request) runs fs/*
// requests in arrival order and owns the fs/open handles. The transport's write side belongs to whoever holds
// the connection's one-slot write token: its writer goroutine while it
// drains the queues (and encodes events), or a goroutine answering a
// request when the token is free; nobody ever waits for the token but the
// writer. Each app-server process has an adapter goroutine owning the
// dialect's caps and buffers. The registry owns which sessions are attached and the
// detached ones with their deadlines. A [SessionTable] has exactly one owner
// at a time, moved by registry messages.
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
// # Failure semantics
//
// A connection latches one failure (context.WithCancelCause; the first
// cause wins, a [*ConnError] with a [Reason]). Its Done channel is every
// attached process actor's Subscriber.Done, so the failure fans out to each
// of them exactly once: each forgets the subscriber and keeps retaining
// output. The connection then hands its session to the registry: detached
// for the detach TTL (websocket), or discarded at once (stdio, TTL 0).
// Expiry and discard terminate the session's processes (SIGKILL to each
// process group) and let their actors exit once closed.
//
// Stop and Kill end every process, but an attached subscriber must keep
// draining Out or close Done (a connection always does: its context ends
// first), because stream ends are delivered in order behind the output.
//
// A process actor is never restarted: its OS process cannot be rebuilt. Its
// lifecycle is monotonic: running, exited, closed; closed comes only after
// the exit and the end of every output stream and takes the highest seq.
// After a terminate, streams still held open by a descendant that left the
// group are closed by force after a short drain, so closed follows promptly.
// Spawn failures are *SpawnError values carrying the OS error.
//
// # Backpressure
//
//   - Requests into a process actor: bounded mailbox (64); senders wait,
//     bounded by their ctx.
//   - Output from the child: readers send facts into a bounded channel
//     (16). The actor stops taking facts while its attached subscriber has
//     so much undelivered output that one more read could make retention
//     evict it; readers then block, the pipe fills, and the child blocks on
//     write. A slow client thus slows its own processes, never another's,
//     and no event is dropped while the connection lives. With no
//     subscriber attached (detached session), output is taken at full speed
//     and the oldest retained output is evicted (retention bounds).
//   - Events to the connection: one bounded queue (256) per connection,
//     shared by its processes, drained by the writer, which blocks on the
//     transport (TCP/pipe backpressure).
//   - Responses: bounded queue (256); a full queue blocks the producer.
//     Long polls and writes are answered by waiter goroutines, at most 4096
//     in flight per connection; beyond that the reader stops reading.
//   - Stdin: writes go to the stdin writer through a bounded channel (64);
//     further writes wait in the actor, each holding its requester's reply,
//     so a child that does not read stdin slows only its writers.
package actors
