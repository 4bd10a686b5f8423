package runtime

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/runtimed/runtimed/wire"
)

// A process started by one client is attached by another that resumed the
// detached session: its Events show the earlier output (from retention)
// and the later output once each, stdin reaches it, Wait has its status.
func TestAttachAfterResume(t *testing.T) {
	ws := startWSServer(t, Config{})
	ctx := ctxT(t)
	first, err := Dial(ctx, ws.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec := sh(t, `echo early; read x; echo "later $x"; exit 7`)
	spec.ID, spec.PipeStdin = "job", true
	p, err := first.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	s, err := p.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := s.Next(ctx); err != nil || string(ev.Data) != "early\n" {
		t.Fatalf("first event %+v %v", ev, err)
	}
	sid := first.SessionID()
	_ = first.Close()

	// Dial retries while the server has not seen the drop yet (-32010).
	second, err := Dial(ctx, ws.url, &ClientOptions{ResumeSessionID: sid})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if _, err := second.Attach(ctx, "nope"); !errors.Is(err, ErrUnknownProcess) {
		t.Fatalf("Attach of an unknown id = %v", err)
	}
	q, err := second.Attach(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if again, err := second.Attach(ctx, "job"); err != nil || again.ID() != "job" {
		t.Fatalf("a second Attach = %v, %v", again, err)
	}
	events, err := q.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Write(ctx, []byte("go\n")); err != nil {
		t.Fatal(err)
	}
	got := collect(t, ctx, events)
	want := []entry{{1, EventOutput, Stdout, "early\n", 0}, {2, EventOutput, Stdout, "later go\n", 0}, {3, EventExited, "", "", 7}, {4, EventClosed, "", "", 0}}
	if len(got) != len(want) {
		t.Fatalf("events %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("event %d: %+v, want %+v (all: %+v)", i, got[i], want[i], got)
		}
	}
	if st, err := q.Wait(ctx); err != nil || st.Code != 7 {
		t.Fatalf("Wait = %v, %v", st, err)
	}
}

// Local attaches to its own processes by id, with their whole history.
func TestLocalAttach(t *testing.T) {
	l := newLocalBackend(t).(*Local)
	ctx := ctxT(t)
	spec := sh(t, `echo one; read x; echo two`)
	spec.ID, spec.PipeStdin = "job", true
	if _, err := l.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Attach(context.Background(), "nope"); !errors.Is(err, ErrUnknownProcess) {
		t.Fatalf("Attach of an unknown id = %v", err)
	}
	q, err := l.Attach(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	events, err := q.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := events.Next(ctx); err != nil || ev.Seq != 1 || string(ev.Data) != "one\n" {
		t.Fatalf("first event %+v %v", ev, err)
	}
	if err := q.Write(ctx, []byte("\n")); err != nil {
		t.Fatal(err)
	}
	got := collect(t, ctx, events)
	if len(got) != 3 || got[0].data != "two\n" || got[2].kind != EventClosed {
		t.Fatalf("events %+v", got)
	}
}

// Dial with ResumeSessionID retries while the server still holds the
// session for another connection (-32010, "the client may retry"): here
// the first client is closed only once the resuming Dial has been refused
// and dialed again, so without the retry Dial would fail. An unknown
// session is not retried.
func TestDialResumeRetriesWhileAttached(t *testing.T) {
	ws := startWSServer(t, Config{})
	ctx := ctxT(t)
	first, err := Dial(ctx, ws.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	var dials atomic.Int64
	redialed := make(chan struct{})
	dial := func(ctx context.Context) (wire.Transport, error) {
		if dials.Add(1) == 2 {
			close(redialed)
		}
		return wire.DialWebsocket(ctx, ws.url, nil, 0)
	}
	type result struct {
		c   *Client
		err error
	}
	got := make(chan result, 1)
	go func() {
		c, err := Dial(ctx, ws.url, &ClientOptions{ResumeSessionID: first.SessionID(), DialTransport: dial})
		got <- result{c, err}
	}()
	select {
	case <-redialed: // refused with -32010 at least once, dialing again
	case r := <-got:
		t.Fatalf("Dial returned before retrying: %v", r.err)
	case <-ctx.Done():
		t.Fatal("no second dial")
	}
	_ = first.Close()
	r := <-got
	if r.err != nil {
		t.Fatalf("resume after the first client closed: %v", r.err)
	}
	_ = r.c.Close()

	dials.Store(10)
	_, err = Dial(ctx, ws.url, &ClientOptions{ResumeSessionID: "no-such-session", DialTransport: dial})
	var re *RPCError
	if !errors.As(err, &re) || re.Code != wire.CodeInvalidRequest || dials.Load() != 11 {
		t.Fatalf("unknown session: %v after %d dials; want -32600 after one", err, dials.Load()-10)
	}
}
