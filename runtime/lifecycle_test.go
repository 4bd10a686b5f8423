package runtime

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/runtimed/runtimed/actors"
)

// backendsWith are the three backends on one configuration.
func backendsWith(cfg Config) []backendCase {
	return []backendCase{
		{"local", func(t *testing.T) Backend {
			c := cfg
			c.Logger = zaptest.NewLogger(t)
			l := NewLocal(c)
			t.Cleanup(func() { _ = l.Close() })
			return l
		}},
		{"websocket", func(t *testing.T) Backend { c, _ := newWSBackend(t, cfg, nil); return c }},
		{"stdio", func(t *testing.T) Backend { return newStdioServer(t, cfg).c }},
	}
}

// A negative ClosedRetention forgets a closed process right after its
// ending was delivered, never before: Wait always returns, and a
// subscriber that arrives just after Start gets every event.
func TestNegativeClosedRetention(t *testing.T) {
	for _, bc := range backendsWith(Config{ClosedRetention: -1}) {
		t.Run(bc.name, func(t *testing.T) {
			b := bc.make(t)
			for i := 0; i < 20; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				p, err := b.Start(ctx, sh(t, `echo out; echo err >&2; exit 3`))
				if err != nil {
					t.Fatal(err)
				}
				s, err := p.Events(ctx)
				if err != nil {
					t.Fatalf("run %d: Events: %v", i, err)
				}
				evs := collect(t, ctx, s)
				var out strings.Builder
				exits := 0
				for j, e := range evs {
					out.WriteString(e.data) // output may follow the exit (PROTOCOL.md §4)
					if e.kind == EventExited && e.code == 3 {
						exits++
					}
					if e.seq != uint64(j+1) {
						t.Fatalf("run %d: seq %d at %d", i, e.seq, j)
					}
				}
				n := len(evs)
				if n == 0 || exits != 1 || evs[n-1].kind != EventClosed || out.String() != "out\nerr\n" && out.String() != "err\nout\n" {
					t.Fatalf("run %d: events %+v", i, evs)
				}
				if st, err := p.Wait(ctx); err != nil || st.Code != 3 {
					t.Fatalf("run %d: Wait = %+v %v", i, st, err)
				}
				// Wait alone, without a subscriber.
				q, err := b.Start(ctx, sh(t, `exit 4`))
				if err != nil {
					t.Fatal(err)
				}
				if st, err := q.Wait(ctx); err != nil || st.Code != 4 {
					t.Fatalf("run %d: Wait without subscriber = %+v %v", i, st, err)
				}
				cancel()
			}
		})
	}
}

// A panic in one process's actor fails that process with a typed error
// (Wait: *ProcessError, matching ErrProcessFailed) on every backend; the
// backend keeps serving the others.
func TestProcessPanicTypedError(t *testing.T) {
	defer actors.SetTestHooks(actors.TestHooks{ProcessRequest: func(id string) {
		if id == "bad" {
			panic("injected process fault")
		}
	}})()
	forEachBackend(t, func(t *testing.T, b Backend) {
		ctx := ctxT(t)
		bad, err := b.Start(ctx, Spec{ID: "bad", Argv: []string{"sleep", "1000"}, Dir: "/"})
		if err != nil {
			t.Fatal(err)
		}
		if err := bad.Signal(ctx, SigUser1); !errors.Is(err, ErrProcessFailed) {
			t.Fatalf("a request to the failing process = %v; want a *ProcessError (the same on every backend)", err)
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err = bad.Wait(wctx)
		var pe *ProcessError
		if !errors.As(err, &pe) || !errors.Is(err, ErrProcessFailed) || pe.ID != "bad" || !strings.Contains(pe.Message, "injected process fault") {
			t.Fatalf("Wait = %v; want a *ProcessError", err)
		}
		if _, err := bad.Read(ctx, ReadOptions{}); !errors.Is(err, ErrProcessFailed) {
			t.Fatalf("Read of the failed process = %v; want a *ProcessError", err)
		}
		good, err := b.Start(ctx, sh(t, `echo fine; exit 2`))
		if err != nil {
			t.Fatal(err)
		}
		if st, err := good.Wait(ctx); err != nil || st.Code != 2 {
			t.Fatalf("the other process: %+v %v", st, err)
		}
	})
}

// Server.Close ends the connections before it kills the processes: a
// client sees its connection drop (every stream fails with the
// disconnect), never the deaths the kill causes.
func TestServerCloseShowsTheDropNotTheKill(t *testing.T) {
	c, ws := newWSBackend(t, Config{}, nil)
	ctx := ctxT(t)
	var streams []*EventStream
	var procs []Process
	for i := 0; i < 20; i++ {
		p, err := c.Start(ctx, sh(t, `echo up; exec sleep 1000`))
		if err != nil {
			t.Fatal(err)
		}
		s, err := p.Events(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ev, err := s.Next(ctx); err != nil || ev.Kind != EventOutput {
			t.Fatalf("first event %+v %v", ev, err)
		}
		streams, procs = append(streams, s), append(procs, p)
	}
	ws.stop()
	for i, s := range streams {
		ev, err := s.Next(ctx)
		for err == nil && ev.Kind == EventLagged { // the latch closes live queues first
			ev, err = s.Next(ctx)
		}
		if err != nil || ev.Kind != EventFailed || !errors.Is(ev.Err, ErrDisconnected) {
			t.Fatalf("process %d: after Close the stream got %+v %v; want the disconnect, not an exit", i, ev, err)
		}
		if _, err := procs[i].Wait(ctx); !errors.Is(err, ErrDisconnected) {
			t.Fatalf("process %d: Wait = %v", i, err)
		}
	}
}
