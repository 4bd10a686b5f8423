package runtime

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
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

// ServiceState is where a service is in its life.
type ServiceState string

const (
	ServiceStarting ServiceState = "starting" // being started
	ServiceRunning  ServiceState = "running"  // its process runs
	ServiceBackoff  ServiceState = "backoff"  // ended; waiting to restart
	ServiceExited   ServiceState = "exited"   // ended for good (by its policy)
	ServiceFailed   ServiceState = "failed"   // gave up: too many restarts in the window
	ServiceStopping ServiceState = "stopping" // being stopped by Stop
	ServiceStopped  ServiceState = "stopped"  // stopped by Stop
)

// ServiceStatus is the observable health of one service.
type ServiceStatus struct {
	Name      string       // the service
	State     ServiceState // where it is now
	ProcessID string       // the current or last process, "" before the first start
	Restarts  int          // restarts so far
	LastExit  *ExitStatus  // how its last process ended; nil before
	LastError error        // the last start error, if the last attempt failed
	Since     time.Time    // when it entered State
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
}

// Supervisor keeps a set of named processes running on any Backend, local
// or remote, with restart policies, exponential backoff with jitter and a
// restart intensity limit. Services start in the order they were added
// and stop in reverse order. It is an actor: one goroutine owns every
// service's state; Status and Subscribe ask it. Add and Start are called
// by one goroutine before the supervisor is shared; after Start, Status,
// Subscribe and Stop may be called from any goroutine.
type Supervisor struct {
	b    Backend
	clk  Clock
	rnd  func() float64
	log  *zap.Logger
	svcs []Service // fixed at Start

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

// supMsg is the closed set of messages the supervisor actor handles.
type supMsg interface{ isSupMsg() }

type (
	startedMsg struct { // a start attempt finished
		idx  int
		gen  int
		proc Process
		err  error
	}
	endedMsg struct { // a service's process ended
		idx int
		gen int
		st  ExitStatus
		err error
	}
	statusMsg struct{ reply chan []ServiceStatus }
	subMsg    struct {
		ch    chan ServiceEvent
		reply chan func()
	}
	unsubMsg struct{ ch chan ServiceEvent }
	stopMsg  struct {
		ctx   context.Context
		reply chan error
	}
)

func (startedMsg) isSupMsg() {}
func (endedMsg) isSupMsg()   {}
func (statusMsg) isSupMsg()  {}
func (subMsg) isSupMsg()     {}
func (unsubMsg) isSupMsg()   {}
func (stopMsg) isSupMsg()    {}

// svcState is one service as the actor sees it; owned by run.
type svcState struct {
	ServiceStatus
	svc       Service
	gen       int     // incarnation number (process NAME#gen)
	proc      Process // the running process, nil otherwise
	delay     time.Duration
	startedAt time.Time
	restarts  []time.Time // restart times inside the window
	retry     <-chan time.Time
	retryAt   time.Time
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

// run is the supervisor actor.
func (s *Supervisor) run(firstDone chan struct{}) {
	defer close(s.done)
	st := make([]*svcState, len(s.svcs))
	for i, svc := range s.svcs {
		st[i] = &svcState{ServiceStatus: ServiceStatus{Name: svc.Name, State: ServiceStarting, Since: s.clk.Now()}, svc: svc, delay: svc.Backoff.Initial}
	}
	subs := s.presubs
	dropped := map[chan ServiceEvent]int{}
	publish := func(ss *svcState) {
		for _, ch := range subs {
			select {
			case ch <- ServiceEvent{ServiceStatus: ss.ServiceStatus, Dropped: dropped[ch]}:
				dropped[ch] = 0
			default:
				dropped[ch]++ // reported with the next event this subscriber gets
			}
		}
	}
	setState := func(ss *svcState, state ServiceState) {
		ss.State, ss.Since = state, s.clk.Now()
		s.log.Info("service", zap.String("service", ss.Name), zap.String("state", string(state)), zap.Int("restarts", ss.Restarts))
		publish(ss)
	}
	// Ordered start: one at a time, each waits for the previous.
	next := 0
	startOne := func(i int) {
		ss := st[i]
		ss.gen++
		ss.retry = nil
		spec := ss.svc.Spec
		spec.ID = ss.Name + "#" + strconv.Itoa(ss.gen)
		ss.ProcessID = spec.ID
		setState(ss, ServiceStarting)
		gen := ss.gen
		go func() {
			p, err := s.b.Start(context.Background(), spec)
			s.fact(startedMsg{idx: i, gen: gen, proc: p, err: err})
		}()
	}
	if len(st) == 0 {
		close(firstDone)
		firstDone = nil
	} else {
		startOne(0)
	}
	// ended decides what happens after an ending (or a failed start).
	ended := func(ss *svcState, failed bool) {
		ss.proc = nil
		now := s.clk.Now()
		if !ss.startedAt.IsZero() && now.Sub(ss.startedAt) >= ss.svc.Backoff.ResetAfter {
			ss.delay = ss.svc.Backoff.Initial // it ran long enough: a fresh failure
		}
		restart := ss.svc.Restart == RestartAlways || ss.svc.Restart == RestartOnFailure && failed
		if !restart {
			setState(ss, ServiceExited)
			return
		}
		kept := ss.restarts[:0]
		for _, t := range ss.restarts {
			if now.Sub(t) < ss.svc.Window {
				kept = append(kept, t)
			}
		}
		ss.restarts = kept
		if ss.svc.MaxRestarts >= 0 && len(ss.restarts) >= ss.svc.MaxRestarts {
			s.log.Warn("service gave up", zap.String("service", ss.Name), zap.Int("restarts_in_window", len(ss.restarts)), zap.Duration("window", ss.svc.Window))
			setState(ss, ServiceFailed)
			return
		}
		wait := ss.delay
		if j := ss.svc.Backoff.Jitter; j > 0 {
			wait = time.Duration(float64(wait) * (1 + j*(2*s.rnd()-1)))
		}
		ss.delay = min(2*ss.delay, ss.svc.Backoff.Max)
		ss.retry, ss.retryAt = s.clk.After(wait), now.Add(wait)
		setState(ss, ServiceBackoff)
	}
	var stopping *stopMsg
	var stopIdx int
	for {
		if stopping != nil {
			// Reverse order: stop the last service still up, wait for its end.
			for stopIdx >= 0 && st[stopIdx].proc == nil && st[stopIdx].State != ServiceStarting {
				if st[stopIdx].State == ServiceRunning {
					setState(st[stopIdx], ServiceStopped)
				}
				stopIdx--
			}
			if stopIdx < 0 {
				for _, ch := range subs {
					close(ch)
				}
				stopping.reply <- nil
				return
			}
			if ss := st[stopIdx]; ss.proc != nil && ss.State == ServiceRunning {
				setState(ss, ServiceStopping)
				p, grace, ctx := ss.proc, ss.svc.StopGrace, stopping.ctx
				go func() { _, _ = p.Terminate(ctx, grace) }()
			}
		}
		// Wait for the first due retry among services in backoff.
		var retry <-chan time.Time
		retryIdx := -1
		if stopping == nil {
			for i, ss := range st {
				if ss.retry != nil && (retryIdx < 0 || ss.retryAt.Before(st[retryIdx].retryAt)) {
					retry, retryIdx = ss.retry, i
				}
			}
		}
		select {
		case <-retry:
			ss := st[retryIdx]
			ss.restarts = append(ss.restarts, s.clk.Now())
			ss.Restarts++
			startOne(retryIdx)
		case m := <-s.mbox:
			switch m := m.(type) {
			case startedMsg:
				ss := st[m.idx]
				if m.gen != ss.gen {
					continue
				}
				if next == m.idx && firstDone != nil {
					next++
					if next < len(st) {
						startOne(next)
					} else {
						close(firstDone)
						firstDone = nil
					}
				}
				if m.err != nil {
					ss.LastError = m.err
					s.log.Warn("service start failed", zap.String("service", ss.Name), zap.Error(m.err))
					if stopping != nil {
						setState(ss, ServiceStopped)
						continue
					}
					ended(ss, true)
					continue
				}
				ss.LastError = nil
				ss.proc, ss.startedAt = m.proc, s.clk.Now()
				if stopping != nil { // stopped while starting: take it down
					go func(p Process) { _, _ = p.Terminate(context.Background(), 0) }(m.proc)
				}
				setState(ss, ServiceRunning)
				idx, gen, p := m.idx, m.gen, m.proc
				go func() {
					st, err := p.Wait(context.Background())
					s.fact(endedMsg{idx: idx, gen: gen, st: st, err: err})
				}()
			case endedMsg:
				ss := st[m.idx]
				if m.gen != ss.gen {
					continue
				}
				exit := m.st
				ss.LastExit = &exit
				if m.err != nil {
					ss.LastError = m.err
				}
				if stopping != nil {
					ss.proc = nil
					setState(ss, ServiceStopped)
					continue
				}
				ended(ss, m.err != nil || m.st.Code != 0 || m.st.Limit != "")
			case statusMsg:
				out := make([]ServiceStatus, len(st))
				for i, ss := range st {
					out[i] = ss.ServiceStatus
				}
				m.reply <- out
			case subMsg:
				subs = append(subs, m.ch)
				ch := m.ch
				m.reply <- func() {
					select {
					case s.mbox <- unsubMsg{ch: ch}:
					case <-s.done:
					}
				}
			case unsubMsg:
				for i, ch := range subs {
					if ch == m.ch {
						subs = append(subs[:i], subs[i+1:]...)
						delete(dropped, ch)
						close(ch)
						break
					}
				}
			case stopMsg:
				if stopping != nil {
					m.reply <- errors.New("runtime: supervisor is already stopping")
					continue
				}
				stopping = &m
				stopIdx = len(st) - 1
				for _, ss := range st {
					ss.retry = nil
					if ss.State == ServiceBackoff {
						setState(ss, ServiceStopped)
					}
				}
			}
		}

	}
}

// Stop stops every service in reverse order (each: SIGTERM, SIGKILL after
// its StopGrace) and returns once all have ended; ctx bounds the wait.
func (s *Supervisor) Stop(ctx context.Context) error {
	if !s.started.Load() {
		return nil
	}
	reply := make(chan error, 1)
	select {
	case s.mbox <- stopMsg{ctx: ctx, reply: reply}:
	case <-s.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Status returns every service's state, restarts and last exit, in order.
func (s *Supervisor) Status(ctx context.Context) ([]ServiceStatus, error) {
	if !s.started.Load() {
		return nil, errors.New("runtime: supervisor not started")
	}
	reply := make(chan []ServiceStatus, 1)
	select {
	case s.mbox <- statusMsg{reply: reply}:
	case <-s.done:
		return nil, ErrSupervisorStopped
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case out := <-reply:
		return out, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Subscribe returns a channel of state changes (capacity buf, at least 1)
// and a cancel func. Subscribing before Start (from the goroutine that
// calls Add and Start) sees every event from the first. A subscriber that does not keep up loses events, and
// the next event it gets says how many (Dropped); Status always has the
// current state. The channel is closed by cancel or when the supervisor
// stops.
func (s *Supervisor) Subscribe(ctx context.Context, buf int) (<-chan ServiceEvent, func(), error) {
	ch := make(chan ServiceEvent, max(buf, 1))
	unsub := func() {
		select {
		case s.mbox <- unsubMsg{ch: ch}:
		case <-s.done:
		}
	}
	if !s.started.Load() {
		// Before Start (same goroutine as Add): sees every event from the first.
		s.presubs = append(s.presubs, ch)
		return ch, unsub, nil
	}
	reply := make(chan func(), 1)
	select {
	case s.mbox <- subMsg{ch: ch, reply: reply}:
	case <-s.done:
		return nil, nil, ErrSupervisorStopped
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	select {
	case cancel := <-reply:
		return ch, cancel, nil
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
}

// Done is closed when the supervisor has stopped.
func (s *Supervisor) Done() <-chan struct{} { return s.done }
