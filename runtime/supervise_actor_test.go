package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/runtimed/runtimed/actors/clock/clocktest"
)

// The supervisor actor's decisions against a scripted Backend: the test
// says when each process ends and how, and what each Start answers, so
// orderings that a real backend makes racy (two services meeting one
// loss, a loss after a redial) are exact.

// scriptedBackend hands every started process to the test (procs); from
// its failFrom-th Start on (if set), Starts fail with errLink.
type scriptedBackend struct {
	procs    chan *scriptedProc
	refuse   *atomic.Pointer[error] // if set, a Start takes the error it holds (once)
	failFrom atomic.Int32
	starts   atomic.Int32
	closed   atomic.Bool
}

func newScriptedBackend() *scriptedBackend {
	return &scriptedBackend{procs: make(chan *scriptedProc, 16)}
}

func (b *scriptedBackend) Start(ctx context.Context, spec Spec) (Process, error) {
	if n, from := b.starts.Add(1), b.failFrom.Load(); from > 0 && n >= from {
		return nil, errLink
	}
	if b.refuse != nil {
		if err := b.refuse.Swap(nil); err != nil {
			return nil, *err
		}
	}
	p := &scriptedProc{id: spec.ID, end: make(chan scriptedEnd, 1)}
	b.procs <- p
	return p, nil
}

func (b *scriptedBackend) Close() error { b.closed.Store(true); return nil }

// next is the next process started on b (bounded wait).
func (b *scriptedBackend) next(t interface {
	Helper()
	Fatal(...any)
}) *scriptedProc {
	t.Helper()
	select {
	case p := <-b.procs:
		return p
	case <-time.After(20 * time.Second):
		t.Fatal("nothing was started")
		return nil
	}
}

type scriptedEnd struct {
	st  ExitStatus
	err error
}

// scriptedProc is a process that ends when the test (finish) or the
// supervisor (Terminate) says; the Supervisor uses no other method.
type scriptedProc struct {
	Process // nil: the methods the supervisor does not call
	id      string
	once    sync.Once
	end     chan scriptedEnd
}

func (p *scriptedProc) ID() string { return p.id }

func (p *scriptedProc) finish(st ExitStatus, err error) {
	p.once.Do(func() { p.end <- scriptedEnd{st, err} })
}

func (p *scriptedProc) Wait(ctx context.Context) (ExitStatus, error) {
	select {
	case e := <-p.end:
		return e.st, e.err
	case <-ctx.Done():
		return ExitStatus{}, ctx.Err()
	}
}

func (p *scriptedProc) Terminate(ctx context.Context, grace time.Duration) (bool, error) {
	p.finish(ExitStatus{Code: 143}, nil)
	return true, nil
}

var errLink = fmt.Errorf("%w: read: connection reset by peer", ErrDisconnected)

// supervise starts a supervisor of svcs on b, subscribed before Start;
// it is stopped at the end of the test (before b's own clean-up), and the
// test fails if the supervisor refused an illegal state transition (the
// actor logs such a bug and carries on).
func supervise(t *testing.T, b Backend, opts *SupervisorOptions, svcs ...Service) (*Supervisor, <-chan ServiceEvent) {
	t.Helper()
	if opts == nil {
		opts = &SupervisorOptions{}
	}
	core, logs := observer.New(zap.InfoLevel)
	opts.Logger = zap.New(zapcore.NewTee(core, zaptest.NewLogger(t).Core()))
	t.Cleanup(func() {
		for _, e := range logs.FilterMessageSnippet("illegal service state transition").All() {
			t.Errorf("%s: %v", e.Message, e.ContextMap())
		}
	})
	sup := NewSupervisor(b, opts)
	for _, svc := range svcs {
		if err := sup.Add(svc); err != nil {
			t.Fatal(err)
		}
	}
	ctx := ctxT(t)
	events, cancel, err := subscribeBeforeStart(t, sup, ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cancel)
	t.Cleanup(func() { _ = sup.Stop(ctx) })
	return sup, events
}

// startScripted is supervise with a placeholder Spec and restart always
// unless set.
func startScripted(t *testing.T, b Backend, opts *SupervisorOptions, svcs ...Service) (*Supervisor, <-chan ServiceEvent) {
	t.Helper()
	for i := range svcs {
		svcs[i].Spec = Spec{Argv: []string{"x"}, Dir: "/"}
		if svcs[i].Restart == "" {
			svcs[i].Restart = RestartAlways
		}
	}
	return supervise(t, b, opts, svcs...)
}

// eventOf waits for service name's next event in state want.
func eventOf(t *testing.T, events <-chan ServiceEvent, name string, want ServiceState) ServiceEvent {
	t.Helper()
	for {
		ev := nextServiceEvent(t, events, want)
		if ev.Name == name {
			return ev
		}
	}
}

// TestSupervisorOldBackendLossAfterRedial: two services meet one loss.
// The first report loses the backend and Redial replaces it; the second,
// about the old backend, must not lose the new one: that service starts
// again at once on the new backend, and Redial is not called again.
func TestSupervisorOldBackendLossAfterRedial(t *testing.T) {
	b0, b1 := newScriptedBackend(), newScriptedBackend()
	var redials atomic.Int32
	sup, events := startScripted(t, b0, &SupervisorOptions{Clock: clocktest.New(), Redial: func(ctx context.Context) (Backend, error) {
		redials.Add(1)
		return b1, nil
	}}, Service{Name: "a"}, Service{Name: "b"})
	pa, pb := b0.next(t), b0.next(t)
	eventOf(t, events, "b", ServiceRunning)
	pa.finish(ExitStatus{}, errLink)
	eventOf(t, events, "a", ServiceLost)
	if ev := eventOf(t, events, "a", ServiceRunning); ev.ProcessID != "a#2" {
		t.Fatalf("a on the new backend: %+v", ev.ServiceStatus)
	}
	if p := b1.next(t); p.id != "a#2" {
		t.Fatalf("started %s on the new backend", p.id)
	}
	pb.finish(ExitStatus{}, errLink) // the old backend's loss, reported late
	if ev := eventOf(t, events, "b", ServiceLost); ev.LastExit != nil {
		t.Fatalf("b lost: %+v", ev.ServiceStatus)
	}
	if ev := eventOf(t, events, "b", ServiceStarting); ev.Reason != ReasonBackendBack {
		t.Fatalf("b: %+v", ev.ServiceStatus)
	}
	if p := b1.next(t); p.id != "b#2" {
		t.Fatalf("started %s on the new backend", p.id)
	}
	eventOf(t, events, "b", ServiceRunning)
	st, err := sup.Status(ctxT(t))
	if err != nil || st[0].State != ServiceRunning || st[1].State != ServiceRunning {
		t.Fatalf("status %+v %v", st, err)
	}
	if n := redials.Load(); n != 1 {
		t.Fatalf("Redial called %d times, want 1", n)
	}
	if err := sup.Stop(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if !b1.closed.Load() || b0.closed.Load() {
		t.Errorf("closed: the caller's backend %v (want false), the redialed one %v (want true)", b0.closed.Load(), b1.closed.Load())
	}
}

// TestSupervisorSecondLoss: a service that exited (LastExit set) and is
// then lost reports no LastExit (the lost process's end is unknown, the
// earlier exit is not its); the redial backoff, built up by a failed
// attempt, starts over at the initial delay for the next loss once a
// start worked on the new backend.
func TestSupervisorSecondLoss(t *testing.T) {
	b0, b1, b2 := newScriptedBackend(), newScriptedBackend(), newScriptedBackend()
	clk := clocktest.New()
	type answer struct {
		b   Backend
		err error
	}
	script := make(chan answer, 8)
	down := errors.New("connection refused")
	_, events := startScripted(t, b0, &SupervisorOptions{Clock: clk, Rand: func() float64 { return 0.5 }, Redial: func(ctx context.Context) (Backend, error) {
		select {
		case a := <-script:
			return a.b, a.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}}, Service{Name: "s", Backoff: Backoff{Initial: time.Second}})
	b0.next(t).finish(ExitStatus{Code: 1}, nil)
	if ev := eventOf(t, events, "s", ServiceBackoff); ev.LastExit == nil || ev.LastExit.Code != 1 {
		t.Fatalf("exit 1: %+v", ev.ServiceStatus)
	}
	clk.Advance(asked(t, clk))
	p := b0.next(t)
	eventOf(t, events, "s", ServiceRunning)
	script <- answer{nil, down}
	p.finish(ExitStatus{}, errLink)
	if ev := eventOf(t, events, "s", ServiceLost); ev.LastExit != nil || ev.ProcessID != "s#2" {
		t.Fatalf("lost: %+v (LastExit %v)", ev.ServiceStatus, ev.LastExit)
	}
	if d := asked(t, clk); d != redialInitial {
		t.Fatalf("first redial delay %v", d)
	}
	script <- answer{b1, nil}
	clk.Advance(redialInitial)
	p = b1.next(t)
	eventOf(t, events, "s", ServiceRunning)
	// The second loss: the delay is the initial one again.
	script <- answer{nil, down}
	p.finish(ExitStatus{}, errLink)
	eventOf(t, events, "s", ServiceLost)
	if d := asked(t, clk); d != redialInitial {
		t.Fatalf("redial delay after a working backend %v, want %v", d, redialInitial)
	}
	script <- answer{b2, nil}
	clk.Advance(redialInitial)
	b2.next(t)
	if ev := eventOf(t, events, "s", ServiceRunning); ev.ProcessID != "s#4" || ev.Restarts != 3 {
		t.Fatalf("running on the third backend: %+v", ev.ServiceStatus)
	}
	if !b1.closed.Load() {
		t.Error("the lost redialed backend was not closed")
	}
}

// TestSupervisorLimitIsFailure: a process a limit ended counts as failed
// for on-failure even when its exit code is 0.
func TestSupervisorLimitIsFailure(t *testing.T) {
	b := newScriptedBackend()
	clk := clocktest.New()
	_, events := startScripted(t, b, &SupervisorOptions{Clock: clk}, Service{Name: "s", Restart: RestartOnFailure})
	b.next(t).finish(ExitStatus{Code: 0, Limit: LimitMemory}, nil)
	if ev := eventOf(t, events, "s", ServiceBackoff); ev.Reason != ReasonExited || ev.LastExit == nil || ev.LastExit.Limit != LimitMemory {
		t.Fatalf("after a limit: %+v", ev.ServiceStatus)
	}
	clk.Advance(asked(t, clk))
	b.next(t).finish(ExitStatus{}, nil)
	if ev := eventOf(t, events, "s", ServiceExited); ev.Restarts != 1 {
		t.Fatalf("clean exit: %+v", ev.ServiceStatus)
	}
}

// TestSupervisorLostDuringFirstStart: the backend is lost while the
// ordered first start is under way: the service that met the loss and
// the ones after it are lost (nothing more is sent to the backend), Start
// returns, and Stop stops them all, in reverse order.
func TestSupervisorLostDuringFirstStart(t *testing.T) {
	b := newScriptedBackend()
	sup := NewSupervisor(b, &SupervisorOptions{Clock: clocktest.New()})
	for _, name := range []string{"a", "b", "c"} {
		if err := sup.Add(Service{Name: name, Spec: Spec{Argv: []string{"x"}, Dir: "/"}, Restart: RestartAlways}); err != nil {
			t.Fatal(err)
		}
	}
	b.failFrom.Store(2)
	ctx := ctxT(t)
	events, cancel, err := sup.Subscribe(ctx, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	defer func() { _ = sup.Stop(ctx) }()
	started := make(chan error, 1)
	go func() { started <- sup.Start(ctx) }()
	b.next(t)
	// a's start answered: b's start is sent and fails with the loss.
	select {
	case err := <-started:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Start did not return")
	}
	st, err := sup.Status(ctx)
	if err != nil || st[0].State != ServiceRunning || st[1].State != ServiceLost || st[2].State != ServiceLost ||
		st[2].ProcessID != "" || !errors.Is(st[2].LastError, ErrBackendLost) {
		t.Fatalf("status %+v %v", st, err)
	}
	if n := b.starts.Load(); n != 2 {
		t.Fatalf("%d starts, want 2 (c is not sent to a lost backend)", n)
	}
	if err := sup.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	var stops []string
	for ev := range events {
		if ev.State == ServiceStopped {
			stops = append(stops, ev.Name)
		}
	}
	if fmt.Sprint(stops) != "[b c a]" {
		t.Errorf("stopped %v, want the lost ones at once, then a", stops)
	}
}

// TestSupervisorStopCancelsRedial: Stop while Redial is under way cancels
// it and waits for it; the lost service is stopped.
func TestSupervisorStopCancelsRedial(t *testing.T) {
	b := newScriptedBackend()
	inRedial := make(chan struct{}, 1)
	sup, events := startScripted(t, b, &SupervisorOptions{Clock: clocktest.New(), Redial: func(ctx context.Context) (Backend, error) {
		inRedial <- struct{}{}
		<-ctx.Done()
		return newScriptedBackend(), nil // too late: the supervisor closes it
	}}, Service{Name: "s"})
	b.next(t).finish(ExitStatus{}, errLink)
	eventOf(t, events, "s", ServiceLost)
	select {
	case <-inRedial:
	case <-time.After(20 * time.Second):
		t.Fatal("Redial was not called")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := sup.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if ev := eventOf(t, events, "s", ServiceStopped); ev.Reason != ReasonStop {
		t.Fatalf("stopped: %+v", ev.ServiceStatus)
	}
	// A stopped supervisor answers at once (its mailbox still has room:
	// nothing may be queued there to wait for an answer that never comes).
	for range 10 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := sup.Stop(ctx); err != nil {
			t.Fatalf("Stop after stopped: %v", err)
		}
		if _, err := sup.Status(ctx); !errors.Is(err, ErrSupervisorStopped) {
			t.Fatalf("Status after stopped: %v", err)
		}
		if _, _, err := sup.Subscribe(ctx, 1); !errors.Is(err, ErrSupervisorStopped) {
			t.Fatalf("Subscribe after stopped: %v", err)
		}
		cancel()
	}
}
