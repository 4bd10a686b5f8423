package actors

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/runtimed/runtimed/actors/fsops"
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
	// FsRoots confines the fs/* methods (zero value: the whole filesystem).
	FsRoots fsops.Roots
	// Isolation is the sandbox host and cgroup manager children are
	// spawned with (zero value: sandboxes and limits are refused, trees
	// are contained by process group only).
	Isolation Isolation
	// DefaultSandbox (FloorReadOnly, FloorWorkspaceWrite or FloorNone) is
	// applied to starts that carry no sandbox; RequireSandbox refuses them.
	DefaultSandbox string
	RequireSandbox bool
	Logger         *zap.Logger
	// Metrics receives measurements (nil: none are taken).
	Metrics Metrics
}

// Supervisor owns the registry actor and tracks every goroutine the actors
// start, so that Stop/Kill and Wait account for all of them.
//
// All methods may be called concurrently.
type Supervisor struct {
	cfg     Config
	log     *zap.Logger
	metrics Metrics // never nil

	stopOnce, killOnce sync.Once
	stopCh, killCh     chan struct{} // closed once by Stop/Kill (their only owner)

	wg       sync.WaitGroup
	registry *registry
}

// NewSupervisor starts a supervisor and its session registry.
func NewSupervisor(cfg Config) *Supervisor {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	cfg.Metrics = metricsOrNop(cfg.Metrics)
	cfg.Proc.metrics = cfg.Metrics
	s := &Supervisor{
		cfg:     cfg,
		log:     cfg.Logger,
		metrics: cfg.Metrics,
		stopCh:  make(chan struct{}),
		killCh:  make(chan struct{}),
	}
	s.registry = newRegistry(s)
	s.wg.Go(s.registry.run)
	return s
}

// Spawn starts a child and its process actor. sub, if not nil, receives
// live events from seq 1.
func (s *Supervisor) Spawn(id string, spec Spec, sub *Subscriber) (*ProcessRef, error) {
	if s.stopped() {
		return nil, ErrStopped
	}
	t0 := time.Now()
	sess, err := startOS(spec, s.cfg.Isolation)
	if err != nil {
		s.metrics.SpawnFailed()
		return nil, err
	}
	s.metrics.ProcessStarted(time.Since(t0))
	return s.spawn(id, spec.Argv, spec.TTY, sess, sub, spec.Timeout), nil
}

// SpawnSession starts a process actor around an already started session
// (tests pass a fake one).
func (s *Supervisor) SpawnSession(id string, argv []string, tty bool, sess Session, sub *Subscriber) *ProcessRef {
	s.metrics.ProcessStarted(0)
	return s.spawn(id, argv, tty, sess, sub, 0)
}

func (s *Supervisor) spawn(id string, argv []string, tty bool, sess Session, sub *Subscriber, timeout time.Duration) *ProcessRef {
	log := s.log.Named("proc").With(zap.String("process_id", id), zap.Int("pid", sess.Pid()))
	p, ref := newProcess(id, argv, tty, sess, s.cfg.Proc, log, sub)
	if timeout > 0 {
		p.timeoutAt = time.Now().Add(timeout)
	}
	p.startHelpers(&s.wg)
	s.wg.Go(func() { p.run(s.stopCh, s.killCh) })
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

// Stop begins a graceful stop: no new processes; every process gets
// SIGTERM (SIGHUP on a PTY) and SIGKILL after the shutdown grace; actors
// exit once their process is closed.
func (s *Supervisor) Stop() { s.stopOnce.Do(func() { close(s.stopCh) }) }

// Kill stops at once: SIGKILL to every process group.
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
