package wire

import (
	"context"
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

// DialWebsocket connects to a runtimed (or compatible) websocket URL.
func DialWebsocket(ctx context.Context, url string, header http.Header, maxMessage int) (*WebsocketTransport, error) {
	c, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: header})
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("websocket dial %s: HTTP %d: %w", url, resp.StatusCode, err)
		}
		return nil, fmt.Errorf("websocket dial %s: %w", url, err)
	}
	return NewWebsocketTransport(c, maxMessage), nil
}

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
