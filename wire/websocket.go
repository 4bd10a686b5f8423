package wire

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// Close status codes a server sends in a websocket close frame before it
// ends a connection (RFC 6455 section 7.4.1).
const (
	CloseGoingAway     = 1001 // the server is shutting down
	CloseProtocolError = 1002 // the peer broke the JSON-RPC protocol (a response, an unknown notification, initialized out of place)
	ClosePolicy        = 1008 // the peer broke a server policy: a slow consumer, a budget that refused the connection
	CloseTooBig        = 1009 // an inbound message over the limit
)

// closeHandshakeTimeout bounds CloseWith: the close frame's write and the
// wait for the peer's close frame together (a peer that neither reads nor
// answers costs at most this long).
const closeHandshakeTimeout = time.Second

// LargeReadBytes is the size from which a server releases a transport's
// read buffer after a message ([ReleaseReadBuffer]), so that an idle
// connection holds no buffer grown for a large request. Clients keep theirs
// (a stream of large notifications reuses one buffer).
const LargeReadBytes = 64 << 10

// WebsocketTransport carries one JSON message per websocket message. It
// accepts text and binary frames and always sends text frames.
type WebsocketTransport struct {
	c    *websocket.Conn
	nc   *progressConn // the accepted connection (nil when dialed): byte progress and close deadline
	buf  []byte        // owned by the ReadMessage caller; reused between messages until released
	gate ReadGate      // set by the ReadMessage caller (SetReadGate); nil: every message is read
}

// SetReadGate installs the gate large messages must pass (see ReadGate).
func (t *WebsocketTransport) SetReadGate(g ReadGate) { t.gate = g }

// refuse reads and discards the rest of a message its gate refused.
func (t *WebsocketTransport) refuse(r io.Reader, gerr error) error {
	prefix := bytes.Clone(t.buf[:min(len(t.buf), LargeReadBytes)])
	n, err := io.Copy(io.Discard, r)
	if err != nil {
		if websocket.CloseStatus(err) == websocket.StatusMessageTooBig || errors.Is(err, websocket.ErrMessageTooBig) {
			return fmt.Errorf("websocket: %w", ErrMessageTooBig)
		}
		return err
	}
	return &ReadRefusedError{Prefix: prefix, Size: len(t.buf) + int(n), Err: gerr}
}

// growBuffer doubles b's capacity (append grows a large slice by a quarter
// at a time, leaving several times a large message's size as garbage).
func growBuffer(b []byte) []byte {
	nb := make([]byte, len(b), max(2*cap(b), 4096))
	copy(nb, b)
	return nb
}

// NewWebsocketTransport wraps an accepted or dialed connection and sets its
// read limit (maxMessage <= 0 means DefaultMaxMessageBytes).
func NewWebsocketTransport(c *websocket.Conn, maxMessage int) *WebsocketTransport {
	if maxMessage <= 0 {
		maxMessage = DefaultMaxMessageBytes
	}
	c.SetReadLimit(int64(maxMessage))
	return &WebsocketTransport{c: c}
}

// AcceptWebsocket upgrades an HTTP request to a websocket transport without
// compression (the caller checks Origin and authentication first). Unlike
// a transport made with [NewWebsocketTransport], it reports byte-level
// write progress ([WebsocketTransport.Progress]) and bounds
// [WebsocketTransport.CloseWith], because it owns the network connection.
func AcceptWebsocket(w http.ResponseWriter, r *http.Request, maxMessage int) (*WebsocketTransport, error) {
	hj := &progressHijacker{ResponseWriter: w}
	c, err := websocket.Accept(hj, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled, InsecureSkipVerify: true})
	if err != nil {
		return nil, err
	}
	t := NewWebsocketTransport(c, maxMessage)
	t.nc = hj.nc
	return t, nil
}

// DialWebsocket connects to a runtimed (or compatible) websocket URL
// (ws:// or wss://, the latter verified against the system roots).
func DialWebsocket(ctx context.Context, url string, header http.Header, maxMessage int) (*WebsocketTransport, error) {
	return DialWebsocketTLS(ctx, url, header, nil, maxMessage)
}

// DialWebsocketTLS is DialWebsocket with the TLS configuration of a wss://
// URL (nil: the system roots, server name from the URL).
func DialWebsocketTLS(ctx context.Context, url string, header http.Header, tlsConfig *tls.Config, maxMessage int) (*WebsocketTransport, error) {
	opts := &websocket.DialOptions{HTTPHeader: header}
	if tlsConfig != nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = tlsConfig
		opts.HTTPClient = &http.Client{Transport: tr}
		defer tr.CloseIdleConnections()
	}
	c, resp, err := websocket.Dial(ctx, url, opts)
	if err != nil {
		if resp != nil {
			return nil, &DialError{URL: url, Status: resp.StatusCode, Err: err}
		}
		return nil, &DialError{URL: url, Err: err}
	}
	return NewWebsocketTransport(c, maxMessage), nil
}

// DialError is a failed websocket dial. Status is the HTTP status when the
// server answered the upgrade with one (401: a token is missing or wrong).
type DialError struct {
	URL    string
	Status int
	Err    error
}

func (e *DialError) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("websocket dial %s: HTTP %d: %v", e.URL, e.Status, e.Err)
	}
	return fmt.Sprintf("websocket dial %s: %v", e.URL, e.Err)
}

func (e *DialError) Unwrap() error { return e.Err }

// ReadMessage returns the next message of either frame type. The slice
// is reused by the next call unless ReleaseReadBuffer drops it.
func (t *WebsocketTransport) ReadMessage(ctx context.Context) ([]byte, error) {
	_, r, err := t.c.Reader(ctx)
	if err == nil {
		t.buf = t.buf[:0]
		admitted := t.gate == nil
		for {
			if len(t.buf) == cap(t.buf) {
				if !admitted && len(t.buf) >= LargeReadBytes {
					if gerr := t.gate.AdmitRead(ctx); gerr != nil {
						return nil, t.refuse(r, gerr)
					}
					admitted = true
				}
				t.buf = growBuffer(t.buf)
			}
			var n int
			n, err = r.Read(t.buf[len(t.buf):cap(t.buf)])
			t.buf = t.buf[:len(t.buf)+n]
			if err == io.EOF {
				return t.buf, nil
			}
			if err != nil {
				break
			}
		}
	}
	if websocket.CloseStatus(err) == websocket.StatusMessageTooBig || errors.Is(err, websocket.ErrMessageTooBig) {
		t.buf = nil
		return nil, fmt.Errorf("websocket: %w", ErrMessageTooBig)
	}
	return nil, err
}

// WriteMessage sends msg as one text frame; on an accepted connection the
// frame may be held until Flush (see Flush).
func (t *WebsocketTransport) WriteMessage(ctx context.Context, msg []byte) error {
	if t.nc == nil {
		return t.c.Write(ctx, websocket.MessageText, msg)
	}
	t.nc.out.cork(ctx)
	err := t.c.Write(ctx, websocket.MessageText, msg)
	t.nc.out.uncork()
	return err
}

// ReleaseReadBuffer drops the read buffer; the last message stays valid
// for its holder. Called by the ReadMessage caller only.
func (t *WebsocketTransport) ReleaseReadBuffer() { t.buf = nil }

// Flush sends what WriteMessage held back. On an accepted connection the
// messages written since the last Flush (a writer's batch: an answer, an
// exited and a closed notification, a run of output) leave in one system
// call instead of one per frame, and the peer wakes once for them. A
// dialed transport writes each message at once; Flush is then a no-op.
func (t *WebsocketTransport) Flush() error {
	if t.nc == nil {
		return nil
	}
	return t.nc.out.flush(t.nc)
}

// Close closes the connection at once without waiting for the peer.
func (t *WebsocketTransport) Close() error { return t.c.CloseNow() }

// CloseWith sends a close frame with code and reason (at most 123 bytes)
// and waits for the peer's, then closes the connection. On an accepted
// connection both steps together take at most a second, whatever the peer
// does; a dialed one is bounded by coder/websocket's own timeouts.
func (t *WebsocketTransport) CloseWith(code int, reason string) error {
	if len(reason) > 123 {
		reason = reason[:123]
	}
	if t.nc != nil {
		t.nc.closeBy(time.Now().Add(closeHandshakeTimeout))
		// The close frame must not wait behind a batch's Flush: what is
		// held goes now, and later frames (the close frame) at once.
		_ = t.nc.out.stop(t.nc)
	}
	return t.c.Close(websocket.StatusCode(code), reason)
}

// Progress returns how many bytes have been handed to the operating system
// so far, and whether the transport can tell (only accepted connections).
// A writer blocked on a peer that does not read makes no progress.
func (t *WebsocketTransport) Progress() (uint64, bool) {
	if t.nc == nil {
		return 0, false
	}
	return t.nc.written.Load(), true
}

// CloseWithReason ends t telling the peer why when the transport can (a
// websocket close frame with code and reason); other transports are
// closed.
func CloseWithReason(t Transport, code int, reason string) error {
	if rc, ok := t.(interface{ CloseWith(int, string) error }); ok {
		return rc.CloseWith(code, reason)
	}
	return t.Close()
}

// ReleaseReadBuffer drops t's read buffer if t keeps one (both transports
// do): a server calls it after a large message so that an idle connection
// does not hold a buffer grown for it. Only the ReadMessage caller may call
// it; the message last read stays valid.
func ReleaseReadBuffer(t Transport) {
	if r, ok := t.(interface{ ReleaseReadBuffer() }); ok {
		r.ReleaseReadBuffer()
	}
}

// TransportProgress returns the bytes t has handed to the operating system
// so far, when t can tell.
func TransportProgress(t Transport) (uint64, bool) {
	if p, ok := t.(interface{ Progress() (uint64, bool) }); ok {
		return p.Progress()
	}
	return 0, false
}

// progressHijacker hands coder/websocket a connection that counts written
// bytes and can be given a hard deadline for the close handshake.
type progressHijacker struct {
	http.ResponseWriter
	nc *progressConn
}

func (h *progressHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := h.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("wire: the response writer cannot be hijacked")
	}
	c, brw, err := hj.Hijack()
	if err != nil {
		return nil, nil, err
	}
	if brw.Writer.Buffered() > 0 {
		if err := brw.Writer.Flush(); err != nil {
			c.Close()
			return nil, nil, err
		}
	}
	// Bytes the HTTP server read ahead are served first by the connection
	// itself, so its 4 KiB buffers can go: an idle connection keeps two
	// small ones (larger reads and writes bypass them).
	var pending []byte
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		pending = append([]byte(nil), b...)
	}
	h.nc = &progressConn{Conn: c, pending: pending}
	return h.nc, bufio.NewReadWriter(bufio.NewReaderSize(h.nc, wsBufSize), bufio.NewWriterSize(h.nc, wsBufSize)), nil
}

// wsBufSize is the size of an accepted connection's read and write buffers.
const wsBufSize = 1 << 10

// progressConn is the accepted network connection. written is updated by
// whichever goroutine writes (under out's lock) and read by the
// connection's watchdog; the close deadline is set once by CloseWith. out
// coalesces the frames of one batch into one write (coalesce.go).
type progressConn struct {
	net.Conn
	pending  []byte // read ahead by the HTTP server; owned by the reading goroutine
	written  atomic.Uint64
	deadline atomic.Int64 // unix nanoseconds; 0: none
	out      coalescer
}

func (c *progressConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		if len(c.pending) == 0 {
			c.pending = nil
		}
		return n, nil
	}
	return c.Conn.Read(p)
}

func (c *progressConn) closeBy(t time.Time) {
	c.deadline.Store(t.UnixNano())
	_ = c.Conn.SetDeadline(t)
}

func (c *progressConn) Write(p []byte) (int, error) { return c.out.write(c, p) }

// send writes bs to the socket in one system call (writev) and counts what
// was written. Called by the coalescer under its lock only.
func (c *progressConn) send(bs net.Buffers) (int64, error) {
	n, err := bs.WriteTo(c.Conn)
	c.written.Add(uint64(n))
	return n, err
}

func (c *progressConn) SetDeadline(t time.Time) error     { return c.Conn.SetDeadline(c.clamp(t)) }
func (c *progressConn) SetReadDeadline(t time.Time) error { return c.Conn.SetReadDeadline(c.clamp(t)) }
func (c *progressConn) SetWriteDeadline(t time.Time) error {
	return c.Conn.SetWriteDeadline(c.clamp(t))
}

// clamp keeps a deadline no later than the close deadline, once set.
func (c *progressConn) clamp(t time.Time) time.Time {
	if d := c.deadline.Load(); d != 0 {
		if limit := time.Unix(0, d); t.IsZero() || t.After(limit) {
			return limit
		}
	}
	return t
}
