package runtime

import (
	"errors"
	"slices"
	"time"
)

// A service's life is one state machine, changed in one place
// (svcActor.setState), each change carrying its reason; the table below
// (legalServiceTransition) is the whole of it:
//
//	pending ─start─▶ starting ─started─▶ running ─stop─▶ stopping ─stop─▶ stopped
//	                  ▲   │start failed     │exited
//	          restart │   ▼                 ▼
//	               backoff ◀── decideEnded ──┴──▶ exited | failed
//
//	starting, running, backoff, pending ─backend lost─▶ lost ─backend back─▶ starting
//	pending, starting, running, backoff, lost ─stop─▶ stopped (starting, running: via stopping)
//
// exited, failed and stopped are final. What follows an ending (restart
// after a backoff, end for good, give up) is decideEnded, a pure function.

// ServiceReason is why a service entered its state (ServiceStatus.Reason).
type ServiceReason string

const (
	// ReasonStart: the supervisor's Start began the service's first start.
	ReasonStart ServiceReason = "start"
	// ReasonStarted: the backend started its process.
	ReasonStarted ServiceReason = "started"
	// ReasonStartFailed: the backend refused to start it (LastError says
	// why); its policy decided what follows.
	ReasonStartFailed ServiceReason = "start failed"
	// ReasonExited: its process ended (LastExit says how); its policy
	// decided what follows.
	ReasonExited ServiceReason = "exited"
	// ReasonRestart: its backoff elapsed.
	ReasonRestart ServiceReason = "restart"
	// ReasonBackendLost: the backend cannot start anything any more (a
	// Client whose connection was lost, a closed backend); LastError wraps
	// ErrBackendLost and the backend's error.
	ReasonBackendLost ServiceReason = "backend lost"
	// ReasonBackendBack: SupervisorOptions.Redial gave a backend again.
	ReasonBackendBack ServiceReason = "backend back"
	// ReasonStop: Supervisor.Stop.
	ReasonStop ServiceReason = "stop"
)

// ErrBackendLost: the service's backend was lost (ServiceLost). Errors
// matching it also match the backend's own error (ErrDisconnected for a
// Client whose connection was lost, ErrClosed for a closed backend).
var ErrBackendLost = errors.New("runtime: supervisor: backend lost")

// backendLost reports whether err says the backend cannot start anything
// any more, rather than that one process failed.
func backendLost(err error) bool {
	return errors.Is(err, ErrDisconnected) || errors.Is(err, ErrClosed)
}

// legalServiceTransition is the transition table: from, to and the
// reasons that may carry the change. Anything else is a bug.
func legalServiceTransition(from, to ServiceState, why ServiceReason) bool {
	if why == ReasonStop {
		switch from {
		case ServicePending, ServiceBackoff, ServiceLost, ServiceStopping:
			return to == ServiceStopped
		case ServiceStarting, ServiceRunning: // stopping to take its process down; stopped if it has none (left)
			return to == ServiceStopping || to == ServiceStopped
		}
		return false
	}
	if why == ReasonBackendLost {
		switch from {
		case ServicePending, ServiceStarting, ServiceRunning, ServiceBackoff:
			return to == ServiceLost
		}
		return false
	}
	switch from {
	case ServicePending:
		return to == ServiceStarting && why == ReasonStart
	case ServiceStarting:
		return to == ServiceRunning && why == ReasonStarted || afterEnding(to) && why == ReasonStartFailed
	case ServiceRunning:
		return afterEnding(to) && why == ReasonExited
	case ServiceBackoff:
		return to == ServiceStarting && why == ReasonRestart
	case ServiceLost:
		return to == ServiceStarting && why == ReasonBackendBack
	}
	return false // exited, failed and stopped are final
}

// afterEnding: the states decideEnded picks from.
func afterEnding(s ServiceState) bool {
	return s == ServiceBackoff || s == ServiceExited || s == ServiceFailed
}

// endFacts is what decideEnded knows about an ending (a process that
// ended, or a start that failed) and the service's backoff so far.
type endFacts struct {
	failed   bool          // a non-zero exit, a signal, a limit, a failed start or a process failure
	ran      time.Duration // how long the process ran; 0 for a start that failed
	now      time.Time     // when it ended
	delay    time.Duration // the delay the next restart takes, before jitter
	restarts []time.Time   // the times of the restarts so far, oldest first (not modified)
	rnd      float64       // a random number in [0, 1), for the jitter
}

// endDecision is what follows an ending.
type endDecision struct {
	state    ServiceState  // ServiceBackoff, ServiceExited or ServiceFailed
	wait     time.Duration // ServiceBackoff: the wait before the restart, jittered
	delay    time.Duration // the delay of the restart after the next one, before jitter
	restarts []time.Time   // the restarts still inside the window (a new slice)
}

// decideEnded decides what follows an ending of svc (its defaults filled
// in): its policy may end it for good (ServiceExited); otherwise a
// restart, unless MaxRestarts restarts happened within the Window already
// (ServiceFailed), after the current delay, jittered by ±Jitter, and the
// delay doubles up to Max. A process that ran for ResetAfter or longer
// takes the delay back to Initial first.
func decideEnded(svc Service, f endFacts) endDecision {
	d := endDecision{delay: f.delay}
	if f.ran >= svc.Backoff.ResetAfter {
		d.delay = svc.Backoff.Initial // it ran long enough: a fresh failure
	}
	d.restarts = slices.DeleteFunc(slices.Clone(f.restarts), func(t time.Time) bool { return f.now.Sub(t) >= svc.Window })
	if svc.Restart != RestartAlways && !(svc.Restart == RestartOnFailure && f.failed) {
		d.state = ServiceExited
		return d
	}
	if svc.MaxRestarts >= 0 && len(d.restarts) >= svc.MaxRestarts {
		d.state = ServiceFailed
		return d
	}
	d.state, d.wait = ServiceBackoff, jittered(d.delay, svc.Backoff.Jitter, f.rnd)
	d.delay = min(2*d.delay, svc.Backoff.Max)
	return d
}

// jittered is d randomised by ±j (r in [0, 1): 0.5 is d itself).
func jittered(d time.Duration, j, r float64) time.Duration {
	if j <= 0 {
		return d
	}
	return time.Duration(float64(d) * (1 + j*(2*r-1)))
}
