package wire

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// The client core: one JSON-RPC 2.0 client over a Transport, shared by the
// runtime's remote Client, the bench and the test harnesses. It allocates
// ids, correlates answers with a pending table, hands everything else to
// the owner's handlers, serializes writes and latches the first failure.

// Sentinels of the client core.
var (
	// ErrConnectionLost wraps the transport error that ended a client: every
	// pending and later call fails with it (errors.Is finds both it and the
	// transport's own error).
	ErrConnectionLost = errors.New("wire: connection lost")
	// ErrClientClosed is the failure of a client after Close.
	ErrClientClosed = errors.New("wire: client closed")
	// ErrInlineBusy refuses a second concurrent call on an inline client.
	ErrInlineBusy = errors.New("wire: inline client: a call is already in progress (one call at a time)")
	// ErrNotInline refuses Poll on a client with a reader goroutine.
	ErrNotInline = errors.New("wire: Poll needs an inline client")
)

// ClientOptions configure a Client. Every handler runs on the goroutine
// that reads: the reader goroutine, or in inline mode the caller of
// Wait/Call/Poll. A handler that blocks stops reading, which is the
// client's backpressure (see the package doc); it must not call the
// client's own blocking methods in inline mode.
type ClientOptions struct {
	// Inline: no reader goroutine. A call writes its request and reads on
	// the caller's goroutine until its own answer, handing what comes
	// first to the handlers. One call at a time: a second concurrent call
	// fails with ErrInlineBusy.
	Inline bool
	// Peek, if set, sees every inbound message's bytes before they are
	// decoded and returns true when it has handled the message itself (a
	// notification recognised by its bytes: the hot path of output
	// streams). It must return false for responses. data is valid only
	// during the call.
	Peek func(data []byte) bool
	// Handle receives every decoded message that is not the answer to a
	// pending call: notifications, requests from the server, and responses
	// no call waits for (the late answer to a call whose ctx ended, an
	// answer to a frame written with WriteRaw). nil: such messages are
	// counted by Ignored, never dropped without a trace.
	Handle func(m Message)
	// Malformed receives inbound messages that are not a JSON-RPC envelope,
	// with the reason. nil: they are counted by Ignored.
	Malformed func(data []byte, err *Error)
	// FirstID is the id of the first call; default 1.
	FirstID int64
	// WriteQueue is how many frames may wait for the writer goroutine when
	// a caller finds the write side busy (reader mode only); default 256.
	WriteQueue int
}

// Response is the answer to a call. Result and Error are raw JSON; exactly
// one is set.
type Response struct {
	ID     ID
	Result json.RawMessage
	Error  json.RawMessage
}

// Err returns the error answer as an *Error (nil for a result). An error
// member that does not decode is reported as -32603 naming it.
func (r Response) Err() error {
	if len(r.Error) == 0 {
		return nil
	}
	var e Error
	if err := json.Unmarshal(r.Error, &e); err != nil {
		return &Error{Code: CodeInternal, Message: fmt.Sprintf("undecodable error member %s", r.Error)}
	}
	return &e
}

// Client is a JSON-RPC 2.0 client over one Transport (one connection: a
// client that reconnects makes a new Client per connection).
//
// Ownership: pending is guarded by mu (map operations only, never I/O);
// the write side (the Transport's WriteMessage and Flush) belongs to
// whoever holds wtok; in reader mode the reader goroutine owns the read
// side, in inline mode the caller whose call is in progress (busy) does;
// cause is written once, before failed is closed.
type Client struct {
	t    Transport
	opts ClientOptions

	nextID  atomic.Int64
	ignored atomic.Uint64

	mu      sync.Mutex
	pending map[string]chan Response

	wtok   chan struct{} // the write side: a caller holding the token writes
	out    chan []byte   // reader mode: frames for the writer goroutine
	queued atomic.Int64  // frames handed to out and not yet written
	busy   atomic.Bool   // inline mode: a call (or Poll) is in progress

	failed   chan struct{} // closed by the latch
	cause    error
	failOnce sync.Once
	wg       sync.WaitGroup // reader and writer goroutines
}

// NewClient starts a client on t. In reader mode it starts a reader and a
// writer goroutine, which end when the transport fails or Close is called.
func NewClient(t Transport, opts ClientOptions) *Client {
	if opts.FirstID == 0 {
		opts.FirstID = 1
	}
	if opts.WriteQueue <= 0 {
		opts.WriteQueue = 256
	}
	c := &Client{t: t, opts: opts, pending: map[string]chan Response{}, wtok: make(chan struct{}, 1), failed: make(chan struct{})}
	c.nextID.Store(opts.FirstID - 1)
	c.wtok <- struct{}{}
	if !opts.Inline {
		c.out = make(chan []byte, opts.WriteQueue)
		c.wg.Go(c.readLoop)
		c.wg.Go(c.writeLoop)
	}
	return c
}

// NewID returns a fresh integer id (the next one Go would use).
func (c *Client) NewID() ID { return IntID(c.nextID.Add(1)) }

// Done is closed once the client has failed or was closed.
func (c *Client) Done() <-chan struct{} { return c.failed }

// Err returns the latched failure (nil while the client works): an error
// wrapping ErrConnectionLost and the transport's error, or
// ErrClientClosed.
func (c *Client) Err() error {
	select {
	case <-c.failed:
		return c.cause
	default:
		return nil
	}
}

// Ignored counts inbound messages no handler took (Handle or Malformed nil).
func (c *Client) Ignored() uint64 { return c.ignored.Load() }

// Close fails every pending call with ErrClientClosed, closes the
// transport and waits for the client's goroutines. It may be called any
// number of times.
func (c *Client) Close() error {
	c.fail(ErrClientClosed)
	c.wg.Wait()
	return nil
}

// Fail latches err as the client's failure (if none is latched yet) and
// closes the transport: every pending and later call fails with it.
func (c *Client) Fail(err error) { c.fail(err) }

func (c *Client) fail(err error) {
	c.failOnce.Do(func() {
		c.cause = err
		close(c.failed)
		c.t.Close()
	})
}

func lost(err error) error { return fmt.Errorf("%w: %w", ErrConnectionLost, err) }

// Call sends a request with a fresh id and waits for its answer. An error
// answer is returned as *Error.
func (c *Client) Call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	p, err := c.Go(ctx, method, params)
	if err != nil {
		return nil, err
	}
	r, err := p.Wait(ctx)
	if err != nil {
		return nil, err
	}
	return r.Result, r.Err()
}

// Go sends a request with a fresh id and returns without waiting for the
// answer (Wait on the returned call). Requests sent by successive Go calls
// reach the transport in that order.
func (c *Client) Go(ctx context.Context, method string, params any) (*PendingCall, error) {
	return c.GoID(ctx, c.NewID(), method, params)
}

// GoID is Go with a caller-chosen id (raw JSON: 7, "abc"). Answers are
// matched by id: strings by value, numbers by their text.
func (c *Client) GoID(ctx context.Context, id ID, method string, params any) (*PendingCall, error) {
	frame, err := AppendRequest(nil, id, method, params)
	if err != nil {
		return nil, fmt.Errorf("wire: encode params of %s: %w", method, err)
	}
	return c.GoFrame(ctx, id, frame)
}

// GoFrame writes frame as is and awaits the answer with the given id (for
// tests: a request spelled in a way AppendRequest would not).
func (c *Client) GoFrame(ctx context.Context, id ID, frame []byte) (*PendingCall, error) {
	if err := c.Err(); err != nil {
		return nil, err
	}
	p := &PendingCall{c: c, id: id, key: idKey(id), reply: make(chan Response, 1)}
	if c.opts.Inline {
		if !c.busy.CompareAndSwap(false, true) {
			return nil, ErrInlineBusy
		}
	} else {
		c.mu.Lock()
		if _, dup := c.pending[p.key]; dup {
			c.mu.Unlock()
			return nil, fmt.Errorf("wire: id %s is already in flight", id)
		}
		c.pending[p.key] = p.reply
		c.mu.Unlock()
	}
	if err := c.write(ctx, frame); err != nil {
		p.Abandon()
		return nil, err
	}
	return p, nil
}

// PendingCall is a request that was sent and whose answer was not awaited yet.
type PendingCall struct {
	c     *Client
	id    ID
	key   string
	reply chan Response
	once  sync.Once
}

// ID returns the call's id.
func (p *PendingCall) ID() ID { return p.id }

// Wait returns the answer. It fails with ctx's error when ctx ends first
// (the call is then abandoned: a late answer goes to Handle), or with the
// client's failure. In inline mode it reads the transport until the
// answer; a ctx that ends during that read fails the whole client (the
// answer's place in the stream is lost), see the package doc.
func (p *PendingCall) Wait(ctx context.Context) (Response, error) {
	if p.c.opts.Inline {
		defer p.Abandon()
		return p.c.readUntil(ctx, p.key)
	}
	select {
	case r := <-p.reply:
		return r, nil
	default:
	}
	select {
	case r := <-p.reply:
		return r, nil
	case <-p.c.failed:
		select {
		case r := <-p.reply: // answered before the failure
			return r, nil
		default:
		}
		return Response{}, p.c.cause
	case <-ctx.Done():
		p.Abandon()
		select {
		case r := <-p.reply:
			return r, nil
		default:
		}
		return Response{}, ctx.Err()
	}
}

// Abandon gives up on the answer (it will go to Handle if it comes). In
// inline mode it frees the client for the next call.
func (p *PendingCall) Abandon() {
	p.once.Do(func() {
		if p.c.opts.Inline {
			p.c.busy.Store(false)
			return
		}
		p.c.mu.Lock()
		if p.c.pending[p.key] == p.reply {
			delete(p.c.pending, p.key)
		}
		p.c.mu.Unlock()
	})
}

// Notify sends a notification.
func (c *Client) Notify(ctx context.Context, method string, params any) error {
	b, err := AppendNotification(nil, method, params)
	if err != nil {
		return fmt.Errorf("wire: encode params of %s: %w", method, err)
	}
	return c.write(ctx, b)
}

// WriteRaw writes b as one message, unchecked, through the client's
// serialized write side (an answer to it goes to Handle).
func (c *Client) WriteRaw(ctx context.Context, b []byte) error { return c.write(ctx, b) }

// WithWriter runs fn while holding the write side, for what WriteRaw
// cannot express (a test's binary websocket frame on its own transport).
// An error from fn does not fail the client.
func (c *Client) WithWriter(ctx context.Context, fn func(Transport) error) error {
	if err := c.acquire(ctx); err != nil {
		return err
	}
	defer c.release()
	return fn(c.t)
}

// acquire takes the write token, waiting for it.
func (c *Client) acquire(ctx context.Context) error {
	select {
	case <-c.wtok:
		return nil
	case <-c.failed:
		return c.cause
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Client) release() { c.wtok <- struct{}{} }

// write sends one frame. A caller that finds the write side free (and no
// frame queued before it) writes and flushes directly, saving a goroutine
// hop; otherwise, in reader mode, the frame joins the writer goroutine's
// queue, and in inline mode the caller waits for the write side. Frames of
// successive writes reach the transport in that order. In reader mode a
// write in progress is never interrupted by ctx (it would tear a frame);
// in inline mode the ctx bounds it. A write error fails the client.
func (c *Client) write(ctx context.Context, frame []byte) error {
	if c.opts.Inline {
		if err := c.acquire(ctx); err != nil {
			return err
		}
		// The caller's ctx bounds the write itself too: inline mode fails
		// the client when a ctx ends mid-exchange anyway.
		return c.writeHeld(ctx, frame)
	}
	select {
	case <-c.wtok: // nobody is writing: write here
		if c.queued.Load() == 0 {
			return c.writeHeld(context.Background(), frame)
		}
		c.release()
	default:
	}
	c.queued.Add(1)
	select {
	case c.out <- frame:
		return nil
	case <-c.failed:
		c.queued.Add(-1)
		return c.cause
	case <-ctx.Done():
		c.queued.Add(-1)
		return ctx.Err()
	}
}

// writeHeld writes and flushes frame; the caller holds the token, which
// it gives back.
func (c *Client) writeHeld(ctx context.Context, frame []byte) error {
	err := c.t.WriteMessage(ctx, frame)
	if err == nil {
		err = c.t.Flush()
	}
	c.release()
	if err != nil {
		c.fail(lost(err))
		return c.Err()
	}
	return nil
}

func (c *Client) writeLoop() {
	for {
		select {
		case f := <-c.out:
			select {
			case <-c.wtok:
			case <-c.failed:
				return
			}
			err := c.t.WriteMessage(context.Background(), f)
			c.queued.Add(-1)
			if err == nil && len(c.out) == 0 {
				err = c.t.Flush()
			}
			c.release()
			if err != nil {
				c.fail(lost(err))
				return
			}
		case <-c.failed:
			return
		}
	}
}

func (c *Client) readLoop() {
	for {
		data, err := c.t.ReadMessage(context.Background())
		if err != nil {
			c.fail(lost(err))
			return
		}
		c.dispatch(data, "")
	}
}

// dispatch routes one inbound message: to Peek, to the pending call it
// answers, or to the handlers. In inline mode want is the key of the one
// call in progress; dispatch then returns its answer (ok true).
func (c *Client) dispatch(data []byte, want string) (r Response, ok bool) {
	if c.opts.Peek != nil && c.opts.Peek(data) {
		return r, false
	}
	m, perr := Decode(data)
	if perr != nil {
		if c.opts.Malformed != nil {
			c.opts.Malformed(data, perr)
		} else {
			c.ignored.Add(1)
		}
		return r, false
	}
	if m.Kind == KindResponse {
		key := idKey(m.ID)
		r = Response{ID: m.ID, Result: m.Result, Error: m.Error}
		if c.opts.Inline {
			if want != "" && key == want {
				return r, true
			}
		} else {
			// Delivered under mu (the channel has room for the one answer),
			// so that Abandon either finds it delivered or sends it to
			// Handle: an answer is never lost between the two.
			c.mu.Lock()
			ch := c.pending[key]
			delete(c.pending, key)
			if ch != nil {
				ch <- r
			}
			c.mu.Unlock()
			if ch != nil {
				return r, false
			}
		}
	}
	if c.opts.Handle != nil {
		c.opts.Handle(m)
	} else {
		c.ignored.Add(1)
	}
	return r, false
}

// idKey normalises an id for matching: strings by value, numbers by their
// text.
func idKey(id []byte) string {
	id = bytes.TrimSpace(id)
	if len(id) > 0 && id[0] == '"' && bytes.IndexByte(id, '\\') >= 0 {
		var s string
		if json.Unmarshal(id, &s) == nil {
			b, _ := json.Marshal(s)
			return string(b)
		}
	}
	return string(id)
}
