package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/runtimed/runtimed/wire"
)

func fakeSpec(id string) Spec { return Spec{ID: id, Argv: []string{"fake"}, Dir: "/"} }

// startFake starts process id through the fake server, which notifies
// notes before it answers.
func startFake(t *testing.T, c *Client, s *fakeServer, id string, notes func()) Process {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); s.start(id, notes) }()
	p, err := c.Start(context.Background(), fakeSpec(id))
	if err != nil {
		t.Fatal(err)
	}
	<-done
	return p
}

// cutAndResume drops the connection and serves the client's reconnect:
// handshake resuming S1, then the catch-up process/read, whose afterSeq
// must be the last seq the client has (the next one is what it lacks).
func cutAndResume(t *testing.T, old *fakeServer, servers <-chan *fakeServer, id string, wantAfter uint64, answer wire.ReadResult) *fakeServer {
	t.Helper()
	old.tr.Close()
	s := nextServer(t, servers)
	s.handshake("S1", "S1")
	m := s.request(wire.MethodProcessRead)
	var p wire.ReadParams
	if err := json.Unmarshal(m.Params, &p); err != nil {
		t.Fatal(err)
	}
	if p.ProcessID != id || p.AfterSeq != wantAfter {
		t.Fatalf("catch-up read of %q after seq %d; want %q after %d (the last seq the client has)", p.ProcessID, p.AfterSeq, id, wantAfter)
	}
	s.reply(m.ID, answer)
	return s
}

func chunk(seq uint64, data string) wire.Chunk {
	return wire.Chunk{Seq: seq, Stream: wire.StreamStdout, Chunk: []byte(data)}
}

func intp(i int) *int { return &i }

// After a reconnect the client catches each process up from exactly the
// last seq it has: output written while it was away arrives once, in
// order, and the stream goes on with live events.
func TestClientResumeCatchUpFromLastSeq(t *testing.T) {
	c, s, servers := fakeClient(t, true)
	p := startFake(t, c, s, "p", func() { s.output("p", 1, "a"); s.output("p", 2, "b") })
	st, err := p.Events(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	wantEvent(t, st, EventOutput, 1, "a")
	wantEvent(t, st, EventOutput, 2, "b")
	s = cutAndResume(t, s, servers, "p", 2, wire.ReadResult{Chunks: []wire.Chunk{chunk(3, "c")}, NextSeq: 4})
	wantEvent(t, st, EventOutput, 3, "c")
	s.output("p", 4, "d")
	s.exited("p", 5, 0)
	s.closed("p", 6)
	wantEvent(t, st, EventOutput, 4, "d")
	wantEvent(t, st, EventExited, 5, "")
	wantEvent(t, st, EventClosed, 6, "")
}

// Output evicted while the client was away is reported as a gap (one per
// run of seqs), for a running process as for one that exited meanwhile,
// and the stream goes on past it.
func TestClientCatchUpReportsEvictedOutput(t *testing.T) {
	t.Run("running", func(t *testing.T) {
		c, s, servers := fakeClient(t, true)
		p := startFake(t, c, s, "p", func() { s.output("p", 1, "a"); s.output("p", 2, "b") })
		st, _ := p.Events(context.Background())
		wantEvent(t, st, EventOutput, 1, "a")
		wantEvent(t, st, EventOutput, 2, "b")
		s = cutAndResume(t, s, servers, "p", 2, wire.ReadResult{Chunks: []wire.Chunk{chunk(6, "f"), chunk(7, "g")}, NextSeq: 8})
		if ev := nextEvent(t, st); ev.Kind != EventGap || ev.Seq != 3 || ev.To != 5 {
			t.Fatalf("event %+v; want the gap 3..5 (evicted while away)", ev)
		}
		wantEvent(t, st, EventOutput, 6, "f")
		wantEvent(t, st, EventOutput, 7, "g")
		s.output("p", 8, "h")
		s.exited("p", 9, 0)
		s.closed("p", 10)
		wantEvent(t, st, EventOutput, 8, "h")
		wantEvent(t, st, EventExited, 9, "")
		wantEvent(t, st, EventClosed, 10, "")
	})
	t.Run("exited-while-away", func(t *testing.T) {
		c, s, servers := fakeClient(t, true)
		p := startFake(t, c, s, "p", func() { s.output("p", 1, "a"); s.output("p", 2, "b") })
		st, _ := p.Events(context.Background())
		wantEvent(t, st, EventOutput, 1, "a")
		wantEvent(t, st, EventOutput, 2, "b")
		// Seqs 3..5 evicted, 6 and 7 retained, 8 the exit, 9 closed.
		cutAndResume(t, s, servers, "p", 2, wire.ReadResult{Chunks: []wire.Chunk{chunk(6, "f"), chunk(7, "g")}, NextSeq: 10, Exited: true, ExitCode: intp(5), Closed: true})
		if ev := nextEvent(t, st); ev.Kind != EventGap || ev.Seq != 3 || ev.To != 5 {
			t.Fatalf("event %+v; want the gap 3..5", ev)
		}
		wantEvent(t, st, EventOutput, 6, "f")
		wantEvent(t, st, EventOutput, 7, "g")
		if ev := wantEvent(t, st, EventExited, 8, ""); ev.ExitCode != 5 {
			t.Fatalf("exit code %d", ev.ExitCode)
		}
		wantEvent(t, st, EventClosed, 9, "")
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		if es, err := p.Wait(ctx); err != nil || es.Code != 5 {
			t.Fatalf("Wait = %+v %v", es, err)
		}
	})
}

// A subscriber that arrives after the client has seen seqs 1..3 (more
// than the client keeps itself), when the server has evicted all of them,
// starts with the gap 1..3 (the trailing gap of its history) before the
// live events: it never skips seqs silently.
func TestClientLateSubscriberTrailingGap(t *testing.T) {
	c, s, _ := fakeClient(t, false)
	big := strings.Repeat("x", histBytes/2+1)
	p := startFake(t, c, s, "p", func() { s.output("p", 1, big); s.output("p", 2, big); s.output("p", 3, big) })
	served := make(chan struct{})
	go func() {
		defer close(served)
		m := s.request(wire.MethodProcessRead)
		s.reply(m.ID, wire.ReadResult{Chunks: []wire.Chunk{chunk(4, "d")}, NextSeq: 5})
	}()
	late, err := p.Events(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	<-served
	if ev := nextEvent(t, late); ev.Kind != EventGap || ev.Seq != 1 || ev.To != 3 {
		t.Fatalf("late subscriber's first event %+v; want the gap 1..3", ev)
	}
	s.output("p", 4, "d")
	wantEvent(t, late, EventOutput, 4, "d")
}

// A subscriber that lags behind its queue recovers what it missed from
// the client's own history, without asking the server (which, with a
// closed retention of 0, has forgotten the process).
func TestClientLaggedSubscriberRecoversLocally(t *testing.T) {
	defer func(old int) { liveQueueCap = old }(liveQueueCap)
	liveQueueCap = 4
	c, s, _ := fakeClient(t, false)
	p := startFake(t, c, s, "p", nil)
	st, err := p.Events(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	for i := 1; i <= n; i++ {
		s.output("p", uint64(i), fmt.Sprintf("line%d\n", i))
	}
	s.exited("p", n+1, 0)
	s.closed("p", n+2)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := p.Wait(ctx); err != nil { // everything reached the client before we read
		t.Fatal(err)
	}
	lagged, seq := 0, uint64(0)
	for {
		ev := nextEvent(t, st)
		if ev.Kind == EventLagged {
			lagged++
			continue
		}
		if ev.Seq != seq+1 || ev.Kind == EventGap || ev.Kind == EventFailed {
			t.Fatalf("event %+v after seq %d", ev, seq)
		}
		seq = ev.Seq
		if ev.Kind == EventClosed {
			break
		}
	}
	if lagged == 0 || seq != n+2 {
		t.Fatalf("lagged %d times, last seq %d", lagged, seq)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel() // a read that only takes what is already there
	if b, err := s.tr.ReadMessage(done); err == nil {
		t.Fatalf("the client asked the server: %s", b)
	}
}

// A subscriber right after Start sees every event from seq 1 even when the
// server would no longer serve them (closed retention 0 forgets the
// process once its ending is delivered): the client keeps them for it.
func TestClientFirstSubscriberNeedsNoHistoryRead(t *testing.T) {
	c, s, _ := fakeClient(t, false)
	p := startFake(t, c, s, "p", func() {
		s.output("p", 1, "a")
		s.exited("p", 2, 3)
		s.closed("p", 3)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	st, err := p.Events(ctx) // the fake server answers no read
	if err != nil {
		t.Fatal(err)
	}
	wantEvent(t, st, EventOutput, 1, "a")
	wantEvent(t, st, EventExited, 2, "")
	wantEvent(t, st, EventClosed, 3, "")
}

// When the connection drops, every process that has not closed, including
// one that exited but whose output has not ended, fails its Wait with
// the disconnect at once.
func TestClientDisconnectLatchExitedNotClosed(t *testing.T) {
	c, s, _ := fakeClient(t, false)
	exited := startFake(t, c, s, "exited", func() { s.exited("exited", 1, 0) })
	running := startFake(t, c, s, "running", nil)
	// process/list is answered after the exit notification: the client has it.
	go func() {
		m := s.request(wire.MethodProcessList)
		s.reply(m.ID, wire.ListResult{Processes: []wire.ProcessInfo{}})
	}()
	if _, err := c.List(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.tr.Close()
	for _, p := range []Process{exited, running} {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err := p.Wait(ctx)
		cancel()
		if !errors.Is(err, ErrDisconnected) {
			t.Fatalf("Wait of %s after the disconnect: %v; want ErrDisconnected", p.ID(), err)
		}
		select {
		case <-p.Done():
		default:
			t.Fatalf("Done of %s still open after the disconnect", p.ID())
		}
	}
}

// A process the server failed (process/closed with "failure") ends its
// stream with EventFailed and its Wait with a *ProcessError.
func TestClientProcessFailure(t *testing.T) {
	c, s, _ := fakeClient(t, false)
	p := startFake(t, c, s, "p", func() { s.output("p", 1, "a") })
	st, _ := p.Events(context.Background())
	wantEvent(t, st, EventOutput, 1, "a")
	s.notify(wire.NotifyProcessClosed, map[string]any{"processId": "p", "seq": 2, "failure": "process p failed: internal error: boom"})
	ev := nextEvent(t, st)
	var pe *ProcessError
	if ev.Kind != EventFailed || !errors.As(ev.Err, &pe) || !errors.Is(ev.Err, ErrProcessFailed) {
		t.Fatalf("event %+v; want EventFailed with a *ProcessError", ev)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := p.Wait(ctx); !errors.As(err, &pe) || pe.ID != "p" || pe.Message != "process p failed: internal error: boom" {
		t.Fatalf("Wait = %v; want the *ProcessError", err)
	}
}

// A process ended by a resource limit while the client was away: the
// catch-up read carries the limit (process/read's ext field), so Wait
// reports it as it would have from the process/exited notification.
func TestClientCatchUpKeepsTheLimit(t *testing.T) {
	c, s, servers := fakeClient(t, true)
	p := startFake(t, c, s, "p", func() { s.output("p", 1, "a") })
	st, err := p.Events(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	wantEvent(t, st, EventOutput, 1, "a")
	cutAndResume(t, s, servers, "p", 1, wire.ReadResult{NextSeq: 4, Exited: true, ExitCode: intp(137), Limit: "memory", Closed: true})
	wantEvent(t, st, EventExited, 2, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	es, err := p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if es.Code != 137 || es.Limit != "memory" {
		t.Fatalf("wait after a catch-up that carried the limit: %+v; want code 137, limit memory", es)
	}
}
