package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/runtimed/runtimed/wire"
)

// benchClient is the benchmark's own protocol client. It is deliberately
// small and fast: notifications are scanned for the few fields the
// benchmark needs and chunks are base64-decoded into a reused buffer,
// so that the client is never what limits a measurement.
//
// Ownership: the reader goroutine owns decodeBuf and every benchProc's
// counters; pending and procs are maps guarded by mu (map operations only,
// never I/O). Requests go to the writer goroutine through out.
type benchClient struct {
	t    wire.Transport
	out  chan []byte
	wtok chan struct{} // the write side: a caller holding the token writes directly

	mu      sync.Mutex
	nextID  int64
	pending map[int64]chan benchReply
	procs   map[string]*benchProc

	decodeBuf []byte
	noDecode  bool // count chunk sizes without decoding (to measure a server when this client is the limit)
	sandbox   any  // process/start.sandbox of every start (nil: none); set before the first start
	uriPaths  bool // the server wants file: URIs (set by newBenchClient)
	done      chan struct{}
	err       error // set before done is closed
}

type benchReply struct {
	result json.RawMessage
	err    error
}

// benchProc counts one process's output; closed is closed by the reader
// when process/closed arrives, after which bytes and exitCode are final.
type benchProc struct {
	bytes    int64
	chunks   int64
	exitCode int
	closed   chan struct{}
}

func newBenchClient(ctx context.Context, t wire.Transport, noDecode bool) (*benchClient, error) {
	c := &benchClient{t: t, noDecode: noDecode, out: make(chan []byte, 1024), wtok: make(chan struct{}, 1), pending: map[int64]chan benchReply{}, procs: map[string]*benchProc{}, done: make(chan struct{})}
	c.wtok <- struct{}{}
	go c.readLoop()
	go c.writeLoop()
	res, err := c.call(ctx, "initialize", map[string]any{"clientName": "runtimed-bench"})
	if err != nil {
		c.close()
		return nil, fmt.Errorf("initialize: %w", err)
	}
	// A server of Codex 0.169's generation (it describes its environment)
	// takes paths as file: URIs; older ones take native paths.
	c.uriPaths = bytes.Contains(res, []byte(`"environmentInfo"`))
	// Written under the token, so no later request can overtake it.
	<-c.wtok
	err = c.t.WriteMessage(ctx, []byte(`{"method":"initialized","params":{}}`))
	if err == nil {
		err = c.t.Flush()
	}
	c.wtok <- struct{}{}
	if err != nil {
		c.close()
		return nil, fmt.Errorf("initialized: %w", err)
	}
	return c, nil
}

func (c *benchClient) close() {
	c.t.Close()
	<-c.done
}

func (c *benchClient) writeLoop() {
	for {
		select {
		case b := <-c.out:
			<-c.wtok
			err := c.t.WriteMessage(context.Background(), b)
			if err == nil && len(c.out) == 0 {
				err = c.t.Flush()
			}
			c.wtok <- struct{}{}
			if err != nil {
				c.t.Close()
				return
			}
		case <-c.done:
			return
		}
	}
}

var (
	keyMethod    = []byte(`"method":"`)
	keyProcessID = []byte(`"processId":"`)
	keyChunk     = []byte(`"chunk":"`)
	keyExitCode  = []byte(`"exitCode":`)
	keyID        = []byte(`"id":`)
)

func (c *benchClient) readLoop() {
	defer close(c.done)
	for {
		msg, err := c.t.ReadMessage(context.Background())
		if err != nil {
			c.err = err
			c.mu.Lock()
			for id, ch := range c.pending {
				ch <- benchReply{err: err}
				delete(c.pending, id)
			}
			c.mu.Unlock()
			return
		}
		if m := fieldString(msg, keyMethod); m != nil {
			c.notification(m, msg)
			continue
		}
		c.response(msg)
	}
}

// fieldString returns the raw (unescaped-as-is) string value after key.
func fieldString(msg, key []byte) []byte {
	i := bytes.Index(msg, key)
	if i < 0 {
		return nil
	}
	rest := msg[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return nil
	}
	return rest[:j]
}

func (c *benchClient) notification(method, msg []byte) {
	switch string(method) {
	case "process/output":
		p := c.proc(fieldString(msg, keyProcessID))
		chunk := fieldString(msg, keyChunk)
		if p == nil || chunk == nil {
			return
		}
		if c.noDecode {
			p.bytes += int64(base64.StdEncoding.DecodedLen(len(chunk)) - bytes.Count(chunk[max(0, len(chunk)-2):], []byte("=")))
			p.chunks++
			return
		}
		if n := base64.StdEncoding.DecodedLen(len(chunk)); cap(c.decodeBuf) < n {
			c.decodeBuf = make([]byte, n)
		}
		n, err := base64.StdEncoding.Decode(c.decodeBuf[:cap(c.decodeBuf)], chunk)
		if err == nil {
			p.bytes += int64(n)
			p.chunks++
		}
	case "process/exited":
		if p := c.proc(fieldString(msg, keyProcessID)); p != nil {
			if i := bytes.Index(msg, keyExitCode); i >= 0 {
				rest := msg[i+len(keyExitCode):]
				end := bytes.IndexAny(rest, ",}")
				if end > 0 {
					p.exitCode, _ = strconv.Atoi(string(bytes.TrimSpace(rest[:end])))
				}
			}
		}
	case "process/closed":
		id := fieldString(msg, keyProcessID)
		c.mu.Lock()
		p := c.procs[string(id)]
		delete(c.procs, string(id))
		c.mu.Unlock()
		if p != nil {
			close(p.closed)
		}
	}
}

func (c *benchClient) proc(id []byte) *benchProc {
	c.mu.Lock()
	p := c.procs[string(id)]
	c.mu.Unlock()
	return p
}

func (c *benchClient) response(msg []byte) {
	var env struct {
		ID     int64           `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  *wire.Error     `json:"error"`
	}
	if bytes.Index(msg, keyID) < 0 || json.Unmarshal(msg, &env) != nil {
		return
	}
	c.mu.Lock()
	ch := c.pending[env.ID]
	delete(c.pending, env.ID)
	c.mu.Unlock()
	if ch == nil {
		return
	}
	if env.Error != nil {
		ch <- benchReply{err: &benchRPCError{code: env.Error.Code, message: env.Error.Message}}
		return
	}
	ch <- benchReply{result: env.Result}
}

func (c *benchClient) call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	ch := make(chan benchReply, 1)
	c.mu.Lock()
	c.nextID++
	id := c.nextID
	c.pending[id] = ch
	c.mu.Unlock()
	b, err := wire.AppendRequest(nil, wire.IntID(id), method, params)
	if err != nil {
		return nil, err
	}
	select {
	case <-c.wtok: // nobody is writing: write here, saving a goroutine hop
		err := c.t.WriteMessage(ctx, b)
		if err == nil {
			err = c.t.Flush()
		}
		c.wtok <- struct{}{}
		if err != nil {
			c.t.Close()
			return nil, err
		}
	default:
		select {
		case c.out <- b:
		case <-c.done:
			return nil, c.doneErr()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	select {
	case r := <-ch:
		return r.result, r.err
	case <-c.done:
		return nil, c.doneErr()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *benchClient) doneErr() error {
	if c.err != nil {
		return c.err
	}
	return errors.New("connection closed")
}

// start registers a process and starts it; wait on the returned proc's closed.
func (c *benchClient) start(ctx context.Context, id string, argv []string, tty bool) (*benchProc, error) {
	return c.startWith(ctx, id, argv, tty, c.sandbox)
}

// startWith is start with process/start.sandbox set to sandbox (nil: none).
func (c *benchClient) startWith(ctx context.Context, id string, argv []string, tty bool, sandbox any) (*benchProc, error) {
	p := &benchProc{closed: make(chan struct{})}
	c.mu.Lock()
	c.procs[id] = p
	c.mu.Unlock()
	params := map[string]any{
		"processId": id, "argv": argv, "cwd": c.path("/"), "tty": tty,
		"env": map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin"},
	}
	if sandbox != nil {
		params["sandbox"] = sandbox
	}
	_, err := c.call(ctx, "process/start", params)
	if err != nil {
		c.mu.Lock()
		delete(c.procs, id)
		c.mu.Unlock()
		return nil, err
	}
	return p, nil
}

// path is an absolute path in the form the server wants.
func (c *benchClient) path(p string) string {
	if c.uriPaths {
		return "file://" + p
	}
	return p
}

// benchRPCError is an error answer.
type benchRPCError struct {
	code    int
	message string
}

func (e *benchRPCError) Error() string { return fmt.Sprintf("rpc error %d: %s", e.code, e.message) }
