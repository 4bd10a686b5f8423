package actors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
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
	maxReadChunk = 64 << 10
	// writeIDMemory is how many writeIds per process are remembered for dedupe.
	writeIDMemory = 4096
	// exitHold is how long a reported exit waits for the output streams to
	// end before it takes its seq, so that output written before the exit
	// is numbered before it (when a descendant keeps the streams open, the
	// exit is published when the hold ends and later output follows it).
	exitHold = 25 * time.Millisecond
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
}

// ReadReply is the answer to a read: PROTOCOL.md's process/read result
// without its encoding.
type ReadReply struct {
	Chunks   []OutputChunk
	NextSeq  uint64
	Exited   bool
	ExitCode int
	Closed   bool
}

// WriteStatus is the outcome of a write (statuses are results, not errors).
type WriteStatus uint8

const (
	WriteAccepted WriteStatus = iota + 1
	WriteStdinClosed
	WriteUnknownProcess
)

// ProcessState is the monotonic lifecycle of a process.
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
	NextSeq  uint64
	Limit    string // the resource limit that ended it, if any
}

// procMsg is the closed set of requests a process actor accepts.
type procMsg interface{ isProcMsg() }

type readMsg struct {
	after    uint64
	maxBytes int // 0: unlimited
	wait     time.Duration
	reply    chan<- ReadReply
}
type writeMsg struct {
	data    []byte
	writeID string // "" means none
	reply   chan<- WriteResult
}
type closeStdinMsg struct{ reply chan<- error }
type terminateMsg struct {
	grace time.Duration // 0: SIGKILL at once
	reply chan<- bool
}
type signalMsg struct {
	sig   syscall.Signal
	reply chan<- error
}
type resizeMsg struct {
	rows, cols uint16
	reply      chan<- error
}
type infoMsg struct{ reply chan<- ProcessInfo }
type attachMsg struct {
	sub   Subscriber
	reply chan<- uint64
}
type discardMsg struct{}
type subscribeMsg struct {
	after    uint64
	capacity int
	reply    chan<- Subscription
}

func (readMsg) isProcMsg()       {}
func (writeMsg) isProcMsg()      {}
func (closeStdinMsg) isProcMsg() {}
func (terminateMsg) isProcMsg()  {}
func (signalMsg) isProcMsg()     {}
func (resizeMsg) isProcMsg()     {}
func (infoMsg) isProcMsg()       {}
func (attachMsg) isProcMsg()     {}
func (discardMsg) isProcMsg()    {}
func (subscribeMsg) isProcMsg()  {}

// WriteResult is the reply to a write: a status, or an error when writing
// to the child's stdin failed.
type WriteResult struct {
	Status WriteStatus
	Err    error
}

// fact is the closed set of things helper goroutines report.
type fact interface{ isFact() }

// outputReadMsg: a reader goroutine read data from a stream.
type outputReadMsg struct {
	stream Stream
	data   []byte
}

// streamEndedMsg: a stream reached EOF (or an error, or was closed).
type streamEndedMsg struct {
	stream Stream
	err    error
}

func (outputReadMsg) isFact()  {}
func (streamEndedMsg) isFact() {}

type stdinOp struct {
	data  []byte
	close bool
	reply chan<- WriteResult // for writes
	done  chan<- error       // for close
}

type pendingRead struct {
	after    uint64
	maxBytes int
	deadline time.Time
	reply    chan<- ReadReply
}

type subscription struct {
	Subscriber
	cursor        uint64 // next seq to deliver
	pendingBytes  int    // bytes of retained output with seq >= cursor
	pendingChunks int
}

// process is the process actor.
//
// Immutable after construction: id, argv, tty, pid, sess, cfg, log and the
// channels. Owned by run (and only touched from its goroutine): every other
// field. Shared: nothing; helpers (readers, waiter, stdin writer) only send
// facts on facts/exitCh or use sess through the methods documented on
// Session.
type process struct {
	id   string
	argv []string
	tty  bool
	pid  int
	sess Session
	cfg  ProcConfig
	log  *zap.Logger

	mbox    chan procMsg
	facts   chan fact
	exitCh  chan int // capacity 1: the waiter never blocks
	stdinCh chan stdinOp
	done    chan struct{}
	closedC chan struct{} // closed by run when the process is closed (closeClosedC)
	final   *finalState   // written by run once, before closedC is closed

	closedCDone bool // closedC has been closed

	nextSeq     uint64
	ring        *Ring
	bp          backpressure // time output was held back for the subscriber
	readSize    int
	openStreams int
	exitHeld    bool // an exit was reported and waits (up to exitHold) for the streams
	heldCode    int
	heldUntil   time.Time
	exited      bool
	exitCode    int
	limit       string // the resource limit that ended it, if any
	exitSeq     uint64
	closed      bool
	closedSeq   uint64
	sub         *subscription
	listeners   []chan Event // lag-mode subscribers; run closes each when it lags or the stream ends
	polls       []*pendingRead
	stdinClosed bool
	stdinQueue  []stdinOp
	writeIDs    map[string]struct{}
	writeIDFIFO []string
	terminating bool
	discard     bool
	stopping    bool
	killAt      time.Time
	timeoutAt   time.Time // Spec.Timeout's deadline
	timedOut    bool
	drainAt     time.Time
	expireAt    time.Time // retention's end: set once the ending reached every subscriber
	timer       *time.Timer
	timerAt     time.Time
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

	metrics Metrics // set by NewSupervisor from Config.Metrics; never nil there
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
}

// finalState: exitCode and limit are written by the process actor before
// it closes closedC and never after, so reading them after <-closedC needs
// no lock; failure is set once, after a recovered panic (before closedC, if
// that was still open, and before done are closed), and read at any time.
type finalState struct {
	exitCode int
	limit    string
	failure  atomic.Pointer[ProcessFailedError]
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

// Terminate kills the process group (grace 0: SIGKILL now; otherwise
// SIGTERM, or SIGHUP for a PTY, then SIGKILL after grace). It reports
// whether the process was still running.
func (r *ProcessRef) Terminate(ctx context.Context, grace time.Duration) (bool, error) {
	return ask(ctx, r.mbox, r.done, func(c chan<- bool) procMsg { return terminateMsg{grace: grace, reply: c} })
}

// Signal sends sig to the process group of a running process.
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

// Discard terminates the process (SIGKILL) if it runs and lets the actor
// exit as soon as it is closed instead of retaining it.
func (r *ProcessRef) Discard(ctx context.Context) error {
	return send(ctx, r.mbox, procMsg(discardMsg{}), r.done)
}

// newProcess builds the actor around a started session and starts its
// goroutines (tracked by wg). stop begins a graceful stop, kill a forced one.
func newProcess(id string, argv []string, tty bool, sess Session, cfg ProcConfig, log *zap.Logger, sub *Subscriber) (*process, *ProcessRef) {
	p := &process{
		id:       id,
		argv:     argv,
		tty:      tty,
		pid:      sess.Pid(),
		sess:     sess,
		cfg:      cfg,
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
	}
	ref := &ProcessRef{id: id, pid: p.pid, argv: argv, tty: tty, mbox: p.mbox, done: p.done, closedC: p.closedC, final: p.final}
	return p, ref
}

// startHelpers starts the reader goroutines, the waiter and the stdin
// writer. Each ends on its own: readers at EOF/close, the waiter after the
// reap, the writer when the actor is done.
func (p *process) startHelpers(wg interface{ Go(func()) }) {
	for i, st := range p.sess.Streams() {
		r, st := p.sess.Output(i), st
		wg.Go(func() { p.readLoop(st, r) })
	}
	wg.Go(func() { p.exitCh <- p.sess.Wait() })
	if p.sess.HasStdin() {
		wg.Go(p.stdinLoop)
	}
}

func (p *process) readLoop(st Stream, r Reader) {
	cr, ok := r.(ChunkReader)
	if !ok {
		cr = &bufferedChunks{r: r, buf: make([]byte, p.readSize)}
	}
	for {
		data, err := cr.ReadChunk(p.readSize)
		if len(data) > 0 {
			select {
			case p.facts <- outputReadMsg{stream: st, data: data}:
			case <-p.done:
				return
			}
		}
		if err != nil {
			select {
			case p.facts <- streamEndedMsg{stream: st, err: err}:
			case <-p.done:
			}
			return
		}
	}
}

// bufferedChunks adapts a plain Reader (test fakes) to ChunkReader.
type bufferedChunks struct {
	r   Reader
	buf []byte
}

func (b *bufferedChunks) ReadChunk(max int) ([]byte, error) {
	n, err := b.r.Read(b.buf[:min(max, len(b.buf))])
	if n > 0 {
		return append([]byte(nil), b.buf[:n]...), nil
	}
	return nil, err
}

func (p *process) stdinLoop() {
	for {
		select {
		case op := <-p.stdinCh:
			if op.close {
				op.done <- p.sess.CloseStdin()
				continue
			}
			if err := p.sess.Write(op.data); err != nil {
				op.reply <- WriteResult{Err: fmt.Errorf("stdin failure: %w", err)}
			} else {
				op.reply <- WriteResult{Status: WriteAccepted}
			}
		case <-p.done:
			if !p.tty {
				_ = p.sess.CloseStdin() // release the pipe's write end
			}
			return
		}
	}
}

// run is the actor loop. stop starts a graceful stop (SIGTERM, SIGKILL
// after the shutdown grace), kill a forced one; either way run returns
// once the process is closed.
func (p *process) run(stop, kill <-chan struct{}) {
	defer close(p.done)
	defer p.sess.Release()
	defer p.endMetrics()
	defer p.recoverPanic()
	p.timer = time.NewTimer(time.Hour)
	p.timer.Stop()
	defer p.timer.Stop()
	for {
		if p.finished(time.Now()) {
			return
		}
		p.rearm()

		var outCh chan<- Event
		var ev Event
		var subDone <-chan struct{}
		if p.sub != nil {
			subDone = p.sub.Done
			if e, ok := p.eventAt(p.sub.cursor); ok {
				outCh, ev = p.sub.Out, e
			}
		}
		var factsCh <-chan fact
		if p.canConsume() {
			factsCh = p.facts
		}
		p.bp.update(factsCh == nil, p.cfg.metrics)
		var stdinCh chan<- stdinOp
		var op stdinOp
		if len(p.stdinQueue) > 0 {
			stdinCh, op = p.stdinCh, p.stdinQueue[0]
		}
		if p.stopping {
			stop = nil
		}

		select {
		case m := <-p.mbox:
			p.handle(m)
		case f := <-factsCh:
			p.handleFact(f)
		case code := <-p.exitCh:
			p.exitHeld, p.heldCode, p.heldUntil = true, code, time.Now().Add(exitHold)
			if p.openStreams == 0 {
				p.releaseExit()
			}
		case outCh <- ev:
			p.delivered(ev)
		case <-subDone:
			p.log.Debug("subscriber lost; output is retained for process/read")
			p.sub = nil // its connection ended: the connection's latched cause is the reason
		case stdinCh <- op:
			p.stdinQueue[0] = stdinOp{}
			p.stdinQueue = p.stdinQueue[1:]
		case <-p.timer.C:
			p.timerAt = time.Time{}
			p.onTimer(time.Now())
		case <-stop:
			p.stopping = true
			if !p.closed {
				// The whole group goes, including descendants of a leader
				// that already exited but left them holding the output.
				p.startTerminate(p.cfg.ShutdownGrace)
				if p.reaped() {
					p.forceDrain()
				}
			}
		case <-kill:
			kill = nil
			p.stopping = true
			p.terminating = true
			_ = p.sess.Signal(syscall.SIGKILL)
			p.killAt = time.Time{} // done now: nothing waits for a grace any more
			p.forceDrain()
			p.dropSubscriber("supervisor killed")
		}
	}
}

// finished reports whether the actor may end. It never ends before the
// process is closed and the ending (exited, closed) was handed to its
// subscriber, or the subscriber was dropped with a logged reason. From that
// moment the closed-retention time runs (zero: none); the actor ends when it
// is over, or at once when nobody can read the process any more (discard,
// stop) and no group kill is pending.
func (p *process) finished(now time.Time) bool {
	if !p.closed || !p.endingDelivered() {
		return false
	}
	if p.expireAt.IsZero() {
		p.expireAt = now.Add(max(p.cfg.ClosedRetention, 0))
	}
	if (p.discard || p.stopping) && p.killAt.IsZero() {
		return true // (a pending group kill is carried out first)
	}
	if !now.Before(p.expireAt) {
		p.log.Debug("closed process retention ended")
		p.killPending()
		return true
	}
	return false
}

// endingDelivered reports whether the subscriber, if any, has been handed
// the closed event (and with it every earlier one).
func (p *process) endingDelivered() bool {
	return p.sub == nil || (p.closed && p.sub.cursor > p.closedSeq)
}

// dropSubscriber forgets the subscriber, logging why when it had not been
// handed the ending yet.
func (p *process) dropSubscriber(reason string) {
	if p.sub == nil {
		return
	}
	if !p.endingDelivered() {
		p.log.Info("subscriber dropped before it was handed the process's ending",
			zap.String("reason", reason), zap.Uint64("cursor", p.sub.cursor), zap.Uint64("next_seq", p.nextSeq))
	}
	p.sub = nil
}

// canConsume reports whether the actor may take more output: always when no
// subscriber is attached (old output is evicted), and otherwise only while
// the next read cannot make retention evict something the subscriber has
// not been given.
func (p *process) canConsume() bool {
	if p.sub == nil {
		return true
	}
	return p.sub.pendingBytes+p.readSize <= p.ring.MaxBytes() && p.sub.pendingChunks+1 <= p.ring.MaxChunks()
}

// eventAt returns the event with the given seq, if it exists yet.
func (p *process) eventAt(seq uint64) (Event, bool) {
	if seq >= p.nextSeq {
		return Event{}, false
	}
	switch {
	case p.exited && seq == p.exitSeq:
		return Event{ProcessID: p.id, Kind: EventExited, Seq: seq, ExitCode: p.exitCode, Limit: p.limit}, true
	case p.closed && seq == p.closedSeq:
		return Event{ProcessID: p.id, Kind: EventClosed, Seq: seq}, true
	}
	c, ok := p.ring.Get(seq)
	if !ok {
		// Unreachable while canConsume holds; reported, never silent.
		p.log.Error("subscriber cursor points at evicted output", zap.Uint64("seq", seq))
		p.sub.cursor = max(seq+1, p.ring.FirstSeq())
		return Event{}, false
	}
	return Event{ProcessID: p.id, Kind: EventOutput, Seq: seq, Stream: c.Stream, Data: c.Data}, true
}

func (p *process) delivered(ev Event) {
	p.sub.cursor = ev.Seq + 1
	if ev.Kind == EventOutput {
		p.sub.pendingBytes -= len(ev.Data)
		p.sub.pendingChunks--
	}
}

func (p *process) handle(m procMsg) {
	runTestHook(&hookProcessRequest, p.id)
	switch m := m.(type) {
	case readMsg:
		if m.wait <= 0 || p.readReady(m.after) {
			m.reply <- p.readNow(m.after, m.maxBytes)
			return
		}
		p.polls = append(p.polls, &pendingRead{after: m.after, maxBytes: m.maxBytes, deadline: time.Now().Add(m.wait), reply: m.reply})
	case writeMsg:
		if m.writeID != "" {
			if _, dup := p.writeIDs[m.writeID]; dup {
				m.reply <- WriteResult{Status: WriteAccepted}
				return
			}
		}
		if p.stdinClosed || p.closed {
			m.reply <- WriteResult{Status: WriteStdinClosed}
			return
		}
		if m.writeID != "" {
			p.rememberWriteID(m.writeID)
		}
		p.queueStdin(stdinOp{data: m.data, reply: m.reply})
	case closeStdinMsg:
		if p.stdinClosed {
			m.reply <- nil
			return
		}
		p.stdinClosed = true
		p.queueStdin(stdinOp{close: true, done: m.reply})
	case terminateMsg:
		if p.closed {
			m.reply <- false
			return
		}
		if p.reaped() {
			// Kill what is left of the group (descendants holding the
			// output open) and close the streams promptly.
			p.terminating = true
			_ = p.sess.Signal(syscall.SIGKILL)
			p.forceDrain()
			m.reply <- false
			return
		}
		p.startTerminate(m.grace)
		m.reply <- true
	case signalMsg:
		if p.reaped() {
			m.reply <- nil
			return
		}
		m.reply <- p.sess.Signal(m.sig)
	case resizeMsg:
		if !p.tty {
			m.reply <- ErrNotPTY
			return
		}
		if p.closed {
			m.reply <- nil
			return
		}
		m.reply <- p.sess.Resize(m.rows, m.cols)
	case infoMsg:
		m.reply <- p.info()
	case attachMsg:
		p.sub = &subscription{Subscriber: m.sub, cursor: p.nextSeq}
		m.reply <- p.nextSeq
	case subscribeMsg:
		live := make(chan Event, m.capacity)
		if p.closed {
			close(live)
		} else {
			p.listeners = append(p.listeners, live)
		}
		m.reply <- Subscription{History: p.historyAfter(m.after), Live: live}
	case discardMsg:
		p.discard = true
		p.killPending()
		if !p.reaped() {
			p.startTerminate(0)
		} else if !p.closed {
			_ = p.sess.Signal(syscall.SIGKILL)
			p.forceDrain()
		}
	}
}

func (p *process) queueStdin(op stdinOp) {
	if len(p.stdinQueue) == 0 {
		select {
		case p.stdinCh <- op:
			return
		default:
		}
	}
	p.stdinQueue = append(p.stdinQueue, op)
}

func (p *process) rememberWriteID(id string) {
	p.writeIDs[id] = struct{}{}
	p.writeIDFIFO = append(p.writeIDFIFO, id)
	if len(p.writeIDFIFO) > writeIDMemory {
		delete(p.writeIDs, p.writeIDFIFO[0])
		p.writeIDFIFO = p.writeIDFIFO[1:]
	}
}

// startTerminate begins termination of a running process.
func (p *process) startTerminate(grace time.Duration) {
	p.terminating = true
	if grace <= 0 {
		_ = p.sess.Signal(syscall.SIGKILL)
		p.killAt = time.Time{}
		return
	}
	sig := syscall.SIGTERM
	if p.tty {
		sig = syscall.SIGHUP
	}
	_ = p.sess.Signal(sig)
	if at := time.Now().Add(grace); p.killAt.IsZero() || at.Before(p.killAt) {
		p.killAt = at
	}
}

// forceDrain schedules the forced end of the output streams.
func (p *process) forceDrain() {
	if p.drainAt.IsZero() {
		p.drainAt = time.Now().Add(p.cfg.DrainAfterTerminate)
	}
}

func (p *process) handleFact(f fact) {
	switch f := f.(type) {
	case outputReadMsg:
		seq := p.nextSeq
		p.nextSeq++
		before := p.ring.Bytes()
		if n := p.ring.Append(OutputChunk{Seq: seq, Stream: f.stream, Data: f.data}); n > 0 {
			p.cfg.metrics.Evicted(n, before+len(f.data)-p.ring.Bytes())
		}
		p.cfg.metrics.OutputBytes(f.stream, len(f.data))
		if p.sub != nil {
			p.sub.pendingBytes += len(f.data)
			p.sub.pendingChunks++
		}
		p.publish(Event{ProcessID: p.id, Kind: EventOutput, Seq: seq, Stream: f.stream, Data: f.data})
		p.wakePolls()
	case streamEndedMsg:
		p.openStreams--
		if p.openStreams == 0 && p.exitHeld {
			p.releaseExit()
		}
		if f.err != nil && !errors.Is(f.err, io.EOF) && !isExpectedEnd(f.err) {
			p.log.Debug("output stream ended with error", zap.Stringer("stream", f.stream), zap.Error(f.err))
		}
		p.maybeClose()
	}
}

// isExpectedEnd: EIO is how a PTY master reports that the slave side is gone.
func isExpectedEnd(err error) bool {
	return errors.Is(err, syscall.EIO) || errors.Is(err, os.ErrClosed)
}

// killPending carries out a pending group kill at once (a terminate's grace
// that nobody will wait for: discard, kill, end of retention).
func (p *process) killPending() {
	if !p.killAt.IsZero() {
		p.killAt = time.Time{}
		_ = p.sess.Signal(syscall.SIGKILL)
	}
}

// reaped reports whether the child has exited (published or held).
func (p *process) reaped() bool { return p.exited || p.exitHeld }

// releaseExit publishes a held exit.
func (p *process) releaseExit() {
	p.exitHeld = false
	p.heldUntil = time.Time{}
	p.handleExit(p.heldCode)
}

func (p *process) handleExit(code int) {
	if p.timedOut {
		code = TimeoutExitCode
	}
	p.timeoutAt = time.Time{}
	p.exited = true
	p.exitCode = code
	p.limit = p.sess.Limit(code)
	p.cfg.metrics.ProcessExited(EndReason(p.limit, p.timedOut, p.terminating))
	p.exitSeq = p.nextSeq
	p.nextSeq++
	if !p.terminating {
		p.killAt = time.Time{}
	}
	p.log.Debug("process exited", zap.Int("exit_code", code))
	if p.terminating {
		// Whatever is left of the group goes too, and streams held open by
		// a descendant that left the group are closed after a short drain.
		_ = p.sess.Signal(syscall.SIGKILL)
		p.forceDrain()
	}
	p.publish(Event{ProcessID: p.id, Kind: EventExited, Seq: p.exitSeq, ExitCode: code, Limit: p.limit})
	p.wakePolls()
	p.maybeClose()
}

func (p *process) maybeClose() {
	if p.closed || !p.exited || p.openStreams > 0 {
		return
	}
	p.closed = true
	p.closedSeq = p.nextSeq
	p.nextSeq++
	p.drainAt = time.Time{}
	p.sess.CloseOutputs()
	if !p.tty && !p.stdinClosed {
		// The child is gone: release our end of its stdin after queued writes.
		p.stdinClosed = true
		p.queueStdin(stdinOp{close: true, done: make(chan error, 1)})
	}
	p.publish(Event{ProcessID: p.id, Kind: EventClosed, Seq: p.closedSeq})
	for _, l := range p.listeners {
		close(l)
	}
	p.listeners = nil
	p.final.exitCode = p.exitCode
	p.final.limit = p.limit
	p.closeClosedC()
	p.wakePolls()
}

// publish offers ev to every lag-mode listener without blocking; a full
// listener is closed and dropped (it lagged, and resubscribes from its seq).
func (p *process) publish(ev Event) {
	if len(p.listeners) == 0 {
		return
	}
	kept := p.listeners[:0]
	for _, l := range p.listeners {
		select {
		case l <- ev:
			kept = append(kept, l)
		default:
			close(l)
		}
	}
	clear(p.listeners[len(kept):])
	p.listeners = kept
}

// historyAfter returns the events with seq > after in seq order, with
// evicted output ranges as EventGap.
func (p *process) historyAfter(after uint64) []Event {
	var out []Event
	cur := after + 1
	emit := func(ev Event) {
		if ev.Seq > cur {
			out = append(out, Event{ProcessID: p.id, Kind: EventGap, Seq: cur, To: ev.Seq - 1})
		}
		out = append(out, ev)
		cur = ev.Seq + 1
	}
	chunks := p.ring.After(nil, after, 0)
	life := make([]Event, 0, 2)
	if p.exited && p.exitSeq > after {
		life = append(life, Event{ProcessID: p.id, Kind: EventExited, Seq: p.exitSeq, ExitCode: p.exitCode, Limit: p.limit})
	}
	if p.closed && p.closedSeq > after {
		life = append(life, Event{ProcessID: p.id, Kind: EventClosed, Seq: p.closedSeq})
	}
	for len(chunks) > 0 || len(life) > 0 {
		if len(life) == 0 || (len(chunks) > 0 && chunks[0].Seq < life[0].Seq) {
			c := chunks[0]
			chunks = chunks[1:]
			emit(Event{ProcessID: p.id, Kind: EventOutput, Seq: c.Seq, Stream: c.Stream, Data: c.Data})
		} else {
			emit(life[0])
			life = life[1:]
		}
	}
	if cur < p.nextSeq {
		out = append(out, Event{ProcessID: p.id, Kind: EventGap, Seq: cur, To: p.nextSeq - 1})
	}
	return out
}

func (p *process) readReady(after uint64) bool {
	return p.ring.index(after) < len(p.ring.chunks) || p.closed || (p.exited && p.exitSeq > after)
}

func (p *process) readNow(after uint64, maxBytes int) ReadReply {
	r := ReadReply{Exited: p.exited, ExitCode: p.exitCode, Closed: p.closed}
	r.Chunks = p.ring.After(nil, after, maxBytes)
	r.NextSeq = p.nextSeq
	if maxBytes > 0 && len(r.Chunks) > 0 {
		r.NextSeq = r.Chunks[len(r.Chunks)-1].Seq + 1
	}
	return r
}

func (p *process) wakePolls() {
	if len(p.polls) == 0 {
		return
	}
	kept := p.polls[:0]
	for _, pr := range p.polls {
		if p.readReady(pr.after) {
			pr.reply <- p.readNow(pr.after, pr.maxBytes)
			continue
		}
		kept = append(kept, pr)
	}
	clear(p.polls[len(kept):])
	p.polls = kept
}

func (p *process) onTimer(now time.Time) {
	if p.exitHeld && !now.Before(p.heldUntil) {
		p.releaseExit()
	}
	kept := p.polls[:0]
	for _, pr := range p.polls {
		if !now.Before(pr.deadline) {
			pr.reply <- p.readNow(pr.after, pr.maxBytes)
			continue
		}
		kept = append(kept, pr)
	}
	clear(p.polls[len(kept):])
	p.polls = kept
	if !p.killAt.IsZero() && !now.Before(p.killAt) {
		p.killAt = time.Time{}
		// The grace is over for the whole group, closed or not.
		p.log.Debug("grace elapsed; killing process group")
		_ = p.sess.Signal(syscall.SIGKILL)
	}
	if !p.timeoutAt.IsZero() && !now.Before(p.timeoutAt) {
		p.timeoutAt = time.Time{}
		if !p.reaped() {
			p.log.Debug("timeout elapsed; killing process group")
			p.timedOut = true
			p.startTerminate(0)
		}
	}
	if !p.drainAt.IsZero() && !now.Before(p.drainAt) {
		p.drainAt = time.Time{}
		if !p.closed {
			p.sess.CloseOutputs()
		}
	}
}

// rearm points the single timer at the earliest pending deadline.
func (p *process) rearm() {
	var next time.Time
	consider := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, pr := range p.polls {
		consider(pr.deadline)
	}
	consider(p.killAt)
	consider(p.heldUntil)
	consider(p.timeoutAt)
	consider(p.drainAt)
	consider(p.expireAt) // set only once closed and delivered
	if next.Equal(p.timerAt) {
		return
	}
	p.timer.Stop()
	select {
	case <-p.timer.C:
	default:
	}
	p.timerAt = next
	if !next.IsZero() {
		p.timer.Reset(time.Until(next))
	}
}

func (p *process) info() ProcessInfo {
	st := StateRunning
	switch {
	case p.closed:
		st = StateClosed
	case p.exited:
		st = StateExited
	}
	return ProcessInfo{ID: p.id, Pid: p.pid, Argv: p.argv, TTY: p.tty, State: st, ExitCode: p.exitCode, NextSeq: p.nextSeq, Limit: p.limit}
}
