package actors

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/runtimed/runtimed/actors/fsops"
	"github.com/runtimed/runtimed/actors/hostenv"
	"github.com/runtimed/runtimed/actors/netproxy"
	"github.com/runtimed/runtimed/actors/osproc"
	"github.com/runtimed/runtimed/wire"
)

// Config configures a Supervisor. Zero values are replaced by defaults in
// package runtime, which documents them; here every field must be set.
type Config struct {
	Proc ProcConfig
	// DetachTTL is how long a dropped websocket's session survives; 0 terminates it at once.
	DetachTTL time.Duration
	// MaxProcesses bounds the active (not yet closed) processes of one
	// session, and the app-server processes of one connection.
	MaxProcesses int
	// MaxMessageBytes is the transports' inbound message limit (for the
	// error that answers a larger one).
	MaxMessageBytes int
	// Budgets are the server-wide limits (connections, processes, open
	// files, retained output, outbound queues) and the slow-consumer
	// timeout; zero fields are unlimited.
	Budgets Budgets
	// FsRoots confines the fs/* methods and process/start's cwd (zero
	// value: the whole filesystem).
	FsRoots fsops.Roots
	// Isolation is the sandbox host and cgroup manager children are
	// spawned with (zero value: sandboxes and limits are refused, trees
	// are contained by process group only).
	Isolation osproc.Isolation
	// DefaultSandbox (FloorReadOnly, FloorWorkspaceWrite or FloorNone) is
	// applied to starts that carry no sandbox; RequireSandbox refuses them.
	DefaultSandbox string
	RequireSandbox bool
	// Environment is the host as environment/info reports it (collected
	// once by package runtime), and Capabilities the optional features the
	// server provides (its capabilities map).
	Environment  hostenv.Info
	Capabilities wire.Capabilities
	// HTTP configures http/request.
	HTTP HTTPConfig
	// CodexSystemDir is where the executor's system Codex configuration
	// lives (environmentConfig/read, capability discovery); "" is
	// /etc/codex. The user's is $CODEX_HOME of the daemon's environment.
	CodexSystemDir string
	// Services, if set, lists the server's supervised services' processes;
	// process/list shows them after the session's own (they belong to no
	// session, so they are listed, not controlled, there).
	Services func(ctx context.Context) []wire.ProcessInfo
	Logger   *zap.Logger
	// NetworkDeny is the operator's network floor: patterns no managed
	// network policy can allow (checked by the caller: runtime validates it).
	NetworkDeny []string
	// NetPlacer places a command's managed-network proxies where only it
	// reaches them (nil: managed networks are refused; see NetPlacer).
	NetPlacer NetPlacer
	// netResolver resolves names for managed-network proxies (nil: the
	// system's); only this package's tests set it.
	netResolver netproxy.Resolver
	// Clock is where connections take their time from: the slow-consumer
	// watchdog's timer and marks (nil: RealClock). Process actors take
	// theirs from Proc.Clock.
	Clock Clock
	// Metrics receives measurements (nil: none are taken).
	Metrics Metrics
	// Audit receives audit events (nil: none are raised).
	Audit Auditor
	// Watch learns of every process started through Start (nil: none).
	Watch Watcher
}

// HTTPConfig configures http/request.
type HTTPConfig struct {
	// Enabled: when false, http/request is refused (-32602).
	Enabled bool
	// MaxBodyBytes caps a buffered (not streamed) response body.
	MaxBodyBytes int64
}

// Supervisor owns the registry actor and tracks every goroutine the actors
// start, so that Stop/Kill and Wait account for all of them.
//
// All methods may be called concurrently.
type Supervisor struct {
	cfg     Config
	log     *zap.Logger
	metrics Metrics // never nil
	audit   Auditor // never nil

	stopOnce, killOnce sync.Once
	stopCh, killCh     chan struct{} // closed once by Stop/Kill (their only owner)
	// startMu orders starting an actor's goroutines against Stop: once Stop
	// has returned, Spawn adds nothing to wg (Wait may be running). Held
	// only around the stopped check and the wg.Go calls, never during I/O.
	startMu sync.Mutex

	wg       sync.WaitGroup
	registry *registry
	budgets  *budgets
	reclaim  chan struct{}         // pokes for the reclaimer goroutine (reclaim.go)
	envInfo  *wire.EnvironmentInfo // immutable: the answer of environment/info
}

// NewSupervisor starts a supervisor and its session registry.
func NewSupervisor(cfg Config) *Supervisor {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	cfg.Metrics = metricsOrNop(cfg.Metrics)
	cfg.Proc.metrics = cfg.Metrics
	if cfg.Audit == nil {
		cfg.Audit = nopAuditor{}
	}
	cfg.Proc.audit = cfg.Audit
	cfg.Proc.resumeHold = cfg.DetachTTL
	s := &Supervisor{
		cfg:     cfg,
		log:     cfg.Logger,
		metrics: cfg.Metrics,
		audit:   cfg.Audit,
		stopCh:  make(chan struct{}),
		killCh:  make(chan struct{}),
	}
	info := environmentInfo(cfg.Environment, cfg.Capabilities)
	s.envInfo = &info
	s.registry = newRegistry(s)
	s.wg.Go(s.registry.run)
	s.budgets = newBudgets(cfg.Budgets)
	s.wg.Go(func() { s.budgets.run(s.stopCh) })
	s.reclaim = make(chan struct{}, 1)
	s.wg.Go(func() { reclaimLoop(s.reclaim, s.stopCh) })
	return s
}

// Spawn starts a child and its process actor, as a first start (see
// SpawnCharged), without admission: tests and benchmarks hand it a Spec
// directly; requests go through Start. sub, if not nil, receives live
// events from seq 1.
func (s *Supervisor) Spawn(id string, spec Spec, sub *Subscriber) (*ProcessRef, error) {
	return s.SpawnCharged(id, spec, sub, 0)
}

// SpawnCharged is Spawn for an owner with ownerActive active processes:
// it charges the budgets (processes, open files, retained output) first;
// the charge returns as the process closes and its actor ends. With fewer
// than FirstStarts the owner may use the budgets' reserve. A refusal is a
// *BudgetError; a spawn that fails for lack of descriptors anyway is one
// too (the open-files limit of the process).
func (s *Supervisor) SpawnCharged(id string, spec Spec, sub *Subscriber, ownerActive int) (*ProcessRef, error) {
	ref, _, err := s.spawnCharged(context.Background(), id, spec, keep{}, sub, nil, ownerActive)
	return ref, err
}

// spawnCharged is steps 11 and 12 of Start: the charge, the spawn, the
// actor. A failure names the step (CheckBudget: refused, or stopping;
// CheckSpawn: the child did not start).
func (s *Supervisor) spawnCharged(ctx context.Context, id string, spec Spec, k keep, sub *Subscriber, live chan Event, ownerActive int) (*ProcessRef, Check, error) {
	if s.stopped() {
		return nil, CheckBudget, ErrStopped
	}
	c := s.processCharge()
	berr, err := s.acquire(ctx, c, ownerActive < FirstStarts)
	if err != nil {
		if ctx.Err() != nil {
			return nil, CheckBudget, ctx.Err()
		}
		return nil, CheckBudget, ErrStopped
	}
	if berr != nil {
		return nil, CheckBudget, berr
	}
	sess, err := s.startNetworked(spec, k.network)
	if err != nil {
		s.release(c)
		if fdExhausted(err) {
			return nil, CheckSpawn, s.noDescriptors(err)
		}
		return nil, CheckSpawn, err
	}
	ref := s.spawn(id, spec.Argv, spec.TTY, sess, sub, k, live)
	if ref == nil {
		s.release(c)
		s.metrics.ProcessExited(EndTerminated)
		osproc.Discard(sess) // stopped while the child was being started
		return nil, CheckSpawn, ErrStopped
	}
	_ = send(context.Background(), s.budgets.mbox, budgetMsg(bindMsg{ref: ref, c: c}), s.budgets.done)
	return ref, 0, nil
}

// startOS starts the child and measures it: a started process is counted
// (its actor reports the exit), a failed start too.
func (s *Supervisor) startOS(spec Spec) (osproc.Session, error) {
	t0 := time.Now()
	sess, err := osproc.Start(spec, s.cfg.Isolation)
	if err != nil {
		s.metrics.SpawnFailed()
		return nil, err
	}
	s.metrics.ProcessStarted(time.Since(t0))
	return sess, nil
}

// noDescriptors is the refusal of a spawn the kernel refused for lack of
// descriptors (EMFILE/ENFILE).
func (s *Supervisor) noDescriptors(err error) *BudgetError {
	value := "the process's RLIMIT_NOFILE"
	if n := s.cfg.Budgets.RLimitNoFile; n > 0 {
		value = fmt.Sprint(n)
	}
	return &BudgetError{Limit: "open files", Value: value, Flag: "RLIMIT_NOFILE; see --max-open-files",
		Detail: "the server has no descriptor left to start this process (" + err.Error() + ")"}
}

// SpawnSession starts a process actor around an already started session
// (tests pass a fake one). It returns nil once the supervisor has stopped.
func (s *Supervisor) SpawnSession(id string, argv []string, tty bool, sess osproc.Session, sub *Subscriber) *ProcessRef {
	s.metrics.ProcessStarted(0)
	ref := s.spawn(id, argv, tty, sess, sub, keep{}, nil)
	if ref == nil {
		s.metrics.ProcessExited(EndTerminated)
	}
	return ref
}

// spawn starts the actor around sess; nil when the supervisor has stopped.
func (s *Supervisor) spawn(id string, argv []string, tty bool, sess osproc.Session, sub *Subscriber, k keep, listener chan Event) *ProcessRef {
	log := s.log.Named("proc").WithLazy(zap.String("process_id", id), zap.Int("pid", sess.Pid())) // fields encoded only if it logs
	p, ref := newProcess(id, argv, tty, sess, s.cfg.Proc, log, sub)
	ref.meta = k.metadata // immutable from here: set before any goroutine sees ref
	ref.who, p.who, p.startedAt = k.who, k.who, time.Now()
	if listener != nil {
		p.listeners = append(p.listeners, listener) // before run starts: its goroutine owns it from then on
	}
	if k.timeout > 0 {
		p.timeoutAt = p.clock.Now().Add(k.timeout)
	}
	s.startMu.Lock()
	if s.stopped() {
		s.startMu.Unlock()
		return nil
	}
	p.startHelpers(&s.wg)
	s.wg.Go(func() { p.run(s.stopCh, s.killCh) })
	s.startMu.Unlock()
	log.Debug("process started", zap.Strings("argv", argv), zap.Bool("tty", tty))
	return ref
}

func (s *Supervisor) stopped() bool {
	select {
	case <-s.stopCh:
		return true
	default:
		return false
	}
}

// Stop begins a graceful stop: no new processes; every process takes the
// kill path with the shutdown grace (SIGTERM, or SIGHUP on a PTY, SIGKILL
// after the grace); actors end once their ending was delivered.
func (s *Supervisor) Stop() {
	s.stopOnce.Do(func() {
		s.startMu.Lock()
		close(s.stopCh)
		s.startMu.Unlock()
	})
}

// Kill stops at once: SIGKILL to every process tree; subscribers are
// dropped rather than waited for.
func (s *Supervisor) Kill() {
	s.Stop()
	s.killOnce.Do(func() { close(s.killCh) })
}

// Wait waits until every actor and helper goroutine has exited, or ctx ends.
func (s *Supervisor) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ErrShuttingDown is returned for work refused because the supervisor is stopping.
var ErrShuttingDown = errors.New("actors: shutting down")
