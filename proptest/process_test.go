package proptest

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"pgregory.net/rapid"

	"github.com/runtimed/runtimed/actors"
	"github.com/runtimed/runtimed/actors/clock/clocktest"
	"github.com/runtimed/runtimed/actors/osproc/osproctest"
)

// stepWait bounds every wait for the actor to absorb a step.
const stepWait = 5 * time.Second

// killWait bounds Supervisor.Wait after Kill for fake sessions: Kill is
// immediate, and the forced drain after it is moved past on the clock.
const killWait = 2 * time.Second

// newFakeSession is the fake session the model drives: the stdin it
// records is always there; a TTY has one stream, the PTY.
func newFakeSession(tty bool) *osproctest.Session {
	return osproctest.New(osproctest.Options{TTY: tty, Stdin: true})
}

// subRec is one subscriber the test attached, and what it was given.
type subRec struct {
	name  string
	ch    chan actors.Event
	done  chan struct{}
	start uint64 // seq of the first event it may be given
	got   []actors.Event
}

func (s *subRec) take() bool {
	select {
	case ev := <-s.ch:
		s.got = append(s.got, ev)
		return true
	default:
		return false
	}
}

// pollRec is an outstanding long poll.
type pollRec struct {
	after    uint64
	maxBytes int
	ch       <-chan actors.ReadReply
	want     *actors.ReadReply // set by the model when it must have been answered
}

// lagRec is a lag-mode subscription (ProcessRef.Subscribe) and how far
// its live queue has been read.
type lagRec struct {
	live      <-chan actors.Event
	next      uint64 // seq of the next live event expected
	capacity  int
	ended     bool // live was closed
	gotClosed bool // live delivered the closed event
}

// procModel is the model of one process actor, per PROTOCOL.md section 4.
type procModel struct {
	nextSeq     uint64
	history     []actors.Event // history[seq-1]
	retain      *retainModel
	streamOpen  []bool
	exitSent    bool
	exited      bool
	exitCode    int
	exitSeq     uint64
	closed      bool
	closedSeq   uint64
	terminating bool
	stdinClosed bool
	writeIDs    map[string]bool
	written     [][]byte
	produced    map[actors.Stream][]byte
	signals     []syscall.Signal
	poll        *pollRec
	// What the client has read (actors/process_output.go, unreadFrom).
	acked       uint64 // the highest afterSeq of a read, at most nextSeq-1
	detached    bool   // the subscriber's connection ended, none attached since
	backlogFrom uint64 // after an attach: the backlog's first unread seq (0: none)
	backlogTo   uint64 // the attach's first live seq
}

// ack: a read (or long poll) with afterSeq after.
func (m *procModel) ack(after uint64) {
	m.acked = max(m.acked, min(after, m.nextSeq-1))
	if m.backlogFrom != 0 {
		m.backlogFrom = max(m.backlogFrom, m.acked+1)
		if m.backlogFrom >= m.backlogTo {
			m.backlogFrom = 0
		}
	}
}

// held reports whether the actor may refuse the next output fact because
// retention is full of output the client has not read (detached: past
// acked; attached after an attach: the backlog). It may say so when the
// actor would in fact take it (a hold that ended by time, a drain that
// cut the streams): the harness then only skips output.
func (m *procModel) held(attached bool, cfg actors.ProcConfig) bool {
	var floor uint64
	switch {
	case attached && m.backlogFrom != 0:
		floor = m.backlogFrom
	case !attached && m.detached:
		floor = m.acked + 1
	default:
		return false // attached: the subscriber's cursor governs (unstick)
	}
	bytes, chunks := 0, 0
	for _, c := range m.retain.chunks {
		if c.Seq >= floor {
			bytes += len(c.Data)
			chunks++
		}
	}
	readSize := min(64<<10, cfg.RetainBytes)
	return bytes+readSize > cfg.RetainBytes || chunks+1 > cfg.RetainChunks
}

func (m *procModel) allEnded() bool { return !slices.Contains(m.streamOpen, true) }

func (m *procModel) state() actors.ProcessState {
	switch {
	case m.closed:
		return actors.StateClosed
	case m.exited:
		return actors.StateExited
	}
	return actors.StateRunning
}

// read is PROTOCOL.md's process/read answer for the model's state.
func (m *procModel) read(after uint64, maxBytes int) actors.ReadReply {
	r := actors.ReadReply{Chunks: m.retain.after(after, maxBytes), NextSeq: m.nextSeq, Exited: m.exited, Closed: m.closed}
	if m.exited {
		r.ExitCode = m.exitCode
	}
	if maxBytes > 0 && len(r.Chunks) > 0 {
		r.NextSeq = r.Chunks[len(r.Chunks)-1].Seq + 1
	}
	return r
}

// ready is PROTOCOL.md's long-poll rule: chunks to return, closed, or an
// exit newer than after.
func (m *procModel) ready(after uint64) bool {
	return len(m.retain.after(after, 0)) > 0 || m.closed || (m.exited && m.exitSeq > after)
}

// emit appends one event to the history; an outstanding long poll that
// becomes ready is answered with the state at this very event.
func (m *procModel) emit(ev actors.Event) {
	ev.Seq = m.nextSeq
	m.nextSeq++
	m.history = append(m.history, ev)
	switch ev.Kind {
	case actors.EventOutput:
		m.retain.append(actors.OutputChunk{Seq: ev.Seq, Stream: ev.Stream, Data: ev.Data})
		m.produced[ev.Stream] = append(m.produced[ev.Stream], ev.Data...)
	case actors.EventExited:
		m.exited, m.exitSeq = true, ev.Seq
	case actors.EventClosed:
		m.closed, m.closedSeq = true, ev.Seq
	}
	if p := m.poll; p != nil && p.want == nil && m.ready(p.after) {
		w := m.read(p.after, p.maxBytes)
		p.want = &w
	}
}

// historyAfter is what Subscribe must return as history: the events with
// seq > after, with each run of evicted output as one EventGap.
func (m *procModel) historyAfter(after uint64) []actors.Event {
	var out []actors.Event
	for seq := after + 1; seq < m.nextSeq; seq++ {
		ev := m.history[seq-1]
		ev.Seq = seq
		if ev.Kind == actors.EventOutput {
			if _, ok := m.retain.get(seq); !ok {
				if n := len(out); n > 0 && out[n-1].Kind == actors.EventGap && out[n-1].To == seq-1 {
					out[n-1].To = seq
				} else {
					out = append(out, actors.Event{Kind: actors.EventGap, Seq: seq, To: seq})
				}
				continue
			}
		}
		out = append(out, ev)
	}
	return out
}

// maybeClose emits closed once the exit and the end of every stream are in.
func (m *procModel) maybeClose() {
	if m.exited && !m.closed && m.allEnded() {
		m.emit(actors.Event{Kind: actors.EventClosed})
	}
}

// forceEnd models the forced end of the streams after a terminate.
func (m *procModel) forceEnd() {
	for i := range m.streamOpen {
		m.streamOpen[i] = false
	}
	m.maybeClose()
}

func sameReply(got, want actors.ReadReply) error {
	if err := sameChunks(got.Chunks, want.Chunks); err != nil {
		return err
	}
	if got.NextSeq != want.NextSeq || got.Exited != want.Exited || got.Closed != want.Closed || (want.Exited && got.ExitCode != want.ExitCode) {
		return fmt.Errorf("got nextSeq %d exited %v (%d) closed %v, want nextSeq %d exited %v (%d) closed %v",
			got.NextSeq, got.Exited, got.ExitCode, got.Closed, want.NextSeq, want.Exited, want.ExitCode, want.Closed)
	}
	return nil
}

func sameEvent(got, want actors.Event) bool {
	return got.Kind == want.Kind && got.Seq == want.Seq && got.Stream == want.Stream &&
		bytes.Equal(got.Data, want.Data) && got.ExitCode == want.ExitCode && got.To == want.To
}

// procHarness runs one process actor under its own supervisor, on a
// clock the harness moves.
type procHarness struct {
	t       *rapid.T
	clk     *clocktest.Clock
	sup     *actors.Supervisor
	fake    *osproctest.Session
	tty     bool
	ref     *actors.ProcessRef
	m       *procModel
	subs    []*subRec
	cur     *subRec // the attached subscriber, if any
	cap     int
	cfg     actors.ProcConfig
	nsubs   int
	stopped bool
	lags    []*lagRec
}

func (h *procHarness) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), stepWait)
}

func (h *procHarness) newSub(start uint64) *subRec {
	h.nsubs++
	s := &subRec{name: fmt.Sprintf("sub%d", h.nsubs), ch: make(chan actors.Event, h.cap), done: make(chan struct{}), start: start}
	h.subs = append(h.subs, s)
	return s
}

// unstick drains one event from the attached subscriber when its queue is
// full: the actor waits for room before it takes more output (lossless
// delivery), so a waiting step must make room to progress.
func (h *procHarness) unstick() {
	if h.cur != nil && len(h.cur.ch) == cap(h.cur.ch) {
		h.cur.take()
	}
}

func (h *procHarness) info() actors.ProcessInfo {
	ctx, cancel := h.ctx()
	defer cancel()
	info, err := h.ref.Info(ctx)
	if err != nil {
		h.t.Fatalf("Info: %v", err)
	}
	return info
}

// await waits until the actor has absorbed every fact the model has: same
// next seq and state. Where the actor waits for a deadline to get there
// (an exit held while streams are open, the drain after a kill), the
// clock is moved to it instead of waiting. An outstanding long poll the
// model says was answered must have its answer, equal to the model's.
func (h *procHarness) await(what string) {
	var last actors.ProcessInfo
	ok := waitFor(stepWait, func() bool {
		h.unstick()
		last = h.info()
		if last.NextSeq == h.m.nextSeq && last.State == h.m.state() {
			return true
		}
		h.clk.AdvanceWithin(h.cfg.DrainAfterTerminate)
		return false
	})
	if !ok {
		h.t.Fatalf("after %s: actor at nextSeq %d state %v, model at nextSeq %d state %v", what, last.NextSeq, last.State, h.m.nextSeq, h.m.state())
	}
	h.checkPoll(what)
}

func (h *procHarness) checkPoll(what string) {
	p := h.m.poll
	if p == nil {
		return
	}
	if p.want == nil {
		select {
		case r := <-p.ch:
			h.t.Fatalf("after %s: long poll (after %d) answered early: %+v", what, p.after, r)
		default:
		}
		return
	}
	select {
	case r := <-p.ch:
		if err := sameReply(r, *p.want); err != nil {
			h.t.Fatalf("after %s: long poll (after %d, maxBytes %d): %v", what, p.after, p.maxBytes, err)
		}
		h.m.poll = nil
	default:
		h.t.Fatalf("after %s: long poll (after %d) not answered although ready", what, p.after)
	}
}

// checkSubs: every subscriber was given a gap-free run of the history from
// the seq it was attached at.
func (h *procHarness) checkSubs() {
	for _, s := range h.subs {
		for i, ev := range s.got {
			seq := s.start + uint64(i)
			if ev.Seq != seq {
				h.t.Fatalf("%s: event %d has seq %d, want %d (attached at %d)", s.name, i, ev.Seq, seq, s.start)
			}
			if seq == 0 || seq > uint64(len(h.m.history)) {
				h.t.Fatalf("%s: given seq %d, history ends at %d", s.name, seq, len(h.m.history))
			}
			want := h.m.history[seq-1]
			want.Seq = seq
			want.ProcessID = ev.ProcessID
			if !sameEvent(ev, want) {
				h.t.Fatalf("%s: seq %d: got %+v, want %+v", s.name, seq, ev, want)
			}
			if ev.ProcessID != "p" {
				h.t.Fatalf("%s: seq %d for process %q", s.name, seq, ev.ProcessID)
			}
		}
	}
}

func (h *procHarness) openStreams() []int {
	var open []int
	if h.m.exitSent && h.m.terminating {
		return nil // streams are being closed by force
	}
	for i, o := range h.m.streamOpen {
		if o {
			open = append(open, i)
		}
	}
	return open
}

func (h *procHarness) output(t *rapid.T) {
	open := h.openStreams()
	if len(open) == 0 {
		t.Skip("no open stream")
	}
	if h.m.held(h.cur != nil, h.cfg) {
		t.Skip("unread output fills retention: the actor takes no more")
	}
	i := rapid.SampledFrom(open).Draw(t, "stream")
	data := rapid.SliceOfN(rapid.Byte(), 1, h.cfg.RetainBytes).Draw(t, "data")
	out := h.fake.Out(i)
	sent := waitFor(stepWait, func() bool {
		h.unstick()
		timer := time.NewTimer(time.Millisecond)
		defer timer.Stop()
		select {
		case out <- data:
			return true
		case <-timer.C:
			return false
		}
	})
	if !sent {
		t.Fatalf("reader of %v never took %d bytes", h.fake.Streams()[i], len(data))
	}
	h.m.emit(actors.Event{Kind: actors.EventOutput, Stream: h.fake.Streams()[i], Data: data})
	h.await("output")
}

func (h *procHarness) endStream(t *rapid.T) {
	open := h.openStreams()
	if len(open) == 0 {
		t.Skip("no open stream")
	}
	if h.m.held(h.cur != nil, h.cfg) {
		t.Skip("unread output fills retention: the actor takes no more")
	}
	i := rapid.SampledFrom(open).Draw(t, "stream")
	h.fake.End(i)
	h.m.streamOpen[i] = false
	h.m.maybeClose()
	h.await("stream end")
}

func (h *procHarness) exit(code int) {
	h.m.exitSent = true
	h.fake.Exit(code)
	h.m.exitCode = code
	h.m.emit(actors.Event{Kind: actors.EventExited, ExitCode: code})
	if h.m.terminating {
		h.m.signals = append(h.m.signals, syscall.SIGKILL)
		h.m.forceEnd()
	} else {
		h.m.maybeClose()
	}
	h.await("exit")
}

func (h *procHarness) terminate(t *rapid.T) {
	grace := rapid.SampledFrom([]time.Duration{0, time.Hour}).Draw(t, "grace")
	ctx, cancel := h.ctx()
	defer cancel()
	running, err := h.ref.Terminate(ctx, grace)
	if err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	want := !h.m.exited && !h.m.closed
	if running != want {
		t.Fatalf("Terminate: running=%v, want %v", running, want)
	}
	switch {
	case h.m.closed:
	case h.m.exited:
		h.m.signals = append(h.m.signals, syscall.SIGKILL)
		h.m.terminating = true
		h.m.forceEnd()
	default:
		h.m.terminating = true
		switch {
		case grace == 0:
			h.m.signals = append(h.m.signals, syscall.SIGKILL)
		case h.tty:
			h.m.signals = append(h.m.signals, syscall.SIGHUP)
		default:
			h.m.signals = append(h.m.signals, syscall.SIGTERM)
		}
	}
	h.await("terminate")
}

func (h *procHarness) write(t *rapid.T) {
	data := rapid.SliceOfN(rapid.Byte(), 0, 8).Draw(t, "data")
	id := rapid.SampledFrom([]string{"", "", "w1", "w2", "w3"}).Draw(t, "writeId")
	ctx, cancel := h.ctx()
	defer cancel()
	res, err := h.ref.Write(ctx, data, id)
	if err != nil || res.Err != nil {
		t.Fatalf("Write: %v %v", err, res.Err)
	}
	want := actors.WriteAccepted
	switch {
	case id != "" && h.m.writeIDs[id]:
		// a repeated writeId answers accepted and writes nothing
	case h.m.stdinClosed || h.m.closed:
		want = actors.WriteStdinClosed
	default:
		if id != "" {
			h.m.writeIDs[id] = true
		}
		h.m.written = append(h.m.written, bytes.Clone(data))
	}
	if res.Status != want {
		t.Fatalf("Write(%q, writeId %q): status %v, want %v", data, id, res.Status, want)
	}
}

func (h *procHarness) closeStdin(t *rapid.T) {
	ctx, cancel := h.ctx()
	defer cancel()
	if err := h.ref.CloseStdin(ctx); err != nil {
		t.Fatalf("CloseStdin: %v", err)
	}
	// A closed pipe process has had its stdin released by the actor already
	// (asynchronously), so only a first close of a live stdin is checked.
	already := h.m.stdinClosed || (h.m.closed && !h.tty)
	h.m.stdinClosed = true
	if closes := h.fake.StdinCloses(); !already && closes == 0 {
		t.Fatalf("CloseStdin answered before stdin was closed")
	}
}

func (h *procHarness) signal(t *rapid.T) {
	ctx, cancel := h.ctx()
	defer cancel()
	if err := h.ref.Signal(ctx, syscall.SIGINT); err != nil {
		t.Fatalf("Signal: %v", err)
	}
	if !h.m.exited {
		h.m.signals = append(h.m.signals, syscall.SIGINT)
	}
}

func (h *procHarness) read(t *rapid.T) {
	after := rapid.Uint64Range(0, h.m.nextSeq+1).Draw(t, "afterSeq")
	mb := rapid.IntRange(0, 2*h.cfg.RetainBytes).Draw(t, "maxBytes")
	ctx, cancel := h.ctx()
	defer cancel()
	got, err := h.ref.Read(ctx, after, mb, 0)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	h.m.ack(after)
	if err := sameReply(got, h.m.read(after, mb)); err != nil {
		t.Fatalf("Read(after %d, maxBytes %d): %v", after, mb, err)
	}
}

func (h *procHarness) longPoll(t *rapid.T) {
	if h.m.poll != nil {
		t.Skip("a long poll is outstanding")
	}
	lo := uint64(0)
	if h.m.nextSeq > 2 {
		lo = h.m.nextSeq - 2
	}
	after := rapid.Uint64Range(lo, h.m.nextSeq+1).Draw(t, "afterSeq")
	mb := rapid.IntRange(0, 2*h.cfg.RetainBytes).Draw(t, "maxBytes")
	ctx, cancel := h.ctx()
	defer cancel()
	ch, err := h.ref.ReadAsync(ctx, after, mb, time.Hour)
	if err != nil {
		t.Fatalf("ReadAsync: %v", err)
	}
	h.m.ack(after)
	p := &pollRec{after: after, maxBytes: mb, ch: ch}
	h.m.poll = p
	if h.m.ready(after) {
		w := h.m.read(after, mb)
		p.want = &w
		select {
		case r := <-ch:
			if err := sameReply(r, w); err != nil {
				t.Fatalf("ready long poll (after %d, maxBytes %d): %v", after, mb, err)
			}
			h.m.poll = nil
		case <-ctx.Done():
			t.Fatalf("ready long poll (after %d) not answered at once", after)
		}
	}
	h.checkPoll("long poll")
}

func (h *procHarness) drain(t *rapid.T) {
	if h.cur == nil {
		t.Skip("no subscriber")
	}
	n := rapid.IntRange(1, h.cap).Draw(t, "n")
	for range n {
		if !h.cur.take() {
			break
		}
	}
}

// endUnseen: a stream ended and the process is not closed, so the actor may
// not have taken the stream's end yet (nothing observable says so); a
// detach or attach now could make it hold that end behind unread output,
// which the model does not follow.
func (h *procHarness) endUnseen() bool {
	return slices.Contains(h.m.streamOpen, false) && !h.m.closed
}

func (h *procHarness) detach(t *rapid.T) {
	if h.cur == nil {
		t.Skip("no subscriber")
	}
	if h.endUnseen() {
		t.Skip("a stream's end may not be taken yet")
	}
	close(h.cur.done)
	h.cur = nil
	h.m.detached, h.m.backlogFrom = true, 0
}

func (h *procHarness) attach(t *rapid.T) {
	if h.endUnseen() {
		t.Skip("a stream's end may not be taken yet")
	}
	h.resume(t)
}

func (h *procHarness) resume(t *rapid.T) {
	s := h.newSub(0)
	ctx, cancel := h.ctx()
	defer cancel()
	start, err := h.ref.Attach(ctx, actors.Subscriber{Out: s.ch, Done: s.done})
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if start != h.m.nextSeq {
		t.Fatalf("Attach at seq %d, want the next unassigned seq %d", start, h.m.nextSeq)
	}
	s.start = start
	h.cur = s // a replaced subscriber is simply given nothing more
	// A resume: the output after acked is the backlog, held until read past.
	h.m.detached, h.m.backlogFrom = false, 0
	if h.m.acked+1 < start {
		h.m.backlogFrom, h.m.backlogTo = h.m.acked+1, start
	}
}

// subscribe: a lag-mode subscription's history is the model's suffix after
// its seq (evicted output as gaps) and its live queue continues it with no
// gap or duplicate.
func (h *procHarness) subscribe(t *rapid.T) {
	if len(h.lags) >= 4 {
		t.Skip("enough subscriptions")
	}
	// A subscriber resumes from a seq it has seen: at most nextSeq-1.
	after := rapid.Uint64Range(0, h.m.nextSeq-1).Draw(t, "afterSeq")
	capacity := rapid.IntRange(1, 3).Draw(t, "capacity")
	ctx, cancel := h.ctx()
	defer cancel()
	sub, err := h.ref.Subscribe(ctx, after, capacity)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	want := h.m.historyAfter(after)
	if len(sub.History) != len(want) {
		t.Fatalf("Subscribe(after %d): history of %d events %+v, want %d %+v", after, len(sub.History), sub.History, len(want), want)
	}
	for i := range want {
		want[i].ProcessID = sub.History[i].ProcessID
		if !sameEvent(sub.History[i], want[i]) || sub.History[i].ProcessID != "p" {
			t.Fatalf("Subscribe(after %d): history[%d] %+v, want %+v", after, i, sub.History[i], want[i])
		}
	}
	h.lags = append(h.lags, &lagRec{live: sub.Live, next: h.m.nextSeq, capacity: capacity})
}

// drainLags reads every live queue: each gives the next events of the
// history in order, and closes after the closed event, or early only if it
// lagged, which cannot happen with room for the (at most 2) events one
// step produces.
func (h *procHarness) drainLags(t *rapid.T) {
	for i, l := range h.lags {
	drain:
		for !l.ended {
			select {
			case ev, ok := <-l.live:
				if !ok {
					l.ended = true
					if !l.gotClosed && l.capacity >= 2 && !(h.m.closed && l.next > h.m.closedSeq) {
						t.Fatalf("subscription %d: live closed at seq %d without the closed event and without lagging", i, l.next)
					}
					continue
				}
				if l.gotClosed {
					t.Fatalf("subscription %d: event %+v after the closed event", i, ev)
				}
				if ev.Seq != l.next || ev.Seq > uint64(len(h.m.history)) {
					t.Fatalf("subscription %d: live event seq %d, want %d", i, ev.Seq, l.next)
				}
				want := h.m.history[ev.Seq-1]
				want.Seq, want.ProcessID = ev.Seq, ev.ProcessID
				if !sameEvent(ev, want) {
					t.Fatalf("subscription %d: live %+v, want %+v", i, ev, want)
				}
				l.next++
				l.gotClosed = ev.Kind == actors.EventClosed
			default:
				break drain
			}
		}
	}
}

func (h *procHarness) invariants(t *rapid.T) {
	info := h.info()
	if info.NextSeq != h.m.nextSeq || info.State != h.m.state() || info.Pid != 0 || info.ID != "p" {
		t.Fatalf("Info %+v, model nextSeq %d state %v", info, h.m.nextSeq, h.m.state())
	}
	if h.m.exited && info.ExitCode != h.m.exitCode {
		t.Fatalf("Info exit code %d, want %d", info.ExitCode, h.m.exitCode)
	}
	writes, signals := h.fake.Writes(), h.fake.Signals()
	if len(writes) != len(h.m.written) {
		t.Fatalf("stdin got %d writes %q, want %d %q", len(writes), writes, len(h.m.written), h.m.written)
	}
	for i := range writes {
		if !bytes.Equal(writes[i], h.m.written[i]) {
			t.Fatalf("stdin write %d: %q, want %q", i, writes[i], h.m.written[i])
		}
	}
	if !slices.Equal(signals, h.m.signals) {
		t.Fatalf("signals %v, want %v", signals, h.m.signals)
	}
	h.checkPoll("invariants")
	h.checkSubs()
	h.drainLags(t)
}

// finish ends the process (exit, every stream), then checks the whole
// history: gap-free seqs from 1, one exited, one closed with the highest
// seq, lossless delivery to the attached subscriber, and per-stream bytes.
func (h *procHarness) finish(t *rapid.T) {
	// A client that resumes and reads past everything lets the actor take
	// the rest of the output.
	if h.cur == nil && h.m.detached {
		h.resume(t)
	}
	if h.m.backlogFrom != 0 {
		ctx, cancel := h.ctx()
		_, err := h.ref.Read(ctx, h.m.nextSeq-1, 1, 0)
		cancel()
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		h.m.ack(h.m.nextSeq - 1)
	}
	if !h.m.exitSent {
		h.exit(0)
	}
	for i, open := range h.m.streamOpen {
		if open {
			h.fake.End(i)
			h.m.streamOpen[i] = false
			h.m.maybeClose()
			h.await("final stream end")
		}
	}
	if !h.m.closed {
		t.Fatalf("model not closed after exit and stream ends")
	}
	if h.cur != nil {
		s := h.cur
		if !waitFor(stepWait, func() bool {
			s.take()
			return s.start+uint64(len(s.got)) == h.m.nextSeq
		}) {
			t.Fatalf("%s (attached at %d) was given %d events, history has %d: delivery is not lossless", s.name, s.start, len(s.got), h.m.nextSeq-1)
		}
	}
	h.invariants(t)
	for i, l := range h.lags {
		if !l.ended {
			t.Fatalf("subscription %d: live queue still open after the process closed", i)
		}
	}

	var exits, closes int
	for i, ev := range h.m.history {
		switch ev.Kind {
		case actors.EventExited:
			exits++
		case actors.EventClosed:
			closes++
			if i != len(h.m.history)-1 {
				t.Fatalf("closed at seq %d is not the last event (%d)", i+1, len(h.m.history))
			}
		}
	}
	if exits != 1 || closes != 1 || h.m.exitSeq >= h.m.closedSeq {
		t.Fatalf("history has %d exited and %d closed (exit seq %d, closed seq %d)", exits, closes, h.m.exitSeq, h.m.closedSeq)
	}
	ctx, cancel := h.ctx()
	defer cancel()
	r, err := h.ref.Read(ctx, 0, 0, 0)
	if err != nil {
		t.Fatalf("final Read: %v", err)
	}
	if err := sameReply(r, h.m.read(0, 0)); err != nil {
		t.Fatalf("final Read: %v", err)
	}
	if r.NextSeq != h.m.closedSeq+1 {
		t.Fatalf("final nextSeq %d, closed seq %d", r.NextSeq, h.m.closedSeq)
	}
	// A subscriber attached from the start and never detached was given
	// every byte the fake produced, per stream, in order.
	first := h.subs[0]
	if first == h.cur {
		out := map[actors.Stream][]byte{}
		for _, ev := range first.got {
			if ev.Kind == actors.EventOutput {
				out[ev.Stream] = append(out[ev.Stream], ev.Data...)
			}
		}
		for _, st := range h.fake.Streams() {
			if !bytes.Equal(out[st], h.m.produced[st]) {
				t.Fatalf("%v: subscriber got %q, the child wrote %q", st, out[st], h.m.produced[st])
			}
		}
	}
}

// stop kills the supervisor and waits for every goroutine it tracks; the
// fake's exit and stream ends are released and every subscriber is
// detached so the actor can close (delivery is lossless: an attached
// subscriber that does not drain holds the actor, even after Kill).
func (h *procHarness) stop(t *rapid.T) {
	if h.stopped {
		return
	}
	h.stopped = true
	for _, s := range h.subs {
		select {
		case <-s.done:
		default:
			close(s.done)
		}
	}
	h.sup.Kill()
	if !h.m.exitSent {
		h.m.exitSent = true
		h.fake.Exit(137)
	}
	for i := range h.fake.Streams() {
		h.fake.End(i)
	}
	stopped := waitFor(killWait, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		if h.sup.Wait(ctx) == nil {
			return true
		}
		h.clk.AdvanceWithin(h.cfg.DrainAfterTerminate) // a held exit, a drain
		return false
	})
	if !stopped {
		t.Errorf("supervisor did not stop within %v of Kill", killWait)
	}
}

// TestProcessActorModel: for any interleaving of output, stream ends, exit,
// terminate, signals, stdin writes (with repeated writeIds), reads, long
// polls and subscriber drains, detaches and attaches, the process actor
// assigns seqs 1, 2, 3, ... to output, exited and closed; emits exactly one
// exited and one closed, closed last and only after the exit and every
// stream end; answers reads with the model's retained suffix and PROTOCOL.md's
// nextSeq rule; gives every subscriber a gap-free run of the same history,
// losslessly while attached (lag-mode subscriptions: history with evicted
// output as gaps, then live events); writes each writeId at most once; and
// stops at once on Supervisor.Kill.
func TestProcessActorModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := actors.ProcConfig{
			RetainBytes:         rapid.IntRange(4, 48).Draw(t, "retainBytes"),
			RetainChunks:        rapid.IntRange(1, 6).Draw(t, "retainChunks"),
			ClosedRetention:     time.Minute,
			DrainAfterTerminate: 50 * time.Millisecond,
			ShutdownGrace:       time.Second,
			Clock:               clocktest.New(),
		}
		tty := rapid.Bool().Draw(t, "tty")
		h := &procHarness{t: t, cfg: cfg, clk: cfg.Clock.(*clocktest.Clock), cap: rapid.IntRange(1, 4).Draw(t, "subscriberQueue")}
		h.sup = actors.NewSupervisor(actors.Config{Proc: cfg, DetachTTL: time.Minute, Logger: zap.NewNop()})
		h.fake, h.tty = newFakeSession(tty), tty
		h.m = &procModel{
			nextSeq:    1,
			retain:     &retainModel{maxBytes: cfg.RetainBytes, maxChunks: cfg.RetainChunks},
			streamOpen: make([]bool, len(h.fake.Streams())),
			writeIDs:   map[string]bool{},
			produced:   map[actors.Stream][]byte{},
		}
		for i := range h.m.streamOpen {
			h.m.streamOpen[i] = true
		}
		s := h.newSub(1)
		h.cur = s
		h.ref = h.sup.SpawnSession("p", []string{"fake"}, tty, h.fake, &actors.Subscriber{Out: s.ch, Done: s.done})
		t.Cleanup(func() { h.stop(t) })

		t.Repeat(map[string]func(*rapid.T){
			"output":    h.output,
			"output2":   h.output, // output is the common case
			"endStream": h.endStream,
			"exit": func(t *rapid.T) {
				if h.m.exitSent {
					t.Skip("exited")
				}
				h.exit(rapid.SampledFrom([]int{0, 1, 3, 130, 137, 255}).Draw(t, "code"))
			},
			"terminate":  h.terminate,
			"signal":     h.signal,
			"write":      h.write,
			"closeStdin": h.closeStdin,
			"read":       h.read,
			"read2":      h.read,
			"longPoll":   h.longPoll,
			"drain":      h.drain,
			"detach":     h.detach,
			"attach":     h.attach,
			"subscribe":  h.subscribe,
			"":           h.invariants,
		})
		h.finish(t)
		// Kill ends everything at once, whatever happened before.
		h.stop(t)
	})
}
