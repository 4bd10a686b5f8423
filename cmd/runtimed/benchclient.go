package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"

	"github.com/runtimed/runtimed/wire"
)

// benchClient is the benchmark's own protocol client, on the client core
// (wire.Client). It is deliberately small and fast: its Peek handler
// scans notifications for the few fields the benchmark needs (byte
// searches, no decode) and decodes chunks into a reused buffer, so that
// the client is never what limits a measurement.
//
// Ownership: the goroutine that reads (the core's reader, or in inline
// mode the caller of the one call in progress) owns decodeBuf and every
// benchProc's counters; procs is a map guarded by mu (map operations
// only, never I/O).
type benchClient struct {
	core *wire.Client

	mu    sync.Mutex
	procs map[string]*benchProc

	decodeBuf []byte
	noDecode  bool // count chunk sizes without decoding (to measure a server when this client is the limit)
	sandbox   any  // process/start.sandbox of every start (nil: none); set before the first start
	uriPaths  bool // the server wants file: URIs (set by newBenchClient)
}

// benchProc counts one process's output; closed is closed by the reader
// when process/closed arrives, after which bytes and exitCode are final.
type benchProc struct {
	bytes    int64
	chunks   int64
	exitCode int
	closed   chan struct{}
}

// newBenchClient handshakes on t. inline: no reader goroutine, each call
// reads its own answer (one call at a time; notifications are handled
// only while a call reads, so a caller waits for a process by polling
// process/read instead of waitClosed).
func newBenchClient(ctx context.Context, t wire.Transport, noDecode, inline bool) (*benchClient, error) {
	c := &benchClient{noDecode: noDecode, procs: map[string]*benchProc{}}
	c.core = wire.NewClient(t, wire.ClientOptions{Inline: inline, Peek: c.peek})
	res, err := c.call(ctx, "initialize", map[string]any{"clientName": "runtimed-bench"})
	if err != nil {
		c.close()
		return nil, fmt.Errorf("initialize: %w", err)
	}
	// A server of Codex 0.169's generation (it describes its environment)
	// takes paths as file: URIs; older ones take native paths.
	c.uriPaths = bytes.Contains(res, []byte(`"environmentInfo"`))
	if err := c.core.Notify(ctx, "initialized", struct{}{}); err != nil {
		c.close()
		return nil, fmt.Errorf("initialized: %w", err)
	}
	return c, nil
}

func (c *benchClient) close() { c.core.Close() }

func (c *benchClient) call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	return c.core.Call(ctx, method, params)
}

// peek handles a notification by its bytes (the core decodes the rest).
func (c *benchClient) peek(msg []byte) bool {
	m := fieldString(msg, keyMethod)
	if m == nil {
		return false
	}
	c.notification(m, msg)
	return true
}

var (
	keyMethod    = []byte(`"method":"`)
	keyProcessID = []byte(`"processId":"`)
	keyChunk     = []byte(`"chunk":"`)
	keyExitCode  = []byte(`"exitCode":`)
)

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
		return wire.FileURI(p)
	}
	return p
}
