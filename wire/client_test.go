package wire_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runtimed/runtimed/wire"
	"github.com/runtimed/runtimed/wire/wiretest"
)

// The client core against a scripted server over a real websocket and over
// MemPipe. The server side is a plain loop on a wire.Transport.

// pipeFunc returns a connected client and server transport.
type pipeFunc func(t *testing.T) (client, server wire.Transport)

func memPipe(t *testing.T) (wire.Transport, wire.Transport) {
	c, s := wiretest.MemPipe(64)
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

func wsPipe(t *testing.T) (wire.Transport, wire.Transport) {
	t.Helper()
	got := make(chan *wire.WebsocketTransport, 1)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tr, err := wire.AcceptWebsocket(w, r, 0)
		if err != nil {
			t.Errorf("accept: %v", err)
			return
		}
		got <- tr
		<-release
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := wire.DialWebsocket(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var s *wire.WebsocketTransport
	select {
	case s = <-got:
	case <-ctx.Done():
		t.Fatal("no connection accepted")
	}
	t.Cleanup(func() {
		c.Close()
		s.Close()
		close(release)
		srv.Close()
	})
	return c, s
}

var pipes = map[string]pipeFunc{"mem": memPipe, "websocket": wsPipe}

// request is what the scripted server reads.
type request struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

func readRequest(t *testing.T, s wire.Transport) request {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := s.ReadMessage(ctx)
	if err != nil {
		t.Fatalf("server read: %v", err)
	}
	var r request
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("server got %q: %v", b, err)
	}
	return r
}

func send(t *testing.T, s wire.Transport, msg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.WriteMessage(ctx, []byte(msg)); err != nil {
		t.Fatalf("server write: %v", err)
	}
	if err := s.Flush(); err != nil {
		t.Fatalf("server flush: %v", err)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Concurrent calls answered in reverse order each get their own answer.
func TestClientCorrelatesOutOfOrderAnswers(t *testing.T) {
	for name, pipe := range pipes {
		t.Run(name, func(t *testing.T) {
			ct, st := pipe(t)
			c := wire.NewClient(ct, wire.ClientOptions{})
			defer c.Close()
			const n = 16
			results := make([]string, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					res, err := c.Call(ctxT(t), "echo", map[string]int{"n": i})
					results[i], errs[i] = string(res), err
				})
			}
			reqs := make([]request, n)
			for i := range n {
				reqs[i] = readRequest(t, st)
			}
			for i := n - 1; i >= 0; i-- {
				send(t, st, fmt.Sprintf(`{"id":%s,"result":%s}`, reqs[i].ID, reqs[i].Params))
			}
			wg.Wait()
			for i := range n {
				if errs[i] != nil || results[i] != fmt.Sprintf(`{"n":%d}`, i) {
					t.Errorf("call %d: got %s, %v", i, results[i], errs[i])
				}
			}
		})
	}
}

// Notifications and a server request reach Handle in order, an error
// answer is an *Error, and an answer nobody waits for goes to Handle too.
func TestClientHandlesNotificationsAndErrors(t *testing.T) {
	for name, pipe := range pipes {
		t.Run(name, func(t *testing.T) {
			ct, st := pipe(t)
			got := make(chan wire.Message, 8)
			var malformed []string
			var mu sync.Mutex
			c := wire.NewClient(ct, wire.ClientOptions{
				Handle: func(m wire.Message) { got <- m },
				Malformed: func(data []byte, err *wire.Error) {
					mu.Lock()
					malformed = append(malformed, string(data))
					mu.Unlock()
				},
			})
			defer c.Close()
			p, err := c.Go(ctxT(t), "boom", nil)
			if err != nil {
				t.Fatal(err)
			}
			r := readRequest(t, st)
			send(t, st, `{"method":"note","params":{"a":1}}`)
			send(t, st, `{"id":"srv-1","method":"ask","params":{}}`)
			send(t, st, `not json`)
			send(t, st, `{"id":999,"result":{}}`)
			send(t, st, fmt.Sprintf(`{"id":%s,"error":{"code":-32601,"message":"no such method"}}`, r.ID))
			resp, err := p.Wait(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			var we *wire.Error
			if !errors.As(resp.Err(), &we) || we.Code != -32601 || we.Message != "no such method" {
				t.Fatalf("error answer: %v", resp.Err())
			}
			want := []string{"note/notification", "ask/request", "/response"}
			for _, w := range want {
				select {
				case m := <-got:
					kinds := map[wire.Kind]string{wire.KindNotification: "notification", wire.KindRequest: "request", wire.KindResponse: "response"}
					if m.Method+"/"+kinds[m.Kind] != w {
						t.Errorf("handled %s/%s, want %s", m.Method, kinds[m.Kind], w)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("%s not handled", w)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(malformed) != 1 || malformed[0] != "not json" {
				t.Errorf("malformed: %q", malformed)
			}
		})
	}
}

// The transport's end fails every pending call with the cause, and later
// calls at once.
func TestClientLatchFailsPendingCalls(t *testing.T) {
	for name, pipe := range pipes {
		t.Run(name, func(t *testing.T) {
			ct, st := pipe(t)
			c := wire.NewClient(ct, wire.ClientOptions{})
			defer c.Close()
			var wg sync.WaitGroup
			errs := make(chan error, 3)
			for range 3 {
				wg.Go(func() {
					_, err := c.Call(ctxT(t), "hang", nil)
					errs <- err
				})
			}
			for range 3 {
				readRequest(t, st)
			}
			cut := errors.New("cable cut")
			if mt, ok := st.(*wiretest.MemTransport); ok {
				mt.Cut(cut)
			} else {
				st.Close()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if !errors.Is(err, wire.ErrConnectionLost) {
					t.Errorf("pending call: %v, want ErrConnectionLost", err)
				}
				if name == "mem" && !errors.Is(err, cut) {
					t.Errorf("pending call: %v, want the cut's error", err)
				}
			}
			select {
			case <-c.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("Done not closed")
			}
			if _, err := c.Call(ctxT(t), "later", nil); !errors.Is(err, wire.ErrConnectionLost) {
				t.Errorf("later call: %v", err)
			}
			c.Close()
			if !errors.Is(c.Err(), wire.ErrConnectionLost) {
				t.Errorf("Close replaced the cause: %v", c.Err())
			}
		})
	}
}

// A call whose ctx ends returns the ctx error; the others go on and its
// late answer reaches Handle.
func TestClientCtxCancelsOneCall(t *testing.T) {
	for name, pipe := range pipes {
		t.Run(name, func(t *testing.T) {
			ct, st := pipe(t)
			late := make(chan wire.Message, 1)
			c := wire.NewClient(ct, wire.ClientOptions{Handle: func(m wire.Message) { late <- m }})
			defer c.Close()
			ctx, cancel := context.WithCancel(context.Background())
			slow, err := c.Go(ctx, "slow", nil)
			if err != nil {
				t.Fatal(err)
			}
			fast, err := c.Go(ctxT(t), "fast", nil)
			if err != nil {
				t.Fatal(err)
			}
			rs, rf := readRequest(t, st), readRequest(t, st)
			cancel()
			if _, err := slow.Wait(ctx); !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled call: %v", err)
			}
			send(t, st, fmt.Sprintf(`{"id":%s,"result":"late"}`, rs.ID))
			send(t, st, fmt.Sprintf(`{"id":%s,"result":"ok"}`, rf.ID))
			r, err := fast.Wait(ctxT(t))
			if err != nil || string(r.Result) != `"ok"` {
				t.Fatalf("other call: %s, %v", r.Result, err)
			}
			select {
			case m := <-late:
				if string(m.ID) != string(rs.ID) || string(m.Result) != `"late"` {
					t.Errorf("late answer: %+v", m)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("late answer not handled")
			}
			if c.Err() != nil {
				t.Errorf("client failed: %v", c.Err())
			}
		})
	}
}

// Requests sent by successive Go calls reach the server in that order,
// whichever path (direct or queued) each write took.
func TestClientGoKeepsOrder(t *testing.T) {
	ct, st := wiretest.MemPipeSized(1, 64)
	defer st.Close()
	c := wire.NewClient(ct, wire.ClientOptions{})
	defer c.Close()
	const n = 50
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			if _, err := c.Go(ctxT(t), "m", map[string]int{"i": i}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i := range n {
		r := readRequest(t, st)
		if string(r.Params) != fmt.Sprintf(`{"i":%d}`, i) {
			t.Fatalf("request %d: %s", i, r.Params)
		}
	}
	<-done
}

// Inline mode hands what precedes the answer to the handlers on the
// caller's goroutine, in order, before the call returns.
func TestClientInlineHandsNotificationsFirst(t *testing.T) {
	for name, pipe := range pipes {
		t.Run(name, func(t *testing.T) {
			ct, st := pipe(t)
			var seen []string // written by the caller's goroutine only
			peeked := 0
			c := wire.NewClient(ct, wire.ClientOptions{
				Inline: true,
				Peek: func(b []byte) bool {
					if strings.Contains(string(b), `"fast"`) {
						peeked++
						return true
					}
					return false
				},
				Handle: func(m wire.Message) { seen = append(seen, m.Method) },
			})
			defer c.Close()
			go func() {
				r := readRequest(t, st)
				send(t, st, `{"method":"a","params":{}}`)
				send(t, st, `{"method":"fast","params":{}}`)
				send(t, st, `{"method":"b","params":{}}`)
				send(t, st, fmt.Sprintf(`{"id":%s,"result":{"x":1}}`, r.ID))
				send(t, st, `{"method":"after","params":{}}`)
			}()
			res, err := c.Call(ctxT(t), "m", nil)
			if err != nil || string(res) != `{"x":1}` {
				t.Fatalf("call: %s, %v", res, err)
			}
			if strings.Join(seen, ",") != "a,b" || peeked != 1 {
				t.Fatalf("before the answer: handled %q, peeked %d", seen, peeked)
			}
			if err := c.Poll(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			if strings.Join(seen, ",") != "a,b,after" {
				t.Fatalf("after Poll: %q", seen)
			}
		})
	}
}

// A second call while an inline call waits is refused with ErrInlineBusy;
// once the first returns, calls work again.
func TestClientInlineRefusesConcurrentCalls(t *testing.T) {
	ct, st := memPipe(t)
	c := wire.NewClient(ct, wire.ClientOptions{Inline: true})
	defer c.Close()
	p, err := c.Go(ctxT(t), "first", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Call(ctxT(t), "second", nil); !errors.Is(err, wire.ErrInlineBusy) {
		t.Fatalf("concurrent inline call: %v, want ErrInlineBusy", err)
	}
	if err := c.Poll(ctxT(t)); !errors.Is(err, wire.ErrInlineBusy) {
		t.Fatalf("Poll during a call: %v, want ErrInlineBusy", err)
	}
	r := readRequest(t, st)
	send(t, st, fmt.Sprintf(`{"id":%s,"result":1}`, r.ID))
	if res, err := p.Wait(ctxT(t)); err != nil || string(res.Result) != "1" {
		t.Fatalf("first: %s, %v", res.Result, err)
	}
	go func() {
		r := readRequest(t, st)
		send(t, st, fmt.Sprintf(`{"id":%s,"result":2}`, r.ID))
	}()
	if res, err := c.Call(ctxT(t), "third", nil); err != nil || string(res) != "2" {
		t.Fatalf("after the first: %s, %v", res, err)
	}
}

// In inline mode a ctx that ends while the caller reads fails the client
// (the answer's place in the stream is lost) and the transport's end
// fails the call in progress.
func TestClientInlineFailures(t *testing.T) {
	ct, st := memPipe(t)
	c := wire.NewClient(ct, wire.ClientOptions{Inline: true})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		readRequest(t, st)
		cancel()
	}()
	if _, err := c.Call(ctx, "m", nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled inline call: %v", err)
	}
	if !errors.Is(c.Err(), wire.ErrConnectionLost) || !errors.Is(c.Err(), context.Canceled) {
		t.Fatalf("latched: %v", c.Err())
	}
	c.Close()

	ct, st = memPipe(t)
	c = wire.NewClient(ct, wire.ClientOptions{Inline: true})
	defer c.Close()
	cut := errors.New("gone")
	go func() {
		readRequest(t, st)
		st.(*wiretest.MemTransport).Cut(cut)
	}()
	if _, err := c.Call(ctxT(t), "m", nil); !errors.Is(err, cut) || !errors.Is(err, wire.ErrConnectionLost) {
		t.Fatalf("inline call on a cut pipe: %v", err)
	}
}

// WriteRaw and WithWriter go through the same write side; Close is
// ErrClientClosed for later calls.
func TestClientRawWrites(t *testing.T) {
	ct, st := memPipe(t)
	c := wire.NewClient(ct, wire.ClientOptions{})
	if err := c.WriteRaw(ctxT(t), []byte(`{"garbage`)); err != nil {
		t.Fatal(err)
	}
	if err := c.WithWriter(ctxT(t), func(tr wire.Transport) error { return tr.WriteMessage(context.Background(), []byte("two")) }); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`{"garbage`, "two"} {
		b, err := st.ReadMessage(ctxT(t))
		if err != nil || string(b) != want {
			t.Fatalf("server read %q, %v; want %q", b, err, want)
		}
	}
	c.Close()
	if _, err := c.Call(ctxT(t), "m", nil); !errors.Is(err, wire.ErrClientClosed) {
		t.Fatalf("call after Close: %v", err)
	}
}

// BenchmarkClientRoundTrip measures one call through the core over
// MemPipe against an echo loop: with the reader goroutine (its answer is
// handed over) and inline (the caller reads it).
func BenchmarkClientRoundTrip(b *testing.B) {
	for _, inline := range []bool{false, true} {
		name := "reader"
		if inline {
			name = "inline"
		}
		b.Run(name, func(b *testing.B) {
			ct, st := wiretest.MemPipe(1)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for {
					msg, err := st.ReadMessage(context.Background())
					if err != nil {
						return
					}
					m, _ := wire.Decode(msg)
					out, _ := wire.AppendResult(nil, m.ID, nil)
					if st.WriteMessage(context.Background(), out) != nil {
						return
					}
				}
			}()
			c := wire.NewClient(ct, wire.ClientOptions{Inline: inline})
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Call(context.Background(), "m", nil); err != nil {
					b.Fatal(err)
				}
			}
			c.Close()
			st.Close()
			<-done
		})
	}
}
