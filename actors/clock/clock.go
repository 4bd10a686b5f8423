package clock

import "time"

// Clock is where a process actor takes the time and its one timer from.
// Every deadline of the actor (the exit hold, a terminate's grace, the
// drain after a kill, Spec.Timeout, long polls, the closed retention) is
// computed from Now and waited for through a Timer. The real clock wraps
// package time; tests substitute a fake one and move time by hand.
type Clock interface {
	Now() time.Time
	// NewTimer returns a stopped timer.
	NewTimer() Timer
}

// Timer is a one-shot timer, used only by the goroutine that created it.
type Timer interface {
	// C delivers the time when the timer fires.
	C() <-chan time.Time
	// Reset arms the timer to fire after d (at once when d <= 0),
	// replacing any earlier arming.
	Reset(d time.Duration)
	// Stop disarms the timer; no fire of an earlier arming is delivered
	// after it returns.
	Stop()
}

// Real is the Clock of package time.
type Real struct{}

func (Real) Now() time.Time { return time.Now() }

func (Real) NewTimer() Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return realTimer{t}
}

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }

// Reset and Stop rely on Go 1.23+ timers: Stop and Reset discard a fire
// not yet received.
func (r realTimer) Reset(d time.Duration) { r.t.Reset(d) }
func (r realTimer) Stop()                 { r.t.Stop() }
