package proptest

import (
	"sync"
	"time"

	"github.com/runtimed/runtimed/actors"
)

// stepClock is an actors.Clock whose time moves only when the harness
// moves it, so the process actor model drives the actor's deadlines
// without sleeping. A fired timer delivers into its channel (capacity 1),
// as a real one does; Reset and Stop discard a fire not yet received.
type stepClock struct {
	mu     sync.Mutex // guards now and every timer's at; never held across a send that can block
	now    time.Time
	timers []*stepTimer
}

type stepTimer struct {
	c  *stepClock
	ch chan time.Time
	at time.Time // zero: disarmed
}

func newStepClock() *stepClock { return &stepClock{now: time.Unix(1_700_000_000, 0)} }

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) NewTimer() actors.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &stepTimer{c: c, ch: make(chan time.Time, 1)}
	c.timers = append(c.timers, t)
	return t
}

// advanceWithin moves the time to the earliest armed deadline if that is
// at most d away, firing the timers it reaches, and reports whether it
// did. The model's only short deadlines are the actor's exit hold and its
// drain after a kill; a terminate's grace, long polls and the closed
// retention are an hour or a minute away, so they never fire by this.
func (c *stepClock) advanceWithin(d time.Duration) bool {
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
	for _, t := range c.timers {
		if !t.at.IsZero() && !c.now.Before(t.at) {
			t.fire()
		}
	}
	return true
}

// fire delivers the time (the caller holds the clock's lock; the channel
// has room or already holds a fire).
func (t *stepTimer) fire() {
	t.at = time.Time{}
	select {
	case t.ch <- t.c.now:
	default:
	}
}

func (t *stepTimer) C() <-chan time.Time { return t.ch }

func (t *stepTimer) Reset(d time.Duration) {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.drain()
	t.at = t.c.now.Add(d)
	if d <= 0 {
		t.fire()
	}
}

func (t *stepTimer) Stop() {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.at = time.Time{}
	t.drain()
}

func (t *stepTimer) drain() {
	select {
	case <-t.ch:
	default:
	}
}
