package runtime

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"pgregory.net/rapid"

	"github.com/runtimed/runtimed/actors/clock/clocktest"
)

// The supervisor actor against a small model. The harness is run's loop
// with the select replaced by rapid's choice of input: it drives the real
// actor's handlers (handle, restart, onRedialTimer, beginStop, stopped)
// from one goroutine, with scripted backends and a fake clock, and hands
// the actor each message its goroutines (Start, Wait, Redial) send. After
// every step the service's state, reason, process id, restarts, last exit
// and the backend's state must equal the model's, no transition may have
// been refused, and nothing may have been started on a lost backend.

type supModel struct {
	svc         Service
	state       ServiceState
	reason      ServiceReason
	gen         int
	restarts    []time.Time
	delay       time.Duration
	startedAt   time.Time
	lastExit    *int // nil: none (or unknown after a loss)
	lost        bool
	redialDelay time.Duration
}

// ended is the model's own reading of Service's documentation.
func (m *supModel) ended(now time.Time, failed bool, ran time.Duration, why ServiceReason) time.Duration {
	if ran >= m.svc.Backoff.ResetAfter {
		m.delay = m.svc.Backoff.Initial
	}
	var kept []time.Time
	for _, t := range m.restarts {
		if now.Sub(t) < m.svc.Window {
			kept = append(kept, t)
		}
	}
	m.restarts, m.reason = kept, why
	switch {
	case m.svc.Restart == RestartNever, m.svc.Restart == RestartOnFailure && !failed:
		m.state = ServiceExited
	case m.svc.MaxRestarts >= 0 && len(kept) >= m.svc.MaxRestarts:
		m.state = ServiceFailed
	default:
		m.state = ServiceBackoff
		wait := m.delay
		m.delay = min(2*m.delay, m.svc.Backoff.Max)
		return wait
	}
	return 0
}

type supHarness struct {
	t       *rapid.T
	clk     *clocktest.Clock
	s       *Supervisor
	a       *svcActor
	m       *supModel
	logs    *observer.ObservedLogs
	cur     *scriptedBackend   // the backend the model says is current
	old     []*scriptedBackend // lost ones, with their start counts
	oldN    []int32
	proc    *scriptedProc // the running process
	up      atomic.Bool   // Redial can make a backend
	refuse  bool          // the next start is refused (not a loss)
	refused atomic.Pointer[error]
}

func (h *supHarness) msg() supMsg {
	select {
	case m := <-h.s.mbox:
		return m
	case <-time.After(10 * time.Second):
		h.t.Fatalf("the actor's goroutines sent nothing")
		return nil
	}
}

// started hands the actor the answer to the start the model expects and
// the process it started.
func (h *supHarness) started() {
	h.a.handle(h.msg())
	if h.m.state == ServiceRunning {
		h.proc = h.cur.next(h.t)
	}
}

func (h *supHarness) check(step string) {
	ss, m := h.a.svcs[0], h.m
	want := fmt.Sprintf("%s/%s %s#%d restarts %d lost %v", m.state, m.reason, ss.Name, m.gen, max(m.gen-1, 0), m.lost)
	got := fmt.Sprintf("%s/%s %s restarts %d lost %v", ss.State, ss.Reason, ss.ProcessID, ss.Restarts, h.a.lost != nil)
	if got != want {
		h.t.Fatalf("after %s: actor %s, model %s", step, got, want)
	}
	if (m.lastExit == nil) != (ss.LastExit == nil) || m.lastExit != nil && *m.lastExit != ss.LastExit.Code {
		h.t.Fatalf("after %s: LastExit %v, model %v", step, ss.LastExit, m.lastExit)
	}
	for i, b := range h.old {
		if n := b.starts.Load(); n != h.oldN[i] {
			h.t.Fatalf("after %s: %d starts on lost backend %d (was %d)", step, n, i, h.oldN[i])
		}
	}
	if e := h.logs.FilterMessageSnippet("illegal").All(); len(e) > 0 {
		h.t.Fatalf("after %s: %s %v", step, e[0].Message, e[0].ContextMap())
	}
}

// launch is the model of a start: on the current backend unless it is lost.
func (h *supHarness) launch(why ServiceReason) {
	m := h.m
	if m.lost {
		m.state, m.reason = ServiceLost, ReasonBackendLost
		return
	}
	m.gen++
	if h.refuse {
		h.refuse = false
		h.a.handle(h.msg())
		h.m.ended(h.clk.Now(), true, 0, ReasonStartFailed)
		if h.m.state == ServiceBackoff {
			<-h.clk.Asked()
		}
		return
	}
	m.state, m.reason = ServiceRunning, ReasonStarted
	m.startedAt = h.clk.Now()
	h.started()
	_ = why
}

// lose: the running process's Wait reports the loss; Redial runs at once.
func (h *supHarness) lose() {
	h.proc.finish(ExitStatus{}, errLink)
	h.proc = nil
	h.a.handle(h.msg())
	h.m.state, h.m.reason, h.m.lastExit, h.m.lost = ServiceLost, ReasonBackendLost, nil, true
	h.old, h.oldN = append(h.old, h.cur), append(h.oldN, h.cur.starts.Load())
	h.redialed()
}

// redialed hands the actor Redial's answer.
func (h *supHarness) redialed() {
	up := h.up.Load()
	h.a.handle(h.msg())
	if !up {
		if d := <-h.clk.Asked(); d != h.m.redialDelay {
			h.t.Fatalf("redial delay %v, model %v", d, h.m.redialDelay)
		}
		h.m.redialDelay = min(2*h.m.redialDelay, redialMax)
		return
	}
	h.cur = h.a.backend.(*scriptedBackend)
	h.m.lost = false
	h.m.reason = ReasonBackendBack
	h.launch(ReasonBackendBack)
	if h.m.state == ServiceRunning {
		h.m.redialDelay = redialInitial
	}
}

func TestSupervisorModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		core, logs := observer.New(zap.InfoLevel)
		h := &supHarness{t: rt, clk: clocktest.New(), logs: logs}
		b0 := newScriptedBackend()
		b0.refuse = &h.refused
		h.cur = b0
		svc := Service{Name: "s", Spec: Spec{Argv: []string{"x"}, Dir: "/"},
			Restart:     rapid.SampledFrom([]RestartPolicy{RestartAlways, RestartOnFailure, RestartNever}).Draw(rt, "policy"),
			Backoff:     Backoff{Initial: time.Second, Max: 4 * time.Second, Jitter: 0.1, ResetAfter: 10 * time.Second},
			MaxRestarts: rapid.SampledFrom([]int{-1, 1, 3}).Draw(rt, "maxRestarts"), Window: time.Minute}
		h.s = NewSupervisor(b0, &SupervisorOptions{Clock: h.clk, Logger: zap.New(core), Rand: func() float64 { return 0.5 },
			Redial: func(ctx context.Context) (Backend, error) {
				if !h.up.Load() {
					return nil, fmt.Errorf("connection refused")
				}
				b := newScriptedBackend()
				b.refuse = &h.refused
				return b, nil
			}})
		if err := h.s.Add(svc); err != nil {
			rt.Fatal(err)
		}
		svc, _ = svc.withDefaults()
		h.m = &supModel{svc: svc, state: ServicePending, delay: time.Second, redialDelay: redialInitial}
		h.a = newSvcActor(h.s, make(chan struct{}))
		h.a.startNext()
		h.m.reason = ReasonStart
		h.launch(ReasonStart)
		h.check("start")
		for i := 0; i < 30 && h.m.state != ServiceExited && h.m.state != ServiceFailed; i++ {
			var step string
			switch h.m.state {
			case ServiceRunning:
				switch rapid.IntRange(0, 3).Draw(rt, "running") {
				case 0, 1:
					code := rapid.SampledFrom([]int{0, 1, 137}).Draw(rt, "code")
					step = fmt.Sprintf("exit %d", code)
					h.proc.finish(ExitStatus{Code: code}, nil)
					h.proc = nil
					h.a.handle(h.msg())
					h.m.lastExit = &code
					ran := h.clk.Now().Sub(h.m.startedAt)
					if wait := h.m.ended(h.clk.Now(), code != 0, ran, ReasonExited); h.m.state == ServiceBackoff {
						if d := <-h.clk.Asked(); d != wait {
							rt.Fatalf("backoff %v, model %v", d, wait)
						}
					}
				case 2:
					step = "lose"
					h.up.Store(rapid.Bool().Draw(rt, "upAtOnce"))
					h.lose()
				case 3:
					d := rapid.SampledFrom([]time.Duration{time.Second, 10 * time.Second}).Draw(rt, "runFor")
					step = fmt.Sprintf("run %v", d)
					h.clk.Advance(d)
				}
			case ServiceBackoff:
				step = "backoff elapses"
				if h.refuse = rapid.IntRange(0, 3).Draw(rt, "refuse") == 0; h.refuse {
					err := error(&RPCError{Code: -32603, Message: "spawn failed"})
					h.refused.Store(&err) // before the start is sent
				}
				retry, idx := h.a.dueRetry()
				h.clk.Advance(h.a.svcs[idx].retryAt.Sub(h.clk.Now()))
				<-retry
				h.a.restart(idx)
				h.m.restarts = append(h.m.restarts, h.clk.Now())
				h.launch(ReasonRestart)
			case ServiceLost:
				h.up.Store(rapid.Bool().Draw(rt, "up"))
				step = fmt.Sprintf("redial (up %v)", h.up.Load())
				h.clk.Advance(redialMax) // at least the redial delay
				<-h.a.redialTimer
				h.a.onRedialTimer()
				h.redialed()
			}
			h.check(step)
		}
		// Stop: whatever is up is taken down, everything ends stopped or final.
		reply := make(chan error, 1)
		h.a.beginStop(stopMsg{ctx: context.Background(), reply: reply})
		for !h.a.stopped() {
			h.a.handle(h.msg())
		}
		if st := h.a.svcs[0].State; st != ServiceStopped && st != ServiceExited && st != ServiceFailed {
			rt.Fatalf("after Stop: %s", st)
		}
		h.a.finish()
		if e := logs.FilterMessageSnippet("illegal").All(); len(e) > 0 {
			rt.Fatalf("at Stop: %s %v", e[0].Message, e[0].ContextMap())
		}
	})
}
