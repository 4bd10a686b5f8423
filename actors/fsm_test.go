package actors

import (
	"fmt"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"pgregory.net/rapid"

	"github.com/runtimed/runtimed/actors/clock/clocktest"
	"github.com/runtimed/runtimed/actors/osproc/osproctest"
)

// The process actor's state machine against a small model. The harness
// drives the real actor's step functions (handle, handleFact, onReaped,
// delivered, dropSubscriber, shutdown, onTimer through the real timer
// arming, settle) from one goroutine, with a fake session and a fake clock:
// it is run's loop with the select replaced by rapid's choice of input.
// After every step the model's transitions (from, to, reason), phase,
// signals, forced closes of the outputs, seqs, long-poll answers and
// listener queues must equal the actor's.

// fsmHarness drives one actor and its model.
type fsmHarness struct {
	t        *rapid.T
	clk      *clocktest.Clock
	sess     *osproctest.Session
	p        *process
	m        *fsmModel
	observed []transRec
	refused  []transRec
	sub      *fsmSub
	lives    []<-chan Event // parallel to m.lags
	stopped  bool
	killed   bool
}

type fsmSub struct {
	got  []Event
	done chan struct{}
}

func newFSMHarness(t *rapid.T) *fsmHarness {
	cfg := ProcConfig{
		RetainBytes:         1 << 10,
		RetainChunks:        rapid.IntRange(1, 4).Draw(t, "retainChunks"),
		ClosedRetention:     rapid.SampledFrom([]time.Duration{-time.Second, 0, 50 * time.Millisecond, time.Minute}).Draw(t, "retention"),
		DrainAfterTerminate: rapid.SampledFrom([]time.Duration{0, 20 * time.Millisecond, 100 * time.Millisecond}).Draw(t, "drain"),
		ShutdownGrace:       rapid.SampledFrom([]time.Duration{10 * time.Millisecond, time.Second}).Draw(t, "shutdownGrace"),
	}
	tty := rapid.Bool().Draw(t, "tty")
	timeout := rapid.SampledFrom([]time.Duration{0, 30 * time.Millisecond, time.Second}).Draw(t, "timeout")
	h := &fsmHarness{t: t, clk: clocktest.New()}
	cfg.Clock = h.clk
	limit := rapid.SampledFrom([]string{"", "memory"}).Draw(t, "limit")
	h.sess = osproctest.New(osproctest.Options{TTY: tty, Limit: limit})
	h.sub = &fsmSub{done: make(chan struct{})}
	h.p, _ = newProcess("p", []string{"fake"}, tty, h.sess, cfg, zap.NewNop(), &Subscriber{Out: make(chan Event), Done: h.sub.done})
	h.p.observe = func(from, to phase, why reason, ok bool) {
		if ok {
			h.observed = append(h.observed, transRec{from, to, why})
		} else {
			h.refused = append(h.refused, transRec{from, to, why})
		}
	}
	h.m = &fsmModel{cfg: cfg, tty: tty, limit: limit, now: h.clk.Now, nextSeq: 1,
		streamOpen: make([]bool, len(h.sess.Streams())), subAttached: true, subCursor: 1}
	for i := range h.m.streamOpen {
		h.m.streamOpen[i] = true
	}
	if timeout > 0 {
		h.p.timeoutAt = h.clk.Now().Add(timeout) // as Supervisor.spawn does
		h.m.timeoutAt = h.p.timeoutAt
	}
	h.p.begin()
	h.m.tr(phaseRunning, reasonStart)
	h.check("begin")
	return h
}

func (h *fsmHarness) gone() bool { return h.m.phase == phaseGone }

// step applies one input to the actor and the model, runs both loops'
// tops (settle, timer), and compares them.
func (h *fsmHarness) step(what string, actor, model func()) {
	actor()
	model()
	h.pump()
	h.m.pump()
	h.check(what)
}

// pump is the top of run's loop: settle, rearm, and a fired timer.
// A timer that keeps firing without the actor making progress (a deadline
// that is due but not handled) fails the test: the real loop would spin.
func (h *fsmHarness) pump() {
	for fires := 0; !h.p.settle(); fires++ {
		if fires > 100 {
			h.t.Fatalf("the actor's timer fired %d times at %v without progress (phase %v)", fires, h.clk.Now(), h.p.phase)
		}
		h.p.rearm()
		select {
		case <-h.p.timer.C():
			h.p.timerAt = time.Time{}
			h.p.onTimer(h.clk.Now())
		default:
			return
		}
	}
}

func (h *fsmHarness) check(what string) {
	t, p, m := h.t, h.p, h.m
	if len(h.refused) > 0 {
		t.Fatalf("after %s: illegal transitions asked for: %v", what, h.refused)
	}
	if !slices.Equal(h.observed, m.trans) {
		t.Fatalf("after %s: transitions\n  actor %v\n  model %v", what, h.observed, m.trans)
	}
	if p.phase != m.phase {
		t.Fatalf("after %s: phase %v, model %v", what, p.phase, m.phase)
	}
	if got := h.sess.Signals(); !slices.Equal(got, m.signals) {
		t.Fatalf("after %s: signals %v, model %v", what, got, m.signals)
	}
	if got := h.sess.ForcedCloses(); got != m.closeOutputs {
		t.Fatalf("after %s: outputs closed %d times, model %d", what, got, m.closeOutputs)
	}
	if p.nextSeq != m.nextSeq || (m.phase >= phaseExited && (p.exitSeq != m.exitSeq || p.exitCode != m.exitCode)) {
		t.Fatalf("after %s: nextSeq %d exit seq %d code %d, model %d %d %d", what, p.nextSeq, p.exitSeq, p.exitCode, m.nextSeq, m.exitSeq, m.exitCode)
	}
	if (p.sub != nil) != m.subAttached || (p.sub != nil && p.sub.cursor != m.subCursor) {
		t.Fatalf("after %s: subscriber %+v, model attached %v at %d", what, p.sub, m.subAttached, m.subCursor)
	}
	for i, mp := range m.polls {
		if mp.seen {
			continue
		}
		select {
		case r := <-mp.reply:
			if !mp.answered {
				t.Fatalf("after %s: long poll %d (after %d) answered early: %+v", what, i, mp.after, r)
			}
			if r.NextSeq > m.nextSeq || (r.Closed && !r.Exited) {
				t.Fatalf("after %s: long poll %d: %+v", what, i, r)
			}
			mp.seen = true
		default:
			if mp.answered {
				t.Fatalf("after %s: long poll %d (after %d) not answered", what, i, mp.after)
			}
		}
	}
	if m.phase == phaseGone {
		h.checkEnding(what)
	}
}

// checkEnding: the actor ended, so every subscriber has the ending: the
// attached one was handed closed (with exited before it), every listener
// was closed after closed (or for lagging), every long poll answered.
func (h *fsmHarness) checkEnding(what string) {
	t, m := h.t, h.m
	if m.subAttached && m.subCursor <= m.closedSeq {
		t.Fatalf("after %s: gone before the subscriber (at %d) was handed closed (%d)", what, m.subCursor, m.closedSeq)
	}
	for i, l := range m.lags {
		if !l.ended {
			t.Fatalf("after %s: gone with listener %d open", what, i)
		}
	}
	for i, mp := range m.polls {
		if !mp.seen {
			t.Fatalf("after %s: gone with long poll %d unanswered", what, i)
		}
	}
	if n := len(h.p.listeners) + len(h.p.polls); n > 0 {
		t.Fatalf("after %s: gone holding %d listeners and polls", what, n)
	}
}

func (h *fsmHarness) skipIfGone(t *rapid.T) {
	if h.gone() {
		t.Skip("the actor ended")
	}
}

func (h *fsmHarness) output(t *rapid.T) {
	h.skipIfGone(t)
	var open []int
	for i, o := range h.m.streamOpen {
		if o && h.sess.ForcedCloses() == 0 {
			open = append(open, i)
		}
	}
	if len(open) == 0 || !h.p.canConsume() {
		t.Skip("no stream can deliver output")
	}
	i := rapid.SampledFrom(open).Draw(t, "stream")
	h.step("output", func() {
		h.p.handleFact(outputReadMsg{stream: h.sess.Streams()[i], data: []byte{'x'}})
	}, func() { h.m.emit(EventOutput) })
}

// endStream: EOF on a stream, or the end a reader sees once the actor
// closed the outputs.
func (h *fsmHarness) endStream(t *rapid.T) {
	h.skipIfGone(t)
	var open []int
	for i, o := range h.m.streamOpen {
		if o {
			open = append(open, i)
		}
	}
	if len(open) == 0 {
		t.Skip("no open stream")
	}
	i := rapid.SampledFrom(open).Draw(t, "stream")
	err := error(nil)
	if h.sess.ForcedCloses() > 0 {
		err = os.ErrClosed
	}
	h.step("stream end", func() {
		h.p.handleFact(streamEndedMsg{stream: h.sess.Streams()[i], err: err})
	}, func() { h.m.endStream(i) })
}

func (h *fsmHarness) exit(t *rapid.T) {
	h.skipIfGone(t)
	if h.m.exitSent {
		t.Skip("exited")
	}
	code := rapid.SampledFrom([]int{0, 1, 137}).Draw(t, "code")
	h.step("exit", func() { h.p.onReaped(code) }, func() { h.m.reap(code) })
}

func (h *fsmHarness) deliver(t *rapid.T) {
	h.skipIfGone(t)
	if h.p.sub == nil {
		t.Skip("no subscriber")
	}
	n := rapid.IntRange(1, 4).Draw(t, "n")
	h.step("deliver", func() {
		for range n {
			ev, ok := h.p.eventAt(h.p.sub.cursor)
			if ok != (h.m.subCursor < h.m.nextSeq) {
				t.Fatalf("event at cursor %d: %v, model has %d events", h.m.subCursor, ok, h.m.nextSeq-1)
			}
			if !ok {
				return
			}
			if ev.Seq != h.m.subCursor || ev.Kind != h.m.kinds[ev.Seq-1] || (ev.Kind == EventExited && ev.ExitCode != h.m.exitCode) {
				t.Fatalf("delivered %+v at cursor %d, model kind %v code %d", ev, h.m.subCursor, h.m.kinds[ev.Seq-1], h.m.exitCode)
			}
			h.p.delivered(ev)
			h.sub.got = append(h.sub.got, ev)
			h.m.subCursor++
		}
	}, func() {})
}

func (h *fsmHarness) unsubscribe(t *rapid.T) {
	h.skipIfGone(t)
	if h.p.sub == nil {
		t.Skip("no subscriber")
	}
	h.step("unsubscribe", func() { h.p.dropSubscriber(reasonConnEnd) }, func() { h.m.dropSub(reasonConnEnd) })
}

func (h *fsmHarness) attach(t *rapid.T) {
	h.skipIfGone(t)
	h.sub = &fsmSub{done: make(chan struct{})}
	reply := make(chan uint64, 1)
	h.step("attach", func() {
		h.p.handle(attachMsg{sub: Subscriber{Out: make(chan Event), Done: h.sub.done}, reply: reply})
	}, func() {
		h.m.subAttached, h.m.subCursor, h.m.dropped = true, h.m.nextSeq, reasonNone
	})
	if got := <-reply; got != h.m.subCursor {
		t.Fatalf("attached at %d, want %d", got, h.m.subCursor)
	}
}

func (h *fsmHarness) subscribe(t *rapid.T) {
	h.skipIfGone(t)
	if len(h.m.lags) >= 3 {
		t.Skip("enough listeners")
	}
	after := rapid.Uint64Range(0, h.m.nextSeq-1).Draw(t, "after")
	capacity := rapid.IntRange(1, 4).Draw(t, "capacity")
	reply := make(chan Subscription, 1)
	h.step("subscribe", func() {
		h.p.handle(subscribeMsg{after: after, capacity: capacity, reply: reply})
	}, func() {
		h.m.lags = append(h.m.lags, &modelLag{capacity: capacity, ended: h.m.phase >= phaseClosed})
	})
	sub := <-reply
	h.lives = append(h.lives, sub.Live)
	next := after + 1
	for _, ev := range sub.History {
		if ev.Seq != next || (ev.Kind != EventGap && ev.Kind != h.m.kinds[ev.Seq-1]) {
			t.Fatalf("history after %d: %+v at %d, model kinds %v", after, ev, next, h.m.kinds)
		}
		next = ev.Seq + 1
		if ev.Kind == EventGap {
			next = ev.To + 1
		}
	}
	if next != h.m.nextSeq {
		t.Fatalf("history after %d ends before %d, model next seq %d", after, next, h.m.nextSeq)
	}
}

// drainListeners reads every listener queue: it holds exactly what the
// model offered it, and is closed exactly when the model says.
func (h *fsmHarness) drainListeners(t *rapid.T) {
	if len(h.lives) == 0 {
		t.Skip("no listener")
	}
	for i, live := range h.lives {
		l := h.m.lags[i]
		for _, seq := range l.queued {
			ev, ok := <-live
			if !ok || ev.Seq != seq || ev.Kind != h.m.kinds[seq-1] {
				t.Fatalf("listener %d: got %+v (open %v), model %d", i, ev, ok, seq)
			}
		}
		l.queued = nil
		select {
		case ev, ok := <-live:
			if ok {
				t.Fatalf("listener %d: unexpected %+v", i, ev)
			}
			if !l.ended {
				t.Fatalf("listener %d closed; the model keeps it", i)
			}
		default:
			if l.ended {
				t.Fatalf("listener %d open; the model closed it (lagged %v)", i, l.lagged)
			}
		}
	}
}

func (h *fsmHarness) read(t *rapid.T) {
	h.skipIfGone(t)
	reply := make(chan ReadReply, 1)
	h.step("read", func() { h.p.handle(readMsg{reply: reply}) }, func() {})
	r, m := <-reply, h.m
	if r.NextSeq != m.nextSeq || r.Exited != (m.phase >= phaseExited) || r.Closed != (m.phase >= phaseClosed) || (r.Exited && r.ExitCode != m.exitCode) {
		t.Fatalf("read %+v; model phase %v next %d code %d", r, m.phase, m.nextSeq, m.exitCode)
	}
	info := make(chan ProcessInfo, 1)
	h.p.handle(infoMsg{reply: info})
	if st := (<-info).State; st != m.phase.state() {
		t.Fatalf("info state %v, model phase %v", st, m.phase)
	}
}

func (h *fsmHarness) longPoll(t *rapid.T) {
	h.skipIfGone(t)
	wait := rapid.SampledFrom([]time.Duration{5 * time.Millisecond, time.Second}).Draw(t, "wait")
	mp := &modelPoll{after: h.m.nextSeq - 1, deadline: h.clk.Now().Add(wait), reply: make(chan ReadReply, 1)}
	h.step("long poll", func() {
		h.p.handle(readMsg{after: mp.after, wait: wait, reply: mp.reply})
	}, func() {
		mp.answered = h.m.phase >= phaseClosed
		h.m.polls = append(h.m.polls, mp)
	})
}

func (h *fsmHarness) terminate(t *rapid.T) {
	h.skipIfGone(t)
	grace := rapid.SampledFrom([]time.Duration{0, 5 * time.Millisecond, 40 * time.Millisecond, time.Hour}).Draw(t, "grace")
	reply := make(chan bool, 1)
	want := !h.m.reaped()
	h.step("terminate", func() { h.p.handle(terminateMsg{grace: grace, reply: reply}) }, func() { h.m.kill(reasonTerminate, grace) })
	if got := <-reply; got != want {
		t.Fatalf("terminate: running %v, want %v", got, want)
	}
}

func (h *fsmHarness) signal(t *rapid.T) {
	h.skipIfGone(t)
	sig := rapid.SampledFrom([]syscall.Signal{syscall.SIGINT, syscall.SIGKILL}).Draw(t, "sig")
	reply := make(chan error, 1)
	h.step("signal", func() { h.p.handle(signalMsg{sig: sig, reply: reply}) }, func() {
		switch {
		case h.m.reaped():
		case sig == syscall.SIGKILL:
			h.m.kill(reasonSignal, 0)
		default:
			h.m.sig(sig)
		}
	})
	<-reply
}

// discard: the detached session's TTL expired, or its connection ended.
func (h *fsmHarness) discard(t *rapid.T) {
	h.skipIfGone(t)
	why := rapid.SampledFrom([]reason{reasonTTL, reasonConnEnd}).Draw(t, "why")
	h.step("discard", func() { h.p.handle(discardMsg{why: why}) }, func() {
		if h.m.forget == reasonNone {
			h.m.forget = why
		}
		h.m.kill(why, 0)
	})
}

func (h *fsmHarness) stop(t *rapid.T) {
	h.skipIfGone(t)
	if h.stopped || h.killed {
		t.Skip("stopping")
	}
	h.stopped = true
	h.step("stop", func() { h.p.shutdown(false) }, func() {
		if h.m.forget == reasonNone {
			h.m.forget = reasonShutdown
		}
		h.m.kill(reasonShutdown, h.m.cfg.ShutdownGrace)
	})
}

func (h *fsmHarness) kill(t *rapid.T) {
	h.skipIfGone(t)
	if h.killed {
		t.Skip("killed")
	}
	h.killed = true
	h.step("kill", func() { h.p.shutdown(true) }, func() {
		if h.m.forget == reasonNone {
			h.m.forget = reasonShutdown
		}
		h.m.kill(reasonShutdown, 0)
		h.m.dropSub(reasonShutdown)
	})
}

// clock moves time: by a step, or to the model's next deadline.
func (h *fsmHarness) clock(t *rapid.T) {
	d := rapid.SampledFrom([]time.Duration{-1, time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond, time.Second, time.Hour}).Draw(t, "advance")
	if d < 0 {
		next := h.m.earliest()
		if next.IsZero() {
			t.Skip("no deadline")
		}
		d = max(next.Sub(h.clk.Now()), 0)
	}
	if h.gone() {
		h.clk.Advance(d) // nothing may change any more
		h.check("clock after the end")
		return
	}
	h.step(fmt.Sprintf("clock +%v", d), func() { h.clk.Advance(d) }, func() {})
}

// finish drives the process to its end the way the outside world would
// (the child exits, streams end, the subscriber reads, time passes) and
// checks that the actor then ends, every subscriber having the ending.
func (h *fsmHarness) finish(t *rapid.T) {
	for i := 0; !h.gone(); i++ {
		if i > 50 {
			t.Fatalf("the actor does not end: phase %v, model %+v", h.p.phase, h.m)
		}
		switch {
		case !h.m.exitSent:
			h.step("final exit", func() { h.p.onReaped(0) }, func() { h.m.reap(0) })
		case slices.Contains(h.m.streamOpen, true):
			h.endStream(t)
		case h.p.sub != nil && h.p.sub.cursor < h.p.nextSeq:
			h.deliver(t)
		case len(h.lives) > 0:
			h.drainListeners(t)
			fallthrough
		default:
			d := time.Hour
			if next := h.m.earliest(); !next.IsZero() {
				d = max(next.Sub(h.clk.Now()), 0)
			}
			h.step("final clock", func() { h.clk.Advance(d) }, func() {})
		}
	}
	if len(h.lives) > 0 {
		h.drainListeners(t)
	}
	h.checkEnding("finish")
	if h.m.trans[0] != (transRec{phaseStarting, phaseRunning, reasonStart}) || h.m.trans[len(h.m.trans)-1].to != phaseGone {
		t.Fatalf("transitions %v", h.m.trans)
	}
	var exits, closes int
	for _, k := range h.m.kinds {
		exits += b2i(k == EventExited)
		closes += b2i(k == EventClosed)
	}
	if exits != 1 || closes != 1 || h.m.kinds[len(h.m.kinds)-1] != EventClosed || h.m.exitSeq >= h.m.closedSeq {
		t.Fatalf("history %v: want one exited, then one closed last", h.m.kinds)
	}
	if s := h.sub; h.m.subAttached && len(s.got) > 0 && s.got[len(s.got)-1].Kind != EventClosed {
		t.Fatalf("the subscriber's last event is %+v, not closed", s.got[len(s.got)-1])
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestProcessStateMachine: for any sequence of output, stream ends, exit,
// subscriber deliveries, unsubscribes and attaches, lag-mode subscribes,
// reads and long polls, terminate (any grace), signals, discard (TTL or
// connection end), shutdown (stop, kill) and clock steps, the actor makes
// exactly the model's transitions with the model's reasons (never one
// backwards: the transition function refuses it and the test fails), sends
// the model's signals, closes the outputs when the model does, numbers
// events as the model does, answers long polls and fills listener queues
// as the model does, never ends before every subscriber has the ending,
// and does end once the world lets it.
func TestProcessStateMachine(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		h := newFSMHarness(t)
		t.Repeat(map[string]func(*rapid.T){
			"output":      h.output,
			"output2":     h.output,
			"endStream":   h.endStream,
			"exit":        h.exit,
			"deliver":     h.deliver,
			"deliver2":    h.deliver,
			"unsubscribe": h.unsubscribe,
			"attach":      h.attach,
			"subscribe":   h.subscribe,
			"drainLags":   h.drainListeners,
			"read":        h.read,
			"longPoll":    h.longPoll,
			"terminate":   h.terminate,
			"signal":      h.signal,
			"discard":     h.discard,
			"stop":        h.stop,
			"kill":        h.kill,
			"clock":       h.clock,
			"clock2":      h.clock,
		})
		h.finish(t)
	})
}

// TestTransitionTable: the transition function refuses every backward or
// same-phase step, whatever the reason, and logs it as a bug.
func TestTransitionTable(t *testing.T) {
	for from := phaseStarting; from <= phaseGone; from++ {
		for to := phaseStarting; to <= from; to++ {
			for why := reasonNone; why <= reasonRetention; why++ {
				p := &process{phase: from, log: zap.NewNop()}
				if p.transition(to, why) || p.phase != from {
					t.Fatalf("%v → %v (%v) accepted", from, to, why)
				}
			}
		}
	}
	// Every phase but gone can fail; nothing else skips to gone.
	for from := phaseStarting; from < phaseGone; from++ {
		if !legalTransition(from, phaseGone, reasonFailure) {
			t.Errorf("%v cannot fail", from)
		}
		if from != phaseRetained && legalTransition(from, phaseGone, reasonRetention) {
			t.Errorf("%v → gone by retention", from)
		}
	}
}
