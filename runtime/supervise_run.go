package runtime

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.uber.org/zap"
)

// supMsg is the closed set of messages the supervisor actor handles.
type supMsg interface{ isSupMsg() }

type (
	startedMsg struct { // a start attempt finished
		idx   int
		gen   int
		epoch int // the backend it was made on
		proc  Process
		err   error
	}
	endedMsg struct { // a service's process ended
		idx   int
		gen   int
		epoch int
		st    ExitStatus
		err   error
	}
	redialedMsg struct { // SupervisorOptions.Redial returned
		b   Backend
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

func (startedMsg) isSupMsg()  {}
func (endedMsg) isSupMsg()    {}
func (redialedMsg) isSupMsg() {}
func (statusMsg) isSupMsg()   {}
func (subMsg) isSupMsg()      {}
func (unsubMsg) isSupMsg()    {}
func (stopMsg) isSupMsg()     {}

// The delays between Redial attempts: from redialInitial doubling to
// redialMax, ±20 %; back to redialInitial once a start succeeds.
const (
	redialInitial = 100 * time.Millisecond
	redialMax     = 5 * time.Second
)

// svcState is one service as the actor sees it; owned by the actor.
type svcState struct {
	ServiceStatus
	svc       Service
	gen       int     // incarnation number (process NAME#gen); Restarts is gen-1 once it started once
	proc      Process // the running process, nil otherwise
	delay     time.Duration
	startedAt time.Time   // when proc started
	restarts  []time.Time // restart times inside the window (backoff restarts only)
	retry     <-chan time.Time
	retryAt   time.Time
}

// svcActor is the supervisor's state; every field is owned by the run
// goroutine (Supervisor.run), which alone reads and writes it. Its
// mailbox (Supervisor.mbox, 64) is bounded: the goroutines that report a
// start, an end or a redial wait for room or for the actor's end;
// callers (Stop, Status, Subscribe) also give up with their ctx. It never
// waits on a subscriber (see publish). Starts, Waits, Terminates and
// Redial run in goroutines of their own; only Close of a backend it made
// is called on the actor (a lost one, or at its end after Stop).
type svcActor struct {
	s       *Supervisor
	svcs    []*svcState
	subs    []chan ServiceEvent
	dropped map[chan ServiceEvent]int // events each subscriber missed since its last one

	firstDone chan struct{} // closed once each service was started once; nil after
	next      int           // the service the ordered first start waits for

	backend     Backend // where services start now
	owned       bool    // backend came from Redial: the actor closes it
	epoch       int     // the backend's number (one more per Redial)
	lost        error   // non-nil while the backend of epoch is lost (wraps ErrBackendLost)
	redialing   bool    // a Redial call is in flight
	redialTimer <-chan time.Time
	redialDelay time.Duration

	ctx      context.Context // ends when Stop begins: bounds Redial
	cancel   context.CancelFunc
	stopping *stopMsg // the Stop being served, nil before
	stopIdx  int      // Stop takes services down from here to 0
}

// run is the supervisor actor: it serves messages and timers until a Stop
// has taken every service down.
func (s *Supervisor) run(firstDone chan struct{}) {
	a := newSvcActor(s, firstDone)
	defer a.finish()
	a.startNext()
	for !a.stopped() {
		a.step()
	}
}

// newSvcActor is the actor's state before its first step: every service
// pending.
func newSvcActor(s *Supervisor, firstDone chan struct{}) *svcActor {
	a := &svcActor{s: s, subs: s.presubs, dropped: map[chan ServiceEvent]int{}, firstDone: firstDone,
		backend: s.b, redialDelay: redialInitial}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	for _, svc := range s.svcs {
		a.svcs = append(a.svcs, &svcState{ServiceStatus: ServiceStatus{Name: svc.Name, State: ServicePending, Since: s.clk.Now()}, svc: svc, delay: svc.Backoff.Initial})
	}
	return a
}

// step waits for one message or timer and handles it.
func (a *svcActor) step() {
	retry, idx := a.dueRetry()
	select {
	case <-retry:
		a.restart(idx)
	case <-a.redialTimer:
		a.onRedialTimer()
	case m := <-a.s.mbox:
		a.handle(m)
	}
}

// onRedialTimer: the next Redial attempt is due.
func (a *svcActor) onRedialTimer() {
	a.redialTimer = nil
	a.redial()
}

// handle handles one message of the mailbox.
func (a *svcActor) handle(m supMsg) {
	switch m := m.(type) {
	case startedMsg:
		a.onStarted(m)
	case endedMsg:
		a.onEnded(m)
	case redialedMsg:
		a.onRedialed(m)
	case statusMsg:
		m.reply <- a.status()
	case subMsg:
		a.subs = append(a.subs, m.ch)
		m.reply <- a.s.unsubscriber(m.ch)
	case unsubMsg:
		a.unsubscribe(m.ch)
	case stopMsg:
		a.beginStop(m)
	}
}

// setState is the only place a service's state changes. An illegal
// transition is a bug: it is logged and refused.
func (a *svcActor) setState(ss *svcState, to ServiceState, why ServiceReason) bool {
	from := ss.State
	if !legalServiceTransition(from, to, why) {
		a.s.log.Error("bug: illegal service state transition refused", zap.String("service", ss.Name),
			zap.String("from", string(from)), zap.String("to", string(to)), zap.String("reason", string(why)))
		return false
	}
	ss.State, ss.Reason, ss.Since = to, why, a.s.clk.Now()
	a.s.log.Info("service", zap.String("service", ss.Name), zap.String("state", string(to)),
		zap.String("reason", string(why)), zap.Int("restarts", ss.Restarts))
	a.publish(ss)
	return true
}

// publish hands ss's status to every subscriber that has room; one that
// has none is told how many it missed with its next event.
func (a *svcActor) publish(ss *svcState) {
	for _, ch := range a.subs {
		select {
		case ch <- ServiceEvent{ServiceStatus: ss.ServiceStatus, Dropped: a.dropped[ch]}:
			a.dropped[ch] = 0
		default:
			a.dropped[ch]++
		}
	}
}

// startNext starts the next service of the ordered first start, or ends
// that start (Start returns) when none is left.
func (a *svcActor) startNext() {
	if a.firstDone == nil {
		return
	}
	if a.next < len(a.svcs) && a.stopping == nil {
		a.launch(a.next, ReasonStart)
		return
	}
	close(a.firstDone)
	a.firstDone = nil
}

// launch starts service i's next process (NAME#gen) on the backend, or
// parks the service as lost while the backend is.
func (a *svcActor) launch(i int, why ServiceReason) {
	ss := a.svcs[i]
	ss.retry = nil
	if a.lost != nil {
		ss.LastError = a.lost
		a.setState(ss, ServiceLost, ReasonBackendLost)
		a.firstStartDone(i)
		return
	}
	if !a.setState(ss, ServiceStarting, why) {
		return
	}
	if ss.gen > 0 {
		ss.Restarts++
	}
	ss.gen++
	spec := ss.svc.Spec
	spec.ID = ss.Name + "#" + strconv.Itoa(ss.gen)
	ss.ProcessID = spec.ID
	ss.startedAt = time.Time{}
	b, gen, epoch := a.backend, ss.gen, a.epoch
	go func() {
		p, err := b.Start(context.Background(), spec)
		a.s.fact(startedMsg{idx: i, gen: gen, epoch: epoch, proc: p, err: err})
	}()
}

// firstStartDone moves the ordered first start past service i, if it was
// waiting for it.
func (a *svcActor) firstStartDone(i int) {
	if a.firstDone != nil && a.next == i {
		a.next++
		a.startNext()
	}
}

// onStarted handles the result of a start.
func (a *svcActor) onStarted(m startedMsg) {
	ss := a.svcs[m.idx]
	if m.gen != ss.gen {
		return
	}
	defer a.firstStartDone(m.idx)
	if m.err != nil {
		ss.LastError = m.err
		a.s.log.Warn("service start failed", zap.String("service", ss.Name), zap.Error(m.err))
		switch {
		case a.stopping != nil:
			a.setState(ss, ServiceStopped, ReasonStop)
		case backendLost(m.err):
			a.onLost(ss, m.epoch, m.err)
		default:
			a.ended(ss, true, 0, ReasonStartFailed)
		}
		return
	}
	ss.LastError = nil
	ss.proc, ss.startedAt = m.proc, a.s.clk.Now()
	if m.epoch == a.epoch {
		a.redialDelay = redialInitial // this backend works
	}
	p, idx, gen, epoch := m.proc, m.idx, m.gen, m.epoch
	go func() {
		st, err := p.Wait(context.Background())
		a.s.fact(endedMsg{idx: idx, gen: gen, epoch: epoch, st: st, err: err})
	}()
	if a.stopping != nil { // started while stopping: take it down now
		a.terminate(ss)
		return
	}
	a.setState(ss, ServiceRunning, ReasonStarted)
}

// onEnded handles the end of a service's process.
func (a *svcActor) onEnded(m endedMsg) {
	ss := a.svcs[m.idx]
	if m.gen != ss.gen {
		return
	}
	ran := a.s.clk.Now().Sub(ss.startedAt)
	ss.proc, ss.startedAt = nil, time.Time{}
	if m.err != nil {
		ss.LastError = m.err
	}
	if backendLost(m.err) && a.stopping == nil {
		ss.LastExit = nil // how it ended is unknown
		a.onLost(ss, m.epoch, m.err)
		return
	}
	exit := m.st
	ss.LastExit = &exit
	if a.stopping != nil {
		a.setState(ss, ServiceStopped, ReasonStop)
		return
	}
	a.ended(ss, m.err != nil || m.st.Code != 0 || m.st.Limit != "", ran, ReasonExited)
}

// ended applies decideEnded to an ending (a process that ran for ran, or
// a start that failed).
func (a *svcActor) ended(ss *svcState, failed bool, ran time.Duration, why ServiceReason) {
	now := a.s.clk.Now()
	d := decideEnded(ss.svc, endFacts{failed: failed, ran: ran, now: now, delay: ss.delay, restarts: ss.restarts, rnd: a.s.rnd()})
	ss.delay, ss.restarts = d.delay, d.restarts
	if d.state == ServiceFailed {
		a.s.log.Warn("service gave up", zap.String("service", ss.Name), zap.Int("restarts_in_window", len(ss.restarts)), zap.Duration("window", ss.svc.Window))
	}
	if d.state == ServiceBackoff {
		ss.retry, ss.retryAt = a.s.clk.After(d.wait), now.Add(d.wait)
	}
	a.setState(ss, d.state, why)
}

// dueRetry returns the timer of the first due restart among services in
// backoff (nil while stopping) and the service's index.
func (a *svcActor) dueRetry() (<-chan time.Time, int) {
	var retry <-chan time.Time
	idx := -1
	if a.stopping != nil {
		return nil, -1
	}
	for i, ss := range a.svcs {
		if ss.retry != nil && (idx < 0 || ss.retryAt.Before(a.svcs[idx].retryAt)) {
			retry, idx = ss.retry, i
		}
	}
	return retry, idx
}

// restart starts service i again once its backoff elapsed; the restart
// counts in its window.
func (a *svcActor) restart(i int) {
	ss := a.svcs[i]
	ss.restarts = append(ss.restarts, a.s.clk.Now())
	a.launch(i, ReasonRestart)
}

// onLost handles a service whose process or start met a lost backend:
// it is parked as lost; if the backend it used is the current one, the
// backend is lost and Redial (if any) is tried; a service that met an
// older backend's loss starts again at once on the current one.
func (a *svcActor) onLost(ss *svcState, epoch int, err error) {
	lost := fmt.Errorf("%w: %w", ErrBackendLost, err)
	ss.LastError = lost
	a.setState(ss, ServiceLost, ReasonBackendLost)
	if epoch == a.epoch && a.lost == nil {
		a.lost = lost
		a.s.log.Warn("supervisor: backend lost", zap.Error(err))
		if a.s.redial != nil {
			a.redial()
		}
	}
	a.revive()
}

// redial calls SupervisorOptions.Redial in its own goroutine.
func (a *svcActor) redial() {
	a.redialing = true
	ctx, redial := a.ctx, a.s.redial
	go func() {
		b, err := redial(ctx)
		a.s.fact(redialedMsg{b: b, err: err})
	}()
}

// onRedialed takes a new backend, or schedules the next attempt.
func (a *svcActor) onRedialed(m redialedMsg) {
	a.redialing = false
	if a.stopping != nil {
		if m.err == nil && m.b != nil {
			_ = m.b.Close()
		}
		return
	}
	if m.err != nil || m.b == nil {
		wait := jittered(a.redialDelay, 0.2, a.s.rnd())
		a.redialDelay = min(2*a.redialDelay, redialMax)
		a.s.log.Info("supervisor: redial failed", zap.Error(m.err), zap.Duration("next_in", wait))
		a.redialTimer = a.s.clk.After(wait)
		return
	}
	if a.owned {
		_ = a.backend.Close() // lost; it was ours
	}
	a.backend, a.owned, a.lost = m.b, true, nil
	a.epoch++
	a.s.log.Info("supervisor: backend back")
	a.revive()
}

// revive starts every lost service again while the backend is not lost.
func (a *svcActor) revive() {
	if a.lost != nil || a.stopping != nil {
		return
	}
	for i, ss := range a.svcs {
		if ss.State == ServiceLost {
			a.launch(i, ReasonBackendBack)
		}
	}
}

// status is every service's status, in order.
func (a *svcActor) status() []ServiceStatus {
	out := make([]ServiceStatus, len(a.svcs))
	for i, ss := range a.svcs {
		out[i] = ss.ServiceStatus
	}
	return out
}

func (a *svcActor) unsubscribe(ch chan ServiceEvent) {
	for i, c := range a.subs {
		if c == ch {
			a.subs = append(a.subs[:i], a.subs[i+1:]...)
			delete(a.dropped, ch)
			close(ch)
			return
		}
	}
}

// beginStop starts serving m: what has no process is stopped at once,
// Redial is cancelled, and the services are taken down in reverse order.
func (a *svcActor) beginStop(m stopMsg) {
	if a.stopping != nil {
		m.reply <- errors.New("runtime: supervisor is already stopping")
		return
	}
	a.stopping, a.stopIdx = &m, len(a.svcs)-1
	a.cancel()
	a.redialTimer = nil
	for _, ss := range a.svcs {
		ss.retry = nil
		switch ss.State {
		case ServicePending, ServiceBackoff, ServiceLost:
			a.setState(ss, ServiceStopped, ReasonStop)
		}
	}
}

// stopped advances a Stop: it takes down the last service still up and
// reports whether every service is down (and Redial has returned).
func (a *svcActor) stopped() bool {
	if a.stopping == nil {
		return false
	}
	for ; a.stopIdx >= 0; a.stopIdx-- {
		switch ss := a.svcs[a.stopIdx]; ss.State {
		case ServiceStarting, ServiceStopping:
			return false // its start or its end is awaited
		case ServiceRunning:
			if a.terminate(ss) {
				return false
			}
		}
	}
	return !a.redialing
}

// terminate takes a service's process down for Stop and reports whether
// its end is to be awaited. A running service without a process exists
// only after a refused transition (a bug, logged): it is stopped at once
// rather than crash the actor.
func (a *svcActor) terminate(ss *svcState) bool {
	if ss.proc == nil {
		a.setState(ss, ServiceStopped, ReasonStop)
		return false
	}
	a.setState(ss, ServiceStopping, ReasonStop)
	p, grace, ctx := ss.proc, ss.svc.StopGrace, a.stopping.ctx
	go func() { _, _ = p.Terminate(ctx, grace) }()
	return true
}

// finish ends the actor: subscribers' channels are closed, a backend the
// actor made is closed, and Stop is answered.
func (a *svcActor) finish() {
	a.cancel()
	for _, ch := range a.subs {
		close(ch)
	}
	if a.owned {
		_ = a.backend.Close()
	}
	if a.firstDone != nil {
		close(a.firstDone)
	}
	if a.stopping != nil {
		a.stopping.reply <- nil // buffered
	}
	close(a.s.done)
}
