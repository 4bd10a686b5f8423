package actors

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/runtimed/runtimed/actors/fsops"
	"github.com/runtimed/runtimed/wire"
)

// Queue capacities of the connection actor (see doc.go, Backpressure).
const (
	// connEventsCap bounds events waiting for the writer, shared by all of the
	// connection's processes. A full queue makes process actors wait (they stop
	// reading their children); nothing is dropped while the connection lives.
	connEventsCap = 256
	// connResponsesCap bounds encoded responses waiting for the writer; a full
	// queue blocks whoever produced the response (the reader or a waiter).
	connResponsesCap = 256
	// connFsQueueCap bounds fs requests waiting for the connection's fs
	// worker; a full queue makes the reader wait (ctx-bounded).
	connFsQueueCap = 64
	// connInflightCap bounds requests answered later (long polls, writes); the
	// reader stops reading when it is reached.
	connInflightCap = 4096
	// connFlushTimeout bounds the writer's last flush when the connection
	// ends (what is already queued for the client; nothing new is awaited).
	connFlushTimeout = 250 * time.Millisecond
)

// Reason says why a connection ended. It is the latched failure's kind.
type Reason uint8

const (
	ReasonTransportLost Reason = iota + 1 // the peer went away or the transport failed
	ReasonProtocol                        // the peer broke the protocol (e.g. a response from the client)
	ReasonShutdown                        // the server is stopping
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
	Resumable bool
	Logger    *zap.Logger
	// MaxMessageBytes is the transport's inbound limit, quoted in the
	// answer to a message over it (0: wire.DefaultMaxMessageBytes).
	MaxMessageBytes int
}

type handshake uint8

const (
	hsNone handshake = iota
	hsInitialized
	hsReady
)

// conn is the connection actor.
//
// Immutable: sup, t, opts, log, ctx, fail, events, responses, inflight, wtok.
// Owned by the reader (ServeConn's goroutine): hs, session, apps, fsq's
// creation. The fs worker owns the fs/open handles.
// The transport's write side is owned by whoever holds wtok's token: the
// writer goroutine while it drains the queues, or a goroutine answering a
// request when the token is free (it never waits for it).
type conn struct {
	sup  *Supervisor
	t    wire.Transport
	opts ConnOptions
	log  *zap.Logger

	ctx  context.Context
	fail context.CancelCauseFunc // the latch

	events    chan Event
	responses chan []byte
	inflight  chan struct{}
	// wtok is the write side of the transport: whoever holds its one token
	// may write (the writer goroutine for queued work; the reader or a
	// waiter for a response when nobody holds it, without ever waiting).
	wtok chan struct{}
	wg   sync.WaitGroup

	hs      handshake
	session *SessionTable
	apps    map[string]*appProc // app-server dialect handles of this connection
	fsq     chan wire.Message   // to the fs worker, started on the first fs request
	httpm   *httpManager        // the http manager, started on the first http/request
	cur     curRequest          // the request being handled (metrics, logs)
}

// ServeConn runs the connection actor on t until the connection ends or
// ctx is cancelled, then detaches or discards its session. It returns the
// latched cause.
func (s *Supervisor) ServeConn(ctx context.Context, t wire.Transport, opts ConnOptions) error {
	if opts.Logger == nil {
		opts.Logger = s.log
	}
	cctx, fail := context.WithCancelCause(ctx)
	c := &conn{
		sup:       s,
		t:         t,
		opts:      opts,
		log:       opts.Logger,
		ctx:       cctx,
		fail:      fail,
		events:    make(chan Event, connEventsCap),
		responses: make(chan []byte, connResponsesCap),
		inflight:  make(chan struct{}, connInflightCap),
		wtok:      make(chan struct{}, 1),
		apps:      make(map[string]*appProc),
	}
	c.wtok <- struct{}{}
	// The writer ends the connection: when the latch fires (failure from
	// any side, or ctx ending from outside: shutdown) it flushes what is
	// already queued for the client, then closes the transport, which is
	// what unblocks the reader.
	c.wg.Go(c.writeLoop)
	c.readLoop()
	c.wg.Wait()
	c.discardApps()
	t.Close()
	cause := context.Cause(cctx)
	fail(cause)
	if c.session != nil && !s.stopped() { // when stopping, every actor terminates itself
		ttl := time.Duration(0)
		if opts.Resumable {
			ttl = s.cfg.DetachTTL
		}
		s.DetachSession(context.Background(), c.session, ttl)
	}
	c.log.Debug("connection ended", zap.Error(cause))
	return cause
}

func (c *conn) latch(reason Reason, err error) {
	c.fail(&ConnError{Reason: reason, Err: err})
}

func (c *conn) readLoop() {
	defer c.recoverPanic("reader", nil)
	// The read is not bound to the latch: cancelling a websocket read
	// closes the connection, which would cut the writer's last flush. The
	// writer closes the transport once it has flushed, ending the read.
	rctx := context.WithoutCancel(c.ctx)
	for {
		data, err := c.t.ReadMessage(rctx)
		if err != nil {
			if errors.Is(err, wire.ErrMessageTooBig) {
				c.reply(wire.MalformedID, nil, wire.ErrMessageTooLarge(cmp.Or(c.opts.MaxMessageBytes, wire.DefaultMaxMessageBytes)))
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
			return // a request read after the latch is abandoned, as in flight on a drop
		}
		msg, perr := wire.Decode(data)
		if perr != nil {
			c.reply(wire.MalformedID, nil, perr)
			continue
		}
		switch msg.Kind {
		case wire.KindResponse:
			c.latch(ReasonProtocol, errors.New("client sent a response"))
			return
		case wire.KindNotification:
			if !c.notification(msg) {
				return
			}
		case wire.KindRequest:
			c.timedRequest(msg)
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
		c.latch(ReasonProtocol, fmt.Errorf("unknown notification %q", msg.Method))
	}
	return false
}

// reply encodes a response and queues it for the writer.
func (c *conn) reply(id wire.ID, result any, rerr *wire.Error) {
	if rerr != nil {
		c.sup.metrics.RequestError(rerr)
	}
	var b []byte
	if rerr != nil {
		b = wire.AppendError(nil, id, rerr)
	} else {
		var err error
		b, err = wire.AppendResult(nil, id, result)
		if err != nil {
			b = wire.AppendError(nil, id, wire.AsError(err))
		}
	}
	if c.ctx.Err() != nil {
		if rerr != nil && rerr.Code == wire.CodeInternal && rerr.Message == context.Cause(c.ctx).Error() {
			return // "the connection ended" is not an answer: the client sees the end itself
		}
		// The writer is flushing for the last time: queue if there is room.
		select {
		case c.responses <- b:
		default:
		}
		return
	}
	// Fast path: if nobody holds the write side, write the response here
	// instead of waking the writer goroutine (a hop that costs a thread
	// wake-up per request). Never waits for the token.
	select {
	case <-c.wtok:
		err := c.t.WriteMessage(c.ctx, b)
		if err == nil {
			err = c.t.Flush()
		}
		c.wtok <- struct{}{}
		if err != nil {
			c.latch(ReasonTransportLost, err)
			c.t.Close()
		}
		return
	default:
	}
	select {
	case c.responses <- b:
	case <-c.ctx.Done():
	}
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
	wire.MethodProcessList:       "exec",
	wire.MethodProcessSpawn:      "exec",
	wire.MethodProcessWriteStdin: "exec",
	wire.MethodProcessResizePty:  "exec",
	wire.MethodProcessKill:       "exec",
	wire.MethodEnvironmentInfo:   "environment info",
	wire.MethodHTTPRequest:       "http",
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
	if family == "filesystem" {
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
	if p.ResumeSessionID != nil && *p.ResumeSessionID != "" {
		table, err = c.sup.ResumeSession(c.ctx, *p.ResumeSessionID)
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
			sub := c.subscriber()
			for id, ref := range table.Procs {
				if _, aerr := ref.Attach(c.ctx, sub); aerr != nil {
					delete(table.Procs, id) // retention ended while detached
				}
			}
		}
	} else {
		table, err = c.sup.NewSession(c.ctx)
	}
	if err != nil {
		c.reply(msg.ID, nil, wire.AsError(err))
		return
	}
	c.session = table
	c.hs = hsInitialized
	c.log = c.log.With(zap.String("session_id", table.ID))
	c.reply(msg.ID, wire.InitializeResult{SessionID: table.ID, EnvironmentInfo: c.sup.envInfo}, nil)
}

func (c *conn) subscriber() Subscriber {
	return Subscriber{Out: c.events, Done: c.ctx.Done()}
}

func (c *conn) start(msg wire.Message) {
	var p wire.StartParams
	if !c.params(msg, &p) {
		return
	}
	if len(p.Argv) == 0 {
		c.reply(msg.ID, nil, wire.ErrEmptyArgv())
		return
	}
	sb, serr := wire.ParseSandbox(p.Sandbox)
	if serr != nil {
		c.reply(msg.ID, nil, serr)
		return
	}
	dir, derr := absPath(p.Cwd)
	if derr != nil {
		c.reply(msg.ID, nil, wire.Errorf(wire.CodeInvalidParams, "cwd %s", derr.Error()))
		return
	}
	if werr := c.sup.cfg.FsRoots.Allow(p.Cwd); werr != nil { // --fs-root: the cwd too
		c.reply(msg.ID, nil, werr)
		return
	}
	if _, exists := c.session.Lookup(p.ProcessID); exists {
		c.reply(msg.ID, nil, wire.ErrProcessExists(p.ProcessID))
		return
	}
	if max := c.sup.cfg.MaxProcesses; max > 0 && c.session.Active() >= max {
		c.reply(msg.ID, nil, wire.ErrProcessLimit(max))
		return
	}
	spec := Spec{Argv: p.Argv, Dir: dir, TTY: p.TTY, PipeStdin: p.PipeStdin, Metadata: processMetadata(p.Metadata)}
	if p.Arg0 != nil {
		spec.Arg0 = *p.Arg0
	}
	if p.Size != nil {
		spec.Rows, spec.Cols = p.Size.Rows, p.Size.Cols
	}
	var policy *EnvPolicy
	if p.EnvPolicy != nil {
		policy = &EnvPolicy{
			Inherit: p.EnvPolicy.Inherit, IgnoreDefaultExcludes: p.EnvPolicy.IgnoreDefaultExcludes,
			Exclude: p.EnvPolicy.Exclude, Set: p.EnvPolicy.Set, IncludeOnly: p.EnvPolicy.IncludeOnly,
		}
	}
	spec.Env = BuildEnv(ServerEnv(), policy, p.Env)
	if spec.Sandbox, serr = c.sup.SandboxFor(sb, dir, spec.Env); serr != nil {
		c.reply(msg.ID, nil, serr)
		return
	}
	if e := managedNetworkError(&p, spec.Sandbox != nil); e != nil {
		c.reply(msg.ID, nil, e)
		return
	}
	spec.Limits = LimitsFrom(p.Limits)
	sub := c.subscriber()
	ref, err := c.sup.Spawn(p.ProcessID, spec, &sub)
	if err != nil {
		c.reply(msg.ID, nil, wire.Errorf(spawnErrorCode(err), "%s", err.Error()))
		return
	}
	c.session.Procs[p.ProcessID] = ref
	c.reply(msg.ID, wire.StartResult{ProcessID: p.ProcessID, SandboxType: SandboxType(spec.Sandbox)}, nil)
}

// absPath accepts an absolute path or a file: URI.
func absPath(p string) (string, error) {
	if strings.HasPrefix(p, "file:") {
		u, err := url.Parse(p)
		if err != nil {
			return "", fmt.Errorf("is not a valid file URI: %s", p)
		}
		if u.Host != "" && u.Host != "localhost" {
			return "", fmt.Errorf("is a file URI with a foreign host %q: %s", u.Host, p)
		}
		p = u.Path
	}
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("must be absolute: %s", p)
	}
	return filepath.Clean(p), nil
}

// deferred runs wait on a tracked goroutine so the reader can go on; it
// holds an inflight slot until the reply to request id is queued.
func (c *conn) deferred(id wire.ID, wait func()) {
	observe := c.deferObservation()
	select {
	case c.inflight <- struct{}{}:
	case <-c.ctx.Done():
		return
	}
	c.wg.Go(func() {
		defer func() { <-c.inflight }()
		defer c.recoverPanic("request waiter", id)
		wait()
		observe()
	})
}

func (c *conn) read(msg wire.Message) {
	var p wire.ReadParams
	if !c.params(msg, &p) {
		return
	}
	ref, ok := c.process(msg, p.ProcessID)
	if !ok {
		return
	}
	maxBytes := 0
	if p.MaxBytes != nil {
		maxBytes = int(min(*p.MaxBytes, 1<<40))
		if maxBytes == 0 {
			maxBytes = 1 // maxBytes 0 still returns the first chunk
		}
	}
	wait := time.Duration(min(p.WaitMs, 24*3600*1000)) * time.Millisecond
	ch, err := ref.ReadAsync(c.ctx, p.AfterSeq, maxBytes, wait)
	if err != nil {
		c.reply(msg.ID, nil, c.actorError(ref, err, p.ProcessID))
		return
	}
	answer := func() {
		select {
		case r := <-ch:
			c.reply(msg.ID, readResult(r), nil)
		case <-ref.Done():
			select {
			case r := <-ch:
				c.reply(msg.ID, readResult(r), nil)
			default:
				c.reply(msg.ID, nil, c.actorError(ref, ErrStopped, p.ProcessID))
			}
		case <-c.ctx.Done():
		}
	}
	if wait <= 0 {
		answer()
		return
	}
	c.deferred(msg.ID, answer)
}

// actorError maps the error of a request to a process actor: a failed
// process answers -32603 with its failure, an ended one "unknown process".
func (c *conn) actorError(ref *ProcessRef, err error, id string) *wire.Error {
	if errors.Is(err, ErrStopped) {
		if f := ref.Failure(); f != nil {
			return wire.ErrProcessFailed(f.Error())
		}
		return wire.ErrUnknownProcess(id)
	}
	return wire.AsError(err)
}

// failed answers a request about a failed process with -32603 and reports
// whether it did.
func (c *conn) failed(msg wire.Message, ref *ProcessRef) bool {
	if f := ref.Failure(); f != nil {
		c.reply(msg.ID, nil, wire.ErrProcessFailed(f.Error()))
		return true
	}
	return false
}

func readResult(r ReadReply) wire.ReadResult {
	out := wire.ReadResult{
		Chunks:  make([]wire.Chunk, len(r.Chunks)),
		NextSeq: r.NextSeq,
		Exited:  r.Exited,
		Closed:  r.Closed,
	}
	for i, ch := range r.Chunks {
		out.Chunks[i] = wire.Chunk{Seq: ch.Seq, Stream: ch.Stream.String(), Chunk: ch.Data}
	}
	if r.Exited {
		code := r.ExitCode
		out.ExitCode = &code
	}
	return out
}

func (c *conn) write(msg wire.Message) {
	var p wire.WriteParams
	if !c.params(msg, &p) {
		return
	}
	writeID := ""
	if p.WriteID != nil {
		if *p.WriteID == "" {
			c.reply(msg.ID, nil, wire.ErrEmptyWriteID())
			return
		}
		writeID = *p.WriteID
	}
	ref, ok := c.session.Lookup(p.ProcessID)
	if !ok {
		c.reply(msg.ID, wire.WriteResult{Status: wire.WriteUnknownProcess}, nil)
		return
	}
	ch, err := ref.WriteAsync(c.ctx, p.Chunk, writeID)
	if err != nil {
		if !c.failed(msg, ref) {
			c.reply(msg.ID, wire.WriteResult{Status: wire.WriteUnknownProcess}, nil)
		}
		return
	}
	c.deferred(msg.ID, func() {
		select {
		case r := <-ch:
			if r.Err != nil {
				c.reply(msg.ID, nil, wire.Errorf(wire.CodeInternal, "%s", r.Err.Error()))
				return
			}
			c.reply(msg.ID, wire.WriteResult{Status: writeStatus(r.Status)}, nil)
		case <-ref.Done():
			if !c.failed(msg, ref) {
				c.reply(msg.ID, wire.WriteResult{Status: wire.WriteStdinClosed}, nil)
			}
		case <-c.ctx.Done():
		}
	})
}

func writeStatus(s WriteStatus) string {
	switch s {
	case WriteAccepted:
		return wire.WriteAccepted
	case WriteStdinClosed:
		return wire.WriteStdinClosed
	}
	return wire.WriteUnknownProcess
}

func (c *conn) terminate(msg wire.Message) {
	var p wire.TerminateParams
	if !c.params(msg, &p) {
		return
	}
	ref, ok := c.session.Lookup(p.ProcessID)
	if !ok {
		c.reply(msg.ID, wire.TerminateResult{Running: false}, nil)
		return
	}
	var grace time.Duration
	if p.GraceMs != nil {
		grace = time.Duration(min(*p.GraceMs, 24*3600*1000)) * time.Millisecond
	}
	running, err := ref.Terminate(c.ctx, grace)
	if err != nil {
		if c.failed(msg, ref) {
			return
		}
		running = false
	}
	c.reply(msg.ID, wire.TerminateResult{Running: running}, nil)
}

// Signals maps the protocol's signal names to signals.
var Signals = map[string]syscall.Signal{
	"interrupt": syscall.SIGINT,
	"terminate": syscall.SIGTERM,
	"kill":      syscall.SIGKILL,
	"hangup":    syscall.SIGHUP,
	"quit":      syscall.SIGQUIT,
	"user1":     syscall.SIGUSR1,
	"user2":     syscall.SIGUSR2,
}

func (c *conn) signal(msg wire.Message) {
	var p wire.SignalParams
	if !c.params(msg, &p) {
		return
	}
	sig, ok := Signals[p.Signal]
	if !ok {
		c.reply(msg.ID, nil, wire.Errorf(wire.CodeInvalidParams, "unknown signal `%s`; expected one of interrupt, terminate, kill, hangup, quit, user1, user2", p.Signal))
		return
	}
	ref, ok := c.session.Lookup(p.ProcessID)
	if !ok {
		c.reply(msg.ID, struct{}{}, nil)
		return
	}
	if err := ref.Signal(c.ctx, sig); err != nil && !errors.Is(err, ErrStopped) {
		c.reply(msg.ID, nil, wire.Errorf(wire.CodeInternal, "signal failure: %v", err))
		return
	} else if err != nil && c.failed(msg, ref) {
		return
	}
	c.reply(msg.ID, struct{}{}, nil)
}

func (c *conn) resize(msg wire.Message) {
	var p wire.ResizeParams
	if !c.params(msg, &p) {
		return
	}
	ref, ok := c.process(msg, p.ProcessID)
	if !ok {
		return
	}
	if err := ref.Resize(c.ctx, p.Rows, p.Cols); err != nil {
		if errors.Is(err, ErrNotPTY) {
			c.reply(msg.ID, nil, wire.ErrNotPTY())
		} else {
			c.reply(msg.ID, nil, c.actorError(ref, err, p.ProcessID))
		}
		return
	}
	c.reply(msg.ID, struct{}{}, nil)
}

func (c *conn) closeStdin(msg wire.Message) {
	var p wire.ProcessParams
	if !c.params(msg, &p) {
		return
	}
	ref, ok := c.process(msg, p.ProcessID)
	if !ok {
		return
	}
	if err := ref.CloseStdin(c.ctx); err != nil && !errors.Is(err, ErrStopped) {
		c.reply(msg.ID, nil, wire.Errorf(wire.CodeInternal, "stdin failure: %v", err))
		return
	} else if err != nil && c.failed(msg, ref) {
		return
	}
	c.reply(msg.ID, struct{}{}, nil)
}

func (c *conn) list(msg wire.Message) {
	var p wire.NoParams
	if !c.params(msg, &p) {
		return
	}
	out := wire.ListResult{Processes: []wire.ProcessInfo{}}
	for id := range c.session.Procs {
		ref, ok := c.session.Lookup(id)
		if !ok {
			continue
		}
		info, err := ref.Info(c.ctx)
		if err != nil {
			continue
		}
		wi := wire.ProcessInfo{ProcessID: info.ID, PID: info.Pid, Argv: info.Argv, TTY: info.TTY, State: info.State.String(), NextSeq: info.NextSeq, Limit: info.Limit, Metadata: wireMetadata(ref.Metadata())}
		if info.State >= StateExited {
			code := info.ExitCode
			wi.ExitCode = &code
		}
		out.Processes = append(out.Processes, wi)
	}
	sortInfos(out.Processes)
	if c.sup.cfg.Services != nil {
		out.Processes = append(out.Processes, c.sup.cfg.Services(c.ctx)...)
	}
	c.reply(msg.ID, out, nil)
}

func sortInfos(infos []wire.ProcessInfo) {
	sort.Slice(infos, func(i, j int) bool { return infos[i].ProcessID < infos[j].ProcessID })
}

// fs hands an fs/* request to the connection's fs worker. The worker runs
// them one at a time in arrival order (a client may pipeline a write and a
// read of one file) and owns the connection's fs/open handles, so a large
// copy or read never holds up the reader, process requests or long polls.
func (c *conn) fs(msg wire.Message) {
	c.cur.deferred = true // the fs worker observes it
	if c.fsq == nil {
		c.fsq = make(chan wire.Message, connFsQueueCap)
		c.wg.Go(c.fsWorker)
	}
	select {
	case c.fsq <- msg:
	case <-c.ctx.Done():
	}
}

// fsWorker is the fs worker goroutine. It owns the connection's
// fsops.Worker (fs/open handles and fs/watchMissing watches), closed when
// it ends, and sends each fs/missingChanged after the answer that armed it.
func (c *conn) fsWorker() {
	w := fsops.NewWorker(c.sup.cfg.FsRoots)
	defer w.Close()
	for {
		select {
		case msg := <-c.fsq:
			if !c.fsRequest(msg, w) {
				return
			}
		case ev, ok := <-w.Events():
			w.Event(ev, ok)
		case err, ok := <-w.Errors():
			w.Error(err, ok)
		case <-c.ctx.Done():
			return
		}
		for _, n := range w.Notifications() {
			c.notify(wire.NotifyFsMissingChanged, n)
		}
	}
}

// fsRequest runs one fs request; false when it panicked (the connection
// then fails: the handles may be in any state).
func (c *conn) fsRequest(msg wire.Message, w *fsops.Worker) (ok bool) {
	defer c.recoverPanic("fs worker", msg.ID)
	runTestHook(&hookFsRequest, msg.Method)
	start := time.Now()
	res, ferr := w.Handle(msg.Method, msg.Params)
	c.reply(msg.ID, res, ferr)
	c.observeRequest(msg.Method, msg.ID, start)
	return true
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
