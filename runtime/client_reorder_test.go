package runtime

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/runtimed/runtimed/wire"
)

// serveReads answers the client's process/read requests for id from the
// given retained chunks (those after afterSeq), with nextSeq; it reports
// each afterSeq asked on reads.
func serveReads(s *fakeServer, id string, retained []wire.Chunk, nextSeq uint64, n int, reads chan<- uint64) {
	for range n {
		m := s.request(wire.MethodProcessRead)
		var p wire.ReadParams
		_ = json.Unmarshal(m.Params, &p)
		if p.ProcessID != id {
			s.t.Errorf("read of %q", p.ProcessID)
		}
		var out []wire.Chunk
		for _, c := range retained {
			if c.Seq > p.AfterSeq {
				out = append(out, c)
			}
		}
		s.reply(m.ID, wire.ReadResult{Chunks: out, NextSeq: nextSeq})
		reads <- p.AfterSeq
	}
}

// A notification the server never sent (seq 2) leaves a hole; once the
// reorder buffer is full, the client reads the hole back from the server
// instead of stalling or dropping what follows: every seq arrives once,
// in order.
func TestClientReorderOverflowReadsTheHoleBack(t *testing.T) {
	defer func(n int) { reorderLimit = n }(reorderLimit)
	reorderLimit = 2
	c, s, _ := fakeClient(t, false)
	p := startFake(t, c, s, "p", func() { s.output("p", 1, "a") })
	st, err := p.Events(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	wantEvent(t, st, EventOutput, 1, "a")
	reads := make(chan uint64, 4)
	s.output("p", 3, "c")
	s.output("p", 4, "d") // the buffer is full now
	s.output("p", 5, "e") // dropped, and the hole is read back
	serveReads(s, "p", []wire.Chunk{chunk(2, "b"), chunk(3, "c"), chunk(4, "d"), chunk(5, "e")}, 6, 1, reads)
	if after := <-reads; after != 1 {
		t.Fatalf("the hole was read after seq %d, want 1", after)
	}
	for i, d := range []string{"b", "c", "d", "e"} {
		wantEvent(t, st, EventOutput, uint64(i+2), d)
	}
	s.output("p", 6, "f")
	s.exited("p", 7, 0)
	s.closed("p", 8)
	wantEvent(t, st, EventOutput, 6, "f")
	wantEvent(t, st, EventExited, 7, "")
	wantEvent(t, st, EventClosed, 8, "")
}

// When the server no longer retains the hole, the loss is reported as an
// EventGap (typed, with its seqs) and the stream goes on.
func TestClientReorderOverflowReportsEvictedHole(t *testing.T) {
	defer func(n int) { reorderLimit = n }(reorderLimit)
	reorderLimit = 2
	c, s, _ := fakeClient(t, false)
	p := startFake(t, c, s, "p", func() { s.output("p", 1, "a") })
	st, _ := p.Events(context.Background())
	wantEvent(t, st, EventOutput, 1, "a")
	reads := make(chan uint64, 4)
	s.output("p", 4, "d")
	s.output("p", 5, "e")
	s.output("p", 6, "f") // dropped: the buffer holds 4 and 5
	// Seqs 2 and 3 were evicted; 4..6 are retained.
	serveReads(s, "p", []wire.Chunk{chunk(4, "d"), chunk(5, "e"), chunk(6, "f")}, 7, 1, reads)
	<-reads
	if ev := nextEvent(t, st); ev.Kind != EventGap || ev.Seq != 2 || ev.To != 3 {
		t.Fatalf("event %+v; want the gap 2..3", ev)
	}
	wantEvent(t, st, EventOutput, 4, "d")
	wantEvent(t, st, EventOutput, 5, "e")
	wantEvent(t, st, EventOutput, 6, "f")
	s.closed("p", 7)
	wantEvent(t, st, EventClosed, 7, "")
}
