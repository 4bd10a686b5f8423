package runtime

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runtimed/runtimed/wire"
)

// Kill the server under a client that has a pending long poll, a
// subscriber and an idle process.
func TestClientDisconnectLatch(t *testing.T) {
	c, ws := newWSBackend(t, Config{}, nil)
	ctx := ctxT(t)
	idle, err := c.Start(ctx, sh(t, "sleep 1000"))
	if err != nil {
		t.Fatal(err)
	}
	busy, err := c.Start(ctx, sh(t, "echo started; sleep 1000"))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := busy.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := sub.Next(ctx); err != nil || ev.Kind != EventOutput {
		t.Fatalf("first event %+v %v", ev, err)
	}
	pollErr := make(chan error, 1)
	go func() {
		_, err := idle.Read(ctx, ReadOptions{Wait: 30 * time.Second})
		pollErr <- err
	}()
	// The poll must be pending on the server before the server dies: a
	// parallel request answered after it proves the server has read it.
	waitPending(t, c, ctx)

	ws.stop()
	killed := time.Now()

	select {
	case err := <-pollErr:
		if !errors.Is(err, ErrDisconnected) || !strings.HasPrefix(err.Error(), "runtimed transport disconnected") {
			t.Fatalf("pending poll ended with %v; want the disconnect error", err)
		}
		if d := time.Since(killed); d > 2*time.Second {
			t.Fatalf("poll ended %v after the disconnect", d)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("pending long poll did not end within 2s of the disconnect")
	}
	failed := 0
	for {
		ev, err := sub.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.Kind == EventFailed {
			failed++
			if !errors.Is(ev.Err, ErrDisconnected) {
				t.Fatalf("failed event carries %v", ev.Err)
			}
		}
	}
	if failed != 1 {
		t.Fatalf("subscriber saw %d failed events; want exactly 1", failed)
	}
	start := time.Now()
	if err := idle.Write(ctx, []byte("x")); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("write after disconnect: %v", err)
	}
	if _, err := c.Start(ctx, sh(t, "true")); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("start after disconnect: %v", err)
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("calls after the latch took %v; they must fail at once", d)
	}
	if _, err := idle.Wait(ctx); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("Wait after disconnect: %v", err)
	}
	if !errors.Is(c.Err(), ErrDisconnected) {
		t.Fatalf("client Err = %v", c.Err())
	}
}

// waitPending makes sure earlier requests reached the server: requests are
// read in order, so an answered environment/status follows them.
func waitPending(t *testing.T, c *Client, ctx context.Context) {
	t.Helper()
	if _, err := c.EnvironmentStatus(ctx); err != nil {
		t.Fatal(err)
	}
}

// cuttable is a transport a test can drop, as a network would.
type cuttable struct {
	wire.Transport
	once sync.Once
}

func (c *cuttable) cut() { c.once.Do(func() { c.Transport.Close() }) }

// cuttableDials dials url as a reconnecting Client does, keeping each
// connection for the test to cut: nth(i) is the i-th one dialled (nil
// before it was).
func cuttableDials(url string) (dial func(context.Context) (wire.Transport, error), nth func(int) *cuttable) {
	var mu sync.Mutex
	var conns []*cuttable
	dial = func(ctx context.Context) (wire.Transport, error) {
		tr, err := wire.DialWebsocket(ctx, url, nil, 0)
		if err != nil {
			return nil, err
		}
		ct := &cuttable{Transport: tr}
		mu.Lock()
		conns = append(conns, ct)
		mu.Unlock()
		return ct, nil
	}
	nth = func(i int) *cuttable {
		mu.Lock()
		defer mu.Unlock()
		if i >= len(conns) {
			return nil
		}
		return conns[i]
	}
	return dial, nth
}

func TestClientReconnectCatchesUp(t *testing.T) {
	ws := startWSServer(t, Config{})
	dial, nth := cuttableDials(ws.url)
	opts := &ClientOptions{Reconnect: true, DialTransport: dial}
	c, err := Dial(ctxT(t), ws.url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := ctxT(t)
	rel := filepath.Join(t.TempDir(), "release")
	script := `i=0; while [ $i -lt 1000 ]; do echo line$i; i=$((i+1)); done
while [ ! -e ` + rel + ` ]; do sleep 0.01; done
while [ $i -lt 3000 ]; do echo line$i; i=$((i+1)); done`
	p, err := c.Start(ctx, sh(t, script))
	if err != nil {
		t.Fatal(err)
	}
	s, err := p.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	var seq uint64
	cutDone := false
	for {
		ev, err := s.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Kind {
		case EventFailed, EventGap:
			t.Fatalf("%v during a resumable drop: %+v", ev.Kind, ev)
		case EventLagged:
			continue
		}
		if ev.Seq != seq+1 {
			t.Fatalf("seq %d after %d", ev.Seq, seq)
		}
		seq = ev.Seq
		out.Write(ev.Data)
		if !cutDone && strings.Contains(out.String(), "line999\n") {
			cutDone = true
			nth(0).cut()
			// Written while no connection is attached; retained for catch-up.
			if err := os.WriteFile(rel, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	var want strings.Builder
	for i := 0; i < 3000; i++ {
		want.WriteString("line" + itoa(i) + "\n")
	}
	if out.String() != want.String() {
		t.Fatalf("after resume: %d bytes, want %d", out.Len(), want.Len())
	}
	if nth(1) == nil {
		t.Fatal("client dialed once; the cut should force a reconnect")
	}
	if st, err := p.Wait(ctx); err != nil || st.Code != 0 {
		t.Fatalf("wait after resume: %+v %v", st, err)
	}
	// Writes and reads keep working on the resumed session.
	if _, err := c.EnvironmentStatus(ctx); err != nil {
		t.Fatal(err)
	}
}

// losesStartAnswer drops the connection instead of delivering the answer
// to the first process/start, as a network failure at the worst moment would.
type losesStartAnswer struct {
	*cuttable
	startID string
	done    *atomic.Bool
}

func (l *losesStartAnswer) ReadMessage(ctx context.Context) ([]byte, error) {
	msg, err := l.cuttable.ReadMessage(ctx)
	if err == nil && !l.done.Load() && strings.Contains(string(msg), `"result":{"processId":"`+l.startID+`"`) {
		l.done.Store(true)
		l.cut()
		return nil, errors.New("connection reset (test)")
	}
	return msg, err
}

// A start that succeeded but whose answer was lost is resent after the
// reconnect; "already exists" for our own resent start is success.
func TestClientReconnectStartAnswerLost(t *testing.T) {
	ws := startWSServer(t, Config{})
	var lost atomic.Bool
	opts := &ClientOptions{
		Reconnect: true,
		DialTransport: func(ctx context.Context) (wire.Transport, error) {
			tr, err := wire.DialWebsocket(ctx, ws.url, nil, 0)
			if err != nil {
				return nil, err
			}
			return &losesStartAnswer{cuttable: &cuttable{Transport: tr}, startID: "lost", done: &lost}, nil
		},
	}
	c, err := Dial(ctxT(t), ws.url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := ctxT(t)
	p, err := c.Start(ctx, Spec{ID: "lost", Argv: []string{"sh", "-c", "echo once; exit 4"}, Dir: "/", Env: map[string]string{"PATH": "/usr/bin:/bin"}})
	if err != nil {
		t.Fatalf("start whose answer was lost: %v", err)
	}
	if !lost.Load() {
		t.Fatal("the test transport never dropped the start answer")
	}
	st, err := p.Wait(ctx)
	if err != nil || st.Code != 4 {
		t.Fatalf("wait: %+v %v", st, err)
	}
	r, err := p.Read(ctx, ReadOptions{})
	if err != nil || len(r.Chunks) != 1 || string(r.Chunks[0].Data) != "once\n" {
		t.Fatalf("the process ran once: %+v %v", r, err)
	}
	// A genuine duplicate is still refused.
	var re *RPCError
	if _, err := c.Start(ctx, Spec{ID: "lost", Argv: []string{"true"}, Dir: "/"}); err == nil || !errors.As(err, &re) {
		// the closed process is retained: the server refuses the id
		t.Fatalf("duplicate start after close: %v", err)
	}
}
