package actors

import (
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/runtimed/runtimed/actors/osproc"
)

// The process actor's lifecycle is one state machine: a phase that only
// moves forward, changed in one place (transition), each change carrying
// its reason. ARCHITECTURE.md draws it.
//
//	starting ─start─▶ running ─kill─▶ stopping
//	                     │exit            │exit
//	                     ▼                ▼
//	                  exited ──kill──▶ draining
//	                     │streams ended   │streams ended (or closed by force at the drain's end)
//	                     ▼                ▼
//	                  closed ◀────────────┘
//	                     │ending delivered (or the subscriber dropped)
//	                     ▼
//	                  retained ─retention over, discard, shutdown─▶ gone
//
// failure (a recovered panic) goes from any phase to gone.

// phase is where a process actor is in its life, in this order.
type phase uint8

const (
	// phaseStarting: built around a started child; run has not begun.
	phaseStarting phase = iota
	// phaseRunning: the child runs. Its exit may be reported and held
	// (exitHeld) for up to exitHold while output streams are open.
	phaseRunning
	// phaseStopping: the kill path began while the child ran: the tree
	// was signalled; SIGKILL follows at killAt or at the exit.
	phaseStopping
	// phaseExited: the exit has its seq; output streams are still open
	// (a descendant may hold them) and are waited for without bound.
	phaseExited
	// phaseDraining: the exit has its seq and the tree was SIGKILLed; the
	// output streams are closed by force at drainAt.
	phaseDraining
	// phaseClosed: the closed event has its seq; the ending (exited,
	// closed) is being handed to the subscriber.
	phaseClosed
	// phaseRetained: the ending reached the subscriber (or it was dropped
	// with a reason); the process stays readable until expireAt.
	phaseRetained
	// phaseGone: the actor ends.
	phaseGone
)

var phaseNames = [...]string{"starting", "running", "stopping", "exited", "draining", "closed", "retained", "gone"}

func (ph phase) String() string {
	if int(ph) < len(phaseNames) {
		return phaseNames[ph]
	}
	return "phase?"
}

// state is the phase as process/list reports it.
func (ph phase) state() ProcessState {
	switch {
	case ph >= phaseClosed:
		return StateClosed
	case ph >= phaseExited:
		return StateExited
	case ph >= phaseRunning:
		return StateRunning
	}
	return StateStarting
}

// reason is why a transition happened (and why the kill path was taken).
type reason uint8

const (
	reasonNone reason = iota
	// reasonStart: run began.
	reasonStart
	// reasonExit: the child's exit took its seq.
	reasonExit
	// reasonSignal: process/signal asked for SIGKILL.
	reasonSignal
	// reasonTerminate: process/terminate (ProcessRef.Terminate).
	reasonTerminate
	// reasonTTL: the detached session's TTL expired.
	reasonTTL
	// reasonLimit: a resource limit ended the child (Session.Limit).
	reasonLimit
	// reasonConnEnd: the connection ended (a discarded session or
	// app-server process, or the subscriber's connection).
	reasonConnEnd
	// reasonShutdown: the supervisor stops (Stop) or is killed (Kill).
	reasonShutdown
	// reasonTimeout: Spec.Timeout elapsed.
	reasonTimeout
	// reasonFailure: the actor panicked (recoverPanic).
	reasonFailure
	// reasonStreamsEnded: every output stream ended, naturally or closed
	// by force at the drain's end.
	reasonStreamsEnded
	// reasonDelivered: the subscriber, if any, was handed the ending.
	reasonDelivered
	// reasonRetention: the closed retention is over.
	reasonRetention
)

var reasonNames = [...]string{"none", "start", "exit", "signal", "terminate", "ttl", "limit",
	"connection end", "shutdown", "timeout", "failure", "streams ended", "delivered", "retention over"}

func (r reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "reason?"
}

// kills reports whether r takes the kill path.
func (r reason) kills() bool {
	switch r {
	case reasonSignal, reasonTerminate, reasonTTL, reasonLimit, reasonConnEnd, reasonShutdown, reasonTimeout:
		return true
	}
	return false
}

// legalTransition is the transition table: from, to and the reasons that
// may carry the change. Anything else (in particular any step backwards)
// is a bug.
func legalTransition(from, to phase, why reason) bool {
	if to <= from {
		return false
	}
	if why == reasonFailure {
		return to == phaseGone
	}
	switch {
	case from == phaseStarting && to == phaseRunning:
		return why == reasonStart
	case from == phaseRunning && to == phaseStopping:
		return why.kills() && why != reasonLimit // a limit is known at the exit only
	case from == phaseRunning && to == phaseExited, from == phaseStopping && to == phaseDraining:
		return why == reasonExit
	case from == phaseExited && to == phaseDraining:
		return why.kills() && why != reasonTimeout // the timeout spares a reaped child
	case (from == phaseExited || from == phaseDraining) && to == phaseClosed:
		return why == reasonStreamsEnded
	case from == phaseClosed && to == phaseRetained:
		return why == reasonDelivered || why == reasonConnEnd || why == reasonShutdown
	case from == phaseRetained && to == phaseGone:
		return why == reasonRetention || why == reasonTTL || why == reasonConnEnd || why == reasonShutdown
	}
	return false
}

// transition is the only place the phase changes. An illegal transition
// (backwards, skipping, or with a reason that cannot cause it) is a bug:
// it is logged and refused, and the caller's step has no effect.
func (p *process) transition(to phase, why reason) bool {
	from := p.phase
	ok := legalTransition(from, to, why)
	if p.observe != nil {
		p.observe(from, to, why, ok)
	}
	if !ok {
		p.log.Error("bug: illegal process phase transition refused",
			zap.Stringer("from", from), zap.Stringer("to", to), zap.Stringer("reason", why))
		return false
	}
	p.phase = to
	p.log.Debug("process phase", zap.Stringer("from", from), zap.Stringer("to", to), zap.Stringer("reason", why))
	return true
}

// exited and closed: the exit, respectively the closed event, has its seq.
func (p *process) exited() bool { return p.phase >= phaseExited }
func (p *process) closed() bool { return p.phase >= phaseClosed }

// reaped reports whether the child has exited (its exit numbered or held).
func (p *process) reaped() bool { return p.exited() || p.exitHeld }

// kill is the one kill path, taken by terminate, a SIGKILL signal, the
// detach TTL, the connection's end, a limit, the timeout and shutdown:
//
//   - while the child runs and grace > 0: SIGTERM (SIGHUP on a PTY) to the
//     tree now, SIGKILL at the end of the grace (the earliest asked wins);
//   - otherwise (grace 0, or the child already reaped): SIGKILL to the
//     whole tree now (Session.Signal: cgroup.kill and killpg);
//   - once the exit has its seq, what is left of the tree is SIGKILLed and
//     the output streams get DrainAfterTerminate to end before they are
//     closed by force (phase draining), so closed follows promptly.
//
// A closed process has nothing left to kill here (Release, at the actor's
// end, takes what may remain). kill returns the error of the signal sent.
func (p *process) kill(why reason, grace time.Duration) error {
	switch p.phase {
	case phaseRunning:
		if !p.transition(phaseStopping, why) {
			return nil
		}
		fallthrough
	case phaseStopping:
		if grace > 0 && !p.exitHeld {
			sig := syscall.SIGTERM
			if p.tty {
				sig = syscall.SIGHUP
			}
			if at := p.clock.Now().Add(grace); p.killAt.IsZero() || at.Before(p.killAt) {
				p.killAt = at
			}
			return p.sess.Signal(sig)
		}
		return p.sigkill()
	case phaseExited:
		if !p.transition(phaseDraining, why) {
			return nil
		}
		p.armDrain()
		fallthrough
	case phaseDraining:
		return p.sigkill()
	}
	return nil
}

// sigkill SIGKILLs the whole tree; no grace is pending after it.
func (p *process) sigkill() error {
	p.killAt = time.Time{}
	return p.sess.Signal(syscall.SIGKILL)
}

// armDrain bounds how long the output streams of a killed tree stay open.
func (p *process) armDrain() {
	if p.drainAt.IsZero() {
		p.drainAt = p.clock.Now().Add(p.cfg.DrainAfterTerminate)
	}
}

// forget makes the actor end right after the ending was delivered
// instead of retaining the process (discard, shutdown). The first reason
// stays.
func (p *process) forget(why reason) {
	if p.forgetReason == reasonNone {
		p.forgetReason = why
	}
	p.endBacklog("the process is being discarded")
}

// discardProcess: nobody will read the process any more (TTL expiry, the
// connection's end). Kill the tree and forget it once delivered.
func (p *process) discardProcess(why reason) {
	p.forget(why)
	_ = p.kill(why, 0)
}

// shutdown: the supervisor stops (force: it is killed, and the subscriber
// is dropped rather than waited for).
func (p *process) shutdown(force bool) {
	p.forget(reasonShutdown)
	grace := p.cfg.ShutdownGrace
	if force {
		grace = 0
	}
	_ = p.kill(reasonShutdown, grace)
	if force {
		p.dropSubscriber(reasonShutdown)
	}
}

// onReaped: the waiter reported the exit. It is held until the output
// streams end, at most exitHold, so that output written before the exit
// is numbered before it.
func (p *process) onReaped(status int) {
	code, sig := osproc.SplitWait(status)
	p.exitHeld, p.heldCode, p.heldSignal, p.heldUntil = true, code, sig, p.clock.Now().Add(exitHold)
	if p.openStreams == 0 {
		p.numberExit()
	}
}

// numberExit gives the held exit its seq: running → exited, stopping →
// draining (the kill path goes on: what is left of the tree is SIGKILLed
// and the streams drain). An exit caused by a resource limit takes the
// kill path too.
func (p *process) numberExit() {
	code := p.heldCode
	p.exitHeld, p.heldUntil = false, time.Time{}
	if p.timedOut {
		code = TimeoutExitCode
	}
	p.timeoutAt = time.Time{}
	to := phaseExited
	if p.phase == phaseStopping {
		to = phaseDraining
	}
	if !p.transition(to, reasonExit) {
		return
	}
	p.exitCode, p.exitSignal = code, p.heldSignal
	p.limit = p.sess.Limit(code)
	p.cfg.metrics.ProcessExited(EndReason(p.limit, p.timedOut, to == phaseDraining))
	p.auditExit(code)
	p.exitSeq = p.nextSeq
	p.nextSeq++
	p.log.Debug("process exited", zap.Int("exit_code", code), zap.String("limit", p.limit))
	if to == phaseDraining {
		p.armDrain()
		_ = p.sigkill()
	}
	p.publish(Event{ProcessID: p.id, Kind: EventExited, Seq: p.exitSeq, ExitCode: code, ExitSignal: p.exitSignal, Limit: p.limit})
	p.wakePolls()
	if p.limit != "" && p.phase == phaseExited {
		_ = p.kill(reasonLimit, 0) // what is left of the tree goes too
	}
	p.maybeClose()
}

// maybeClose: exited (or draining) and every output stream ended → closed.
func (p *process) maybeClose() {
	if (p.phase != phaseExited && p.phase != phaseDraining) || p.openStreams > 0 {
		return
	}
	if !p.transition(phaseClosed, reasonStreamsEnded) {
		return
	}
	p.closedSeq = p.nextSeq
	p.nextSeq++
	p.drainAt = time.Time{}
	p.sess.CloseOutputs()
	if !p.tty && !p.stdinClosed {
		// The child is gone: release our end of its stdin after queued writes.
		p.stdinClosed = true
		p.queueStdin(stdinOp{close: true, done: make(chan error, 1)})
	}
	p.publish(Event{ProcessID: p.id, Kind: EventClosed, Seq: p.closedSeq})
	for _, l := range p.listeners {
		close(l)
	}
	p.listeners = nil
	p.final.exitCode = p.exitCode
	p.final.exitSignal = p.exitSignal
	p.final.limit = p.limit
	p.closeClosedC()
	p.wakePolls()
}

// settle runs before each step of the loop: a closed process whose ending
// reached its subscriber (or whose subscriber was dropped with a reason)
// is retained from then on, for ClosedRetention (zero or negative: not at
// all); a retained process is gone when its retention is over, or at once
// when nobody will read it any more (discard, shutdown). It reports
// whether the actor ends.
func (p *process) settle() bool {
	now := p.clock.Now()
	if p.phase == phaseClosed && p.endingDelivered() {
		why := reasonDelivered
		if p.sub == nil && p.dropped != reasonNone {
			why = p.dropped
		}
		if p.transition(phaseRetained, why) {
			p.expireAt = now.Add(max(p.cfg.ClosedRetention, 0))
			// A tree that ended with its process needs no cgroup while
			// the process is retained (nor holds one for the next start).
			p.sess.ReleaseIfEmpty()
		}
	}
	if p.phase == phaseRetained {
		switch {
		case p.forgetReason != reasonNone:
			p.transition(phaseGone, p.forgetReason)
		case !now.Before(p.expireAt):
			p.log.Debug("closed process retention ended")
			p.transition(phaseGone, reasonRetention)
		}
	}
	return p.phase == phaseGone
}

// onTimer handles every deadline that has passed.
func (p *process) onTimer(now time.Time) {
	if p.exitHeld && !now.Before(p.heldUntil) {
		p.numberExit()
	}
	p.expirePolls(now)
	if !p.killAt.IsZero() && !now.Before(p.killAt) {
		p.log.Debug("grace elapsed; killing the process tree")
		_ = p.sigkill()
	}
	if !p.timeoutAt.IsZero() && !now.Before(p.timeoutAt) {
		p.timeoutAt = time.Time{}
		if !p.reaped() {
			p.log.Debug("timeout elapsed; killing the process tree")
			p.timedOut = true
			_ = p.kill(reasonTimeout, 0)
		}
	}
	if p.backlogFrom != 0 && !now.Before(p.backlogUntil) {
		p.endBacklog("its hold ended before the client read past it")
	}
	if !p.drainAt.IsZero() && !now.Before(p.drainAt) {
		p.drainAt = time.Time{}
		if p.phase == phaseDraining {
			p.log.Debug("drain elapsed; closing the output streams")
			p.sess.CloseOutputs()
			p.outputsCut = true // what the readers still hold is taken, unread or not
			p.endBacklog("the streams were closed by force")
		}
	}
}

// nextDeadline is the earliest pending deadline (zero: none).
func (p *process) nextDeadline() time.Time {
	var next time.Time
	consider := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, pr := range p.polls {
		consider(pr.deadline)
	}
	consider(p.killAt)
	consider(p.heldUntil)
	consider(p.timeoutAt)
	consider(p.drainAt)
	if p.backlogFrom != 0 {
		consider(p.backlogUntil)
	}
	if p.phase == phaseRetained {
		consider(p.expireAt)
	}
	return next
}

// rearm points the single timer at the earliest pending deadline.
func (p *process) rearm() {
	next := p.nextDeadline()
	if next.Equal(p.timerAt) {
		return
	}
	p.timer.Stop()
	p.timerAt = next
	if !next.IsZero() {
		p.timer.Reset(next.Sub(p.clock.Now()))
	}
}

// begin: the actor's goroutine takes over (starting → running).
func (p *process) begin() {
	p.timer = p.clock.NewTimer()
	p.transition(phaseRunning, reasonStart)
}

// run is the actor loop. stop starts a graceful stop (the kill path with
// the shutdown grace), kill a forced one; either way run returns once the
// process is closed and its ending delivered (or its subscriber dropped).
func (p *process) run(stop, kill <-chan struct{}) {
	defer close(p.done)
	defer p.sess.Release()
	defer p.endMetrics()
	defer p.recoverPanic()
	p.begin()
	defer p.timer.Stop()
	for !p.settle() {
		p.rearm()
		p.publishReadView()

		var outCh chan<- Event
		var ev Event
		var subDone <-chan struct{}
		if p.sub != nil {
			subDone = p.sub.Done
			if e, ok := p.eventAt(p.sub.cursor); ok {
				outCh, ev = p.sub.Out, e
			}
		}
		var factsCh <-chan fact
		if p.canConsume() {
			factsCh = p.facts
		}
		p.bp.update(factsCh == nil, p.cfg.metrics)
		var stdinCh chan<- stdinOp
		var op stdinOp
		if len(p.stdinQueue) > 0 {
			stdinCh, op = p.stdinCh, p.stdinQueue[0]
		}

		select {
		case m := <-p.mbox:
			p.handle(m)
		case f := <-factsCh:
			p.handleFact(f)
		case code := <-p.exitCh:
			p.onReaped(code)
		case outCh <- ev:
			p.delivered(ev)
		case <-subDone:
			p.subscriberLost()
		case stdinCh <- op:
			p.stdinQueue[0] = stdinOp{}
			p.stdinQueue = p.stdinQueue[1:]
		case <-p.timer.C():
			p.timerAt = time.Time{}
			p.onTimer(p.clock.Now())
		case <-stop:
			stop = nil
			p.shutdown(false)
		case <-kill:
			kill, stop = nil, nil
			p.shutdown(true)
		}
	}
}
