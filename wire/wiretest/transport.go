package wiretest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// ReadLimit is the largest inbound websocket message the client accepts.
const ReadLimit = 128 << 20

// transport moves whole JSON messages. readMsg is only called from the client's reader goroutine.
type transport interface {
	readMsg(ctx context.Context) (msg []byte, binary bool, err error)
	writeMsg(ctx context.Context, b []byte) error
	writeBinary(ctx context.Context, b []byte) error
	// close ends the connection from the client side: abruptly for a websocket, by closing stdin for stdio.
	close() error
	// teardown releases everything so the reader goroutine returns.
	teardown()
}

// HandshakeError is returned by DialWS when the server answers the upgrade with a non-101 status.
type HandshakeError struct {
	StatusCode int
	Body       string
	Err        error
}

func (e *HandshakeError) Error() string {
	return fmt.Sprintf("websocket handshake refused with HTTP %d (%q): %v", e.StatusCode, e.Body, e.Err)
}

func (e *HandshakeError) Unwrap() error { return e.Err }

// httpClient returns a client that leaves no idle connections (and so no goroutines) behind.
func httpClient() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
}

// DialWS opens a websocket connection to url with the given extra handshake headers.
func DialWS(ctx context.Context, url string, header http.Header) (*Client, error) {
	hc := httpClient()
	defer hc.CloseIdleConnections()
	conn, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: hc, HTTPHeader: header})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			var body []byte
			if resp.Body != nil {
				body, _ = io.ReadAll(io.LimitReader(resp.Body, 4096))
				_ = resp.Body.Close()
			}
			return nil, &HandshakeError{StatusCode: resp.StatusCode, Body: string(body), Err: err}
		}
		return nil, err
	}
	conn.SetReadLimit(ReadLimit)
	return newClient(&wsTransport{conn: conn}), nil
}

// HTTPGet performs GET path on the HTTP side of a websocket server URL (ws://IP:PORT) and returns the
// status code and (at most 64 KiB of) the body.
func HTTPGet(ctx context.Context, wsURL, path string, header http.Header) (int, string, error) {
	hc := httpClient()
	defer hc.CloseIdleConnections()
	u := "http://" + strings.TrimPrefix(wsURL, "ws://") + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, "", err
	}
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(body), nil
}

type wsTransport struct {
	conn *websocket.Conn
}

func (w *wsTransport) readMsg(ctx context.Context) ([]byte, bool, error) {
	typ, b, err := w.conn.Read(ctx)
	return b, typ == websocket.MessageBinary, err
}

func (w *wsTransport) writeMsg(ctx context.Context, b []byte) error {
	return w.conn.Write(ctx, websocket.MessageText, b)
}

func (w *wsTransport) writeBinary(ctx context.Context, b []byte) error {
	return w.conn.Write(ctx, websocket.MessageBinary, b)
}

func (w *wsTransport) close() error { return w.conn.CloseNow() }
func (w *wsTransport) teardown()    { _ = w.conn.CloseNow() }

// StartStdio runs `bin serve --listen stdio:// extraArgs...` and returns a client speaking
// newline-delimited JSON over its stdin and stdout. Client.Server is the server process. Everything is
// torn down when the test ends.
func StartStdio(t testing.TB, bin string, extraArgs ...string) *Client {
	t.Helper()
	return StartStdioArgs(t, bin, append([]string{"serve", "--listen", "stdio://"}, extraArgs...)...)
}

// StartStdioArgs is StartStdio with the server's whole argument list given (for example to spell the
// listen address differently).
func StartStdioArgs(t testing.TB, bin string, args ...string) *Client {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := start(t, bin, args, nil, func(cmd *exec.Cmd) {
		cmd.Stdin = inR
		cmd.Stdout = outW
	})
	_ = inR.Close()
	_ = outW.Close()
	if err != nil {
		_ = inW.Close()
		_ = outR.Close()
		t.Fatalf("wiretest: start %s %q: %v", bin, args, err)
	}
	tr := &stdioTransport{w: inW, rf: outR, br: bufio.NewReaderSize(outR, 1<<20)}
	c := newClient(tr)
	c.Server = srv
	// Registered after the server's cleanup, so it runs first: close stdin, then the server is stopped,
	// then the reader is released.
	t.Cleanup(func() {
		_ = c.Close()
		srv.Stop()
		tr.teardown()
		c.waitReader(StopTimeout)
		c.core.Close()
	})
	return c
}

type stdioTransport struct {
	wmu       sync.Mutex
	w         *os.File
	rf        *os.File
	br        *bufio.Reader
	closeOnce sync.Once
}

func (s *stdioTransport) readMsg(ctx context.Context) ([]byte, bool, error) {
	line, err := s.br.ReadBytes('\n')
	if err != nil {
		if len(line) > 0 && errors.Is(err, io.EOF) {
			return nil, false, fmt.Errorf("stdout ended inside a line (%d bytes without newline): %w", len(line), io.ErrUnexpectedEOF)
		}
		return nil, false, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, false, nil
}

func (s *stdioTransport) writeMsg(ctx context.Context, b []byte) error {
	if strings.ContainsRune(string(b), '\n') {
		return errors.New("wiretest: a stdio message cannot contain a newline")
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if dl, ok := ctx.Deadline(); ok {
		_ = s.w.SetWriteDeadline(dl)
	} else {
		_ = s.w.SetWriteDeadline(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { _ = s.w.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	buf := make([]byte, 0, len(b)+1)
	buf = append(append(buf, b...), '\n')
	_, err := s.w.Write(buf)
	return err
}

func (s *stdioTransport) writeBinary(ctx context.Context, b []byte) error {
	return errors.New("wiretest: the stdio transport has no binary frames")
}

func (s *stdioTransport) close() error {
	var err error
	s.closeOnce.Do(func() {
		s.wmu.Lock()
		defer s.wmu.Unlock()
		err = s.w.Close()
	})
	return err
}

func (s *stdioTransport) teardown() {
	_ = s.close()
	_ = s.rf.Close()
}
