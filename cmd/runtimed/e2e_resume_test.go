package main_test

import (
	"context"
	"crypto/sha256"
	"io"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runtimed/runtimed/runtime"
	"github.com/runtimed/runtimed/wire"
	"github.com/runtimed/runtimed/wire/wiretest"
)

// Issue 14's resume figure against the real binary with its default
// retention (1 MiB): a fast producer (`seq`, 51 MB; 19 MB under the race
// detector) under a Go client whose
// connection drops abruptly ten times mid-stream, each reconnect 100 ms
// later. The stream that arrives is the child's, byte for byte: no gap, no
// duplicate, the same sha256 (before: 16 of 50 MB arrived, 129 chunks
// lost). What makes it hold: the server keeps what a detached session has
// not read (the child blocks meanwhile), and the client acknowledges what
// it received (process/ack), so output in flight at a drop is still
// retained for the catch-up read.
func TestHostileResumeFastProducerLossless(t *testing.T) {
	t.Parallel()
	srv := wiretest.StartWS(t, bin)
	lines, drops := 6_400_000, int64(10) // 50.9 MB, the figure
	if raceEnabled {
		lines = 2_500_000 // 18.9 MB: the client decodes several times slower
	}
	want := wiretest.SeqOutput(lines)
	plan := &wiretest.DropPlan{Every: 1 << 20, Drops: drops}
	var dials atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := runtime.Dial(ctx, srv.URL, &runtime.ClientOptions{
		Reconnect: true,
		DialTransport: func(ctx context.Context) (wire.Transport, error) {
			if dials.Add(1) > 1 {
				// Detached for a while: the child fills retention meanwhile.
				time.Sleep(100 * time.Millisecond)
			}
			tr, err := wire.DialWebsocket(ctx, srv.URL, nil, 0)
			if err != nil {
				return nil, err
			}
			return &wiretest.OutputDropper{Transport: tr, Plan: plan}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The child starts writing once the subscriber is there (a line on stdin).
	p, err := c.Start(ctx, runtime.Spec{Argv: []string{"sh", "-c", "read go && exec seq 1 " + strconv.Itoa(lines)}, Dir: t.TempDir(), Env: map[string]string{"PATH": "/usr/bin:/bin"}, PipeStdin: true})
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
	for {
		ev, err := s.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("after %d of %d bytes: %v", len(got), len(want), err)
		}
		switch ev.Kind {
		case runtime.EventFailed, runtime.EventGap:
			t.Fatalf("%v after %d of %d bytes and %d drops: %+v", ev.Kind, len(got), len(want), plan.Done.Load(), ev)
		case runtime.EventLagged:
			// The subscriber fell behind its queue: it resubscribes from its
			// seq (the client's history, then the server's retention).
			continue
		}
		if ev.Seq != seq+1 {
			t.Fatalf("seq %d after %d", ev.Seq, seq)
		}
		seq = ev.Seq
		got = append(got, ev.Data...)
	}
	if n := plan.Done.Load(); n != drops || dials.Load() < drops+1 {
		t.Fatalf("%d drops, %d dials; want %d drops mid-stream, each followed by a reconnect", n, dials.Load(), drops)
	}
	if len(got) != len(want) || sha256.Sum256(got) != sha256.Sum256(want) {
		t.Fatalf("after %d drops: %d bytes (sha256 %x), want %d (sha256 %x)", drops, len(got), sha256.Sum256(got), len(want), sha256.Sum256(want))
	}
	if st, err := p.Wait(ctx); err != nil || st.Code != 0 {
		t.Fatalf("wait: %+v %v", st, err)
	}
}
