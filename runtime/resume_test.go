package runtime

import (
	"context"
	"crypto/sha256"
	"io"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runtimed/runtimed/wire"
	"github.com/runtimed/runtimed/wire/wiretest"
)

// Issue 14, lossless resume: a fast producer (`seq`, 51 MB written as fast
// as the server takes it) under a client whose connection is cut abruptly
// five times mid-stream, each reconnect 100 ms later. While the session is
// detached the process stops being read once its retention holds nothing
// but unread output (the child blocks on the pipe) instead of evicting it;
// after each resume the client catches up with process/read from its last
// seq. The stream that arrives is the child's, byte for byte: no gap (an
// EventGap would say so), no duplicate (seqs are consecutive), same
// sha256. Without the detached rule it fails at the first cut (measured: a
// gap of 54 chunks); without process/ack, at default retention, output in
// flight at a cut is lost (measured: a gap at the first cut).
func TestResumeUnderFastProducerIsLossless(t *testing.T) {
	lines, cuts := 6_400_000, int64(5) // 50.9 MB
	if raceEnabled {
		// The client decodes several times slower; keep the test within a
		// minute on 2 cores. The stream is still much larger than
		// retention, and the first cut comes after 1 MiB.
		lines, cuts = 3_400_000, 2 // 26.6 MB
	}
	t.Run("subscriber keeps up", func(t *testing.T) { resumeFastProducer(t, lines, cuts, liveQueueCap, false) })
	// A subscriber queue of 4 events lags all the time, above all when a
	// catch-up hands it a retention's worth at once: while it resubscribes
	// the client acknowledges nothing past it, so the server still has
	// what it missed.
	t.Run("subscriber lags", func(t *testing.T) { resumeFastProducer(t, lines/4, 2, 4, true) })
}

func resumeFastProducer(t *testing.T, lines int, cuts int64, queue int, mustLag bool) {
	defer func(old int) { liveQueueCap = old }(liveQueueCap)
	liveQueueCap = queue
	want := wiretest.SeqOutput(lines)
	// Default retention (1 MiB), much smaller than what a dropped
	// connection can have in flight (its outbound queue, 256 KiB, and the
	// socket buffers, which TCP grows to several MiB on loopback when the
	// client reads slowly, as under the race detector) and than what the
	// child writes while detached: the client's process/ack keeps the one,
	// the detached rule the other.
	ws := startWSServer(t, Config{})
	plan := &wiretest.DropPlan{Every: 1 << 20, Drops: cuts}
	var dials atomic.Int64
	opts := &ClientOptions{
		Reconnect: true,
		DialTransport: func(ctx context.Context) (wire.Transport, error) {
			if dials.Add(1) > 1 {
				// Detached long enough for the child to write more than
				// retention holds.
				time.Sleep(100 * time.Millisecond)
			}
			tr, err := wire.DialWebsocket(ctx, ws.url, nil, 0)
			if err != nil {
				return nil, err
			}
			return &wiretest.OutputDropper{Transport: tr, Plan: plan}, nil
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := Dial(ctx, ws.url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	// The child waits for a line on stdin, sent once the subscriber is
	// there: the test is about resumes, not about a subscriber that comes
	// after the client let output go (which the client's history covers
	// only for its last 256 KiB).
	p, err := c.Start(ctx, Spec{Argv: []string{"sh", "-c", "read go && exec seq 1 " + strconv.Itoa(lines)}, Dir: t.TempDir(), Env: map[string]string{"PATH": "/usr/bin:/bin"}, PipeStdin: true})
	if err != nil {
		t.Fatal(err)
	}
	s, err := p.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Write(ctx, []byte("go\n")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 0, len(want))
	var seq uint64
	lags := 0
	for {
		ev, err := s.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("after %d of %d bytes: %v", len(got), len(want), err)
		}
		switch ev.Kind {
		case EventFailed, EventGap:
			t.Fatalf("%v after %d of %d bytes and %d cuts: %+v", ev.Kind, len(got), len(want), plan.Done.Load(), ev)
		case EventLagged:
			lags++
			continue
		}
		if ev.Seq != seq+1 {
			t.Fatalf("seq %d after %d", ev.Seq, seq)
		}
		seq = ev.Seq
		got = append(got, ev.Data...)
	}
	if mustLag && lags == 0 {
		t.Fatal("the subscriber never lagged: the case is not exercised")
	}
	done := plan.Done.Load()
	if len(got) != len(want) || sha256.Sum256(got) != sha256.Sum256(want) {
		t.Fatalf("after %d resumes: %d bytes (sha256 %x), want %d (sha256 %x)", done, len(got), sha256.Sum256(got), len(want), sha256.Sum256(want))
	}
	if done != cuts || dials.Load() < cuts+1 {
		t.Fatalf("%d cuts, %d dials; want %d cuts mid-stream, each followed by a reconnect", done, dials.Load(), cuts)
	}
	if st, err := p.Wait(ctx); err != nil || st.Code != 0 {
		t.Fatalf("wait: %+v %v", st, err)
	}
}
