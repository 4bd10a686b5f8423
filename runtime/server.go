package runtime

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/runtimed/runtimed/actors"
	"github.com/runtimed/runtimed/actors/fsops"
	"github.com/runtimed/runtimed/wire"
)

// Defaults, documented in one place (also in doc.go and README).
const (
	DefaultDetachTTL       = 30 * time.Second
	DefaultRetainBytes     = 1 << 20
	DefaultRetainChunks    = 50_000
	DefaultClosedRetention = 30 * time.Second
	DefaultShutdownGrace   = 2 * time.Second
	DefaultMaxProcesses    = 4096
	DefaultMaxMessageBytes = 64 << 20 // 64 MiB
	// drainAfterTerminate: how long a terminated process's output may still
	// drain after it exits before its streams are closed by force.
	drainAfterTerminate = 100 * time.Millisecond
)

// Config configures a Server (and a Local). The zero value means the
// documented defaults; a negative value is an error where the field does
// not say what it means (Validate names the field).
type Config struct {
	// Logger receives structured logs; nil means no logging. Never stdout.
	Logger *zap.Logger
	// DetachTTL: how long a dropped websocket's session (and its processes)
	// survives for a resume. Zero means DefaultDetachTTL; negative means
	// none (terminate at once).
	DetachTTL time.Duration
	// RetainBytes and RetainChunks bound retained output per process;
	// zero means DefaultRetainBytes and DefaultRetainChunks.
	RetainBytes  int
	RetainChunks int // see RetainBytes
	// ClosedRetention: how long a closed process stays readable. Zero means
	// the default; negative means it is forgotten at once.
	ClosedRetention time.Duration
	// ShutdownGrace: SIGTERM-to-SIGKILL grace on Shutdown; zero means
	// DefaultShutdownGrace.
	ShutdownGrace time.Duration
	// MaxProcesses bounds the active (not yet closed) processes of one
	// session (of a Local: all of its processes), and the app-server
	// processes of one connection. A start beyond it is refused with
	// -32011 "limit reached: processes per session = N (--max-processes): ...".
	// Zero means DefaultMaxProcesses.
	MaxProcesses int
	// MaxMessageBytes limits inbound messages on both transports; zero
	// means DefaultMaxMessageBytes.
	MaxMessageBytes int

	// Server-wide budgets. Zero means the default derived from the machine
	// (ProbeMachine: RLIMIT_NOFILE and memory); negative means unlimited.
	// A refusal is a JSON-RPC error -32011 "limit reached: <limit> =
	// <value> (<flag>): ..." and costs no other client anything; a
	// connection the budgets refuse gets that error with id null and a
	// close frame 1008.
	//
	// MaxConnections bounds open connections (default: the smaller of
	// three quarters of the descriptor budget and MaxOutboundBytes /
	// OutboundQueueBytes).
	MaxConnections int
	// MaxProcessesTotal bounds active processes server-wide (default: the
	// smaller of the descriptor budget without the reserve / 6 and
	// MaxRetainedBytes / what one process may retain).
	MaxProcessesTotal int
	// MaxOpenFiles bounds the descriptors charged to connections (1 each)
	// and processes (6 each) (default: RLIMIT_NOFILE minus those open at
	// start and 32); FDReserve of them (default 1/16, between 32 and 1024)
	// only new connections and sessions with fewer than 2 active processes
	// may use, so a greedy session is refused while they still work.
	MaxOpenFiles int
	FDReserve    int // see MaxOpenFiles; below a positive MaxOpenFiles
	// MaxRetainedBytes bounds the output processes may hold: each charges
	// RetainBytes plus its read-ahead (18 reads of up to 64 KiB) while it
	// runs, RetainBytes once closed until its retention ends (default: half
	// of memory, a worst case: the read-ahead fills only behind a slow client).
	MaxRetainedBytes int64
	// MaxOutboundBytes bounds all connections' outbound queues; each
	// connection charges OutboundQueueBytes (default 256 KiB,
	// DefaultOutboundQueueBytes) while open (default: an eighth of memory).
	MaxOutboundBytes   int64
	OutboundQueueBytes int // see MaxOutboundBytes
	// MaxInboundBytes bounds the requests being read, decoded or handled
	// server-wide, ConnInboundBytes those of one connection (a process/write
	// to a child that reads slowly is in flight until it is answered). A
	// message counts once it outgrows 64 KiB, at MaxMessageBytes while it is
	// read (its size is not known yet), then at its buffer's size. Past either
	// budget the server stops reading the connection (backpressure); a
	// message that waits a minute is refused with -32011 naming the limit.
	// Defaults: the larger of a sixty-fourth of memory and twice
	// MaxMessageBytes (server-wide), twice MaxMessageBytes (per connection).
	// Each must be at least MaxMessageBytes.
	MaxInboundBytes  int64
	ConnInboundBytes int64 // see MaxInboundBytes
	// SlowConsumerTimeout closes a websocket connection whose outbound
	// queue makes no progress for this long (default 30 s); the detach
	// rules then apply to its session.
	SlowConsumerTimeout time.Duration
	// AuthToken, if set, is required as "Authorization: Bearer <token>" on
	// every websocket upgrade (no control characters); empty: none is.
	AuthToken string
	// Tokens, if set, names the tokens clients may present (runtimed
	// serve --auth-token-file, reloaded on SIGHUP); it takes precedence
	// over AuthToken. The token's name goes with the connection's session
	// into logs, metrics, process/list (tokenName) and the audit log.
	Tokens TokenSource
	// Audit, if set, receives audit events (runtimed serve --audit-log).
	Audit Auditor
	// Watch, if set, learns of every process a client starts (the web
	// console, runtimed serve --console-listen).
	Watch Watcher
	// AllowedOrigins lists Origin header values that may connect (none
	// empty). Any other request carrying an Origin header is refused with
	// 403; nil: every request with an Origin is.
	AllowedOrigins []string
	// FsRoots confines every fs/* method and process cwd to these existing
	// directories (after resolving symlinks). Empty means the whole filesystem.
	FsRoots []string
	// DefaultSandbox ("read-only" or "workspace-write", with the start's
	// cwd as the project root) confines starts that carry no sandbox.
	// Empty: such starts run unconfined.
	DefaultSandbox string
	// RequireSandbox refuses starts that carry no sandbox (and no
	// DefaultSandbox applies) with -32602.
	RequireSandbox bool
	// Containment is ContainAuto (a cgroup per process tree where this host
	// allows it, else a child subreaper), ContainSubreaper or
	// ContainProcessGroup.
	Containment string
	// SandboxLevel is "namespaces" (the default: the empty string) or
	// "landlock" (runtimed serve --sandbox-level): what a sandboxed start
	// gets; see docs/sandbox.md.
	SandboxLevel string
	// SandboxPidNamespace is "isolate" (the default: the empty string;
	// each sandboxed tree in a pid namespace of its own) or "inherit"
	// (runtimed serve --sandbox-pid-namespace).
	SandboxPidNamespace string
	// NoPreparedSandboxes: every sandboxed start builds its own sandbox
	// (runtimed serve --sandbox-prepare=false). By default, at the
	// namespaces level with the pid namespace isolated, the sandbox of
	// the next start of each recent policy (at most two) is prepared in
	// the background; see docs/sandbox.md, "Prepared sandboxes".
	NoPreparedSandboxes bool
	// Services are kept running by the server (StartServices; runtimed
	// serve --supervise FILE) and shown by process/list of every session.
	// Each is checked as Supervisor.Add checks it; names are unique.
	Services []Service
	// DisableHTTPRequests refuses http/request (-32602, saying so); by
	// default clients may make HTTP requests from the server's network.
	DisableHTTPRequests bool
	// MaxHTTPBodyBytes caps a buffered http/request response body (a
	// larger one is an error; streamed bodies are not capped). Zero means
	// DefaultMaxHTTPBodyBytes, negative is an error.
	MaxHTTPBodyBytes int64
	// StateDir holds the records of this runtime's process groups where no
	// cgroup tracks its trees (subreaper and process-group containment), so
	// that a runtime started after this one died can kill them; at start it
	// is searched for the records of runtimes that died (see
	// ReclaimOrphans). Empty means $RUNTIMED_STATE_DIR, else
	// $XDG_RUNTIME_DIR/runtimed, else <os.TempDir>/runtimed-<uid>. It is
	// made (0700) if its parent exists, and used only if it belongs to
	// this user and nobody else may write it; otherwise nothing is
	// recorded (logged at start).
	StateDir string
	// CodexSystemDir is where the executor's system Codex configuration
	// lives (config.toml, requirements.toml, skills/) for
	// environmentConfig/read and capability discovery. Empty: /etc/codex.
	CodexSystemDir string
	// Metrics collects Prometheus metrics in a registry of this server's
	// own, served by ObservabilityHandler (see docs/operations.md).
	Metrics bool
	// NetworkDeny is the operator's network floor: domain patterns (host,
	// *.d, **.d; not "*") that no client's managed-network policy can
	// allow (runtimed serve --network-deny).
	NetworkDeny []string

	// netPlacer, if set, replaces the managed-network placer the host
	// picks (actors.HostPlacer where the namespaces level is enforced):
	// only this package's tests set it, with an unconfined loopback
	// placer, to exercise the plumbing.
	netPlacer actors.NetPlacer
}

// Validate reports configuration errors that NewServer would otherwise
// turn into failing Serve calls (and NewLocal into failing Starts): a
// negative value where only zero (the default) or more means something,
// an fs root that does not exist, an unknown DefaultSandbox or
// Containment, a bad Service. The error is an *OptionError naming the
// field ("Config.FsRoots", "Config.Services[1].Backoff.Jitter").
func (c Config) Validate() error { return c.validate() }

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	switch {
	case c.DetachTTL == 0:
		c.DetachTTL = DefaultDetachTTL
	case c.DetachTTL < 0:
		c.DetachTTL = 0
	}
	if c.RetainBytes <= 0 {
		c.RetainBytes = DefaultRetainBytes
	}
	if c.RetainChunks <= 0 {
		c.RetainChunks = DefaultRetainChunks
	}
	switch {
	case c.ClosedRetention == 0:
		c.ClosedRetention = DefaultClosedRetention
	case c.ClosedRetention < 0:
		c.ClosedRetention = 0
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = DefaultShutdownGrace
	}
	if c.MaxProcesses <= 0 {
		c.MaxProcesses = DefaultMaxProcesses
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.MaxHTTPBodyBytes <= 0 {
		c.MaxHTTPBodyBytes = DefaultMaxHTTPBodyBytes
	}
	return c
}

// ErrServerClosed is returned by Serve and ServeTransport after Shutdown or Close.
var ErrServerClosed = errors.New("runtime: server closed")

// Server serves the runtimed protocol on any number of websocket listeners
// and transports, over one shared supervisor. Its methods may be called
// concurrently.
type Server struct {
	cfg     Config
	log     *zap.Logger
	sup     *actors.Supervisor
	iso     *isolation     // the sandbox host and cgroup manager, released after the supervisor stops
	svcs    *services      // the supervised services, nil without Config.Services
	metrics *serverMetrics // nil when Config.Metrics is off
	tokens  TokenSource    // nil: no auth (identity.go)
	audit   Auditor        // never nil
	byToken *tokenCounter  // nil when Config.Metrics is off

	initErr error          // a configuration error: Serve and ServeTransport return it
	budgets actors.Budgets // resolved at NewServer

	ctx    context.Context // cancelled (cause ReasonShutdown) when closing
	cancel context.CancelCauseFunc

	mu        sync.Mutex // guards listeners and closing; never held during I/O
	listeners map[net.Listener]*http.Server
	closing   bool
	conns     sync.WaitGroup
}

// NewServer returns a server with its supervisor running.
func NewServer(cfg Config) *Server {
	err := cfg.Validate()
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancelCause(context.Background())
	iso := newIsolation(cfg)
	scfg := supervisorConfig(cfg, iso)
	scfg.Budgets = cfg.budgets(ProbeMachine())
	roots, rerr := fsops.NewRoots(cfg.FsRoots)
	if rerr != nil {
		// Serve refuses to run; until then confine to nothing reachable.
		roots, _ = fsops.NewRoots([]string{os.TempDir()})
	}
	scfg.FsRoots = roots
	svcs, serr := newServices(cfg)
	if err == nil {
		err = serr
	}
	scfg.Services = svcs.list
	var metrics *serverMetrics
	var byToken *tokenCounter
	if cfg.Metrics {
		metrics = newServerMetrics()
		scfg.Metrics = metrics
		byToken = newTokenCounter(metrics.reg)
		registerSandboxMetrics(metrics.reg, iso.Host)
	}
	scfg.Watch = cfg.Watch
	var aud Auditor = nopAudit{}
	if cfg.Audit != nil {
		aud, scfg.Audit = cfg.Audit, cfg.Audit
		if metrics != nil {
			registerAuditMetrics(metrics.reg, cfg.Audit)
		}
	}
	return &Server{
		tokens:    cfg.tokenSource(),
		audit:     aud,
		byToken:   byToken,
		svcs:      svcs,
		metrics:   metrics,
		cfg:       cfg,
		log:       cfg.Logger,
		initErr:   err,
		budgets:   scfg.Budgets,
		sup:       actors.NewSupervisor(scfg),
		iso:       iso,
		ctx:       ctx,
		cancel:    cancel,
		listeners: make(map[net.Listener]*http.Server),
	}
}

// Config returns the effective configuration (defaults applied).
func (s *Server) Config() Config { return s.cfg }

// Handler returns the HTTP handler: GET /healthz and /readyz, and websocket
// upgrades on any other path, after the Origin and bearer-token checks.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if origin := r.Header.Get("Origin"); origin != "" && !s.originAllowed(origin) {
		http.Error(w, "requests with an Origin header are refused", http.StatusForbidden)
		return
	}
	if s.serveHealth(w, r) {
		return
	}
	name, ok := s.identify(r)
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="runtimed"`)
		http.Error(w, "missing or invalid bearer token", http.StatusUnauthorized)
		return
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		http.Error(w, "runtimed speaks JSON-RPC over websocket here; GET /readyz for health", http.StatusBadRequest)
		return
	}
	t, err := wire.AcceptWebsocket(w, r, s.cfg.MaxMessageBytes)
	if err != nil {
		s.log.Debug("websocket accept failed", zap.Error(err))
		return
	}
	go func() { _ = s.serveTransport(t, true, connIdentity{token: name, peer: r.RemoteAddr}) }()
}

func (s *Server) originAllowed(origin string) bool {
	for _, o := range s.cfg.AllowedOrigins {
		if o == "*" || strings.EqualFold(o, origin) {
			return true
		}
	}
	return false
}

func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// Serve accepts websocket connections on l until Shutdown or Close; then it
// returns ErrServerClosed.
func (s *Server) Serve(l net.Listener) error {
	if s.initErr != nil {
		return s.initErr
	}
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: zap.NewStdLog(s.log.Named("http"))}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return ErrServerClosed
	}
	s.listeners[l] = hs
	s.mu.Unlock()
	err := hs.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return ErrServerClosed
	}
	return err
}

// ServeTransport serves one connection on t and returns when it ends.
// With resumable, a dropped connection detaches its session for the detach
// TTL (websocket); otherwise its end terminates its processes (stdio).
func (s *Server) ServeTransport(t wire.Transport, resumable bool) error {
	return s.serveTransport(t, resumable, connIdentity{peer: "stdio"})
}

func (s *Server) serveTransport(t wire.Transport, resumable bool, id connIdentity) error {
	if s.initErr != nil {
		t.Close()
		return s.initErr
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		t.Close()
		return ErrServerClosed
	}
	s.conns.Add(1)
	s.mu.Unlock()
	defer s.conns.Done()
	defer s.metrics.connOpened(t)()
	s.byToken.inc(id.token)
	log := s.log.Named("conn")
	if id.token != "" {
		log = log.With(zap.String("token", id.token))
	}
	return s.sup.ServeConn(s.ctx, t, actors.ConnOptions{Resumable: resumable, Logger: log, MaxMessageBytes: s.cfg.MaxMessageBytes,
		TokenName: id.token, Peer: id.peer, ConnID: connSeq.Add(1)})
}

// Shutdown stops the server gracefully on every transport: it stops
// accepting (listeners closed, new transports refused), terminates every
// process tree (SIGTERM, SIGHUP on a PTY, then SIGKILL after the shutdown
// grace), waits until each process has handed its ending (exited, closed)
// to its connection, then ends every connection, whose writer flushes what
// it already holds for its client. If ctx ends first, every tree is killed
// at once, subscribers are dropped, and ctx's error is returned once the
// connections have ended (or could not be ended in time: a transport
// blocked in a read or write that cannot be interrupted).
func (s *Server) Shutdown(ctx context.Context) error {
	defer s.iso.release()
	s.stopAccepting()
	s.svcs.stop(ctx)
	s.sup.Stop()
	err := s.sup.Wait(ctx)
	if err != nil {
		s.sup.Kill()
	}
	s.cancel(&actors.ConnError{Reason: actors.ReasonShutdown})
	if werr := s.waitConns(connEndWait); werr != nil && err == nil {
		err = werr
	}
	if err != nil {
		wctx, cancel := context.WithTimeout(context.Background(), killedEndWait)
		defer cancel()
		_ = s.sup.Wait(wctx)
	}
	return err
}

// Bounds of Shutdown's last steps, so that a server stops within its
// shutdown grace plus one second even when a transport is stuck.
const (
	// connEndWait: for connections to end once cancelled (their writers'
	// last flush is bounded shorter still).
	connEndWait = 350 * time.Millisecond
	// killedEndWait: for actors to end after a kill (SIGKILL, output drain).
	killedEndWait = 200 * time.Millisecond
)

// errConnsStuck: a connection did not end in time after the shutdown.
var errConnsStuck = errors.New("runtime: a connection did not end after shutdown (transport blocked)")

func (s *Server) waitConns(d time.Duration) error {
	done := make(chan struct{})
	go func() { s.conns.Wait(); close(done) }()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-done:
		return nil
	case <-timer.C:
		return errConnsStuck
	}
}

// Close ends every connection first (so that nothing the kill causes
// reaches a client: a client sees its connection end, not its processes),
// then kills every process (SIGKILL) and returns once all goroutines have
// exited.
func (s *Server) Close() error {
	defer s.iso.release()
	s.stopAccepting()
	s.svcs.kill()
	s.cancel(&actors.ConnError{Reason: actors.ReasonShutdown})
	s.conns.Wait()
	s.sup.Kill()
	return s.sup.Wait(context.Background())
}

// stopAccepting refuses new transports and closes the listeners. Accepted
// websocket connections are hijacked, so closing the HTTP servers does not
// end them; cancelling s.ctx does.
func (s *Server) stopAccepting() {
	s.mu.Lock()
	s.closing = true
	hss := make([]*http.Server, 0, len(s.listeners))
	for _, hs := range s.listeners {
		hss = append(hss, hs)
	}
	clear(s.listeners)
	s.mu.Unlock()
	for _, hs := range hss {
		_ = hs.Close()
	}
}
