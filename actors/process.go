package actors

import (
	"context"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/runtimed/runtimed/actors/osproc"
)

// Mailbox and queue capacities of the process actor (see doc.go, Backpressure).
const (
	// procMailboxCap bounds requests waiting for the actor; senders block (with ctx).
	procMailboxCap = 64
	// factsCap bounds output facts from the reader goroutines; readers block,
	// which stops them reading the child, which blocks the child's writes.
	factsCap = 16
	// stdinQueueCap bounds writes handed to the stdin writer goroutine; more
	// wait inside the actor, each holding its own requester's reply.
	stdinQueueCap = 64
	// maxReadChunk is the largest chunk: one read of a pipe or PTY drains
	// what is available up to this (64 KiB, 87 KiB of base64 on the wire).
	// It is also the most retention can fall short of its byte bound:
	// chunks are evicted whole, so the newest retainBytes less at most
	// 64 KiB stay (larger coalesced chunks lost up to 256 KiB).
	maxReadChunk = osproc.MaxChunk
	// writeIDMemory is how many writeIds per process are remembered for dedupe.
	writeIDMemory = 4096
	// exitHold is how long a reported exit waits for the output streams to
	// end before it takes its seq, so that output written before the exit
	// is numbered before it (when a descendant keeps the streams open, the
	// exit is published when the hold ends and later output follows it).
	exitHold = 25 * time.Millisecond
	// backlogSentHold is how long the backlog after a resume stays unread
	// once a process/read answer carried it without the client reading
	// past it (see unreadFrom): time for that answer, up to a retention's
	// worth, to reach the client, or for its connection to be seen lost.
	backlogSentHold = 10 * time.Second
)

// EventKind is the kind of a process event.
type EventKind uint8

const (
	EventOutput EventKind = iota + 1
	EventExited
	EventClosed
	// EventGap stands for output seqs Seq..To that retention evicted before
	// a subscriber could see them (only in subscription history).
	EventGap
	// EventFailed ends a subscriber's events when the process actor failed
	// (a recovered panic): Seq is the subscriber's next seq, Failure says
	// why. Nothing follows it.
	EventFailed
)

// Event is one entry of a process's history, addressed by Seq. Output
// events carry Stream and Data; exited events carry ExitCode.
type Event struct {
	ProcessID string
	Kind      EventKind
	Seq       uint64
	Stream    Stream
	Data      []byte
	ExitCode  int
	// ExitSignal is the signal that killed the process (exited events
	// only): 0 when it exited on its own (ExitCode is then its code), -1
	// when unknown (a remote server that does not say: ExitCode's 128+N
	// reading is all there is).
	ExitSignal int
	// Limit names the resource limit that ended the process (exited
	// events only; "" when none did).
	Limit   string
	To      uint64 // last seq of an EventGap
	Failure string // of an EventFailed
}

// Subscriber is where a process actor delivers live events: the attached
// connection. Out is shared by all processes of that connection and read by
// its writer; Done is closed when the connection is lost (the latched
// failure), after which the actor forgets the subscriber.
//
// Delivery is lossless: when Out is full the actor waits (keeps serving
// requests, stops reading the child), and it never lets retention evict an
// event the subscriber has not been given.
type Subscriber struct {
	Out  chan<- Event
	Done <-chan struct{}
	// Acks: the subscriber's client acknowledges what it was handed
	// (process/ack): the process starts in ack mode (see unreadFrom).
	Acks bool
}

// ReadReply is the answer to a read: PROTOCOL.md's process/read result
// without its encoding.
type ReadReply struct {
	Chunks     []OutputChunk
	NextSeq    uint64
	Exited     bool
	ExitCode   int
	ExitSignal int    // as Event.ExitSignal, once exited
	Limit      string // the resource limit that ended it, once exited ("" if none)
	Closed     bool
}

// WriteStatus is the outcome of a write (statuses are results, not errors).
type WriteStatus uint8

const (
	WriteAccepted WriteStatus = iota + 1
	WriteStdinClosed
	WriteUnknownProcess
)

// ProcessState is the monotonic lifecycle of a process as process/list
// reports it (a projection of the actor's phase, see phase).
type ProcessState uint8

const (
	StateStarting ProcessState = iota
	StateRunning
	StateExited
	StateClosed
)

func (s ProcessState) String() string {
	return [...]string{"starting", "running", "exited", "closed"}[s]
}

// ProcessInfo describes a process for process/list.
type ProcessInfo struct {
	ID       string
	Pid      int
	Argv     []string
	TTY      bool
	State    ProcessState
	ExitCode int // valid when State >= StateExited
	// ExitSignal: as Event.ExitSignal, when State >= StateExited.
	ExitSignal int
	NextSeq    uint64
	Limit      string // the resource limit that ended it, if any
}

// WriteResult is the reply to a write: a status, or an error when writing
// to the child's stdin failed.
type WriteResult struct {
	Status WriteStatus
	Err    error
}

// ProcConfig is the per-process part of the supervisor's configuration.
type ProcConfig struct {
	RetainBytes     int
	RetainChunks    int
	ClosedRetention time.Duration
	// DrainAfterTerminate is how long after a terminated process exits its
	// output streams may still drain before they are closed by force (a
	// descendant that left the group may hold them open).
	DrainAfterTerminate time.Duration
	// ShutdownGrace is the SIGTERM-to-SIGKILL grace used when the supervisor stops.
	ShutdownGrace time.Duration
	// Clock gives the actor its time and timer (nil: RealClock). Tests
	// drive deadlines with a fake one.
	Clock Clock

	metrics Metrics // set by NewSupervisor from Config.Metrics; never nil there
	audit   Auditor // set by NewSupervisor from Config.Audit; nil: none
	// resumeHold is how long the backlog after a resume stays unread for
	// the client to catch up (set by NewSupervisor from Config.DetachTTL;
	// 0: not held).
	resumeHold time.Duration
}

// ProcessRef is a handle on a process actor. All methods may be called
// concurrently from any goroutine.
type ProcessRef struct {
	id      string
	pid     int
	argv    []string
	tty     bool
	mbox    chan<- procMsg
	done    <-chan struct{}
	closedC <-chan struct{}
	final   *finalState
	meta    *Metadata // set by the supervisor before the ref is shared
	who     *Who      // likewise (audit.go): who started it
}

// finalState: exitCode and limit are written by the process actor before
// it closes closedC and never after, so reading them after <-closedC needs
// no lock; failure is set once, after a recovered panic (before closedC, if
// that was still open, and before done are closed), and read at any time.
type finalState struct {
	exitCode   int
	exitSignal int
	limit      string
	failure    atomic.Pointer[ProcessFailedError]
	// view is the actor's last published readView (written only by the
	// actor, each value immutable once stored).
	view atomic.Pointer[readView]
}

// readView is what the process actor publishes, after each step that
// changes it, for reads that need no hop to the actor: an idle process's
// process/read with waitMs 0 that would return no output and acknowledge
// nothing new (see ProcessRef.ReadIdle).
type readView struct {
	nextSeq    uint64 // the next seq to be assigned
	lastChunk  uint64 // seq of the newest retained chunk (0: none retained)
	acked      uint64 // output read up to here (the unread-output rule)
	backlog    bool   // a resume's backlog is held: a read may release it
	exited     bool
	closed     bool
	exitCode   int
	exitSignal int
	limit      string
}

// ReadIdle answers a read (waitMs 0) after seq after from the actor's last
// published view, without a hop to the actor, when the actor would answer
// it with no output and the read acknowledges nothing it has not
// acknowledged already; ok is false otherwise (ask the actor). The answer
// is the one the actor gave at the moment it published the view (a read
// that arrived then).
func (r *ProcessRef) ReadIdle(after uint64) (ReadReply, bool) {
	select {
	case <-r.done:
		return ReadReply{}, false // ended or forgotten: the actor's answer
	default:
	}
	v := r.final.view.Load()
	// The view is never older than what the actor has told any client: it
	// is published at the top of each step (before a notification goes
	// out) and before every answer that shows a seq (read answers, a long
	// poll woken by output mid-step included; Info; Attach). A client
	// that claims more (after >= v.nextSeq) is sent to the actor.
	if v == nil || after >= v.nextSeq || v.backlog || v.lastChunk > after || after > v.acked {
		return ReadReply{}, false
	}
	return ReadReply{NextSeq: v.nextSeq, Exited: v.exited, ExitCode: v.exitCode, ExitSignal: v.exitSignal, Limit: v.limit, Closed: v.closed}, true
}

func (r *ProcessRef) ID() string            { return r.id }
func (r *ProcessRef) Pid() int              { return r.pid }
func (r *ProcessRef) Done() <-chan struct{} { return r.done }
func (r *ProcessRef) TTY() bool             { return r.tty }
func (r *ProcessRef) Argv() []string        { return r.argv }

// Alive reports whether the actor still exists (a closed process stays
// alive until its retention ends).
func (r *ProcessRef) Alive() bool {
	select {
	case <-r.done:
		return false
	default:
		return true
	}
}

// ReadAsync queues a read and returns the channel its reply will arrive on.
// With wait > 0 the reply comes when output, exit or close is newer than
// after, or when wait has passed.
func (r *ProcessRef) ReadAsync(ctx context.Context, after uint64, maxBytes int, wait time.Duration) (<-chan ReadReply, error) {
	reply := make(chan ReadReply, 1)
	err := send(ctx, r.mbox, procMsg(readMsg{after: after, maxBytes: maxBytes, wait: wait, reply: reply}), r.done)
	return reply, err
}

// Read reads retained output (see ReadAsync).
func (r *ProcessRef) Read(ctx context.Context, after uint64, maxBytes int, wait time.Duration) (ReadReply, error) {
	ch, err := r.ReadAsync(ctx, after, maxBytes, wait)
	if err != nil {
		return ReadReply{}, err
	}
	return await(ctx, ch, r.done)
}

// WriteAsync queues a write to stdin; the reply comes once the bytes were
// written to the child (or rejected).
func (r *ProcessRef) WriteAsync(ctx context.Context, data []byte, writeID string) (<-chan WriteResult, error) {
	reply := make(chan WriteResult, 1)
	err := send(ctx, r.mbox, procMsg(writeMsg{data: data, writeID: writeID, reply: reply}), r.done)
	return reply, err
}

// Write writes to stdin and waits for the result.
func (r *ProcessRef) Write(ctx context.Context, data []byte, writeID string) (WriteResult, error) {
	ch, err := r.WriteAsync(ctx, data, writeID)
	if err != nil {
		return WriteResult{}, err
	}
	return await(ctx, ch, r.done)
}

// CloseStdin closes stdin after every earlier write.
func (r *ProcessRef) CloseStdin(ctx context.Context) error {
	res, err := ask(ctx, r.mbox, r.done, func(c chan<- error) procMsg { return closeStdinMsg{reply: c} })
	if err != nil {
		return err
	}
	return res
}

// Terminate kills the process tree through the actor's kill path (grace
// 0, or a child already reaped: SIGKILL now; otherwise SIGTERM, or SIGHUP
// for a PTY, then SIGKILL after grace; then the output streams drain for
// ProcConfig.DrainAfterTerminate at most). It reports whether the process
// was still running.
func (r *ProcessRef) Terminate(ctx context.Context, grace time.Duration) (bool, error) {
	return ask(ctx, r.mbox, r.done, func(c chan<- bool) procMsg { return terminateMsg{grace: grace, reply: c} })
}

// Signal sends sig to the process group of a running process; SIGKILL
// goes through the kill path (the whole tree, then a bounded drain).
func (r *ProcessRef) Signal(ctx context.Context, sig syscall.Signal) error {
	res, err := ask(ctx, r.mbox, r.done, func(c chan<- error) procMsg { return signalMsg{sig: sig, reply: c} })
	if err != nil {
		return err
	}
	return res
}

// Resize sets the PTY size.
func (r *ProcessRef) Resize(ctx context.Context, rows, cols uint16) error {
	res, err := ask(ctx, r.mbox, r.done, func(c chan<- error) procMsg { return resizeMsg{rows: rows, cols: cols, reply: c} })
	if err != nil {
		return err
	}
	return res
}

// Info returns the process's current description.
func (r *ProcessRef) Info(ctx context.Context) (ProcessInfo, error) {
	return ask(ctx, r.mbox, r.done, func(c chan<- ProcessInfo) procMsg { return infoMsg{reply: c} })
}

// Attach makes sub the process's live subscriber, starting at the next
// unassigned seq (nothing is replayed), and returns that seq.
func (r *ProcessRef) Attach(ctx context.Context, sub Subscriber) (uint64, error) {
	return ask(ctx, r.mbox, r.done, func(c chan<- uint64) procMsg { return attachMsg{sub: sub, reply: c} })
}

// Closed is closed once the process has exited and all its output
// streams have ended (the closed event has a seq).
func (r *ProcessRef) Closed() <-chan struct{} { return r.closedC }

// ExitCode returns the exit code; valid only after Closed() is closed.
func (r *ProcessRef) ExitCode() int { return r.final.exitCode }

// ExitSignal returns the signal that killed the process, 0 if it exited
// on its own; valid only after Closed() is closed.
func (r *ProcessRef) ExitSignal() int { return r.final.exitSignal }

// Limit names the resource limit that ended the process, once Closed is
// closed ("" when none did).
func (r *ProcessRef) Limit() string { return r.final.limit }

// Failure returns the *ProcessFailedError of a process whose actor failed
// (a recovered panic), or nil. Once set it stays; it is set before
// Closed() (if still open) and Done() are closed.
func (r *ProcessRef) Failure() error {
	if f := r.final.failure.Load(); f != nil {
		return f
	}
	return nil
}

// Subscription is a lag-mode subscriber: History holds the events after
// the requested seq that existed when it subscribed (evicted output as
// EventGap), Live the ones after, in seq order. The actor never blocks on
// Live: when it is full the actor closes it (the subscriber lagged and
// subscribes again from its last seq); it also closes it after the closed
// event.
type Subscription struct {
	History []Event
	Live    <-chan Event
}

// Subscribe returns the history after seq `after` and registers a live
// queue of the given capacity, in one actor step: no gap, no duplicate.
func (r *ProcessRef) Subscribe(ctx context.Context, after uint64, capacity int) (Subscription, error) {
	return ask(ctx, r.mbox, r.done, func(c chan<- Subscription) procMsg {
		return subscribeMsg{after: after, capacity: max(capacity, 1), reply: c}
	})
}

// Ack tells the actor that the attached connection's client has every seq
// up to seq (process/ack). From then on, until another connection
// attaches, output handed to that connection stays unread (retained,
// holding the producer back when retention is full of it) until it is
// acknowledged, so an abrupt drop loses nothing that was in flight. It
// waits only for room in the mailbox.
func (r *ProcessRef) Ack(ctx context.Context, seq uint64) error {
	return send(ctx, r.mbox, procMsg(ackMsg{seq: seq}), r.done)
}

// Discard kills the process tree (SIGKILL) if it is not closed and lets
// the actor end as soon as its ending was delivered instead of retaining
// it. The reason recorded is the connection's end.
func (r *ProcessRef) Discard(ctx context.Context) error {
	return r.discard(ctx, reasonConnEnd)
}

// discard is Discard with the reason recorded (reasonConnEnd or reasonTTL).
func (r *ProcessRef) discard(ctx context.Context, why reason) error {
	return send(ctx, r.mbox, procMsg(discardMsg{why: why}), r.done)
}

// process is the process actor.
//
// Immutable after construction: id, argv, tty, pid, sess, cfg, clock, log,
// observe and the channels. Owned by run (and only touched from its
// goroutine): every other field. Shared: nothing; helpers (readers,
// waiter, stdin writer) only send facts on facts/exitCh or use sess through
// the methods documented on Session. final is written by run and read by
// ProcessRef after closedC is closed (see finalState).
type process struct {
	id   string
	argv []string
	tty  bool
	pid  int
	// Audit (auditing.go): who started it, when (set before run starts,
	// immutable), and the output bytes read (owned by run).
	who       *Who
	startedAt time.Time
	bytesOut  int64
	sess      osproc.Session
	cfg       ProcConfig
	clock     Clock
	log       *zap.Logger
	// observe, if set (tests only, before run starts), sees every
	// transition asked for and whether it was legal.
	observe func(from, to phase, why reason, ok bool)

	mbox    chan procMsg
	facts   chan fact
	exitCh  chan int // capacity 1: the waiter never blocks
	stdinCh chan stdinOp
	done    chan struct{}
	closedC chan struct{} // closed by run when the process is closed (closeClosedC)
	final   *finalState   // written by run once, before closedC is closed

	closedCDone bool // closedC has been closed

	// Lifecycle (process_fsm.go).
	phase        phase
	exitHeld     bool // the exit was reported and waits (until heldUntil) for the streams
	heldCode     int
	heldSignal   int // the signal of the held exit (0: it exited on its own)
	exitCode     int
	exitSignal   int    // the signal that killed it, 0 if it exited on its own
	limit        string // the resource limit that ended it, if any
	exitSeq      uint64
	closedSeq    uint64
	timedOut     bool   // Spec.Timeout killed it: the exit code is TimeoutExitCode
	forgetReason reason // set: end once delivered instead of retaining (discard, shutdown)
	dropped      reason // why the last subscriber went before it was handed the ending
	// Deadlines, all from clock (zero: none); one timer points at the earliest.
	heldUntil time.Time // the exit hold's end
	killAt    time.Time // a grace's end: SIGKILL (phase stopping only)
	timeoutAt time.Time // Spec.Timeout
	drainAt   time.Time // the forced close of the streams (phase draining only)
	expireAt  time.Time // retention's end (phase retained only)
	timer     Timer
	timerAt   time.Time

	// Output, retention and subscribers (process_output.go).
	nextSeq     uint64
	ring        *Ring
	bp          backpressure // time output was held back for the subscriber
	readSize    int
	openStreams int
	sub         *subscription
	listeners   []chan Event // lag-mode subscribers; run closes each when it lags or the stream ends
	polls       []*pendingRead
	// What the session's client has read (see unreadFrom).
	acked        uint64    // the highest afterSeq of a process/read or seq of a process/ack, at most nextSeq-1
	ackMode      bool      // the attached connection acknowledges (process/ack): what it was handed stays unread until acked
	detached     bool      // the subscriber's connection ended and none attached since
	backlogFrom  uint64    // after a resume: the backlog's first unread seq (0: none)
	backlogTo    uint64    // the first seq the resumed subscriber got live
	backlogUntil time.Time // the backlog is unread until then at most
	outputsCut   bool      // the streams were closed by force (a killed process's drain ended)

	// Stdin (process_requests.go, process_io.go).
	stdinClosed bool
	stdinQueue  []stdinOp
	writeIDs    map[string]struct{}
	writeIDFIFO []string
}

// newProcess builds the actor around a started session (phase starting).
// The supervisor then starts its helpers (startHelpers) and run.
func newProcess(id string, argv []string, tty bool, sess osproc.Session, cfg ProcConfig, log *zap.Logger, sub *Subscriber) (*process, *ProcessRef) {
	clock := cfg.Clock
	if clock == nil {
		clock = RealClock{}
	}
	p := &process{
		id:       id,
		argv:     argv,
		tty:      tty,
		pid:      sess.Pid(),
		sess:     sess,
		cfg:      cfg,
		clock:    clock,
		log:      log,
		mbox:     make(chan procMsg, procMailboxCap),
		facts:    make(chan fact, factsCap),
		exitCh:   make(chan int, 1),
		stdinCh:  make(chan stdinOp, stdinQueueCap),
		done:     make(chan struct{}),
		closedC:  make(chan struct{}),
		final:    &finalState{},
		nextSeq:  1,
		ring:     NewRing(cfg.RetainBytes, cfg.RetainChunks),
		writeIDs: make(map[string]struct{}),
	}
	p.cfg.metrics = metricsOrNop(cfg.metrics)
	p.readSize = min(maxReadChunk, p.ring.MaxBytes())
	p.openStreams = len(sess.Streams())
	p.stdinClosed = !sess.HasStdin()
	if sub != nil {
		p.sub = &subscription{Subscriber: *sub, cursor: 1}
		p.ackMode = sub.Acks
	}
	ref := &ProcessRef{id: id, pid: p.pid, argv: argv, tty: tty, mbox: p.mbox, done: p.done, closedC: p.closedC, final: p.final}
	return p, ref
}
