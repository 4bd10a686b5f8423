package clocktest

import (
	"sync"
	"time"

	"github.com/runtimed/runtimed/actors/clock"
)

// Clock is a fake clock. Its time starts at a fixed instant.
type Clock struct {
	mu     sync.Mutex // guards now and every timer's at
	now    time.Time
	timers []*timer
	asked  chan time.Duration
}

var _ clock.Clock = (*Clock)(nil)

// New returns a Clock at a fixed instant.
func New() *Clock {
	return &Clock{now: time.Unix(1_700_000_000, 0), asked: make(chan time.Duration, 64)}
}

func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a stopped timer.
func (c *Clock) NewTimer() clock.Timer { return c.newTimer() }

func (c *Clock) newTimer() *timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{c: c, ch: make(chan time.Time, 1)}
	c.timers = append(c.timers, t)
	return t
}

// After returns a channel that receives the time once the clock has been
// advanced by d, and tells Asked about d.
func (c *Clock) After(d time.Duration) <-chan time.Time {
	t := c.newTimer()
	t.Reset(d)
	c.asked <- d
	return t.ch
}

// Asked delivers the duration of each After, in order.
func (c *Clock) Asked() <-chan time.Duration { return c.asked }

// Advance moves the time by d and fires every timer whose deadline has come.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.fireDue()
}

// AdvanceWithin moves the time to the earliest armed deadline if that is
// at most d away (not at all if it has passed), firing what it reaches,
// and reports whether there was one.
func (c *Clock) AdvanceWithin(d time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	var next time.Time
	for _, t := range c.timers {
		if !t.at.IsZero() && (next.IsZero() || t.at.Before(next)) {
			next = t.at
		}
	}
	if next.IsZero() || next.Sub(c.now) > d {
		return false
	}
	if next.After(c.now) {
		c.now = next
	}
	c.fireDue()
	return true
}

// fireDue fires the timers whose deadline has come (c.mu held).
func (c *Clock) fireDue() {
	for _, t := range c.timers {
		if !t.at.IsZero() && !c.now.Before(t.at) {
			t.fire()
		}
	}
}

// Pending reports whether a timer fired and its fire was not received yet.
func (c *Clock) Pending() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.timers {
		if len(t.ch) > 0 {
			return true
		}
	}
	return false
}

// Armed reports whether a timer is armed to fire at at.
func (c *Clock) Armed(at time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.timers {
		if t.at.Equal(at) {
			return true
		}
	}
	return false
}

type timer struct {
	c  *Clock
	ch chan time.Time
	at time.Time // zero: disarmed
}

func (t *timer) C() <-chan time.Time { return t.ch }

// fire delivers the time (c.mu held; the channel has room or already
// holds a fire).
func (t *timer) fire() {
	t.at = time.Time{}
	select {
	case t.ch <- t.c.now:
	default:
	}
}

func (t *timer) Reset(d time.Duration) {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.drain()
	t.at = t.c.now.Add(d)
	if d <= 0 {
		t.fire()
	}
}

func (t *timer) Stop() {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.at = time.Time{}
	t.drain()
}

func (t *timer) drain() {
	select {
	case <-t.ch:
	default:
	}
}
