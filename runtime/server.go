package runtime

import (
	"context"
	"crypto/subtle"
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
	DefaultMaxMessageBytes = wire.DefaultMaxMessageBytes
	// drainAfterTerminate: how long a terminated process's output may still
	// drain after it exits before its streams are closed by force.
	drainAfterTerminate = 100 * time.Millisecond
)

// Config configures a Server. The zero value means the documented defaults.
type Config struct {
	// Logger receives structured logs; nil means no logging. Never stdout.
	Logger *zap.Logger
	// DetachTTL: how long a dropped websocket's session (and its processes)
	// survives for a resume. Zero means DefaultDetachTTL; negative means
	// none (terminate at once).
	DetachTTL time.Duration
	// RetainBytes and RetainChunks bound retained output per process.
	RetainBytes  int
	RetainChunks int
	// ClosedRetention: how long a closed process stays readable. Zero means
	// the default; negative means it is forgotten at once.
	ClosedRetention time.Duration
	// ShutdownGrace: SIGTERM-to-SIGKILL grace on Shutdown.
	ShutdownGrace time.Duration
	// MaxProcesses bounds the active (not yet closed) processes of one
	// session (of a Local: all of its processes), and the app-server
	// processes of one connection. A start beyond it is refused with
	// -32011 "limit reached: processes per session = N (--max-processes): ...".
	MaxProcesses int
	// MaxMessageBytes limits inbound messages on both transports.
	MaxMessageBytes int

	// Server-wide budgets. Zero means the default derived from the machine
	// (ProbeMachine: RLIMIT_NOFILE and memory); negative means unlimited.
	// A refusal is a JSON-RPC error -32011 "limit reached: <limit> =
	// <value> (<flag>): ..." and costs no other client anything; a
	// connection the budgets refuse gets that error with id null and a
	// close frame 1008.
	//
	// MaxConnections bounds open connections (default: the smaller of a
	// quarter of the descriptor budget and MaxOutboundBytes /
	// OutboundQueueBytes).
	MaxConnections int
	// MaxProcessesTotal bounds active processes server-wide (default: the
	// smaller of the descriptor budget without the reserve / 6 and
	// MaxRetainedBytes / what one process may retain).
	MaxProcessesTotal int
	// MaxOpenFiles bounds the descriptors charged to connections (2 each)
	// and processes (6 each) (default: RLIMIT_NOFILE minus those open at
	// start and 32); FDReserve of them (default 1/16, between 32 and 1024)
	// only new connections and sessions with fewer than 2 active processes
	// may use, so a greedy session is refused while they still work.
	MaxOpenFiles int
	FDReserve    int
	// MaxRetainedBytes bounds the output processes may hold: each charges
	// RetainBytes plus its read-ahead (18 reads of up to 256 KiB) while it
	// runs, RetainBytes once closed until its retention ends (default: half
	// of memory, a worst case: the read-ahead fills only behind a slow client).
	MaxRetainedBytes int64
	// MaxOutboundBytes bounds all connections' outbound queues; each
	// connection charges OutboundQueueBytes (default 1 MiB) while open
	// (default: an eighth of memory).
	MaxOutboundBytes   int64
	OutboundQueueBytes int
	// SlowConsumerTimeout closes a websocket connection whose outbound
	// queue makes no progress for this long (default 30 s); the detach
	// rules then apply to its session.
	SlowConsumerTimeout time.Duration
	// AuthToken, if set, is required as "Authorization: Bearer <token>" on
	// every websocket upgrade.
	AuthToken string
	// AllowedOrigins lists Origin header values that may connect. Any other
	// request carrying an Origin header is refused with 403.
	AllowedOrigins []string
	// FsRoots confines every fs/* method to these directories (after
	// resolving symlinks). Empty means the whole filesystem.
	FsRoots []string
	// DefaultSandbox ("read-only" or "workspace-write", with the start's
	// cwd as the project root) confines starts that carry no sandbox.
	// Empty: such starts run unconfined.
	DefaultSandbox string
	// RequireSandbox refuses starts that carry no sandbox (and no
	// DefaultSandbox applies) with -32602.
	RequireSandbox bool
	// Containment is ContainAuto (a cgroup per process tree where this host
	// allows it) or ContainProcessGroup.
	Containment string
	// DisableHTTPRequests refuses http/request (-32602, saying so); by
	// default clients may make HTTP requests from the server's network.
	DisableHTTPRequests bool
	// MaxHTTPBodyBytes caps a buffered http/request response body (a
	// larger one is an error; streamed bodies are not capped). Zero means
	// DefaultMaxHTTPBodyBytes.
	MaxHTTPBodyBytes int64
}

// Validate reports configuration errors that NewServer would otherwise
// turn into failing Serve calls (for example an fs root that does not exist).
func (c Config) Validate() error {
	if _, err := fsops.NewRoots(c.FsRoots); err != nil {
		return err
	}
	return validateSandboxConfig(c)
}

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
	cfg Config
	log *zap.Logger
	sup *actors.Supervisor
	iso *isolation // the sandbox host and cgroup manager, released after the supervisor stops

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
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancelCause(context.Background())
	iso := newIsolation(cfg)
	scfg := supervisorConfig(cfg, iso)
	scfg.Budgets = cfg.budgets(ProbeMachine())
	roots, err := fsops.NewRoots(cfg.FsRoots)
	if err == nil {
		err = validateSandboxConfig(cfg)
	}
	if err != nil {
		// Serve refuses to run; until then confine to nothing reachable.
		roots, _ = fsops.NewRoots([]string{os.TempDir()})
	}
	scfg.FsRoots = roots
	return &Server{
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

// Handler returns the HTTP handler: GET /readyz, and websocket upgrades on
// any other path, after the Origin and bearer-token checks.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if origin := r.Header.Get("Origin"); origin != "" && !s.originAllowed(origin) {
		http.Error(w, "requests with an Origin header are refused", http.StatusForbidden)
		return
	}
	if r.URL.Path == "/readyz" && r.Method == http.MethodGet {
		if s.isClosing() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("ok\n"))
		return
	}
	if s.cfg.AuthToken != "" && !s.authorized(r) {
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
	go func() { _ = s.ServeTransport(t, true) }()
}

func (s *Server) originAllowed(origin string) bool {
	for _, o := range s.cfg.AllowedOrigins {
		if o == "*" || strings.EqualFold(o, origin) {
			return true
		}
	}
	return false
}

// authorized checks "Authorization: Bearer <token>"; the scheme is
// case-insensitive (RFC 9110 section 11.1), spaces after it are skipped.
func (s *Server) authorized(r *http.Request) bool {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	tok = strings.TrimLeft(tok, " ")
	return subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.AuthToken)) == 1
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
	return s.sup.ServeConn(s.ctx, t, actors.ConnOptions{Resumable: resumable, Logger: s.log.Named("conn")})
}

// Shutdown stops accepting, ends every connection, terminates every process
// (SIGTERM, SIGKILL after the shutdown grace) and waits for all of it, or
// until ctx ends, in which case everything is killed and ctx's error is
// returned.
func (s *Server) Shutdown(ctx context.Context) error {
	defer s.iso.release()
	s.sup.Stop() // first, so ending connections leave their processes to the graceful stop
	s.beginClose()
	done := make(chan struct{})
	go func() { s.conns.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.sup.Kill()
		<-done
		_ = s.sup.Wait(context.Background())
		return ctx.Err()
	}
	if err := s.sup.Wait(ctx); err != nil {
		s.sup.Kill()
		_ = s.sup.Wait(context.Background())
		return err
	}
	return nil
}

// Close kills every process (SIGKILL), ends every connection and returns
// once all goroutines have exited.
func (s *Server) Close() error {
	defer s.iso.release()
	s.beginClose()
	s.sup.Kill()
	s.conns.Wait()
	return s.sup.Wait(context.Background())
}

func (s *Server) beginClose() {
	s.mu.Lock()
	s.closing = true
	hss := make([]*http.Server, 0, len(s.listeners))
	for _, hs := range s.listeners {
		hss = append(hss, hs)
	}
	clear(s.listeners)
	s.mu.Unlock()
	s.cancel(&actors.ConnError{Reason: actors.ReasonShutdown})
	for _, hs := range hss {
		// Websocket connections are hijacked, so Close only stops the
		// listener; the cancel above ends the connections themselves.
		_ = hs.Close()
	}
}
