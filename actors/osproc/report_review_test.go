package osproc

import (
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runtimed/runtimed/actors/contain"
	"github.com/runtimed/runtimed/actors/sandbox"
)

// Adversarial review of a start on a prepared sandbox as osproc sees it
// (Wait on the init's ExitReport, the init reaped in the background,
// Release waiting for it): statuses the same as a fresh start's, a killed
// init, a Release while Wait is blocked.

// reviewIso is a namespaces-level host with the pid namespace isolated
// (where starts are prepared) and a cgroup manager; fresh is the same host
// with preparation off.
func reviewIso(t *testing.T) (prepared, fresh Isolation) {
	t.Helper()
	h, err := sandbox.Probe(os.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	if !h.Namespaces || !h.Enforces() {
		t.Skipf("no namespaces here: %s", h.NamespacesMissing)
	}
	h.Level, h.PidNamespace = sandbox.LevelNamespaces, sandbox.PidIsolate
	f := *h
	f.NoPrepare = true
	m := contain.NewManager(contain.ModeCgroup2)
	return Isolation{Host: h, Contain: m}, Isolation{Host: &f, Contain: m}
}

func reviewSpec(t *testing.T, iso Isolation, script string) Spec {
	t.Helper()
	p := &sandbox.Policy{RestrictFS: true, Rules: []sandbox.Rule{{Path: "/", Access: sandbox.Read}}}
	if err := iso.Host.Check(p); err != nil {
		t.Skipf("policy: %v", err)
	}
	return Spec{Argv: []string{"/bin/sh", "-c", script}, Dir: "/", Env: []string{"PATH=/usr/bin:/bin"}, Sandbox: p}
}

// startReviewed starts script; onPrepared: retried (a bounded number of
// times, the pool prepares in the background after a start) until the
// start ran on a prepared sandbox (the host's count of prepared starts
// went up; fresh namespaced starts report their exit too).
func startReviewed(t *testing.T, iso Isolation, script string, onPrepared bool) *osSession {
	t.Helper()
	spec := reviewSpec(t, iso, script)
	for i := 0; i < 50; i++ {
		before, _, _ := iso.Host.PreparedStats()
		s, err := Start(spec, iso)
		if err != nil {
			t.Fatal(err)
		}
		ss := s.(*osSession)
		after, _, _ := iso.Host.PreparedStats()
		if prepared := after > before; !onPrepared || prepared {
			if onPrepared != prepared {
				Discard(s)
				t.Fatalf("a start meant to be fresh ran on a prepared sandbox")
			}
			if ss.report == nil {
				Discard(s)
				t.Fatalf("a namespaced start without a report of its exit")
			}
			return ss
		}
		Discard(s)
		time.Sleep(20 * time.Millisecond) // the preparation runs after a start
	}
	t.Fatal("no start ran on a prepared sandbox")
	return nil
}

// waitBounded runs s.Wait with a bound.
func waitBounded(t *testing.T, s *osSession, d time.Duration) int {
	t.Helper()
	done := make(chan int, 1)
	go func() { done <- s.Wait() }()
	select {
	case code := <-done:
		return code
	case <-time.After(d):
		_ = syscall.Kill(s.pid, syscall.SIGKILL)
		_ = s.group.Kill()
		<-done
		t.Fatalf("Wait did not return within %v", d)
		return -1
	}
}

// waitReady reads the session's first output until it holds "ready".
func waitReady(t *testing.T, s *osSession) {
	t.Helper()
	_ = s.outputs[0].SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 64)
	n, err := s.outputs[0].Read(buf)
	_ = s.outputs[0].SetReadDeadline(time.Time{})
	if err != nil || !strings.Contains(string(buf[:n]), "ready") {
		t.Fatalf("ready: %q %v", buf[:n], err)
	}
}

func finish(s *osSession) {
	s.CloseOutputs()
	if s.HasStdin() {
		_ = s.CloseStdin()
	}
	s.Release()
}

// TestReviewReportStatusesAsFresh: the status Wait returns on a prepared
// start is the one a fresh start's Wait returns: exits 0 and 3, a death by
// signal of the command, SIGTERM from the daemon forwarded by the init and
// SIGKILL of the tree from the daemon (Signal), each several times (the
// kill races the init's report).
func TestReviewReportStatusesAsFresh(t *testing.T) {
	prep, fresh := reviewIso(t)
	cases := []struct {
		name, script string
		sig          syscall.Signal // sent once the command said ready
	}{
		{"exit0", `exit 0`, 0},
		{"exit3", `exit 3`, 0},
		{"self-kill-9", `kill -9 $$`, 0},
		{"sigterm", `echo ready; while :; do sleep 0.05; done`, syscall.SIGTERM},
		{"sigkill", `echo ready; while :; do sleep 0.05; done`, syscall.SIGKILL},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			run := func(iso Isolation, onPrepared bool) int {
				s := startReviewed(t, iso, c.script, onPrepared)
				defer finish(s)
				if c.sig != 0 {
					waitReady(t, s)
					if err := s.Signal(c.sig); err != nil {
						t.Fatal(err)
					}
				}
				return waitBounded(t, s, 15*time.Second)
			}
			want := run(fresh, false)
			n := 1
			if c.sig == syscall.SIGKILL {
				n = 20
			}
			got := map[int]int{}
			for i := 0; i < n; i++ {
				got[run(prep, true)]++
			}
			if len(got) != 1 || got[want] != n {
				wc, ws := SplitWait(want)
				var desc []string
				for st, k := range got {
					gc, gs := SplitWait(st)
					desc = append(desc, fmt.Sprintf("%dx exitCode %d exitSignal %d", k, gc, gs))
				}
				t.Errorf("prepared: %s; fresh: exitCode %d exitSignal %d", strings.Join(desc, ", "), wc, ws)
			}
		})
	}
}

// TestReviewReportInitKilled: the init of a prepared start killed by
// SIGKILL after "started" (no report): Wait falls back to reaping it and
// returns its death by SIGKILL, as a fresh start's Wait does, without a
// hang; the command dies with its pid namespace.
func TestReviewReportInitKilled(t *testing.T) {
	prep, fresh := reviewIso(t)
	for _, c := range []struct {
		iso        Isolation
		onPrepared bool
	}{{fresh, false}, {prep, true}} {
		s := startReviewed(t, c.iso, `echo ready; exec sleep 30`, c.onPrepared)
		waitReady(t, s)
		if err := syscall.Kill(s.pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		code := waitBounded(t, s, 10*time.Second)
		// The command's stdout reaches EOF: it died with the namespace.
		_ = s.outputs[0].SetReadDeadline(time.Now().Add(10 * time.Second))
		rest, err := io.ReadAll(s.outputs[0])
		finish(s)
		if code != SignaledBy(int(syscall.SIGKILL)) {
			c1, s1 := SplitWait(code)
			t.Errorf("prepared %v: the killed init's status: exitCode %d exitSignal %d, want SIGKILL", c.onPrepared, c1, s1)
		}
		if err != nil {
			t.Errorf("prepared %v: the command outlived its init: %q %v", c.onPrepared, rest, err)
		}
	}
}

// TestReviewReportReleaseWhileWaiting: Release while Wait is still blocked
// (the owner gives up on a running command): Release returns within its
// bound (1 s and the group's kill), the tree is killed, the init is
// reaped, and Wait then returns what it returns for a fresh start (the
// init's death by SIGKILL).
func TestReviewReportReleaseWhileWaiting(t *testing.T) {
	prep, fresh := reviewIso(t)
	run := func(iso Isolation, onPrepared bool) (int, time.Duration) {
		s := startReviewed(t, iso, `echo ready; exec sleep 30`, onPrepared)
		waitReady(t, s)
		done := make(chan int, 1)
		go func() { done <- s.Wait() }()
		t0 := time.Now()
		s.CloseOutputs()
		s.Release()
		took := time.Since(t0)
		if took > 3*time.Second {
			t.Errorf("prepared %v: Release took %v", onPrepared, took)
		}
		var code int
		select {
		case code = <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(s.pid, syscall.SIGKILL)
			<-done
			t.Fatalf("prepared %v: Wait still blocked 10 s after Release: the tree was not killed", onPrepared)
		}
		// The init reaped (by Wait, or its background goroutine): gone.
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if err := syscall.Kill(s.pid, 0); err == syscall.ESRCH {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("prepared %v: the init %d is still there (unreaped?)", onPrepared, s.pid)
			}
		}
		return code, took
	}
	want, wtook := run(fresh, false)
	got, gtook := run(prep, true)
	wc, ws := SplitWait(want)
	gc, gs := SplitWait(got)
	t.Logf("Release took %v fresh, %v prepared", wtook, gtook)
	if got != want {
		t.Errorf("Wait after Release: prepared exitCode %d exitSignal %d, fresh exitCode %d exitSignal %d", gc, gs, wc, ws)
	}
}

// TestReviewReportDescendantsEnd: a prepared start's command exits 0
// leaving a descendant (in a session of its own) that holds its stdout:
// Wait returns the command's 0 from the report, and the descendant dies
// with the init (stdout reaches EOF, no process is left in the group), as
// on a fresh start.
func TestReviewReportDescendantsEnd(t *testing.T) {
	prep, fresh := reviewIso(t)
	for _, c := range []struct {
		iso        Isolation
		onPrepared bool
	}{{fresh, false}, {prep, true}} {
		s := startReviewed(t, c.iso, `setsid sleep 300 & echo started; exit 0`, c.onPrepared)
		code := waitBounded(t, s, 10*time.Second)
		_ = s.outputs[0].SetReadDeadline(time.Now().Add(10 * time.Second))
		out, err := io.ReadAll(s.outputs[0])
		empty := false
		for deadline := time.Now().Add(5 * time.Second); !empty && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			empty = s.group.Empty()
		}
		finish(s)
		if code != 0 || string(out) != "started\n" || err != nil {
			t.Errorf("prepared %v: exit %d, output %q %v (EOF not reached: the descendant lives?)", c.onPrepared, code, out, err)
		}
		if !empty {
			t.Errorf("prepared %v: the tree's group is not empty after the command and its init ended", c.onPrepared)
		}
	}
}

// TestSandboxStopStopsTheCommand: SIGSTOP through Session.Signal stops the
// sandboxed command (not only its init), fresh and prepared, and SIGCONT
// lets it go on: the command's state on the host is 'T', then not.
func TestSandboxStopStopsTheCommand(t *testing.T) {
	prepared, fresh := reviewIso(t)
	h := *prepared.Host
	h.NoDirect = true
	viaInit := Isolation{Host: &h, Contain: prepared.Contain}
	for _, c := range []struct {
		name       string
		iso        Isolation
		onPrepared bool
		direct     bool
	}{{"fresh", fresh, false, false}, {"prepared", viaInit, true, false}, {"prepared_direct", prepared, true, true}} {
		t.Run(c.name, func(t *testing.T) {
			// One process (a shell forking sleeps would be seen in its
			// vfork's wait, state D, while the stopped group holds it).
			s := startReviewed(t, c.iso, `echo ready; exec sleep 1000`, c.onPrepared)
			defer finish(s)
			waitReady(t, s)
			if s.report.Direct() != c.direct {
				t.Fatalf("direct start %v, want %v", s.report.Direct(), c.direct)
			}
			cmd := s.pid // a direct start's command is the daemon's child
			if !c.direct {
				cmd = childOf(t, s.pid)
			}
			if err := s.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			waitState(t, cmd, func(st string) bool { return st == "T" }, "stopped")
			if st := procState(s.pid); !c.direct && st == "T" {
				t.Errorf("the init %d stopped too", s.pid)
			}
			if err := s.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			waitState(t, cmd, func(st string) bool { return st != "T" }, "running again")
		})
	}
}

// childOf is pid's one child on the host (the sandbox init's command,
// forked by one of its threads: each thread lists its own children).
func childOf(t *testing.T, pid int) int {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	var all string
	for _, task := range tasks {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
		all += string(b)
	}
	var child int
	if _, err := fmt.Sscan(all, &child); err != nil {
		t.Fatalf("children of %d: %q", pid, all)
	}
	return child
}

// procState is the state letter of pid in /proc/pid/stat ("" if gone).
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2 : i+3]
	}
	return ""
}

// waitState waits (bounded: the kernel signals no state change) until
// pid's state satisfies ok.
func waitState(t *testing.T, pid int, ok func(string) bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for st := procState(pid); !ok(st); st = procState(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("command %d not %s: state %q", pid, what, st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
