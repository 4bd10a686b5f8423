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
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/runtimed/runtimed/wire"
)

// ClientOptions configure a Client. The zero value (and a nil
// *ClientOptions) means the defaults. Dial and NewClient check them before
// connecting; a mistake is an *OptionError naming the field.
type ClientOptions struct {
	// Token is sent as "Authorization: Bearer <token>" on the websocket
	// upgrade; empty sends none. Control characters are an error.
	Token string
	// Header adds headers to the websocket upgrade (names are HTTP tokens,
	// values without control characters); nil adds none.
	Header http.Header
	// TLSConfig verifies a wss:// server; nil means the system roots (see
	// LoadCA for a private certificate authority).
	TLSConfig *tls.Config
	// ClientName is sent in initialize; default "runtimed-go".
	ClientName string
	// ResumeSessionID, if set, resumes that detached session instead of
	// starting a new one: List shows its processes, Attach returns a
	// handle on one. While the server still sees the session attached to
	// the connection that just dropped (-32010), a client that can dial
	// (Dial, or DialTransport set) dials again, with backoff, within
	// ConnectTimeout.
	ResumeSessionID string
	// ConnectTimeout bounds dialing; zero means 10 s, negative is an error.
	ConnectTimeout time.Duration
	// InitializeTimeout bounds the handshake; zero means 10 s, negative is
	// an error.
	InitializeTimeout time.Duration
	// Reconnect: on a transport failure, reconnect and resume the session
	// (within ReconnectWindow), catch every process up from its last seq
	// and resend unanswered requests (writes keep their writeId). Only if
	// that fails does the client latch the failure.
	Reconnect bool
	// ReconnectWindow bounds the reconnect attempts; zero means 25 s (the
	// server's default detach TTL is 30 s), negative is an error.
	ReconnectWindow time.Duration
	// DialTransport, if set, replaces the websocket dialer (tests use it to
	// inject a transport they can cut).
	DialTransport func(ctx context.Context) (wire.Transport, error)
	// MaxMessageBytes limits inbound messages; zero means 64 MiB, negative
	// is an error.
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
	outbound chan []byte    // request frames for the next connection's pump (none usable now) and resends
	// cur is the connection callers write their requests on directly (the
	// core serializes writes); written only by run (nil while none is usable).
	cur    atomic.Pointer[wire.Client]
	failed chan struct{} // closed by run when the latch fires
	cause  error         // written by run before failed is closed
	done   chan struct{} // closed when run returns
	wg     sync.WaitGroup

	*fsImpl // the FileSystem methods, over this connection

	sessionID   string // immutable after the first handshake
	acks        bool   // the server takes process/ack (immutable after the first handshake)
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
	if err := opts.validate(); err != nil {
		return nil, err
	}
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
	if err := opts.validate(); err != nil {
		return nil, err
	}
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
	res, err := resumeHandshake(ctx, o, dial, &t)
	if err != nil {
		return nil, fmt.Errorf("runtime: initialize: %w", err)
	}
	c.sessionID = res.SessionID
	c.acks = res.EnvironmentInfo != nil && res.EnvironmentInfo.Capabilities[wire.CapRuntimedOutputAck]
	c.fsImpl = newRemoteFS(c)
	st := &clientState{c: c, pending: map[int64]*pendingCall{}, procs: map[string]*rproc{}}
	st.attach(t)
	c.wg.Go(st.run)
	return c, nil
}

// resumeHandshake runs the handshake on *t; a resume the server refuses
// with -32010 (the old connection's end not seen yet) is retried on a new
// transport from dial, with backoff, within o.ConnectTimeout. On failure
// the transport is closed.
func resumeHandshake(ctx context.Context, o ClientOptions, dial func(context.Context) (wire.Transport, error), t *wire.Transport) (wire.InitializeResult, error) {
	deadline := time.Now().Add(o.ConnectTimeout)
	backoff := 10 * time.Millisecond
	for {
		ictx, cancel := context.WithTimeout(ctx, o.InitializeTimeout)
		res, err := handshake(ictx, *t, o.ClientName, o.ResumeSessionID)
		cancel()
		if err == nil {
			return res, nil
		}
		(*t).Close()
		var re *RPCError
		if o.ResumeSessionID == "" || dial == nil || !errors.As(err, &re) || re.Code != wire.CodeSessionAttached || time.Now().Add(backoff).After(deadline) {
			return res, err
		}
		timer := time.NewTimer(backoff)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return res, ctx.Err()
		}
		backoff = min(backoff*2, 200*time.Millisecond)
		dctx, dcancel := context.WithTimeout(ctx, time.Until(deadline))
		nt, derr := dial(dctx)
		dcancel()
		if derr != nil {
			return res, err // the refusal says more than the failed redial
		}
		*t = nt
	}
}

// handshake runs initialize/initialized synchronously on a fresh transport
// with an inline client core (it reads on this goroutine; nothing else
// reads yet), before the connection's reader core starts. The inline core
// holds no goroutine and is dropped without Close, which would close t;
// on failure the caller closes t. A ctx that ends during the read closes
// t (the inline core's rule), as the answer cannot arrive any more.
func handshake(ctx context.Context, t wire.Transport, name, resume string) (wire.InitializeResult, error) {
	var res wire.InitializeResult
	// The client acknowledges output (client_ack.go) when the server
	// advertises it; a server that does not know the field ignores it.
	params := wire.InitializeParams{ClientName: name, OutputAck: true}
	if resume != "" {
		params.ResumeSessionID = &resume
	}
	core := wire.NewClient(t, wire.ClientOptions{Inline: true})
	p, err := core.GoID(ctx, wire.IntID(0), wire.MethodInitialize, params)
	if err != nil {
		return res, unwrapLost(err)
	}
	resp, err := p.Wait(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		return res, unwrapLost(err)
	}
	if len(resp.Error) > 0 {
		return res, initializeError(decodeRPCError(resp.Error), resume)
	}
	if err := json.Unmarshal(resp.Result, &res); err != nil {
		return res, fmt.Errorf("bad initialize result: %w", err)
	}
	if err := core.Notify(ctx, wire.MethodInitialized, struct{}{}); err != nil {
		return res, unwrapLost(err)
	}
	return res, nil
}

// unwrapLost returns the transport's own error of a core failure (the
// handshake reports what the transport said, as before the core).
func unwrapLost(err error) error {
	if u, ok := err.(interface{ Unwrap() []error }); ok && errors.Is(err, wire.ErrConnectionLost) {
		if errs := u.Unwrap(); len(errs) == 2 {
			return errs[1]
		}
	}
	return err
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
	if err := c.send(ctx, frame); err != nil {
		c.toActor(cancelCallMsg{id: id})
		return nil, false, err
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

// send writes a registered request: directly on the current connection
// when the write side is free (the core's direct write: no goroutine hop),
// else through the core's writer, or, while no connection is usable,
// through c.outbound for the next one. It fails only with the ctx's error:
// a frame lost with a failing connection is resent by the actor after a
// reconnect (it is pending), or the call gets the latched failure.
func (c *Client) send(ctx context.Context, frame []byte) error {
	if core := c.cur.Load(); core != nil {
		if err := core.WriteRaw(ctx, frame); err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		return nil
	}
	select {
	case c.outbound <- frame:
		return nil
	case <-c.failed:
		return nil // the caller's wait returns the cause
	case <-ctx.Done():
		return ctx.Err()
	}
}

// EnvironmentStatus calls environment/status.
func (c *Client) EnvironmentStatus(ctx context.Context) (string, error) {
	var res wire.StatusResult
	err := c.call(ctx, wire.MethodEnvironmentStatus, nil, &res)
	return res.Status, err
}
