package runtime

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runtimed/runtimed/actors/clock/clocktest"
)

func nextServiceEvent(t *testing.T, ch <-chan ServiceEvent, want ServiceState) ServiceEvent {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("events ended while waiting for %s", want)
			}
			if ev.State == want {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %s event", want)
		}
	}
}

// TestSupervisorCrashLoopBacksOffAndGivesUp: a command that always fails is
// restarted after 1 s, 2 s, 4 s (doubling, capped), then the intensity
// limit (3 restarts in the window) makes the service give up. The clock is
// fake: nothing sleeps. Runs on every backend.
func TestSupervisorCrashLoopBacksOffAndGivesUp(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		clk := clocktest.New()
		sup, events := supervise(t, b, &SupervisorOptions{Clock: clk, Rand: func() float64 { return 0.5 }}, // jitter factor 1
			Service{Name: "crash", Spec: sh(t, "exit 3"), Restart: RestartOnFailure,
				Backoff: Backoff{Initial: time.Second, Max: 4 * time.Second, Jitter: 0.1}, MaxRestarts: 3, Window: time.Minute})
		ctx := ctxT(t)
		var delays []time.Duration
		for i := 0; i < 3; i++ {
			nextServiceEvent(t, events, ServiceBackoff)
			select {
			case d := <-clk.Asked():
				delays = append(delays, d)
				clk.Advance(d)
			case <-time.After(20 * time.Second):
				t.Fatal("the supervisor never asked for a backoff timer")
			}
		}
		ev := nextServiceEvent(t, events, ServiceFailed)
		if ev.Restarts != 3 || ev.LastExit == nil || ev.LastExit.Code != 3 {
			t.Errorf("gave up with %+v", ev.ServiceStatus)
		}
		want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}
		if len(delays) != 3 || delays[0] != want[0] || delays[1] != want[1] || delays[2] != want[2] {
			t.Errorf("backoff delays %v, want %v", delays, want)
		}
		st, err := sup.Status(ctx)
		if err != nil || len(st) != 1 || st[0].State != ServiceFailed || st[0].ProcessID != "crash#4" {
			t.Errorf("status %+v %v", st, err)
		}
	})
}

// TestSupervisorPoliciesOrderAndStop: never/on-failure end a clean exit;
// always restarts it; services start in order and stop in reverse order.
func TestSupervisorPoliciesOrderAndStop(t *testing.T) {
	b := newLocalBackend(t)
	clk := clocktest.New()
	dir := t.TempDir()
	long := func(name string) Service {
		return Service{Name: name, Spec: sh(t, "echo $$ > "+filepath.Join(dir, name)+"; exec sleep 60"), StopGrace: time.Second}
	}
	sup, events := supervise(t, b, &SupervisorOptions{Clock: clk, Rand: func() float64 { return 0.5 }},
		long("first"),
		Service{Name: "clean-never", Spec: sh(t, "exit 0"), Restart: RestartNever},
		Service{Name: "clean-onfail", Spec: sh(t, "exit 0"), Restart: RestartOnFailure},
		Service{Name: "clean-always", Spec: sh(t, "exit 0"), Restart: RestartAlways, Backoff: Backoff{Initial: time.Second}},
		long("last"),
	)
	ctx := ctxT(t)
	var order []string
	first := map[string]bool{}
	seen := map[string]ServiceState{}
	timeout := time.After(20 * time.Second)
	for !(seen["clean-never"] == ServiceExited && seen["clean-onfail"] == ServiceExited && seen["first"] == ServiceRunning &&
		seen["last"] == ServiceRunning && seen["clean-always"] == ServiceBackoff) {
		select {
		case ev := <-events:
			if ev.State == ServiceRunning && !first[ev.Name] {
				first[ev.Name] = true
				order = append(order, ev.Name)
			}
			seen[ev.Name] = ev.State
		case <-timeout:
			t.Fatalf("states %v", seen)
		}
	}
	if strings.Join(order, ",") != "first,clean-never,clean-onfail,clean-always,last" {
		t.Errorf("start order %v", order)
	}
	// always restarts after its backoff.
	clk.Advance(<-clk.Asked())
	nextServiceEvent(t, events, ServiceRunning)
	// Stop: reverse order (once both long services really run).
	pids := map[string]int{"first": readPid(t, filepath.Join(dir, "first")), "last": readPid(t, filepath.Join(dir, "last"))}
	stopDone := make(chan error, 1)
	go func() { stopDone <- sup.Stop(ctx) }()
	var stops []string
	for ev := range events {
		if ev.State == ServiceStopping {
			stops = append(stops, ev.Name)
		}
	}
	if err := <-stopDone; err != nil {
		t.Fatal(err)
	}
	if len(stops) < 2 || stops[0] != "last" || stops[len(stops)-1] != "first" {
		t.Errorf("stop order %v, want last first and first last", stops)
	}
	for name, pid := range pids {
		if processAlive(pid) {
			t.Errorf("%s (pid %d) survived Stop", name, pid)
		}
	}
}

func subscribeBeforeStart(t *testing.T, sup *Supervisor, ctx context.Context) (<-chan ServiceEvent, func(), error) {
	t.Helper()
	ch, cancel, err := sup.Subscribe(ctx, 256)
	if err != nil {
		return nil, nil, err
	}
	return ch, cancel, sup.Start(ctx)
}

func TestSupervisorValidation(t *testing.T) {
	sup := NewSupervisor(newLocalBackend(t), nil)
	for _, c := range []struct {
		svc  Service
		want string
	}{
		{Service{Spec: Spec{Argv: []string{"true"}}}, "Service.Name"},
		{Service{Name: "x"}, "Service.Spec.Argv"},
		{Service{Name: "x", Spec: Spec{Argv: []string{"true"}}, Restart: "sometimes"}, "Service.Restart"},
		{Service{Name: "x", Spec: Spec{Argv: []string{"true"}}, Backoff: Backoff{Initial: time.Minute, Max: time.Second}}, "Service.Backoff.Max"},
		{Service{Name: "x", Spec: Spec{Argv: []string{"true"}}, Backoff: Backoff{Jitter: 1.5}}, "Service.Backoff.Jitter"},
	} {
		if err := sup.Add(c.svc); optionOf(err) != c.want {
			t.Errorf("%+v: %v, want %q", c.svc, err, c.want)
		}
	}
	if err := sup.Add(Service{Name: "x", Spec: Spec{Argv: []string{"true"}, Dir: "/"}}); err != nil {
		t.Fatal(err)
	}
	if err := sup.Add(Service{Name: "x", Spec: Spec{Argv: []string{"true"}, Dir: "/"}}); err == nil {
		t.Errorf("a name added twice")
	}
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && strings.HasSuffix(string(b), "\n") {
			var pid int
			for _, c := range strings.TrimSpace(string(b)) {
				pid = pid*10 + int(c-'0')
			}
			return pid
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s never written", path)
	return 0
}

func processAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] != "Z"
}

func TestParseServices(t *testing.T) {
	good := `{"services":[{"name":"web","argv":["sleep","1"],"cwd":"/","restart":"always","backoff":{"initial":"1s","max":"2s"},
		"maxRestarts":-1,"window":"5m","stopGrace":"3s","sandbox":"read-only","limits":{"memoryBytes":1048576}}]}`
	svcs, err := ParseServices([]byte(good))
	if err != nil || len(svcs) != 1 {
		t.Fatalf("good file: %v", err)
	}
	s := svcs[0]
	if s.Restart != RestartAlways || s.Backoff.Initial != time.Second || s.MaxRestarts != -1 || s.Window != 5*time.Minute ||
		s.StopGrace != 3*time.Second || s.Spec.Sandbox == nil || s.Spec.Limits.MemoryBytes != 1<<20 || s.Spec.EnvPolicy == nil {
		t.Errorf("parsed %+v", s)
	}
	for _, c := range []struct{ file, want string }{
		{`{}`, "no services"},
		{`{"services":[{"name":"a","argv":["x"],"cwd":"/","bogus":1}]}`, "unknown field \"bogus\""},
		{`{"services":[{"name":"a b","argv":["x"],"cwd":"/"}]}`, "services[0] (a b): name"},
		{`{"services":[{"name":"a","argv":[],"cwd":"/"}]}`, "argv: empty"},
		{`{"services":[{"name":"a","argv":["x"],"cwd":"rel"}]}`, "cwd: \"rel\""},
		{`{"services":[{"name":"a","argv":["x"],"cwd":"/","window":"soon"}]}`, "window: \"soon\""},
		{`{"services":[{"name":"a","argv":["x"],"cwd":"/","maxRestarts":0}]}`, "maxRestarts: 0"},
		{`{"services":[{"name":"a","argv":["x"],"cwd":"/","sandbox":"tight"}]}`, "sandbox: \"tight\""},
		{`{"services":[{"name":"a","argv":["x"],"cwd":"/","network":true}]}`, "network: only meaningful"},
		{`{"services":[{"name":"a","argv":["x"],"cwd":"/"},{"name":"a","argv":["y"],"cwd":"/"}]}`, "used twice"},
	} {
		if _, err := ParseServices([]byte(c.file)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.file, err, c.want)
		}
	}
}
