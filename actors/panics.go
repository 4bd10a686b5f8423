package actors

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// Panic isolation. A panic in a process actor fails that one process; a
// panic in a connection's goroutines (reader, writer, fs worker, long-poll
// waiters, app-server adapters) fails that one connection. Either way the
// panic is recovered, logged with its stack, and everything else keeps
// running.

// ErrProcessFailed is matched (errors.Is) by every *ProcessFailedError.
var ErrProcessFailed = errors.New("actors: process failed")

// ProcessFailedError is the failure of a process whose actor panicked: the
// process tree was killed and the actor is gone.
type ProcessFailedError struct {
	ID     string
	Reason string // the panic value
}

func (e *ProcessFailedError) Error() string {
	return fmt.Sprintf("process %s failed: internal error: %s", e.ID, e.Reason)
}

// Is makes errors.Is(err, ErrProcessFailed) hold.
func (e *ProcessFailedError) Is(target error) bool { return target == ErrProcessFailed }

// failedDeliveryWait bounds how long a failed process actor tries to hand
// its subscriber the EventFailed before it gives up (the subscriber's
// connection is not draining).
const failedDeliveryWait = 5 * time.Second

// recoverPanic runs deferred in the process actor's goroutine. On a panic
// it kills the process tree, ends the helpers, records the failure (read
// through ProcessRef.Failure after done), ends every lag-mode listener,
// releases Closed() waiters, and hands the subscriber an EventFailed at its
// cursor, so that nobody waits for an ending that will not come. done is
// closed after it returns (run's first defer).
func (p *process) recoverPanic() {
	v := recover()
	if v == nil {
		return
	}
	err := &ProcessFailedError{ID: p.id, Reason: fmt.Sprint(v)}
	p.log.Error("process actor panicked; failing the process and killing its tree",
		zap.String("panic", err.Reason), zap.ByteString("stack", debug.Stack()))
	safely(p.log, func() { _ = p.sess.Signal(syscall.SIGKILL) })
	safely(p.log, p.sess.CloseOutputs)
	for _, l := range p.listeners {
		safely(p.log, func() { close(l) })
	}
	p.listeners = nil
	p.final.failure.Store(err)
	if !p.closedCDone {
		p.final.exitCode = -1
		p.closeClosedC()
	}
	if p.sub != nil && !p.endingDelivered() {
		ev := Event{ProcessID: p.id, Kind: EventFailed, Seq: p.sub.cursor, Failure: err.Error()}
		timer := time.NewTimer(failedDeliveryWait)
		defer timer.Stop()
		select {
		case p.sub.Out <- ev:
		case <-p.sub.Done:
		case <-timer.C:
			p.log.Warn("subscriber not handed the process failure: its connection is not draining")
		}
	}
	// Last: the checks above read the phase the panic left. (The wait
	// above uses real time, not p.clock: the recovery path trusts as
	// little of the actor's state as it can.)
	safely(p.log, func() { p.transition(phaseGone, reasonFailure) })
}

// closeClosedC releases Closed() waiters exactly once.
func (p *process) closeClosedC() {
	p.closedCDone = true
	close(p.closedC)
}

// safely runs f, logging (not propagating) a panic: used where a recovery
// path touches state that may be what panicked.
func safely(log *zap.Logger, f func()) {
	defer func() {
		if v := recover(); v != nil {
			log.Error("panic while recovering from a panic", zap.Any("panic", v))
		}
	}()
	f()
}

// Test hooks. They are nil in production: only tests set them (through
// SetTestHooks) to inject a panic into an actor or hold one at a chosen
// point. No message on the wire can set or reach them.
type testHook = func(string)

var hookProcessRequest, hookConnRequest, hookFsRequest, hookAppExited atomic.Pointer[testHook]

func runTestHook(h *atomic.Pointer[testHook], arg string) {
	if f := h.Load(); f != nil {
		(*f)(arg)
	}
}

// TestHooks are functions tests may run inside actors; each gets the
// process id (ProcessRequest) or the method (ConnRequest, FsRequest).
type TestHooks struct {
	// ProcessRequest runs in a process actor before it handles a request.
	ProcessRequest func(processID string)
	// ConnRequest runs in a connection's reader before it handles a request.
	ConnRequest func(method string)
	// FsRequest runs in a connection's fs worker before it handles an fs request.
	FsRequest func(method string)
	// AppExited runs in an app-server adapter after it queued the
	// dialect's process/exited for handle.
	AppExited func(handle string)
}

// SetTestHooks installs h for tests (panic injection) and returns a
// function that removes it. Never called in production.
func SetTestHooks(h TestHooks) (restore func()) {
	set := func(p *atomic.Pointer[testHook], f func(string)) {
		if f == nil {
			p.Store(nil)
			return
		}
		hf := testHook(f)
		p.Store(&hf)
	}
	set(&hookProcessRequest, h.ProcessRequest)
	set(&hookConnRequest, h.ConnRequest)
	set(&hookFsRequest, h.FsRequest)
	set(&hookAppExited, h.AppExited)
	return func() { SetTestHooks(TestHooks{}) }
}
