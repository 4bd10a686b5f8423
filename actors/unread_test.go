package actors

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/runtimed/runtimed/actors/clock/clocktest"
)

// evictions counts what retention evicted (the reported loss).
type evictions struct {
	NopMetrics
	chunks int
}

func (e *evictions) Evicted(chunks, _ int) { e.chunks += chunks }

// unreadHarness drives one process actor's output handlers directly (no
// goroutines): output facts, deliveries to the subscriber, reads, the
// connection's loss and a resume.
type unreadHarness struct {
	t   *testing.T
	p   *process
	clk *clocktest.Clock
	ev  *evictions
}

const unreadChunk = 1000 // bytes per output fact

func newUnreadHarness(t *testing.T, retainBytes, retainChunks int) *unreadHarness {
	clk := clocktest.New()
	cfg := ProcConfig{RetainBytes: retainBytes, RetainChunks: retainChunks, Clock: clk, resumeHold: time.Minute}
	p, _ := newProcess("p", []string{"fake"}, false, oneStream(), cfg, zaptest.NewLogger(t), &Subscriber{Out: make(chan Event), Done: make(chan struct{})})
	ev := &evictions{}
	p.cfg.metrics = ev
	p.readSize = unreadChunk // the fake's reads are this size
	return &unreadHarness{t: t, p: p, clk: clk, ev: ev}
}

// produce offers up to n chunks, as the readers would, while the actor
// takes them; it returns how many it took.
func (h *unreadHarness) produce(n int) int {
	taken := 0
	for taken < n && h.p.canConsume() {
		h.p.handleFact(outputReadMsg{stream: Stdout, data: make([]byte, unreadChunk)})
		taken++
	}
	return taken
}

// deliverAll hands the subscriber everything up to the last seq.
func (h *unreadHarness) deliverAll() {
	for h.p.sub != nil {
		ev, ok := h.p.eventAt(h.p.sub.cursor)
		if !ok {
			return
		}
		h.p.delivered(ev)
	}
}

func (h *unreadHarness) read(after uint64) ReadReply {
	reply := make(chan ReadReply, 1)
	h.p.read(readMsg{after: after, reply: reply})
	return <-reply
}

func (h *unreadHarness) resume() uint64 {
	return h.p.attach(Subscriber{Out: make(chan Event), Done: make(chan struct{})})
}

// retainedFrom fails unless every seq from..p.nextSeq-1 is retained.
func (h *unreadHarness) retainedFrom(from uint64, what string) {
	h.t.Helper()
	for s := from; s < h.p.nextSeq; s++ {
		if _, ok := h.p.ring.Get(s); !ok {
			h.t.Fatalf("%s: seq %d (unread) was evicted; retained %d..%d", what, s, h.p.ring.FirstSeq(), h.p.nextSeq-1)
		}
	}
}

// The rule, step by step: attached, output the connection was handed is
// evicted (counted: a reported loss, never an event the subscriber has not
// been given); detached, retention full of unread output stops the reads
// instead; a resume keeps the backlog until the client reads past it.
func TestUnreadOutputRule(t *testing.T) {
	h := newUnreadHarness(t, 10*unreadChunk, 1000)
	p := h.p

	// Attached, delivering everything: output flows without bound and old
	// output is evicted, counted.
	for range 50 {
		if h.produce(1) != 1 {
			t.Fatalf("attached, everything delivered: the actor stopped taking output at seq %d", p.nextSeq)
		}
		h.deliverAll()
	}
	if h.ev.chunks == 0 || p.ring.FirstSeq() <= 1 {
		t.Fatalf("attached: nothing evicted (first retained %d, evictions %d): delivered output must make room", p.ring.FirstSeq(), h.ev.chunks)
	}
	// Attached, not delivering: undelivered output fills at most half of
	// retention; the other half keeps the newest delivered output.
	cursor := p.sub.cursor
	took := h.produce(100)
	if took != 5 {
		t.Fatalf("attached, nothing delivered: took %d chunks; want 5 (half of retention)", took)
	}
	h.retainedFrom(cursor-5, "attached: the newest delivered half")

	// The client acknowledged what it was handed; the connection is lost:
	// the 5 chunks it was not handed are unread.
	h.read(cursor - 1)
	p.subscriberLost()
	if !p.detached {
		t.Fatal("not detached after the subscriber was lost")
	}
	first := p.acked + 1
	took = h.produce(100)
	if took != 5 {
		t.Fatalf("detached: took %d chunks; want the 5 that fill retention", took)
	}
	if p.canConsume() {
		t.Fatal("detached with retention full of unread output: the actor still reads")
	}
	h.retainedFrom(first, "detached")

	// Resume: live from the next seq; the backlog (everything after the
	// acknowledged seq) stays until read past.
	live := h.resume()
	if p.canConsume() {
		t.Fatal("resumed, backlog unread: the actor reads (and would evict the backlog)")
	}
	r := h.read(first - 1)
	if len(r.Chunks) == 0 || r.Chunks[0].Seq != first || r.NextSeq != live {
		t.Fatalf("catch-up read after %d: %d chunks from %d, nextSeq %d; want from %d up to %d", first-1, len(r.Chunks), r.Chunks[0].Seq, r.NextSeq, first, live)
	}
	if p.canConsume() {
		t.Fatal("the catch-up answer alone released the backlog: a drop while it is in flight would lose it")
	}
	h.read(live - 1) // the client acknowledges the catch-up
	if !p.canConsume() {
		t.Fatal("backlog acknowledged: the actor still does not read")
	}

	// A backlog nobody reads past is released after its hold, then evicted
	// (counted).
	h.deliverAll()
	h.produce(3)
	h.deliverAll()
	p.subscriberLost()
	h.produce(100)
	h.resume()
	h.read(p.acked) // a catch-up that is never acknowledged
	if p.canConsume() {
		t.Fatal("unacknowledged backlog: the actor reads")
	}
	h.clk.Advance(backlogSentHold)
	p.onTimer(h.clk.Now())
	if !p.canConsume() {
		t.Fatalf("the backlog's hold (%v after the answer that carried it) ended: the actor still does not read", backlogSentHold)
	}
	before := h.ev.chunks
	h.produce(1)
	h.deliverAll()
	if h.ev.chunks == before {
		t.Fatal("output taken past a released backlog evicted nothing")
	}

	// Detached, then discarded (TTL expiry): nobody will read it, output
	// flows again.
	p.subscriberLost()
	h.produce(100)
	if p.canConsume() {
		t.Fatal("detached: the actor reads")
	}
	p.discardProcess(reasonTTL)
	if !p.canConsume() {
		t.Fatal("discarded (detach TTL over): the actor still does not read")
	}
}

// Ack mode (process/ack): output handed to the connection stays unread
// until acknowledged, however much of it a drop could lose in flight;
// acknowledging lets the actor read again; a new connection starts without
// it (a client that does not acknowledge is never held to it).
func TestAckModeKeepsHandedOutput(t *testing.T) {
	h := newUnreadHarness(t, 10*unreadChunk, 1000)
	p := h.p
	p.handle(ackMsg{seq: 0})
	if !p.ackMode {
		t.Fatal("process/ack did not put the attached process in ack mode")
	}
	// Everything is handed at once, nothing acknowledged: the actor stops
	// when retention holds nothing but unacknowledged output (without ack
	// mode it would run on: sent counts as read).
	took := 0
	for range 100 {
		n := h.produce(1)
		h.deliverAll()
		if n == 0 {
			break
		}
		took += n
	}
	if took != 10 || p.canConsume() {
		t.Fatalf("ack mode, handed but not acknowledged: took %d chunks (want 10, retention's worth), reading still: %v", took, p.canConsume())
	}
	h.retainedFrom(1, "ack mode: handed, unacknowledged")
	// A drop: everything after the acknowledged seq is still there.
	p.handle(ackMsg{seq: 4})
	if !p.canConsume() {
		t.Fatal("4 chunks acknowledged: the actor still does not read")
	}
	h.produce(4)
	h.deliverAll()
	p.subscriberLost()
	h.retainedFrom(5, "after the drop, from the first unacknowledged seq")
	// Resumed by a connection that never acknowledges: the half-retention
	// rule again, not ack mode.
	h.resume()
	h.read(p.nextSeq - 1)
	if p.ackMode {
		t.Fatal("a resumed connection inherited ack mode: a client that never acknowledges would block its producer")
	}
	for range 50 {
		if h.produce(1) != 1 {
			t.Fatalf("resumed without acknowledgements, everything delivered: the actor stopped at seq %d", p.nextSeq)
		}
		h.deliverAll()
	}
	// An ack for seqs never assigned is clamped, not trusted.
	p.handle(ackMsg{seq: 1 << 60})
	if p.acked != p.nextSeq-1 {
		t.Fatalf("ack past nextSeq: acked %d, want %d", p.acked, p.nextSeq-1)
	}
	// A connection that declared it acknowledges (initialize's
	// runtimedOutputAck) is in ack mode from its first byte: nothing it
	// is handed before its first process/ack is evicted either.
	p.subscriberLost()
	p.attach(Subscriber{Out: make(chan Event), Done: make(chan struct{}), Acks: true})
	if !p.ackMode {
		t.Fatal("resumed by a connection that declared acknowledgements: not in ack mode")
	}
	from := p.nextSeq
	for range 100 {
		if h.produce(1) == 0 {
			break
		}
		h.deliverAll()
	}
	h.retainedFrom(from, "declared ack mode, nothing acknowledged yet")
	if p.canConsume() {
		t.Fatal("declared ack mode, retention full of unacknowledged output: the actor still reads")
	}
}

// A process that never had a connection (Local's lag-mode listeners) reads
// at full speed, evicting old output, as before.
func TestUnreadRuleSparesProcessesWithoutConnection(t *testing.T) {
	cfg := ProcConfig{RetainBytes: 10 * unreadChunk, RetainChunks: 1000, Clock: clocktest.New(), resumeHold: time.Minute}
	p, _ := newProcess("p", []string{"fake"}, false, oneStream(), cfg, zaptest.NewLogger(t), nil)
	p.readSize = unreadChunk
	for i := range 100 {
		if !p.canConsume() {
			t.Fatalf("no connection ever: the actor stopped reading after %d chunks", i)
		}
		p.handleFact(outputReadMsg{stream: Stdout, data: make([]byte, unreadChunk)})
	}
}

// Random sequences of output, deliveries, reads, drops and resumes: output
// the client has not read (past its acknowledged seq while detached, or
// after a resume until it reads past the backlog; from the cursor while
// attached) is never evicted, and the actor never stops for good while a
// reader keeps up.
func TestUnreadRuleRandomized(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 7))
		h := newUnreadHarness(t, (4+rng.IntN(20))*unreadChunk, 3+rng.IntN(30))
		p := h.p
		// The model: what the client has read, by the definition in
		// process_output.go, kept apart from the actor's own state.
		var acked, backlogFrom, backlogTo uint64
		detached := false
		ack := func(after uint64) {
			acked = max(acked, min(after, p.nextSeq-1))
			if backlogFrom != 0 {
				backlogFrom = max(backlogFrom, acked+1)
				if backlogFrom >= backlogTo {
					backlogFrom = 0
				}
			}
		}
		for step := 0; step < 300; step++ {
			floor := acked + 1 // detached
			if !detached {
				floor = p.sub.cursor
				if backlogFrom != 0 {
					floor = min(floor, backlogFrom)
				}
			}
			firstBefore := p.ring.FirstSeq()
			nextBefore := p.nextSeq
			switch op := rng.IntN(10); {
			case op < 4:
				h.produce(1 + rng.IntN(5))
			case op < 6:
				if !detached {
					h.deliverAll()
				}
			case op < 8:
				if p.nextSeq > 1 {
					after := acked + uint64(rng.IntN(int(p.nextSeq-acked)))
					h.read(after)
					ack(after)
				}
			case op < 9:
				if !detached {
					p.subscriberLost()
					detached, backlogFrom = true, 0
				}
			default:
				if detached {
					live := h.resume()
					detached, backlogFrom = false, 0
					if acked+1 < live {
						backlogFrom, backlogTo = acked+1, live
					}
				}
			}
			// Everything from the floor that was retained before the step
			// still is (seqs >= nextBefore are this step's own).
			for s := max(floor, firstBefore); s < nextBefore; s++ {
				if _, ok := p.ring.Get(s); !ok {
					t.Fatalf("seed %d step %d: seq %d evicted though unread (floor %d, retained %d..%d, acked %d, detached %v)",
						seed, step, s, floor, p.ring.FirstSeq(), p.nextSeq-1, acked, detached)
				}
			}
		}
		// Liveness: attached, the client reads past everything and takes
		// its notifications: output flows again.
		if p.sub == nil {
			h.resume()
		}
		h.read(p.nextSeq - 1)
		h.deliverAll()
		if h.produce(1) != 1 {
			t.Fatalf("seed %d: caught up and attached, the actor does not read", seed)
		}
	}
}

// When the drain after a kill ends (the streams are closed by force), the
// kill path's bound wins over the unread rule: a detached process whose
// retention is full of unread output takes what its readers still hold
// (so that it can close) and its backlog is no longer held.
func TestUnreadRuleYieldsToForcedClose(t *testing.T) {
	h := newUnreadHarness(t, 10*unreadChunk, 1000)
	p := h.p
	h.produce(3)
	h.deliverAll()
	p.subscriberLost()
	h.produce(100)
	if p.canConsume() {
		t.Fatal("detached, retention full of unread output: the actor reads")
	}
	p.phase = phaseDraining // exited, the tree SIGKILLed, a descendant holds the pipe
	p.drainAt = h.clk.Now()
	p.onTimer(h.clk.Now())
	if !p.outputsCut {
		t.Fatal("the drain's end did not close the streams")
	}
	if !p.canConsume() {
		t.Fatal("the streams were closed by force: the actor still does not take what its readers hold, and cannot close")
	}
	h.resume()
	if p.backlogFrom != 0 || !p.canConsume() {
		t.Fatalf("a resume after the forced close holds a backlog from %d", p.backlogFrom)
	}
}

// An acknowledgement never goes back: a client re-reading older history
// (process/read after an earlier seq) does not make output it already
// acknowledged unread again, so the actor keeps taking output.
func TestAckNeverGoesBack(t *testing.T) {
	h := newUnreadHarness(t, 10*unreadChunk, 1000)
	p := h.p
	h.produce(8)
	h.deliverAll()
	p.subscriberLost()
	h.read(p.nextSeq - 1) // everything acknowledged
	acked := p.acked
	if !p.canConsume() {
		t.Fatal("detached, everything acknowledged: the actor does not read")
	}
	if r := h.read(0); len(r.Chunks) == 0 {
		t.Fatal("re-reading the history returned nothing")
	}
	if p.acked != acked || !p.canConsume() {
		t.Fatalf("a re-read from seq 0 moved the acknowledgement to %d (was %d) and the actor reads: %v", p.acked, acked, p.canConsume())
	}
	if took := h.produce(5); took != 5 {
		t.Fatalf("after a re-read: took %d chunks; want 5", took)
	}
}

// History reports evicted output as a gap wherever it is, the end
// included: output too large for retention evicts everything, itself too,
// and the history is one gap to the last seq, never silently empty; the
// next output follows the gap.
func TestHistoryEndsWithGap(t *testing.T) {
	h := newUnreadHarness(t, 10*unreadChunk, 1000)
	p := h.p
	h.produce(2)
	p.handleFact(outputReadMsg{stream: Stdout, data: make([]byte, 20*unreadChunk)}) // seq 3, larger than retention
	show := func(hist []Event) string {
		var s []string
		for _, ev := range hist {
			s = append(s, fmt.Sprintf("kind %d seq %d-%d", ev.Kind, ev.Seq, ev.To))
		}
		return strings.Join(s, ", ")
	}
	if hist := p.subscribe(0, 4).History; len(hist) != 1 || hist[0].Kind != EventGap || hist[0].Seq != 1 || hist[0].To != 3 {
		t.Fatalf("history [%s]; want one gap 1..3", show(hist))
	}
	h.produce(1)
	if hist := p.subscribe(0, 4).History; len(hist) != 2 || hist[0].Kind != EventGap || hist[0].To != 3 || hist[1].Kind != EventOutput || hist[1].Seq != 4 {
		t.Fatalf("history [%s]; want a gap 1..3, then output 4", show(hist))
	}
}
