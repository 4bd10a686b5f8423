package runtime

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/runtimed/runtimed/actors/clock/clocktest"
)

// mkfifo makes a fifo in dir.
func mkfifo(t *testing.T, dir string) string {
	t.Helper()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	return fifo
}

// release opens the fifo at path for writing (which waits for the
// process to open it for reading: the handshake) and writes a line,
// bounded.
func release(t *testing.T, path string) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err == nil {
			_, err = f.WriteString("go\n")
			_ = f.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the process never opened the fifo")
	}
}

// backoffAfter reads the next backoff event and the delay the supervisor
// asked for it.
func backoffAfter(t *testing.T, events <-chan ServiceEvent, clk *clocktest.Clock) (ServiceEvent, time.Duration) {
	t.Helper()
	ev := nextServiceEvent(t, events, ServiceBackoff)
	return ev, asked(t, clk)
}

// TestSupervisorBackoffResetsAfterHealthyRun: a service that flapped (its
// delay built up to 4 s) and then ran for just under ResetAfter keeps the
// built-up delay; once it ran for ResetAfter, its next restart waits the
// initial delay again. Real processes, fake clock: each long run waits on
// a fifo the test opens once the clock has moved.
func TestSupervisorBackoffResetsAfterHealthyRun(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		clk := clocktest.New()
		dir := t.TempDir()
		fifo := mkfifo(t, dir)
		count := filepath.Join(dir, "count")
		// Runs 1 and 2 fail at once; the later ones wait for the fifo, then fail.
		spec := sh(t, `n=$(( $(cat `+count+` 2>/dev/null || echo 0) + 1 )); echo $n > `+count+`
if [ $n -ge 3 ]; then read x < `+fifo+`; fi
exit 1`)
		const resetAfter = time.Minute
		_, events := supervise(t, b, &SupervisorOptions{Clock: clk, Rand: func() float64 { return 0.5 }}, // no jitter
			Service{Name: "flappy", Spec: spec, Restart: RestartOnFailure, MaxRestarts: -1,
				Backoff: Backoff{Initial: time.Second, Max: 30 * time.Second, Jitter: 0.1, ResetAfter: resetAfter}})
		// The flapping: 1 s, then 2 s.
		for _, want := range []time.Duration{time.Second, 2 * time.Second} {
			if _, d := backoffAfter(t, events, clk); d != want {
				t.Fatalf("flapping: backoff %v, want %v", d, want)
			}
			clk.Advance(want)
		}
		// Run 3 lasts just under ResetAfter: the delay stays built up (4 s).
		if ev := nextServiceEvent(t, events, ServiceRunning); ev.ProcessID != "flappy#3" {
			t.Fatalf("run 3: %+v", ev.ServiceStatus)
		}
		clk.Advance(resetAfter - time.Millisecond)
		release(t, fifo)
		if ev, d := backoffAfter(t, events, clk); d != 4*time.Second || ev.LastExit == nil || ev.LastExit.Code != 1 {
			t.Fatalf("after a run shorter than ResetAfter: backoff %v (%+v), want 4s", d, ev.ServiceStatus)
		}
		clk.Advance(4 * time.Second)
		// Run 4 lasts ResetAfter: the next restart waits Initial again.
		if ev := nextServiceEvent(t, events, ServiceRunning); ev.ProcessID != "flappy#4" {
			t.Fatalf("run 4: %+v", ev.ServiceStatus)
		}
		clk.Advance(resetAfter)
		release(t, fifo)
		if _, d := backoffAfter(t, events, clk); d != time.Second {
			t.Fatalf("after a healthy run (ResetAfter): backoff %v, want the initial 1s", d)
		}
		// And it builds up again from there.
		clk.Advance(time.Second)
		nextServiceEvent(t, events, ServiceRunning)
		release(t, fifo)
		if _, d := backoffAfter(t, events, clk); d != 2*time.Second {
			t.Fatalf("the flap after the reset: backoff %v, want 2s", d)
		}
	})
}

// TestSupervisorFailedStartsAfterLongRunKeepBackingOff: a service that
// ran for long and then cannot even start (its directory is gone) backs
// off 1 s, 2 s, 4 s: a failed start did not run, so the long run before
// it does not reset the delay every time.
func TestSupervisorFailedStartsAfterLongRunKeepBackingOff(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		clk := clocktest.New()
		dir := t.TempDir()
		fifo := mkfifo(t, dir)
		work := filepath.Join(dir, "work")
		if err := os.Mkdir(work, 0o700); err != nil {
			t.Fatal(err)
		}
		spec := sh(t, "read x < "+fifo+"; exit 1")
		spec.Dir = work
		_, events := supervise(t, b, &SupervisorOptions{Clock: clk, Rand: func() float64 { return 0.5 }},
			Service{Name: "gone", Spec: spec, MaxRestarts: -1, Backoff: Backoff{Initial: time.Second, Max: 30 * time.Second, ResetAfter: 10 * time.Second}})
		nextServiceEvent(t, events, ServiceRunning)
		clk.Advance(time.Hour)
		if err := os.Remove(work); err != nil {
			t.Fatal(err)
		}
		release(t, fifo)
		for _, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
			ev, d := backoffAfter(t, events, clk)
			if d != want {
				t.Fatalf("backoff %v, want %v (%+v)", d, want, ev.ServiceStatus)
			}
			if want > time.Second && (ev.Reason != ReasonStartFailed || ev.LastError == nil) {
				t.Fatalf("not a failed start: %+v", ev.ServiceStatus)
			}
			clk.Advance(d)
		}
	})
}
