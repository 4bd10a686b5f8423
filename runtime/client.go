package runtime

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/runtimed/runtimed/wire"
)

// ClientOptions configure a Client. The zero value means the defaults.
type ClientOptions struct {
	// Token is sent as "Authorization: Bearer <token>" on the websocket upgrade.
	Token string
	// Header adds headers to the websocket upgrade.
	Header http.Header
	// TLSConfig verifies a wss:// server; nil means the system roots (see
	// LoadCA for a private certificate authority).
	TLSConfig *tls.Config
	// ClientName is sent in initialize; default "runtimed-go".
	ClientName string
	// ResumeSessionID, if set, resumes that detached session instead of
	// starting a new one: List shows its processes, Attach returns a
	// handle on one.
	ResumeSessionID string
	// ConnectTimeout bounds dialing; default 10 s.
	ConnectTimeout time.Duration
	// InitializeTimeout bounds the handshake; default 10 s.
	InitializeTimeout time.Duration
	// Reconnect: on a transport failure, reconnect and resume the session
	// (within ReconnectWindow), catch every process up from its last seq
	// and resend unanswered requests (writes keep their writeId). Only if
	// that fails does the client latch the failure.
	Reconnect bool
	// ReconnectWindow bounds the reconnect attempts; default 25 s (the
	// server's default detach TTL is 30 s).
	ReconnectWindow time.Duration
	// DialTransport, if set, replaces the websocket dialer (tests use it to
	// inject a transport they can cut).
	DialTransport func(ctx context.Context) (wire.Transport, error)
	// MaxMessageBytes limits inbound messages; default 64 MiB.
	MaxMessageBytes int
	// Logger receives the client's logs; nil means none.
	Logger *zap.Logger
}

func (o ClientOptions) withDefaults() ClientOptions {
	if o.ClientName == "" {
		o.ClientName = "runtimed-go"
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 10 * time.Second
	}
	if o.InitializeTimeout <= 0 {
		o.InitializeTimeout = 10 * time.Second
	}
	if o.ReconnectWindow <= 0 {
		o.ReconnectWindow = 25 * time.Second
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = wire.DefaultMaxMessageBytes
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return o
}

// Client is the remote backend: it speaks PROTOCOL.md to a runtimed (or
// compatible) server. All methods may be called concurrently.
//
// The first transport failure is latched (unless Reconnect recovers it):
// every pending call returns an error wrapping ErrDisconnected, every open
// process's event stream ends with one EventFailed, pending Waits return
// the failure, and new calls fail at once without touching the network.
type Client struct {
	opts ClientOptions
	log  *zap.Logger
	dial func(ctx context.Context) (wire.Transport, error) // nil: cannot reconnect

	mbox     chan clientMsg // to run; bounded, senders select on done
	outbound chan []byte    // request frames for the current writer
	failed   chan struct{}  // closed by run when the latch fires
	cause    error          // written by run before failed is closed
	done     chan struct{}  // closed when run returns
	wg       sync.WaitGroup

	*fsImpl // the FileSystem methods, over this connection

	sessionID   string // immutable after the first handshake
	nextID      atomic.Int64
	procSeq     atomic.Uint64
	writeSeq    atomic.Uint64
	writePrefix string
}

const (
	clientMailboxCap  = 256
	clientOutboundCap = 256
)

// reorderLimit bounds notifications held while an earlier seq is missing
// (a variable only so tests can make it small). When it is full, the
// client reads the hole back from the server (see rproc.holeRead).
var reorderLimit = 1 << 16

// Dial connects to a runtimed websocket URL (ws://HOST:PORT, or
// wss://HOST:PORT over TLS) and performs the handshake. A URL of another
// form is an error wrapping ErrBadURL; a server that refuses the token is
// an error wrapping ErrUnauthorized.
func Dial(ctx context.Context, url string, opts *ClientOptions) (*Client, error) {
	var o ClientOptions
	if opts != nil {
		o = *opts
	}
	o = o.withDefaults()
	dial := o.DialTransport
	if dial == nil {
		if err := checkDialURL(url); err != nil {
			return nil, err
		}
		header := o.Header.Clone()
		if header == nil {
			header = http.Header{}
		}
		if o.Token != "" {
			header.Set("Authorization", "Bearer "+o.Token)
		}
		dial = func(ctx context.Context) (wire.Transport, error) {
			return dialWebsocket(ctx, url, header, o.TLSConfig, o.MaxMessageBytes)
		}
	}
	return connect(ctx, o, dial, nil)
}

// NewClient performs the handshake over an established transport (for
// example a StdioTransport over a child's pipes). Without
// opts.DialTransport it cannot reconnect.
func NewClient(ctx context.Context, t wire.Transport, opts *ClientOptions) (*Client, error) {
	var o ClientOptions
	if opts != nil {
		o = *opts
	}
	o = o.withDefaults()
	return connect(ctx, o, o.DialTransport, t)
}

func connect(ctx context.Context, o ClientOptions, dial func(context.Context) (wire.Transport, error), t wire.Transport) (*Client, error) {
	if t == nil {
		dctx, cancel := context.WithTimeout(ctx, o.ConnectTimeout)
		var err error
		t, err = dial(dctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("runtime: connect: %w", err)
		}
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	c := &Client{
		opts:        o,
		log:         o.Logger.Named("client"),
		dial:        dial,
		mbox:        make(chan clientMsg, clientMailboxCap),
		outbound:    make(chan []byte, clientOutboundCap),
		failed:      make(chan struct{}),
		done:        make(chan struct{}),
		writePrefix: "w-" + hex.EncodeToString(rnd[:]) + "-",
	}
	ictx, cancel := context.WithTimeout(ctx, o.InitializeTimeout)
	defer cancel()
	sid, err := handshake(ictx, t, o.ClientName, o.ResumeSessionID)
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("runtime: initialize: %w", err)
	}
	c.sessionID = sid
	c.fsImpl = newRemoteFS(c)
	st := &clientState{c: c, pending: map[int64]*pendingCall{}, procs: map[string]*rproc{}}
	st.attach(t)
	c.wg.Go(st.run)
	return c, nil
}

// handshake runs initialize/initialized synchronously on a fresh transport,
// before its reader starts. A resume retries while the server still sees
// the old connection (-32010).
func handshake(ctx context.Context, t wire.Transport, name, resume string) (string, error) {
	params := wire.InitializeParams{ClientName: name}
	if resume != "" {
		params.ResumeSessionID = &resume
	}
	frame, _ := wire.AppendRequest(nil, wire.IntID(0), wire.MethodInitialize, params)
	if err := t.WriteMessage(ctx, frame); err != nil {
		return "", err
	}
	if err := t.Flush(); err != nil {
		return "", err
	}
	for {
		// The ctx bounds the wait; the transport is closed by the caller on failure.
		stop := context.AfterFunc(ctx, func() { t.Close() })
		data, err := t.ReadMessage(ctx)
		stop()
		if err != nil {
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			return "", err
		}
		msg, perr := wire.Decode(data)
		if perr != nil || msg.Kind != wire.KindResponse || string(msg.ID) != "0" {
			continue // not ours (cannot happen before initialized, but be lenient)
		}
		if len(msg.Error) > 0 {
			var e RPCError
			_ = json.Unmarshal(msg.Error, &e)
			return "", &e
		}
		var res wire.InitializeResult
		if err := json.Unmarshal(msg.Result, &res); err != nil {
			return "", fmt.Errorf("bad initialize result: %w", err)
		}
		note, _ := wire.AppendNotification(nil, wire.MethodInitialized, struct{}{})
		if err := t.WriteMessage(ctx, note); err != nil {
			return "", err
		}
		return res.SessionID, t.Flush()
	}
}

// SessionID returns the server's session id.
func (c *Client) SessionID() string { return c.sessionID }

// Done is closed once the client has latched a failure or was closed.
func (c *Client) Done() <-chan struct{} { return c.failed }

// Err returns the latched failure, or nil.
func (c *Client) Err() error {
	select {
	case <-c.failed:
		return c.cause
	default:
		return nil
	}
}

// Close closes the connection and waits for the client's goroutines. Later
// calls fail with ErrClosed.
func (c *Client) Close() error {
	select {
	case c.mbox <- closeClientMsg{}:
	case <-c.done:
	}
	c.wg.Wait()
	return nil
}

// clientMsg is the closed set of messages the client actor handles.
type clientMsg interface{ isClientMsg() }

type callMsg struct {
	id     int64
	frame  []byte
	method string
	reply  chan<- callResult
}
type cancelCallMsg struct{ id int64 }
type inboundMsg struct {
	gen int
	msg wire.Message
}
type outputMsg struct {
	gen int
	n   wire.OutputNotification
}
type transportLostMsg struct {
	gen int
	err error
}
type reconnectedMsg struct{ t wire.Transport }
type reconnectFailedMsg struct{ err error }
type closeClientMsg struct{}
type registerProcMsg struct {
	id     string
	attach bool // an open process of that id is returned, not refused
	reply  chan<- *rproc
	known  chan<- bool // attach only: whether the process was known already (sent before reply)
}
type forgetProcMsg struct{ id string }
type subscribeRemoteMsg struct {
	id    string
	reply chan<- remoteSub
}
type catchUpMsg struct {
	id  string
	res wire.ReadResult
}

// holeReadFailedMsg: the read meant to fill a hole behind a full reorder
// buffer failed; the hole is then reported as lost.
type holeReadFailedMsg struct {
	id  string
	err error
}
type dropHistMsg struct {
	id string
	rp *rproc
}

func (callMsg) isClientMsg()            {}
func (cancelCallMsg) isClientMsg()      {}
func (inboundMsg) isClientMsg()         {}
func (outputMsg) isClientMsg()          {}
func (transportLostMsg) isClientMsg()   {}
func (reconnectedMsg) isClientMsg()     {}
func (reconnectFailedMsg) isClientMsg() {}
func (closeClientMsg) isClientMsg()     {}
func (registerProcMsg) isClientMsg()    {}
func (forgetProcMsg) isClientMsg()      {}
func (subscribeRemoteMsg) isClientMsg() {}
func (catchUpMsg) isClientMsg()         {}
func (holeReadFailedMsg) isClientMsg()  {}
func (dropHistMsg) isClientMsg()        {}

type callResult struct {
	result json.RawMessage
	err    error
	resent bool // the request was sent again after a reconnect
}

type pendingCall struct {
	frame  []byte
	method string
	reply  chan<- callResult
	resent bool
}

// clientState is owned by the client actor goroutine (run).
type clientState struct {
	c            *Client
	pending      map[int64]*pendingCall
	procs        map[string]*rproc
	t            wire.Transport
	gen          int
	stopIO       chan struct{} // closed to stop the current writer
	reconnecting bool
	latched      bool
}

func (st *clientState) attach(t wire.Transport) {
	st.gen++
	st.t = t
	st.stopIO = make(chan struct{})
	gen, stop, c := st.gen, st.stopIO, st.c
	c.wg.Go(func() { c.readLoop(t, gen) })
	c.wg.Go(func() { c.writeLoop(t, gen, stop) })
}

func (c *Client) readLoop(t wire.Transport, gen int) {
	for {
		data, err := t.ReadMessage(context.Background())
		if err != nil {
			c.toActor(transportLostMsg{gen: gen, err: err})
			return
		}
		if n, ok := wire.ParseOutputNotification(data); ok {
			// The hot path: no encoding/json for output chunks.
			if !c.toActor(outputMsg{gen: gen, n: n}) {
				return
			}
			continue
		}
		msg, perr := wire.Decode(data)
		if perr != nil {
			c.log.Warn("undecodable message from server", zap.String("error", perr.Message))
			continue
		}
		if !c.toActor(inboundMsg{gen: gen, msg: msg}) {
			return
		}
	}
}

func (c *Client) writeLoop(t wire.Transport, gen int, stop <-chan struct{}) {
	for {
		select {
		case f := <-c.outbound:
			if err := t.WriteMessage(context.Background(), f); err != nil {
				c.toActor(transportLostMsg{gen: gen, err: err})
				return
			}
			if len(c.outbound) == 0 {
				if err := t.Flush(); err != nil {
					c.toActor(transportLostMsg{gen: gen, err: err})
					return
				}
			}
		case <-stop:
			return
		}
	}
}

// toActor sends to the actor unless it has exited.
func (c *Client) toActor(m clientMsg) bool {
	select {
	case c.mbox <- m:
		return true
	case <-c.done:
		return false
	}
}

func (st *clientState) run() {
	c := st.c
	defer close(c.done)
	for m := range c.mbox {
		switch m := m.(type) {
		case callMsg:
			if st.latched {
				m.reply <- callResult{err: c.cause}
				continue
			}
			st.pending[m.id] = &pendingCall{frame: m.frame, method: m.method, reply: m.reply}
		case cancelCallMsg:
			delete(st.pending, m.id)
		case inboundMsg:
			if m.gen == st.gen {
				st.inbound(m.msg)
			}
		case outputMsg:
			if m.gen == st.gen {
				st.output(m.n)
			}
		case transportLostMsg:
			if m.gen != st.gen || st.latched || st.reconnecting {
				continue
			}
			close(st.stopIO)
			st.t.Close()
			if !c.opts.Reconnect || c.dial == nil {
				st.latch(fmt.Errorf("%w: %v", ErrDisconnected, m.err))
				return
			}
			c.log.Info("transport lost; reconnecting", zap.Error(m.err))
			st.reconnecting = true
			st.gen++ // messages from the old transport are stale now
			c.wg.Go(func() { c.reconnect(m.err) })
		case reconnectedMsg:
			st.reconnecting = false
			if st.latched {
				m.t.Close()
				continue
			}
			st.attach(m.t)
			st.resume()
		case reconnectFailedMsg:
			st.reconnecting = false
			st.latch(fmt.Errorf("%w: %v", ErrDisconnected, m.err))
			return
		case closeClientMsg:
			if !st.reconnecting {
				close(st.stopIO)
			}
			st.t.Close()
			st.latch(ErrClosed)
			return
		case registerProcMsg:
			if st.latched {
				m.reply <- nil
				continue
			}
			if old := st.procs[m.id]; old != nil && !old.closed {
				if m.attach {
					m.known <- true
					m.reply <- old
				} else {
					m.reply <- nil // the id is taken; Start reports it as the server would
				}
				continue
			}
			rp := &rproc{id: m.id, next: 1, done: make(chan struct{})}
			st.procs[m.id] = rp
			if m.attach {
				m.known <- false
			}
			m.reply <- rp
		case forgetProcMsg:
			delete(st.procs, m.id)
		case subscribeRemoteMsg:
			m.reply <- st.subscribe(m.id)
		case catchUpMsg:
			st.catchUp(m.id, m.res)
		case holeReadFailedMsg:
			st.holeLost(m.id, m.err)
		case dropHistMsg:
			if rp := st.procs[m.id]; rp == m.rp {
				rp.hist, rp.histSize, rp.histFrom = nil, 0, 0
			}
		}
	}
}

// latch records the first failure and fans it out.
func (st *clientState) latch(err error) {
	if st.latched {
		return
	}
	st.latched = true
	c := st.c
	c.cause = err
	close(c.failed)
	for id, p := range st.pending {
		p.reply <- callResult{err: err}
		delete(st.pending, id)
	}
	for _, rp := range st.procs {
		if rp.histTimer != nil {
			rp.histTimer.Stop()
		}
		if !rp.closed {
			rp.failure = err
			close(rp.done)
		}
		for _, l := range rp.listeners {
			close(l)
		}
		rp.listeners = nil
	}
	// run returns after this; every caller still waiting selects on failed,
	// and readers/writers select on done.
}

func (st *clientState) inbound(msg wire.Message) {
	switch msg.Kind {
	case wire.KindResponse:
		id, err := strconv.ParseInt(string(msg.ID), 10, 64)
		if err != nil {
			return
		}
		p, ok := st.pending[id]
		if !ok {
			return // a duplicate answer to a resent request
		}
		delete(st.pending, id)
		if len(msg.Error) > 0 {
			var e RPCError
			_ = json.Unmarshal(msg.Error, &e)
			p.reply <- callResult{err: &e, resent: p.resent}
			return
		}
		p.reply <- callResult{result: msg.Result, resent: p.resent}
	case wire.KindNotification:
		st.notification(msg)
	}
}

// reconnect dials and resumes the session within the reconnect window.
func (c *Client) reconnect(cause error) {
	deadline := time.Now().Add(c.opts.ReconnectWindow)
	backoff := 20 * time.Millisecond
	lastErr := cause
	for time.Now().Before(deadline) {
		select {
		case <-c.done:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), min(c.opts.ConnectTimeout, time.Until(deadline)))
		t, err := c.dial(ctx)
		if err == nil {
			_, err = handshake(ctx, t, c.opts.ClientName, c.sessionID)
			if err == nil {
				cancel()
				c.log.Info("session resumed", zap.String("session_id", c.sessionID))
				if !c.toActor(reconnectedMsg{t: t}) {
					t.Close()
				}
				return
			}
			t.Close()
			var re *RPCError
			if errors.As(err, &re) && re.Code != wire.CodeSessionAttached {
				cancel()
				c.toActor(reconnectFailedMsg{err: fmt.Errorf("resume: %w", err)})
				return
			}
		}
		cancel()
		lastErr = err
		timer := time.NewTimer(backoff)
		select {
		case <-timer.C:
		case <-c.done:
			timer.Stop()
			return
		}
		backoff = min(backoff*2, time.Second)
	}
	c.toActor(reconnectFailedMsg{err: fmt.Errorf("reconnect gave up after %v: %w", c.opts.ReconnectWindow, lastErr)})
}

// call sends a request and decodes its result into out (if not nil).
func (c *Client) call(ctx context.Context, method string, params any, out any) error {
	raw, err := c.callRaw(ctx, method, params)
	if err != nil {
		return err
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("runtime: bad %s result: %w", method, err)
		}
	}
	return nil
}

func (c *Client) callRaw(ctx context.Context, method string, params any) (json.RawMessage, error) {
	r := c.callResult(ctx, method, params)
	return r.result, r.err
}

// callResult is callRaw that also says whether the request was resent.
func (c *Client) callResult(ctx context.Context, method string, params any) callResult {
	raw, resent, err := c.callRawResent(ctx, method, params)
	return callResult{result: raw, err: err, resent: resent}
}

func (c *Client) callRawResent(ctx context.Context, method string, params any) (json.RawMessage, bool, error) {
	if err := c.Err(); err != nil {
		return nil, false, err
	}
	id := c.nextID.Add(1)
	frame, err := wire.AppendRequest(nil, wire.IntID(id), method, params)
	if err != nil {
		return nil, false, err
	}
	reply := make(chan callResult, 1)
	select {
	case c.mbox <- callMsg{id: id, frame: frame, method: method, reply: reply}:
	case <-c.failed:
		return nil, false, c.cause
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
	select {
	case c.outbound <- frame:
	case r := <-reply:
		return r.result, r.resent, r.err
	case <-c.failed:
		return nil, false, c.cause
	case <-ctx.Done():
		c.toActor(cancelCallMsg{id: id})
		return nil, false, ctx.Err()
	}
	select {
	case r := <-reply:
		return r.result, r.resent, r.err
	case <-c.failed:
		return nil, false, c.cause
	case <-ctx.Done():
		c.toActor(cancelCallMsg{id: id})
		return nil, false, ctx.Err()
	}
}

// EnvironmentStatus calls environment/status.
func (c *Client) EnvironmentStatus(ctx context.Context) (string, error) {
	var res wire.StatusResult
	err := c.call(ctx, wire.MethodEnvironmentStatus, nil, &res)
	return res.Status, err
}
