package wire

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// acceptServer serves one websocket connection with AcceptWebsocket and
// hands the transport to the test.
func acceptServer(t *testing.T) (url string, got <-chan *WebsocketTransport) {
	t.Helper()
	ch := make(chan *WebsocketTransport, 1)
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tr, err := AcceptWebsocket(w, r, 0)
		if err != nil {
			t.Errorf("accept: %v", err)
			return
		}
		ch <- tr
		<-done // the handler owns nothing after the upgrade; keep it simple
	}))
	t.Cleanup(func() { close(done); srv.Close() })
	return "ws" + strings.TrimPrefix(srv.URL, "http"), ch
}

// acceptedPair is a dialed client, the server's accepted transport (closed
// at the test's end) and a 10 s context for the test.
func acceptedPair(t *testing.T) (*websocket.Conn, *WebsocketTransport, context.Context) {
	t.Helper()
	url, got := acceptServer(t)
	c := dialClient(t, url)
	tr := <-got
	t.Cleanup(func() { tr.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c, tr, ctx
}

func dialClient(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}})
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(16 << 20)
	t.Cleanup(func() { c.CloseNow() })
	return c
}

func TestWebsocketProgressCountsWrittenBytes(t *testing.T) {
	url, got := acceptServer(t)
	c := dialClient(t, url)
	tr := <-got
	defer tr.Close()
	before, ok := tr.Progress()
	if !ok {
		t.Fatal("an accepted transport must report progress")
	}
	msg := []byte(`{"method":"x","params":{"pad":"` + strings.Repeat("a", 10000) + `"}}`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tr.WriteMessage(ctx, msg); err != nil {
		t.Fatal(err)
	}
	if err := tr.Flush(); err != nil {
		t.Fatal(err)
	}
	after, _ := tr.Progress()
	if after-before < uint64(len(msg)) {
		t.Errorf("progress grew by %d after a %d-byte message", after-before, len(msg))
	}
	if _, b, err := c.Read(ctx); err != nil || len(b) != len(msg) {
		t.Fatalf("client read %d bytes, %v", len(b), err)
	}
	if _, ok := (&WebsocketTransport{}).Progress(); ok {
		t.Error("a dialed transport cannot count bytes")
	}
}

// The messages of one batch (WriteMessage ... Flush) leave in one write:
// nothing reaches the socket before Flush, all of it at Flush, in order. A
// large message is not held: it goes at once, after what is held.
func TestWebsocketBatchLeavesAtFlush(t *testing.T) {
	c, tr, ctx := acceptedPair(t)
	msgs := [][]byte{[]byte(`{"method":"a"}`), []byte(`{"method":"b","params":{"pad":"` + strings.Repeat("b", 3000) + `"}}`), []byte(`{"method":"c"}`)}
	p0, _ := tr.Progress()
	total := 0
	for _, m := range msgs {
		if err := tr.WriteMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
		total += len(m)
	}
	if p, _ := tr.Progress(); p != p0 {
		t.Fatalf("%d bytes reached the socket before Flush; a batch must leave in one write", p-p0)
	}
	if err := tr.Flush(); err != nil {
		t.Fatal(err)
	}
	p1, _ := tr.Progress()
	if p1-p0 < uint64(total) {
		t.Fatalf("Flush sent %d bytes of %d", p1-p0, total)
	}
	big := []byte(`{"method":"big","params":{"pad":"` + strings.Repeat("x", 100<<10) + `"}}`)
	msgs = append(msgs, msgs[0], big, msgs[2])
	if err := tr.WriteMessage(ctx, msgs[3]); err != nil {
		t.Fatal(err)
	}
	if err := tr.WriteMessage(ctx, big); err != nil {
		t.Fatal(err)
	}
	if p, _ := tr.Progress(); p-p1 < uint64(len(msgs[3])+len(big)) {
		t.Fatalf("a %d-byte message was held (%d bytes sent)", len(big), p-p1)
	}
	if err := tr.WriteMessage(ctx, msgs[5]); err != nil {
		t.Fatal(err)
	}
	if err := tr.Flush(); err != nil {
		t.Fatal(err)
	}
	for i, want := range msgs {
		_, b, err := c.Read(ctx)
		if err != nil || string(b) != string(want) {
			t.Fatalf("message %d: got %d bytes (%v), want %d", i, len(b), err, len(want))
		}
	}
}

// A close handshake started while a batch is held sends the held messages,
// then the close frame, at once (not after a Flush that may never come).
func TestWebsocketCloseWithSendsHeldBatch(t *testing.T) {
	url, got := acceptServer(t)
	c := dialClient(t, url)
	tr := <-got
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tr.WriteMessage(ctx, []byte(`{"method":"last"}`)); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- tr.CloseWith(ClosePolicy, "bye") }()
	if _, b, err := c.Read(ctx); err != nil || string(b) != `{"method":"last"}` {
		t.Fatalf("got %q, %v; want the held message first", b, err)
	}
	_, _, err := c.Read(ctx)
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != ClosePolicy || ce.Reason != "bye" {
		t.Fatalf("client saw %v; want close 1008 bye", err)
	}
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("CloseWith did not return")
	}
}

func TestWebsocketCloseWithSendsReason(t *testing.T) {
	url, got := acceptServer(t)
	c := dialClient(t, url)
	tr := <-got
	readErr := make(chan error, 1)
	go func() {
		_, _, err := c.Read(context.Background())
		readErr <- err
	}()
	if err := CloseWithReason(tr, CloseProtocolError, "protocol violation: a client may not send responses"); err != nil {
		t.Logf("CloseWith: %v", err)
	}
	select {
	case err := <-readErr:
		var ce websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != CloseProtocolError || ce.Reason != "protocol violation: a client may not send responses" {
			t.Errorf("client saw %v; want close 1002 with the reason", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no close frame")
	}
}

// A peer that neither reads nor answers the close handshake costs at most
// about a second.
func TestWebsocketCloseWithIsBounded(t *testing.T) {
	url, got := acceptServer(t)
	_ = dialClient(t, url) // never reads
	tr := <-got
	// Fill the peer's receive window so even the close frame cannot be written.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	big := make([]byte, 1<<20)
	for ctx.Err() == nil {
		wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		err := tr.WriteMessage(wctx, big)
		wcancel()
		if err != nil {
			break
		}
	}
	start := time.Now()
	_ = tr.CloseWith(ClosePolicy, "slow consumer")
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("CloseWith took %v with a peer that does not read", d)
	}
}

// A buffer grown for a large message is dropped when the reader releases
// it, and the message stays valid; without a release it is reused.
func TestWebsocketReleasesLargeReadBuffer(t *testing.T) {
	c, tr, ctx := acceptedPair(t)
	large := make([]byte, 4<<20)
	for i := range large {
		large[i] = 'x'
	}
	wrote := make(chan error, 1)
	go func() {
		err := c.Write(ctx, websocket.MessageText, large)
		if err == nil {
			err = c.Write(ctx, websocket.MessageText, []byte(`{"method":"small"}`))
		}
		wrote <- err
	}()
	m, err := tr.ReadMessage(ctx)
	if err != nil || len(m) != len(large) {
		t.Fatalf("read %d bytes, %v", len(m), err)
	}
	ReleaseReadBuffer(tr)
	if tr.buf != nil {
		t.Errorf("the transport keeps a %d-byte read buffer after a release", cap(tr.buf))
	}
	if string(m[:3]) != "xxx" || len(m) != len(large) {
		t.Error("the released message changed")
	}
	if m, err = tr.ReadMessage(ctx); err != nil || string(m) != `{"method":"small"}` {
		t.Fatalf("read %q, %v", m, err)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if cap(tr.buf) > LargeReadBytes {
		t.Errorf("a %d-byte read buffer after a small message", cap(tr.buf))
	}
}

// Bytes a client sends together with its upgrade request (read ahead by the
// HTTP server) reach the transport first.
func TestWebsocketReadAheadBytesKept(t *testing.T) {
	url, got := acceptServer(t)
	addr := strings.TrimPrefix(url, "ws://")
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	payload := []byte(`{"id":1,"method":"environment/status"}`)
	req := "GET / HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
	frame := []byte{0x81, 0x80 | byte(len(payload)), 1, 2, 3, 4}
	for i, b := range payload {
		frame = append(frame, b^[]byte{1, 2, 3, 4}[i%4])
	}
	if _, err := nc.Write(append([]byte(req), frame...)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	tr := <-got
	defer tr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := tr.ReadMessage(ctx)
	if err != nil || string(m) != string(payload) {
		t.Fatalf("read %q, %v; want the frame sent with the upgrade", m, err)
	}

}

// A close handshake the peer starts during a batch is answered: the close
// reply (written by coder/websocket's reader, which then closes the
// socket) is not held behind the batch, and takes the held messages with
// it (the client's Close reads, and drops, the held message first).
// (Found by review: with the cork held for the whole batch, the reply and
// the held messages were lost and the peer saw EOF.)
func TestWebsocketPeerCloseDuringBatch(t *testing.T) {
	c, tr, ctx := acceptedPair(t)
	if err := tr.WriteMessage(ctx, []byte(`{"method":"a"}`)); err != nil { // a batch, not flushed
		t.Fatal(err)
	}
	rerr := make(chan error, 1)
	go func() { _, err := tr.ReadMessage(context.Background()); rerr <- err }() // the server's reader
	if err := c.Close(websocket.StatusNormalClosure, "bye"); err != nil {
		t.Fatalf("the client's close handshake failed: %v", err)
	}
	<-rerr
}

// Flush is bounded by the context of the batch's WriteMessage calls, as a
// WriteMessage is: a peer that does not read cannot hold a writer past it.
// (Found by review: the held bytes' socket write had no deadline.)
func TestWebsocketFlushHonoursWriteContext(t *testing.T) {
	url, got := acceptServer(t)
	_ = dialClient(t, url) // never reads
	tr := <-got
	defer tr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	msg := []byte(`{"method":"x","params":{"pad":"` + strings.Repeat("a", 8000) + `"}}`)
	done := make(chan error, 1)
	go func() {
		for {
			for range 7 {
				if err := tr.WriteMessage(ctx, msg); err != nil {
					done <- err
					return
				}
			}
			if err := tr.Flush(); err != nil {
				done <- err
				return
			}
		}
	}()
	select {
	case err := <-done:
		if ctx.Err() == nil {
			t.Fatalf("the writer failed before its context ended: %v", err)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("the writer is still blocked 6 s after its write context ended")
	}
}
