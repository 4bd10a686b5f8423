package actors

import (
	"context"
	"slices"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/runtimed/runtimed/actors/clock/clocktest"
	"github.com/runtimed/runtimed/actors/osproc"
	"github.com/runtimed/runtimed/actors/osproc/osproctest"
)

// clockRun is one process actor running its real loop on a fake clock.
type clockRun struct {
	t    *testing.T
	clk  *clocktest.Clock
	sess *osproctest.Session
	ref  *ProcessRef
	rec  *recorder
}

func startClockRun(t *testing.T, timeout time.Duration) *clockRun {
	c := &clockRun{t: t, clk: clocktest.New(), sess: osproctest.New(osproctest.Options{Streams: []osproc.Stream{osproc.Stdout}}), rec: newRecorder(16)}
	sup := NewSupervisor(Config{
		Proc: ProcConfig{RetainBytes: 1 << 20, RetainChunks: 1000, ClosedRetention: time.Minute,
			DrainAfterTerminate: 100 * time.Millisecond, ShutdownGrace: time.Second, Clock: c.clk},
		DetachTTL: time.Minute,
		Logger:    zaptest.NewLogger(t),
	})
	t.Cleanup(func() {
		sup.Kill()
		c.sess.TryExit(137)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := sup.Wait(ctx); err != nil {
			t.Errorf("supervisor did not stop: %v", err)
		}
	})
	c.ref = sup.spawn("p", []string{"fake"}, false, c.sess, c.rec.sub(), keep{timeout: timeout}, nil)
	return c
}

// advance moves the fake clock and waits until the actor has handled
// what it fired: the fire was received, and an Info round trip (answered
// only after the step that received it) returns.
func (c *clockRun) advance(d time.Duration) ProcessInfo {
	c.t.Helper()
	c.clk.Advance(d)
	deadline := time.Now().Add(10 * time.Second)
	for c.clk.Pending() {
		if time.Now().After(deadline) {
			c.t.Fatal("the actor did not take its timer's fire")
		}
		time.Sleep(time.Millisecond)
	}
	return c.info()
}

// waitArmed waits until the actor's timer points at at.
func (c *clockRun) waitArmed(at time.Time) {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !c.clk.Armed(at) {
		if time.Now().After(deadline) {
			c.t.Fatalf("the actor's timer never pointed at %v", at)
		}
		time.Sleep(time.Millisecond)
	}
}

func (c *clockRun) info() ProcessInfo {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := c.ref.Info(ctx)
	if err != nil {
		c.t.Fatalf("Info: %v", err)
	}
	return info
}

func (c *clockRun) wantSignals(what string, want ...syscall.Signal) {
	c.t.Helper()
	if got := c.sess.Signals(); !slices.Equal(got, want) {
		c.t.Fatalf("%s: signals %v, want %v", what, got, want)
	}
}

// TestRunLoopKillPathOnTheClock: the real loop takes every deadline of the
// kill path from its clock. Terminate's grace, the exit hold, the drain
// that closes an output held open by a descendant, and the closed
// retention each happen exactly when the fake clock reaches them, not a
// tick before; nothing sleeps on them.
func TestRunLoopKillPathOnTheClock(t *testing.T) {
	c := startClockRun(t, 0)
	ctx := context.Background()
	if running, err := c.ref.Terminate(ctx, 10*time.Second); err != nil || !running {
		t.Fatalf("terminate = %v, %v", running, err)
	}
	c.wantSignals("terminate", syscall.SIGTERM)
	c.advance(10*time.Second - time.Millisecond)
	c.wantSignals("just before the grace's end", syscall.SIGTERM)
	c.advance(time.Millisecond)
	c.wantSignals("at the grace's end", syscall.SIGTERM, syscall.SIGKILL)

	// The child dies; its stream is not ended (an escaped
	// descendant), so the exit is held for exitHold.
	c.sess.Exit(137)
	c.waitArmed(c.clk.Now().Add(exitHold)) // the actor holds the exit
	if info := c.info(); info.State != StateRunning {
		t.Fatalf("state %v during the exit hold", info.State)
	}
	if info := c.advance(exitHold - time.Millisecond); info.State != StateRunning {
		t.Fatalf("state %v before the exit hold's end", info.State)
	}
	if info := c.advance(time.Millisecond); info.State != StateExited || info.ExitCode != 137 {
		t.Fatalf("after the exit hold: %+v", info)
	}
	c.wantSignals("at the exit (draining)", syscall.SIGTERM, syscall.SIGKILL, syscall.SIGKILL)
	if ev := next(t, c.rec); ev.Kind != EventExited || ev.Seq != 1 {
		t.Fatalf("first event %+v", ev)
	}
	if forced := c.sess.ForcedCloses(); forced != 0 {
		t.Fatal("outputs closed before the drain's end")
	}
	c.advance(100*time.Millisecond - time.Millisecond)
	if forced := c.sess.ForcedCloses(); forced != 0 {
		t.Fatal("outputs closed before the drain's end")
	}
	c.advance(time.Millisecond)
	if forced := c.sess.ForcedCloses(); forced == 0 {
		t.Fatal("outputs not closed at the drain's end")
	}
	if ev := next(t, c.rec); ev.Kind != EventClosed || ev.Seq != 2 {
		t.Fatalf("after the drain: %+v", ev)
	}
	<-c.ref.Closed()
	if c.info().State != StateClosed {
		t.Fatal("not closed")
	}
	// Retained for ClosedRetention from the delivery, then gone.
	c.advance(time.Minute - time.Millisecond)
	if !c.ref.Alive() {
		t.Fatal("gone before its retention ended")
	}
	c.clk.Advance(time.Millisecond)
	select {
	case <-c.ref.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("still alive after its retention ended")
	}
}

// TestRunLoopTimeoutOnTheClock: Spec.Timeout is a deadline of the clock;
// at it the kill path SIGKILLs the tree and the exit reports
// TimeoutExitCode.
func TestRunLoopTimeoutOnTheClock(t *testing.T) {
	c := startClockRun(t, 5*time.Second)
	c.advance(5*time.Second - time.Millisecond)
	c.wantSignals("before the timeout")
	c.advance(time.Millisecond)
	c.wantSignals("at the timeout", syscall.SIGKILL)
	c.sess.End(0)
	c.sess.Exit(137)
	evs := c.rec.untilClosed(t, 10*time.Second)
	if len(evs) != 2 || evs[0].Kind != EventExited || evs[0].ExitCode != TimeoutExitCode {
		t.Fatalf("events %+v; want exited(%d), closed", evs, TimeoutExitCode)
	}
	c.wantSignals("after the exit", syscall.SIGKILL, syscall.SIGKILL)
}
