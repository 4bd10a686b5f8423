package actors

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/runtimed/runtimed/actors/audit"
	"github.com/runtimed/runtimed/actors/fsops"
	"github.com/runtimed/runtimed/actors/osproc"
	"github.com/runtimed/runtimed/wire"
)

// Queue capacities of the connection actor (see doc.go, Backpressure).
const (
	// connFsQueueCap bounds fs requests waiting for the connection's fs
	// worker; a full queue makes the reader wait (ctx-bounded).
	connFsQueueCap = 64
	// connInflightCap bounds requests answered later (long polls, writes); the
	// reader stops reading when it is reached.
	connInflightCap = 4096
	// DefaultOutboundQueueBytes is a connection's outbound queue budget when
	// the configuration sets none.
	DefaultOutboundQueueBytes = 256 << 10
	// connFlushTimeout bounds the last flush when the connection ends
	// (what is already queued for the client; nothing new is awaited).
	connFlushTimeout = 250 * time.Millisecond
)

// Reason says why a connection ended. It is the latched failure's kind.
type Reason uint8

const (
	ReasonTransportLost Reason = iota + 1 // the peer went away or the transport failed
	ReasonProtocol                        // the peer broke the protocol (e.g. a response from the client)
	ReasonShutdown                        // the server is stopping
	ReasonSlowConsumer                    // the outbound queue made no progress for the slow-consumer timeout
	ReasonInternal                        // a recovered panic in one of the connection's goroutines
)

func (r Reason) String() string {
	switch r {
	case ReasonTransportLost:
		return "transport lost"
	case ReasonProtocol:
		return "protocol violation"
	case ReasonShutdown:
		return "server shutdown"
	case ReasonSlowConsumer:
		return "slow consumer"
	case ReasonInternal:
		return "internal error"
	}
	return "unknown"
}

// ConnError is the latched failure of a connection: the first cause wins.
type ConnError struct {
	Reason Reason
	Err    error
}

func (e *ConnError) Error() string {
	if e.Err == nil {
		return "connection ended: " + e.Reason.String()
	}
	return fmt.Sprintf("connection ended: %s: %v", e.Reason, e.Err)
}
func (e *ConnError) Unwrap() error { return e.Err }

// ConnOptions configure one connection.
type ConnOptions struct {
	// Resumable: a dropped connection detaches its session for the detach
	// TTL (websocket). Otherwise its end terminates the processes (stdio).
	// Only a resumable connection is closed as a slow consumer.
	Resumable bool
	Logger    *zap.Logger
	// MaxMessageBytes is the transport's inbound limit, quoted in the
	// answer to a message over it (0: wire.DefaultMaxMessageBytes).
	MaxMessageBytes int
	// TokenName is the name of the bearer token the connection presented
	// ("" without auth), Peer its remote address and ConnID the server's
	// number for it: they go with its session into logs, process/list and
	// the audit log.
	TokenName string
	Peer      string
	ConnID    uint64
}

type handshake uint8

const (
	hsNone handshake = iota
	hsInitialized
	hsReady
)

// conn is the connection actor.
//
// Immutable: sup, t, opts, log, ctx, fail, final, budget and the channels.
// Owned by the reader (ServeConn's goroutine): hs, session, apps, fsq's
// creation, lastSB. The fs worker owns the fs/open handles. The queue goroutine
// owns the outbound fifo and its byte count (outbound.go); msgsOut is
// written by whoever writes and read by the queue's watchdog.
// The transport's write side is owned by whoever holds wtok's token: the
// queue goroutine (lending it to the writer goroutine) while anything is
// queued, or a goroutine answering a request when the token is free (it
// never waits for it).
type conn struct {
	sup    *Supervisor
	t      wire.Transport
	opts   ConnOptions
	log    *zap.Logger
	budget int // outbound queue bytes

	ctx  context.Context
	fail context.CancelCauseFunc // the latch
	// final bounds the last flush: it ends connFlushTimeout after the
	// latch fires (a peer that does not read gets nothing more).
	final context.Context

	events    chan Event      // unbuffered: process actors and the http streams, into the queue
	responses chan outItem    // unbuffered: replies and notifications, into the queue
	batches   chan []outItem  // queue -> writer (cap 1)
	written   chan writtenMsg // writer -> queue (cap 1)
	msgsOut   atomic.Uint64   // messages written (the watchdog's progress when the transport cannot count bytes)
	queued    atomic.Bool     // the queue goroutine was started (set by the reader, read by the closer)
	outDone   chan struct{}   // closed when the queue goroutine and its writer have ended
	inflight  chan struct{}
	// wtok is the write side of the transport: whoever holds its one token
	// may write (the queue goroutine and its writer for queued work; the
	// reader or a waiter for a response when nobody holds it, without
	// ever waiting).
	wtok chan struct{}
	wg   sync.WaitGroup

	hs       handshake
	acks     bool // the client declared it sends process/ack (initialize's runtimedOutputAck)
	queueing bool // the queue goroutine runs (started by the reader: outbound)
	session  *SessionTable
	apps     map[string]*appProc // app-server dialect handles of this connection
	fsq      chan fsItem         // to the fs worker, started on the first fs request
	httpm    *httpManager        // the http manager, started on the first http/request
	cur      curRequest          // the request being handled (metrics, logs)
	lastSB   sandboxCache        // the last process/start.sandbox, parsed
	gate     *inboundGate        // the transport's read gate (nil without inbound budgets); its state is the reader's
	ask      *asker              // pending network/policyRequest, started with the first managed network
	// clientName is initialize's clientName (owned by the reader).
	clientName string
}

// ServeConn runs the connection actor on t until the connection ends or
// ctx is cancelled, then detaches or discards its session. It returns the
// latched cause. A connection the budgets refuse is told why (an error
// with id null, then a close frame with 1008) and ended at once; the error
// is then a *BudgetError.
func (s *Supervisor) ServeConn(ctx context.Context, t wire.Transport, opts ConnOptions) error {
	if opts.Logger == nil {
		opts.Logger = s.log
	}
	release, err := s.AcquireConnection(ctx)
	if err != nil {
		s.auditRefusedConn(&opts, err)
		refuse(ctx, t, err)
		return err
	}
	defer release()
	budget := s.cfg.Budgets.OutboundQueueBytes
	if budget <= 0 {
		budget = DefaultOutboundQueueBytes
	}
	cctx, fail := context.WithCancelCause(ctx)
	final, cut := context.WithCancel(context.WithoutCancel(ctx))
	defer cut()
	stopCut := context.AfterFunc(cctx, func() { time.AfterFunc(connFlushTimeout, cut) })
	defer stopCut()
	c := &conn{
		sup:       s,
		t:         t,
		opts:      opts,
		log:       opts.Logger,
		budget:    budget,
		ctx:       cctx,
		fail:      fail,
		final:     final,
		outDone:   make(chan struct{}),
		events:    make(chan Event),
		responses: make(chan outItem),
		batches:   make(chan []outItem, 1),
		written:   make(chan writtenMsg, 1),
		inflight:  make(chan struct{}, connInflightCap),
		wtok:      make(chan struct{}, 1),
		apps:      make(map[string]*appProc),
	}
	c.wtok <- struct{}{}
	if lim := s.cfg.Budgets; lim.MaxInboundBytes > 0 || lim.ConnInboundBytes > 0 {
		c.gate = &inboundGate{c: c, key: inboundKeys.Add(1),
			want: int64(cmp.Or(opts.MaxMessageBytes, s.cfg.MaxMessageBytes, wire.DefaultMaxMessageBytes))}
		wire.SetReadGate(t, c.gate)
		defer s.inboundDone(c.gate.key) // after the waiters: what they did not return
	}
	c.auditConn(audit.ConnOpen, nil)
	// The queue goroutine is started by the reader before the first request
	// that can produce output from another goroutine (outbound); until then
	// the reader is the only writer and always finds the write token free.
	// An idle connection thus has one goroutine, the reader.
	// The reader does not read under cctx (a cancelled read would close a
	// websocket before a close frame could be sent): closing the transport
	// is what unblocks it when the connection ends from outside (shutdown,
	// a slow consumer) or the writer fails. The closer waits for the last
	// flush of what is queued (at most connFlushTimeout) first. A protocol
	// violation is found by the reader itself, which then returns; its
	// close frame follows the last responses.
	watchDone := make(chan struct{})
	stopWatch := context.AfterFunc(cctx, func() {
		defer close(watchDone)
		if cause := context.Cause(cctx); !isReason(cause, ReasonProtocol) {
			if c.queued.Load() {
				select {
				case <-c.outDone:
				case <-final.Done():
				}
			}
			closeFor(t, cause)
		}
	})
	c.readLoop()
	fail(&ConnError{Reason: ReasonTransportLost}) // no-op unless the reader ended without a cause
	c.wg.Wait()
	c.discardApps()
	if !stopWatch() {
		<-watchDone // its close (at most a second) ends before the connection does
	}
	cause := context.Cause(cctx)
	closeFor(t, cause)
	if c.session != nil && !s.stopped() { // when stopping, every actor terminates itself
		ttl := time.Duration(0)
		if opts.Resumable {
			ttl = s.cfg.DetachTTL
		}
		s.DetachSession(context.Background(), c.session, ttl)
		if ttl == 0 {
			c.auditConn(audit.SessionEnd, cause)
		} else {
			c.auditConn(audit.SessionDetach, cause)
		}
	}
	c.auditConn(audit.ConnClose, cause)
	c.log.Debug("connection ended", zap.Error(cause))
	return cause
}

func (c *conn) latch(reason Reason, err error) {
	c.fail(&ConnError{Reason: reason, Err: err})
}

func (c *conn) readLoop() {
	defer c.recoverPanic("reader", nil)
	for {
		data, err := c.t.ReadMessage(context.Background())
		if err != nil {
			if refused, ok := errors.AsType[*wire.ReadRefusedError](err); ok && c.ctx.Err() == nil {
				c.answerRefused(refused) // the inbound budget refused it; the rest was dropped
				continue
			}
			if errors.Is(err, wire.ErrMessageTooBig) {
				c.reply(wire.MalformedID, nil, wire.ErrMessageTooLarge(cmp.Or(c.opts.MaxMessageBytes, c.sup.cfg.MaxMessageBytes, wire.DefaultMaxMessageBytes)))
				if _, ok := c.t.(*wire.StdioTransport); ok {
					continue // stdio skipped the line and is still usable
				}
			}
			if c.ctx.Err() == nil {
				if errors.Is(err, io.EOF) {
					c.latch(ReasonTransportLost, io.EOF)
				} else {
					c.latch(ReasonTransportLost, err)
				}
			}
			return
		}
		if c.ctx.Err() != nil {
			return
		}
		var inbound int64 // the inbound budget's charge for this message
		if c.gate != nil {
			inbound = c.gate.took(data)
		}
		size := len(data)
		var msg wire.Message
		var perr *wire.Error
		if size >= wire.LargeReadBytes {
			// Do not keep a buffer grown for this message: hand it to
			// the decoded message instead of copying it.
			wire.ReleaseReadBuffer(c.t)
			msg, perr = wire.DecodeOwned(data)
		} else {
			msg, perr = wire.Decode(data)
		}
		data = nil
		if size >= LargeMessageBytes {
			c.sup.largeMessage()
		}
		if perr != nil {
			c.reply(msg.ID, nil, perr)
			c.releaseInbound(inbound)
			continue
		}
		switch msg.Kind {
		case wire.KindResponse:
			c.releaseInbound(inbound)
			if !c.answer(msg) {
				c.latch(ReasonProtocol, errors.New("a client may not send responses"))
				return
			}
		case wire.KindNotification:
			c.releaseInbound(inbound)
			if !c.notification(msg) {
				return
			}
		case wire.KindRequest:
			c.timedRequest(msg, inbound)
		}
		if c.ctx.Err() != nil {
			return
		}
	}
}

func (c *conn) notification(msg wire.Message) bool {
	if msg.Method == wire.MethodInitialized && c.hs != hsNone {
		if c.hs == hsInitialized {
			c.hs = hsReady
		}
		return true
	}
	if msg.Method == wire.MethodInitialized {
		c.latch(ReasonProtocol, errors.New("initialized before initialize"))
	} else {
		c.latch(ReasonProtocol, fmt.Errorf("unknown notification %.64q", msg.Method))
	}
	return false
}

var knownMethods = map[string]string{
	wire.MethodInitialize:        "",
	wire.MethodEnvironmentStatus: "exec",
	wire.MethodProcessStart:      "exec",
	wire.MethodProcessRead:       "exec",
	wire.MethodProcessWrite:      "exec",
	wire.MethodProcessTerminate:  "exec",
	wire.MethodProcessSignal:     "exec",
	wire.MethodProcessResize:     "exec",
	wire.MethodProcessCloseStdin: "exec",
	wire.MethodProcessAck:        "exec",
	wire.MethodProcessList:       "exec",
	wire.MethodProcessSpawn:      "exec",
	wire.MethodProcessWriteStdin: "exec",
	wire.MethodProcessResizePty:  "exec",
	wire.MethodProcessKill:       "exec",
	wire.MethodEnvironmentInfo:   "environment info",
	wire.MethodHTTPRequest:       "http",

	wire.MethodEnvironmentConfigRead:     "environment config",
	wire.MethodCapabilitiesDiscoverV2:    "capability discovery",
	wire.MethodCapabilityRootsDiscoverV1: "capability discovery",
}

func (c *conn) request(msg wire.Message) {
	family, known := knownMethods[msg.Method]
	if fsops.IsFsMethod(msg.Method) {
		family, known = "filesystem", true
	}
	if !known {
		c.reply(msg.ID, nil, wire.ErrUnknownMethod(msg.Method))
		return
	}
	if msg.Method == wire.MethodInitialize {
		c.initialize(msg)
		return
	}
	switch c.hs {
	case hsNone:
		c.reply(msg.ID, nil, wire.ErrNotInitialized(family))
		return
	case hsInitialized:
		c.reply(msg.ID, nil, wire.ErrNotInitializedAck(family))
		return
	}
	if family == "filesystem" || isCodexHomeMethod(msg.Method) {
		c.fs(msg)
		return
	}
	switch msg.Method {
	case wire.MethodEnvironmentStatus:
		c.reply(msg.ID, wire.StatusResult{Status: "ready"}, nil)
	case wire.MethodProcessStart:
		c.start(msg)
	case wire.MethodProcessRead:
		c.read(msg)
	case wire.MethodProcessWrite:
		c.write(msg)
	case wire.MethodProcessTerminate:
		c.terminate(msg)
	case wire.MethodProcessSignal:
		c.signal(msg)
	case wire.MethodProcessResize:
		c.resize(msg)
	case wire.MethodProcessCloseStdin:
		c.closeStdin(msg)
	case wire.MethodProcessList:
		c.list(msg)
	case wire.MethodProcessAck:
		c.ack(msg)
	case wire.MethodProcessSpawn:
		c.spawnApp(msg)
	case wire.MethodProcessWriteStdin:
		c.writeStdinApp(msg)
	case wire.MethodProcessResizePty:
		c.resizeApp(msg)
	case wire.MethodProcessKill:
		c.killApp(msg)
	case wire.MethodEnvironmentInfo:
		c.environment(msg)
	case wire.MethodHTTPRequest:
		c.httpRequest(msg)
	}
}

func (c *conn) initialize(msg wire.Message) {
	var p wire.InitializeParams
	if !c.params(msg, &p) {
		return
	}
	if c.hs != hsNone {
		c.reply(msg.ID, nil, wire.ErrInitializeTwice())
		return
	}
	var table *SessionTable
	var err error
	c.acks = p.OutputAck
	if p.ResumeSessionID != nil && *p.ResumeSessionID != "" {
		table, err = c.sup.ResumeSession(c.ctx, *p.ResumeSessionID, c.ctx.Done())
		var re *ResumeError
		if errors.As(err, &re) {
			if re.Attached {
				c.reply(msg.ID, nil, wire.ErrSessionAttached(re.ID))
			} else {
				c.reply(msg.ID, nil, wire.ErrUnknownSession(re.ID))
			}
			return
		}
		if err == nil {
			c.outbound()
			sub := c.subscriber()
			for id, ref := range table.Procs {
				if _, aerr := ref.Attach(c.ctx, sub); errors.Is(aerr, ErrStopped) {
					table.Remove(id) // retention ended while detached
				}
			}
		}
	} else {
		table, err = c.sup.NewSession(c.ctx, c.ctx.Done())
	}
	if err != nil {
		c.reply(msg.ID, nil, wire.AsError(err))
		return
	}
	c.session = table
	c.hs = hsInitialized
	c.clientName = p.ClientName
	if p.ResumeSessionID != nil && *p.ResumeSessionID != "" {
		c.auditConn(audit.SessionResume, nil)
	} else {
		c.auditConn(audit.SessionCreate, nil)
	}
	if c.log.Core().Enabled(zap.DebugLevel) {
		c.log = c.log.With(zap.String("session_id", table.ID)) // (a logger with fields costs ~1 KiB per connection)
	}
	c.reply(msg.ID, wire.InitializeResult{SessionID: table.ID, EnvironmentInfo: c.sup.envInfo}, nil)
}

func (c *conn) subscriber() Subscriber {
	return Subscriber{Out: c.events, Done: c.ctx.Done(), Acks: c.acks}
}

// start decodes process/start into a StartRequest for Supervisor.Start,
// which makes every check (see Start for their order).
func (c *conn) start(msg wire.Message) {
	var p wire.StartParams
	if !c.params(msg, &p) {
		return
	}
	sb, serr := c.lastSB.parse(p.Sandbox)
	if serr != nil {
		c.reply(msg.ID, nil, serr)
		return
	}
	netReq, nerr := c.networkRequest(&p)
	if nerr != nil {
		c.reply(msg.ID, nil, nerr)
		return
	}
	req := StartRequest{
		ID: p.ProcessID, Argv: p.Argv, Cwd: p.Cwd, Env: p.Env, TTY: p.TTY, PipeStdin: p.PipeStdin,
		Sandbox: sb, Network: netReq, Limits: LimitsFrom(p.Limits), Metadata: processMetadata(p.Metadata),
	}
	if p.Arg0 != nil {
		req.Arg0 = *p.Arg0
	}
	if p.Size != nil {
		req.Rows, req.Cols = p.Size.Rows, p.Size.Cols
	}
	if e := p.EnvPolicy; e != nil {
		req.EnvPolicy = &osproc.EnvPolicy{Inherit: e.Inherit, IgnoreDefaultExcludes: e.IgnoreDefaultExcludes, Exclude: e.Exclude, Set: e.Set, IncludeOnly: e.IncludeOnly}
	}
	req.Subscriber = c.subscriber()
	req.Who = c.who()
	res, err := c.sup.Start(context.Background(), sessionOwner{c}, req) // as before: a start is not cut short by the connection's end
	if err != nil {
		c.reply(msg.ID, nil, startWireError(err))
		return
	}
	c.reply(msg.ID, wire.StartResult{ProcessID: p.ProcessID, SandboxType: res.SandboxType()}, nil)
}

// startWireError is the answer to a start Supervisor.Start refused.
func startWireError(err error) *wire.Error {
	if se, ok := err.(*StartError); ok { // what Start returns
		return se.Wire()
	}
	return wire.AsError(err)
}

// sessionOwner is the Owner of process/start: the connection's session.
type sessionOwner struct{ c *conn }

func (o sessionOwner) Reserve(id string) (int, bool) {
	if _, exists := o.c.session.Lookup(id); exists {
		return 0, true
	}
	return o.c.session.Active(), false
}

func (o sessionOwner) Spawning() { o.c.outbound() }

func (o sessionOwner) Started(id string, ref *ProcessRef) {
	if ref != nil {
		o.c.session.Add(id, ref)
	}
}

// params decodes msg's params into p, answering a decode error itself; it
// reports whether the handler goes on.
func (c *conn) params(msg wire.Message, p wire.Params) bool {
	if e := wire.DecodeParams(msg.Params, p); e != nil {
		c.reply(msg.ID, nil, e)
		return false
	}
	return true
}

// process looks up a process of the session, answering -32600 "unknown
// process id" itself when there is none.
func (c *conn) process(msg wire.Message, id string) (*ProcessRef, bool) {
	ref, ok := c.session.Lookup(id)
	if !ok {
		c.reply(msg.ID, nil, wire.ErrUnknownProcess(id))
	}
	return ref, ok
}
