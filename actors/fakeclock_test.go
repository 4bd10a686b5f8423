package actors

import (
	"sync"
	"time"
)

// fakeClock is a Clock whose time moves only when the test calls Advance.
// A timer whose deadline is reached fires into its channel (capacity 1), as
// a real one would; nothing sleeps.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	c  *fakeClock
	ch chan time.Time
	at time.Time // zero: disarmed
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer() Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, ch: make(chan time.Time, 1)}
	c.timers = append(c.timers, t)
	return t
}

// Advance moves the time by d and fires every timer whose deadline has come.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for _, t := range c.timers {
		if !t.at.IsZero() && !c.now.Before(t.at) {
			t.fire()
		}
	}
}

// Pending reports whether a timer fired and its fire was not received yet.
func (c *fakeClock) Pending() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.timers {
		if len(t.ch) > 0 {
			return true
		}
	}
	return false
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

// fire delivers the time (the caller holds the clock's lock).
func (t *fakeTimer) fire() {
	t.at = time.Time{}
	select {
	case t.ch <- t.c.now:
	default:
	}
}

func (t *fakeTimer) Reset(d time.Duration) {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.drain()
	t.at = t.c.now.Add(d)
	if d <= 0 {
		t.fire()
	}
}

func (t *fakeTimer) Stop() {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.at = time.Time{}
	t.drain()
}

func (t *fakeTimer) drain() {
	select {
	case <-t.ch:
	default:
	}
}

// Armed reports whether a timer is armed to fire at at.
func (c *fakeClock) Armed(at time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.timers {
		if t.at.Equal(at) {
			return true
		}
	}
	return false
}
