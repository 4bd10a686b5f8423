package wiretest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/runtimed/runtimed/wire"
)

// NotificationRetention bounds how long an unconsumed notification stays in a client's buffer.
var NotificationRetention = 3 * time.Minute

// RPCError is the error member of a response. It implements error.
type RPCError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *RPCError) Error() string { return fmt.Sprintf("rpc error %d: %s", e.Code, e.Message) }

// Message is one inbound JSON message.
type Message struct {
	ID     json.RawMessage // nil when absent
	Method string          // "" for responses
	Params json.RawMessage
	Result json.RawMessage // nil when absent
	Error  *RPCError
	Raw    []byte // the message as received
}

// IsResponse reports whether m is a response (it has no method).
func (m *Message) IsResponse() bool { return m.Method == "" }

// Notification is a message from the server that has a method.
type Notification struct {
	Method   string
	Params   json.RawMessage
	ID       json.RawMessage // set only if the server sent a request (it never should)
	Received time.Time
	// ProcessID is params.processId when params is an object with a string processId.
	ProcessID string
}

// Client is a raw protocol client on the project's client core
// (wire.Client): the core's reader goroutine correlates responses with
// the callers waiting for their id; everything else is classified by the
// client's Peek handler: notifications go to a buffer the test queries
// with WaitNotification and friends, responses nobody waits for to an
// "unclaimed" list, messages that are not valid envelopes to Garbage.
//
// Ownership: notes, unclaimed, garbage, raws and wake are guarded by mu
// (never held during I/O); the core owns the transport.
type Client struct {
	// Server is the server process of a stdio client (nil for websocket clients).
	Server *Server

	tr   transport
	core *wire.Client

	mu        sync.Mutex
	unclaimed []*Message
	notes     []Notification
	garbage   [][]byte
	raws      map[string][]byte // id key -> the response as received, until its caller takes it
	wake      chan struct{}     // closed and replaced whenever something arrives

	ended     chan struct{} // closed when the core has failed and the waiters were woken
	closeOnce sync.Once
	closeErr  error
}

func newClient(tr transport) *Client {
	c := &Client{
		tr:    tr,
		raws:  map[string][]byte{},
		wake:  make(chan struct{}),
		ended: make(chan struct{}),
	}
	c.core = wire.NewClient(coreTransport{c}, wire.ClientOptions{FirstID: 101, Peek: c.peek, Handle: c.handle, Malformed: c.malformed})
	go func() {
		<-c.core.Done()
		c.mu.Lock()
		c.broadcastLocked()
		c.mu.Unlock()
		close(c.ended)
	}()
	return c
}

// coreTransport is the wiretest transport as a wire.Transport; a binary
// frame (the server must send text) is recorded in Garbage and still
// dispatched.
type coreTransport struct{ c *Client }

func (t coreTransport) ReadMessage(ctx context.Context) ([]byte, error) {
	b, binary, err := t.c.tr.readMsg(ctx)
	if err == nil && binary {
		t.c.mu.Lock()
		t.c.garbage = append(t.c.garbage, append([]byte("[binary frame] "), b...))
		t.c.mu.Unlock()
	}
	return b, err
}

func (t coreTransport) WriteMessage(ctx context.Context, b []byte) error {
	return t.c.tr.writeMsg(ctx, b)
}
func (t coreTransport) Flush() error { return nil }
func (t coreTransport) Close() error { t.c.tr.teardown(); return nil }

func (c *Client) broadcastLocked() {
	close(c.wake)
	c.wake = make(chan struct{})
}

// peek classifies a message with the harness's own (strict) envelope
// check; only well-formed responses with an id go on to the core, which
// hands each to its caller or to handle.
func (c *Client) peek(b []byte) bool {
	raw := append([]byte(nil), b...)
	msg, err := parseMessage(raw)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err != nil:
		c.garbage = append(c.garbage, raw)
	case msg.Method != "":
		now := time.Now()
		// Drop notifications nobody consumed for a long time.
		i := 0
		for i < len(c.notes) && now.Sub(c.notes[i].Received) > NotificationRetention {
			i++
		}
		if i > 0 {
			c.notes = append(c.notes[:0:0], c.notes[i:]...)
		}
		c.notes = append(c.notes, Notification{Method: msg.Method, Params: msg.Params, ID: msg.ID, Received: now,
			ProcessID: processIDOf(msg.Params)})
	case bytes.Equal(bytes.TrimSpace(msg.ID), []byte("null")):
		c.unclaimed = append(c.unclaimed, msg) // nobody can wait for a null id
	default:
		c.raws[idKey(msg.ID)] = raw
		return false // the core correlates it (a broadcast follows in handle or takeRaw)
	}
	c.broadcastLocked()
	return true
}

// handle receives the responses no caller waits for.
func (c *Client) handle(m wire.Message) {
	if m.Kind != wire.KindResponse {
		return // peek took every request and notification
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	key := idKey(json.RawMessage(m.ID))
	raw := c.raws[key]
	delete(c.raws, key)
	if msg, err := parseMessage(raw); err == nil {
		c.unclaimed = append(c.unclaimed, msg)
	}
	c.broadcastLocked()
}

// malformed receives a response peek accepted but the core could not
// decode (an id it cannot correlate): nobody waits for it.
func (c *Client) malformed(data []byte, _ *wire.Error) {
	raw := append([]byte(nil), data...)
	c.mu.Lock()
	defer c.mu.Unlock()
	if msg, err := parseMessage(raw); err == nil {
		delete(c.raws, idKey(msg.ID))
		c.unclaimed = append(c.unclaimed, msg)
	} else {
		c.garbage = append(c.garbage, raw)
	}
	c.broadcastLocked()
}

// takeRaw returns the response to id as received (a caller's answer).
func (c *Client) takeRaw(id json.RawMessage) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := idKey(id)
	raw := c.raws[key]
	delete(c.raws, key)
	c.broadcastLocked()
	return raw
}

// parseMessage checks the envelope shape: a notification/request has a string method; a response has an
// id and exactly one of result and error.
func parseMessage(b []byte) (*Message, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, err
	}
	m := &Message{Raw: b, ID: fields["id"], Params: fields["params"], Result: fields["result"]}
	if mb, ok := fields["method"]; ok {
		if err := json.Unmarshal(mb, &m.Method); err != nil || m.Method == "" {
			return nil, fmt.Errorf("bad method %s", mb)
		}
		return m, nil
	}
	if m.ID == nil {
		return nil, errors.New("message has neither method nor id")
	}
	eb, hasErr := fields["error"]
	if hasErr == (m.Result != nil) {
		return nil, errors.New("response must have exactly one of result and error")
	}
	if hasErr {
		m.Error = &RPCError{}
		if err := json.Unmarshal(eb, m.Error); err != nil {
			return nil, fmt.Errorf("bad error member: %v", err)
		}
	}
	return m, nil
}

// idKey normalises an id for matching: strings by value, numbers by their exact literal.
func idKey(id json.RawMessage) string {
	id = bytes.TrimSpace(id)
	if len(id) > 0 && id[0] == '"' {
		var s string
		if json.Unmarshal(id, &s) == nil {
			return "s:" + s
		}
	}
	return "n:" + string(id)
}

// Done is closed when the connection has ended (the reader saw EOF or an error).
func (c *Client) Done() <-chan struct{} { return c.ended }

// Err is the error that ended the connection (nil while it is open); it
// wraps wire.ErrConnectionLost and the transport's error.
func (c *Client) Err() error {
	select {
	case <-c.ended:
		return c.core.Err()
	default:
		return nil
	}
}

// Close ends the connection from the client side. For a websocket this is abrupt (no close handshake,
// like a dropped network connection); for stdio it closes the server's stdin. A websocket Close waits
// (bounded) for the reader goroutine to finish.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.closeErr = c.tr.close()
		if _, ok := c.tr.(*wsTransport); ok {
			c.waitReader(StopTimeout)
			c.core.Close()
		}
	})
	return c.closeErr
}

// CloseClean ends the connection the way a well-behaved client does: for a websocket a close frame
// (1000), waiting (bounded) for the server's; for stdio it closes the server's stdin like Close.
func (c *Client) CloseClean() error {
	c.closeOnce.Do(func() {
		if ws, ok := c.tr.(*wsTransport); ok {
			c.closeErr = ws.conn.Close(websocket.StatusNormalClosure, "")
			c.waitReader(StopTimeout)
			c.core.Close()
			return
		}
		c.closeErr = c.tr.close()
	})
	return c.closeErr
}

// waitReader waits, bounded, for the connection's end.
func (c *Client) waitReader(d time.Duration) {
	select {
	case <-c.ended:
	case <-time.After(d):
	}
}

// Garbage returns inbound messages that were not valid JSON-RPC envelopes, and binary websocket frames
// (prefixed "[binary frame] ").
func (c *Client) Garbage() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]byte(nil), c.garbage...)
}

// Unclaimed returns responses that no caller was waiting for (and nobody took with WaitResponse).
func (c *Client) Unclaimed() []*Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Message(nil), c.unclaimed...)
}

// NewID returns a fresh integer id.
func (c *Client) NewID() json.RawMessage { return json.RawMessage(c.core.NewID()) }

func encodeEnvelope(id json.RawMessage, method string, params any) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	if id != nil {
		buf.WriteString(`"id":`)
		buf.Write(id)
		buf.WriteByte(',')
	}
	mb, _ := json.Marshal(method)
	buf.WriteString(`"method":`)
	buf.Write(mb)
	if params != nil {
		pb, err := json.Marshal(params)
		if err != nil {
			return nil, fmt.Errorf("wiretest: encode params of %s: %w", method, err)
		}
		buf.WriteString(`,"params":`)
		buf.Write(pb)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// Call sends a request with a fresh integer id and waits for its response. A nil params omits the
// member; pass json.RawMessage("null") to send an explicit null. The error is non-nil only for
// transport problems and timeouts; a protocol error comes back as *RPCError.
func (c *Client) Call(ctx context.Context, method string, params any) (json.RawMessage, *RPCError, error) {
	return c.CallID(ctx, c.NewID(), method, params)
}

// CallID is Call with a caller-chosen id (raw JSON: `7`, `"abc"`). The response must echo it exactly
// (strings by value, numbers by their literal text).
func (c *Client) CallID(ctx context.Context, id json.RawMessage, method string, params any) (json.RawMessage, *RPCError, error) {
	m, err := c.Request(ctx, id, method, params)
	if err != nil {
		return nil, nil, err
	}
	return m.Result, m.Error, nil
}

// Request sends a request and returns the whole response message.
func (c *Client) Request(ctx context.Context, id json.RawMessage, method string, params any) (*Message, error) {
	p, err := c.send(ctx, id, method, params)
	if err != nil {
		return nil, err
	}
	return p.wait(ctx)
}

// Pending is a request that has been sent and whose response has not been awaited yet.
type Pending struct {
	c      *Client
	p      *wire.PendingCall
	id     json.RawMessage
	method string
}

// CallAsync sends a request with a fresh integer id and returns without waiting for the response, so
// a test can pipeline requests; the server sees them in the order of the CallAsync calls.
func (c *Client) CallAsync(ctx context.Context, method string, params any) (*Pending, error) {
	return c.send(ctx, c.NewID(), method, params)
}

// Wait waits for the response of a request sent with CallAsync.
func (p *Pending) Wait(ctx context.Context) (json.RawMessage, *RPCError, error) {
	m, err := p.wait(ctx)
	if err != nil {
		return nil, nil, err
	}
	return m.Result, m.Error, nil
}

func (c *Client) send(ctx context.Context, id json.RawMessage, method string, params any) (*Pending, error) {
	b, err := encodeEnvelope(id, method, params)
	if err != nil {
		return nil, err
	}
	p, err := c.core.GoFrame(ctx, wire.ID(id), b)
	if err != nil {
		return nil, fmt.Errorf("wiretest: send %s (id %s): %w", method, id, err)
	}
	return &Pending{c: c, p: p, id: id, method: method}, nil
}

func (p *Pending) wait(ctx context.Context) (*Message, error) {
	r, err := p.p.Wait(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("wiretest: no response to %s (id %s): %w", p.method, p.id, err)
		}
		return nil, fmt.Errorf("wiretest: connection ended before the response to %s (id %s): %v", p.method, p.id, err)
	}
	raw := p.c.takeRaw(json.RawMessage(r.ID))
	m, perr := parseMessage(raw)
	if perr != nil { // cannot happen: peek checked it
		return nil, fmt.Errorf("wiretest: response to %s (id %s): %v", p.method, p.id, perr)
	}
	return m, nil
}

// CallResult calls method and decodes the result into out (if non-nil). A protocol error is returned
// as *RPCError.
func (c *Client) CallResult(ctx context.Context, method string, params, out any) error {
	res, rpcErr, err := c.Call(ctx, method, params)
	if err != nil {
		return err
	}
	if rpcErr != nil {
		return rpcErr
	}
	if out != nil {
		if err := json.Unmarshal(res, out); err != nil {
			return fmt.Errorf("wiretest: decode %s result %s: %w", method, res, err)
		}
	}
	return nil
}

// Notify sends a notification (no id). A nil params omits the member.
func (c *Client) Notify(ctx context.Context, method string, params any) error {
	b, err := encodeEnvelope(nil, method, params)
	if err != nil {
		return err
	}
	return c.core.WriteRaw(ctx, b)
}

// SendRaw sends b as one message (a text frame, or one line on stdio) without any checks.
func (c *Client) SendRaw(ctx context.Context, b []byte) error { return c.core.WriteRaw(ctx, b) }

// SendBinary sends b as one binary websocket frame (websocket only), through the same write side.
func (c *Client) SendBinary(ctx context.Context, b []byte) error {
	return c.core.WithWriter(ctx, func(wire.Transport) error { return c.tr.writeBinary(ctx, b) })
}

// WaitResponse waits for a response with the given id that no Call is waiting for (for example the
// `"id": -1` answer to a malformed message, or the answer to a request sent with SendRaw) and removes
// it from the unclaimed list.
func (c *Client) WaitResponse(ctx context.Context, id json.RawMessage) (*Message, error) {
	key := idKey(id)
	for {
		c.mu.Lock()
		for i, m := range c.unclaimed {
			if idKey(m.ID) == key {
				c.unclaimed = append(c.unclaimed[:i:i], c.unclaimed[i+1:]...)
				c.mu.Unlock()
				return m, nil
			}
		}
		wake := c.wake
		ended := c.core.Err() != nil
		c.mu.Unlock()
		if ended {
			return nil, fmt.Errorf("wiretest: connection ended while waiting for a response with id %s: %v", id, c.Err())
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, fmt.Errorf("wiretest: no response with id %s: %w", id, ctx.Err())
		}
	}
}

// RecvRaw waits for the next inbound message that nobody else consumes: a response no caller was
// waiting for, or a message that was not a valid envelope (Garbage). It removes and returns it as
// received.
func (c *Client) RecvRaw(ctx context.Context) ([]byte, error) {
	for {
		c.mu.Lock()
		if len(c.unclaimed) > 0 {
			m := c.unclaimed[0]
			c.unclaimed = c.unclaimed[1:]
			c.mu.Unlock()
			return m.Raw, nil
		}
		if len(c.garbage) > 0 {
			g := c.garbage[0]
			c.garbage = c.garbage[1:]
			c.mu.Unlock()
			return g, nil
		}
		wake := c.wake
		ended := c.core.Err() != nil
		c.mu.Unlock()
		if ended {
			return nil, fmt.Errorf("wiretest: connection ended: %v", c.Err())
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, fmt.Errorf("wiretest: nothing received: %w", ctx.Err())
		}
	}
}

// WaitNotification waits for the first buffered or future notification for which pred is true,
// removes it from the buffer and returns it. A nil pred matches any notification.
func (c *Client) WaitNotification(ctx context.Context, pred func(method string, params json.RawMessage) bool) (Notification, error) {
	for {
		c.mu.Lock()
		for i, n := range c.notes {
			if pred == nil || pred(n.Method, n.Params) {
				c.notes = append(c.notes[:i:i], c.notes[i+1:]...)
				c.mu.Unlock()
				return n, nil
			}
		}
		wake := c.wake
		ended := c.core.Err() != nil
		c.mu.Unlock()
		if ended {
			return Notification{}, fmt.Errorf("wiretest: connection ended while waiting for a notification: %v", c.Err())
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return Notification{}, fmt.Errorf("wiretest: notification not received: %w", ctx.Err())
		}
	}
}

// takeProcessEvents removes and returns the buffered process notifications of processID.
func (c *Client) takeProcessEvents(processID string) []Notification {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Notification
	kept := c.notes[:0:0]
	for _, n := range c.notes {
		if n.ProcessID == processID && isProcessEvent(n.Method) {
			out = append(out, n)
		} else {
			kept = append(kept, n)
		}
	}
	if len(out) > 0 {
		c.notes = kept
	}
	return out
}

// TakeNotifications removes and returns every buffered notification for which pred is true.
func (c *Client) TakeNotifications(pred func(method string, params json.RawMessage) bool) []Notification {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Notification
	kept := c.notes[:0:0]
	for _, n := range c.notes {
		if pred == nil || pred(n.Method, n.Params) {
			out = append(out, n)
		} else {
			kept = append(kept, n)
		}
	}
	c.notes = kept
	return out
}

// Notifications returns a snapshot of the buffered (unconsumed) notifications.
func (c *Client) Notifications() []Notification {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Notification(nil), c.notes...)
}

// waitChange returns a channel closed at the next inbound message (or connection end).
func (c *Client) waitChange() (<-chan struct{}, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wake, c.core.Err() != nil
}
