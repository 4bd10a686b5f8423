package runtime

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestDecideEnded is the table of what follows an ending.
func TestDecideEnded(t *testing.T) {
	base := func(policy RestartPolicy) Service {
		svc, err := Service{Name: "s", Spec: Spec{Argv: []string{"true"}, Dir: "/"}, Restart: policy,
			Backoff:     Backoff{Initial: time.Second, Max: 8 * time.Second, Jitter: 0.5, ResetAfter: 10 * time.Second},
			MaxRestarts: 3, Window: time.Minute}.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		return svc
	}
	now := time.Unix(1_000_000, 0)
	ago := func(d ...time.Duration) []time.Time {
		var out []time.Time
		for _, x := range d {
			out = append(out, now.Add(-x))
		}
		return out
	}
	for _, c := range []struct {
		name  string
		svc   Service
		f     endFacts
		state ServiceState
		wait  time.Duration // backoff only
		delay time.Duration
		kept  int // restarts kept in the window
	}{
		{"never, failed", base(RestartNever), endFacts{failed: true, delay: time.Second}, ServiceExited, 0, time.Second, 0},
		{"never, clean", base(RestartNever), endFacts{delay: time.Second}, ServiceExited, 0, time.Second, 0},
		{"on-failure, clean", base(RestartOnFailure), endFacts{delay: 2 * time.Second}, ServiceExited, 0, 2 * time.Second, 0},
		{"on-failure, failed", base(RestartOnFailure), endFacts{failed: true, delay: time.Second}, ServiceBackoff, time.Second, 2 * time.Second, 0},
		{"always, clean", base(RestartAlways), endFacts{delay: time.Second}, ServiceBackoff, time.Second, 2 * time.Second, 0},
		{"doubling", base(RestartAlways), endFacts{failed: true, delay: 2 * time.Second}, ServiceBackoff, 2 * time.Second, 4 * time.Second, 0},
		{"capped at Max", base(RestartAlways), endFacts{failed: true, delay: 8 * time.Second}, ServiceBackoff, 8 * time.Second, 8 * time.Second, 0},
		{"ran ResetAfter: Initial again", base(RestartAlways), endFacts{failed: true, ran: 10 * time.Second, delay: 8 * time.Second}, ServiceBackoff, time.Second, 2 * time.Second, 0},
		{"ran just under ResetAfter: no reset", base(RestartAlways), endFacts{failed: true, ran: 10*time.Second - 1, delay: 4 * time.Second}, ServiceBackoff, 4 * time.Second, 8 * time.Second, 0},
		{"failed start (ran 0): no reset", base(RestartAlways), endFacts{failed: true, delay: 4 * time.Second}, ServiceBackoff, 4 * time.Second, 8 * time.Second, 0},
		{"jitter low end", base(RestartAlways), endFacts{delay: 2 * time.Second, rnd: 0}, ServiceBackoff, time.Second, 4 * time.Second, 0},
		{"jitter high end", base(RestartAlways), endFacts{delay: 2 * time.Second, rnd: 0.75}, ServiceBackoff, 2500 * time.Millisecond, 4 * time.Second, 0},
		{"window full: gives up", base(RestartAlways), endFacts{failed: true, delay: time.Second, restarts: ago(50*time.Second, 20*time.Second, time.Second)}, ServiceFailed, 0, time.Second, 3},
		{"one restart left the window", base(RestartAlways), endFacts{failed: true, delay: time.Second, restarts: ago(time.Minute, 20*time.Second, time.Second)}, ServiceBackoff, time.Second, 2 * time.Second, 2},
		{"window full, clean exit under on-failure: exited", base(RestartOnFailure), endFacts{delay: time.Second, restarts: ago(3*time.Second, 2*time.Second, time.Second)}, ServiceExited, 0, time.Second, 3},
		{"no limit", func() Service { s := base(RestartAlways); s.MaxRestarts = -1; return s }(), endFacts{failed: true, delay: time.Second, restarts: ago(4*time.Second, 3*time.Second, 2*time.Second, time.Second)}, ServiceBackoff, time.Second, 2 * time.Second, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.f.now = now
			if c.f.rnd == 0 && c.name != "jitter low end" {
				c.f.rnd = 0.5 // no jitter
			}
			in := slices.Clone(c.f.restarts)
			d := decideEnded(c.svc, c.f)
			if d.state != c.state || d.delay != c.delay || len(d.restarts) != c.kept || (c.state == ServiceBackoff && d.wait != c.wait) {
				t.Errorf("got %s wait %v delay %v kept %d; want %s wait %v delay %v kept %d", d.state, d.wait, d.delay, len(d.restarts), c.state, c.wait, c.delay, c.kept)
			}
			if !slices.Equal(in, c.f.restarts) {
				t.Errorf("decideEnded modified its input: %v, was %v", c.f.restarts, in)
			}
		})
	}
}

// TestServiceTransitionTable: the table allows exactly the drawn edges;
// the final states have none, and stop reaches stopped from every
// non-final state.
func TestServiceTransitionTable(t *testing.T) {
	states := []ServiceState{ServicePending, ServiceStarting, ServiceRunning, ServiceBackoff, ServiceLost, ServiceExited, ServiceFailed, ServiceStopping, ServiceStopped}
	reasons := []ServiceReason{ReasonStart, ReasonStarted, ReasonStartFailed, ReasonExited, ReasonRestart, ReasonBackendLost, ReasonBackendBack, ReasonStop}
	type edge struct {
		from, to ServiceState
		why      ServiceReason
	}
	want := map[edge]bool{}
	for _, e := range []edge{
		{ServicePending, ServiceStarting, ReasonStart},
		{ServiceStarting, ServiceRunning, ReasonStarted},
		{ServiceStarting, ServiceBackoff, ReasonStartFailed},
		{ServiceStarting, ServiceExited, ReasonStartFailed},
		{ServiceStarting, ServiceFailed, ReasonStartFailed},
		{ServiceRunning, ServiceBackoff, ReasonExited},
		{ServiceRunning, ServiceExited, ReasonExited},
		{ServiceRunning, ServiceFailed, ReasonExited},
		{ServiceBackoff, ServiceStarting, ReasonRestart},
		{ServicePending, ServiceLost, ReasonBackendLost},
		{ServiceStarting, ServiceLost, ReasonBackendLost},
		{ServiceRunning, ServiceLost, ReasonBackendLost},
		{ServiceBackoff, ServiceLost, ReasonBackendLost},
		{ServiceLost, ServiceStarting, ReasonBackendBack},
		{ServicePending, ServiceStopped, ReasonStop},
		{ServiceStarting, ServiceStopping, ReasonStop},
		{ServiceStarting, ServiceStopped, ReasonStop},
		{ServiceRunning, ServiceStopping, ReasonStop},
		{ServiceRunning, ServiceStopped, ReasonStop},
		{ServiceBackoff, ServiceStopped, ReasonStop},
		{ServiceLost, ServiceStopped, ReasonStop},
		{ServiceStopping, ServiceStopped, ReasonStop},
	} {
		want[e] = true
	}
	n := 0
	for _, from := range states {
		for _, to := range states {
			for _, why := range reasons {
				got := legalServiceTransition(from, to, why)
				if got != want[edge{from, to, why}] {
					t.Errorf("%s -%s-> %s: legal %v, want %v", from, why, to, got, !got)
				}
				if got {
					n++
				}
			}
		}
	}
	if n != len(want) {
		t.Errorf("%d legal transitions, want %d", n, len(want))
	}
}

// TestBackendLostErrors: what counts as a lost backend, and the error a
// lost service carries.
func TestBackendLostErrors(t *testing.T) {
	for _, c := range []struct {
		err  error
		lost bool
	}{
		{fmt.Errorf("%w: read: connection reset", ErrDisconnected), true},
		{ErrClosed, true},
		{&ProcessError{ID: "x", Message: "failed"}, false},
		{&RPCError{Code: -32603, Message: "spawn failed"}, false},
		{errors.New("other"), false},
		{nil, false},
	} {
		if got := backendLost(c.err); got != c.lost {
			t.Errorf("backendLost(%v) = %v", c.err, got)
		}
	}
}
