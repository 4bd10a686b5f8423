package wire

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/coder/websocket"
)

// WebsocketTransport carries one JSON message per websocket message. It
// accepts text and binary frames and always sends text frames.
type WebsocketTransport struct {
	c   *websocket.Conn
	buf []byte // owned by the ReadMessage caller; reused between messages
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
// is reused by the next call.
func (t *WebsocketTransport) ReadMessage(ctx context.Context) ([]byte, error) {
	_, r, err := t.c.Reader(ctx)
	if err == nil {
		t.buf = t.buf[:0]
		for {
			if len(t.buf) == cap(t.buf) {
				t.buf = append(t.buf, 0)[:len(t.buf)]
			}
			var n int
			n, err = r.Read(t.buf[len(t.buf):cap(t.buf)])
			t.buf = t.buf[:len(t.buf)+n]
			if err == io.EOF {
				if cap(t.buf) > 8<<20 && len(t.buf) < cap(t.buf)/4 {
					// Do not keep a huge buffer for small messages.
					data := t.buf
					t.buf = nil
					return data, nil
				}
				return t.buf, nil
			}
			if err != nil {
				break
			}
		}
	}
	if websocket.CloseStatus(err) == websocket.StatusMessageTooBig || errors.Is(err, websocket.ErrMessageTooBig) {
		return nil, fmt.Errorf("websocket: %w", ErrMessageTooBig)
	}
	return nil, err
}

// WriteMessage sends msg as one text frame.
func (t *WebsocketTransport) WriteMessage(ctx context.Context, msg []byte) error {
	return t.c.Write(ctx, websocket.MessageText, msg)
}

// Flush is a no-op: every message is its own frame.
func (t *WebsocketTransport) Flush() error { return nil }

// Close closes the connection at once without waiting for the peer.
func (t *WebsocketTransport) Close() error { return t.c.CloseNow() }
