package runtime

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// RestartPolicy says when a supervised service is started again after its
// process ended (systemd's Restart=).
type RestartPolicy string

const (
	// RestartNever leaves an ended service ended.
	RestartNever RestartPolicy = "never"
	// RestartOnFailure restarts after a non-zero exit, a signal, a limit or
	// a start that failed; a clean exit 0 ends the service.
	RestartOnFailure RestartPolicy = "on-failure"
	// RestartAlways restarts after any ending.
	RestartAlways RestartPolicy = "always"
)

// Backoff spaces restarts: the first waits Initial, each next one twice
// the previous, at most Max, each randomised by ±Jitter (a fraction).
// A service that ran for ResetAfter or longer starts over at Initial.
// Zero fields take the defaults; negative durations, a Jitter outside
// [0, 1) and a Max below Initial (defaults included) are errors.
type Backoff struct {
	Initial    time.Duration // 0: 100 ms
	Max        time.Duration // 0: 30 s
	Jitter     float64       // 0: 0.2 (there is no jitter-free backoff); at most just under 1
	ResetAfter time.Duration // 0: 10 s
}

// Service is one process a Supervisor keeps running. Supervisor.Add and
// Config.Validate check it: a mistake is an *OptionError naming the field
// ("Service.Backoff.Jitter") and the service.
type Service struct {
	// Name identifies the service; its processes are named NAME#N.
	// Required, without '#', '/' or spaces, unique within a Supervisor.
	Name string
	// Spec is the process to run (its ID is ignored), checked as Start
	// checks it.
	Spec Spec
	// Restart is the restart policy: RestartNever, RestartOnFailure (also
	// "") or RestartAlways.
	Restart RestartPolicy
	// Backoff is the delay before each restart (see Backoff's defaults).
	Backoff Backoff
	// MaxRestarts within Window (systemd's StartLimitBurst within
	// StartLimitIntervalSec, suture's failure threshold): one more restart
	// than that and the service gives up (ServiceFailed). Zero means 5 (a
	// negative MaxRestarts means no limit); a zero Window 60 s (negative
	// is an error).
	MaxRestarts int
	Window      time.Duration // see MaxRestarts
	// StopGrace is the SIGTERM-to-SIGKILL grace when the supervisor stops
	// it; zero means 5 s, negative is an error.
	StopGrace time.Duration
}

// ServiceState is where a service is in its life (supervise_fsm.go draws
// the transitions; each carries a ServiceReason).
type ServiceState string

const (
	ServicePending  ServiceState = "pending"  // waiting for the services before it to start (Start's ordered first start)
	ServiceStarting ServiceState = "starting" // being started
	ServiceRunning  ServiceState = "running"  // its process runs
	ServiceBackoff  ServiceState = "backoff"  // ended; waiting to restart
	ServiceLost     ServiceState = "lost"     // its backend was lost; started again once a backend can (SupervisorOptions.Redial)
	ServiceExited   ServiceState = "exited"   // ended for good (by its policy)
	ServiceFailed   ServiceState = "failed"   // gave up: too many restarts in the window
	ServiceStopping ServiceState = "stopping" // being stopped by Stop
	ServiceStopped  ServiceState = "stopped"  // stopped by Stop
)

// ServiceStatus is the observable health of one service.
type ServiceStatus struct {
	Name      string        // the service
	State     ServiceState  // where it is now
	Reason    ServiceReason // why it entered State
	ProcessID string        // the current or last process, "" before the first start
	Restarts  int           // restarts so far (its process NAME#N has N = Restarts+1)
	// LastExit is how its last process ended; nil before the first
	// ending, and after its backend was lost (how it ended is unknown
	// then: a lost backend is never taken for an exit).
	LastExit *ExitStatus
	// LastError is the last start error if the last attempt failed, the
	// process's failure, or (ServiceLost) an error wrapping ErrBackendLost
	// and the backend's error (ErrDisconnected, ErrClosed).
	LastError error
	Since     time.Time // when it entered State
}

// ServiceEvent is a change of a service's state. Dropped counts events
// this subscriber missed just before this one because its queue was full.
type ServiceEvent struct {
	ServiceStatus
	Dropped int // events missed just before this one
}

// Clock is the time source of a Supervisor; tests pass a fake one.
type Clock interface {
	Now() time.Time                         // the current time
	After(d time.Duration) <-chan time.Time // like time.After
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// SupervisorOptions configure a Supervisor; nil, and every nil field,
// means the defaults (nothing here can be out of range).
type SupervisorOptions struct {
	Clock  Clock       // nil: the system clock
	Logger *zap.Logger // nil: no logging
	// Rand returns a float in [0, 1) for the jitter; nil: math/rand/v2.
	Rand func() float64
	// Redial, if set, makes a new backend when the current one is lost:
	// its Start or a process's Wait failed with ErrDisconnected (a Client
	// whose connection was lost and, with ClientOptions.Reconnect, could
	// not be resumed, e.g. a restarted server) or ErrClosed. The services
	// it ran are ServiceLost meanwhile and nothing is started on the lost
	// backend. Redial is called at once, then again after each failure
	// with backoff (100 ms doubling to 5 s, ±20 %, on Clock); ctx ends when
	// Stop begins. With the backend it returns, every lost service starts
	// again (without backoff: losing the backend is not the service's
	// failure, and it does not count in MaxRestarts). The supervisor owns
	// the backends Redial returns: it closes one when it is lost in turn
	// and the last one when it stops. The backend given to NewSupervisor
	// stays the caller's. Nil: lost services stay lost until Stop.
	Redial func(ctx context.Context) (Backend, error)
}

// Supervisor keeps a set of named processes running on any Backend, local
// or remote, with restart policies, exponential backoff with jitter and a
// restart intensity limit. Services start in the order they were added
// and stop in reverse order. A lost backend (a remote Client whose
// connection is gone) is not an exit: the services are ServiceLost until
// SupervisorOptions.Redial gives a backend again. It is an actor
// (supervise_run.go): one goroutine owns every service's state; Status
// and Subscribe ask it. Add and Start are called
// by one goroutine before the supervisor is shared; after Start, Status,
// Subscribe and Stop may be called from any goroutine.
type Supervisor struct {
	b      Backend
	clk    Clock
	rnd    func() float64
	log    *zap.Logger
	redial func(ctx context.Context) (Backend, error) // nil: none
	svcs   []Service                                  // fixed at Start

	mbox    chan supMsg         // requests and facts; run reads it
	done    chan struct{}       // closed when run returns
	started atomic.Bool         // set once by Start
	presubs []chan ServiceEvent // subscribed before Start (by the configuring goroutine); run takes them
}

// ErrSupervisorStarted: Add after Start, or Start twice.
var ErrSupervisorStarted = errors.New("runtime: supervisor already started")

// ErrSupervisorStopped: the supervisor has stopped.
var ErrSupervisorStopped = errors.New("runtime: supervisor stopped")

// NewSupervisor returns a supervisor of processes on b.
func NewSupervisor(b Backend, opts *SupervisorOptions) *Supervisor {
	s := &Supervisor{b: b, clk: realClock{}, rnd: rand.Float64, log: zap.NewNop(), mbox: make(chan supMsg, 64), done: make(chan struct{})}
	if opts != nil {
		if opts.Clock != nil {
			s.clk = opts.Clock
		}
		if opts.Logger != nil {
			s.log = opts.Logger
		}
		if opts.Rand != nil {
			s.rnd = opts.Rand
		}
		s.redial = opts.Redial
	}
	return s
}

// Add registers a service (before Start). The service is validated: a
// name, an argv, a known policy, sane backoff and window.
func (s *Supervisor) Add(svc Service) error {
	if s.started.Load() {
		return ErrSupervisorStarted
	}
	svc, err := svc.withDefaults()
	if err != nil {
		return err
	}
	for _, o := range s.svcs {
		if o.Name == svc.Name {
			return fmt.Errorf("runtime: service %q added twice", svc.Name)
		}
	}
	s.svcs = append(s.svcs, svc)
	return nil
}

// Backoff's defaults (see Backoff).
const (
	defaultBackoffInitial = 100 * time.Millisecond
	defaultBackoffMax     = 30 * time.Second
)

// withDefaults validates svc (an *OptionError naming the field) and fills
// in the defaults of its zero fields.
func (svc Service) withDefaults() (Service, error) {
	if err := svc.check("Service"); err != nil {
		return svc, err
	}
	if svc.Restart == "" {
		svc.Restart = RestartOnFailure
	}
	b := &svc.Backoff
	b.Initial = cmp.Or(b.Initial, defaultBackoffInitial)
	b.Max = cmp.Or(b.Max, defaultBackoffMax)
	b.Jitter = cmp.Or(b.Jitter, 0.2)
	b.ResetAfter = cmp.Or(b.ResetAfter, 10*time.Second)
	svc.MaxRestarts = cmp.Or(svc.MaxRestarts, 5)
	svc.Window = cmp.Or(svc.Window, 60*time.Second)
	svc.StopGrace = cmp.Or(svc.StopGrace, 5*time.Second)
	return svc, nil
}

// fact hands a watcher's fact to the actor, or drops it once the actor
// has stopped (nobody waits for it then).
func (s *Supervisor) fact(m supMsg) {
	select {
	case s.mbox <- m:
	case <-s.done:
	}
}

// Start starts every service, in the order added, and waits until each
// was started once (or its first start failed, which its policy then
// handles). It returns ctx's error if ctx ends first; the services keep
// being supervised until Stop.
func (s *Supervisor) Start(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return ErrSupervisorStarted
	}
	firstDone := make(chan struct{})
	go s.run(firstDone)
	select {
	case <-firstDone:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stop stops every service in reverse order (each: SIGTERM, SIGKILL after
// its StopGrace) and returns once all have ended; ctx bounds the wait.
// Stop after the supervisor stopped returns nil.
func (s *Supervisor) Stop(ctx context.Context) error {
	if !s.started.Load() {
		return nil
	}
	err, aerr := ask(s, ctx, func(reply chan error) supMsg { return stopMsg{ctx: ctx, reply: reply} })
	if errors.Is(aerr, ErrSupervisorStopped) {
		return nil
	}
	return cmp.Or(aerr, err)
}

// Status returns every service's state, restarts and last exit, in order.
func (s *Supervisor) Status(ctx context.Context) ([]ServiceStatus, error) {
	if !s.started.Load() {
		return nil, errors.New("runtime: supervisor not started")
	}
	return ask(s, ctx, func(reply chan []ServiceStatus) supMsg { return statusMsg{reply: reply} })
}

// Subscribe returns a channel of state changes (capacity buf, at least 1)
// and a cancel func. Subscribing before Start (from the goroutine that
// calls Add and Start) sees every event from the first. A subscriber that
// does not keep up loses events, and the next event it gets says how many
// (Dropped); Status always has the current state. The channel is closed
// by cancel or when the supervisor stops.
func (s *Supervisor) Subscribe(ctx context.Context, buf int) (<-chan ServiceEvent, func(), error) {
	ch := make(chan ServiceEvent, max(buf, 1))
	if !s.started.Load() {
		// Before Start (same goroutine as Add): sees every event from the first.
		s.presubs = append(s.presubs, ch)
		return ch, s.unsubscriber(ch), nil
	}
	cancel, err := ask(s, ctx, func(reply chan func()) supMsg { return subMsg{ch: ch, reply: reply} })
	if err != nil {
		return nil, nil, err
	}
	return ch, cancel, nil
}

// Done is closed when the supervisor has stopped.
func (s *Supervisor) Done() <-chan struct{} { return s.done }

// ask sends the actor the request msg makes around a reply channel of
// capacity 1 and waits for the answer, bounded by ctx; once the actor has
// stopped (unanswered) it is ErrSupervisorStopped.
func ask[T any](s *Supervisor, ctx context.Context, msg func(reply chan T) supMsg) (T, error) {
	var zero T
	reply := make(chan T, 1)
	select {
	case s.mbox <- msg(reply):
	case <-s.done:
		return zero, ErrSupervisorStopped
	case <-ctx.Done():
		return zero, ctx.Err()
	}
	select {
	case r := <-reply:
		return r, nil
	case <-s.done: // stopped: the request may sit unread in the mailbox
		select {
		case r := <-reply: // answered just before it stopped (Stop's own answer)
			return r, nil
		default:
			return zero, ErrSupervisorStopped
		}
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// unsubscriber is the cancel func of the subscription ch.
func (s *Supervisor) unsubscriber(ch chan ServiceEvent) func() {
	return func() {
		select {
		case <-s.done:
			return
		default:
		}
		select {
		case s.mbox <- unsubMsg{ch: ch}:
		case <-s.done:
		}
	}
}
