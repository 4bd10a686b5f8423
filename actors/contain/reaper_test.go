package contain

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func subreaperManager(t *testing.T) *Manager {
	t.Helper()
	m := NewManager(ModeSubreaper)
	if m.Mode() != ModeSubreaper {
		t.Fatalf("subreaper mode unavailable: got %s", m.Mode())
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// gone waits (bounded) until kill(pid, 0) fails with ESRCH: not running
// and not a zombie either.
func gone(t *testing.T, pid int, within time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// zombieChildren lists the children of this process that are zombies.
// noZombiesWithin waits (bounded) until this process has no zombie child
// and returns those left: a member killed with the tree may still be
// waiting for the reaper's next sweep (SIGCHLD, or 250 ms at most).
func noZombiesWithin(d time.Duration) []int {
	deadline := time.Now().Add(d)
	for {
		z := zombieChildren()
		if len(z) == 0 || time.Now().After(deadline) {
			return z
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func zombieChildren() []int {
	var out []int
	for _, pid := range childrenOf("self") {
		if st, ok := readStat(pid); ok && st.state == 'Z' {
			out = append(out, pid)
		}
	}
	return out
}

// readPids reads the pids appended (one a line) to path so far.
func readPids(path string) []int {
	b, _ := os.ReadFile(path)
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// TestSubreaperNeverStealsAnExitCode: while orphans (setsid'd and
// double-forked grandchildren) are adopted and reaped, many short direct
// children exit concurrently with distinct codes; each Wait gets its own
// code (a stolen status shows as an error "no child processes" or a
// wrong code). Afterwards every orphan is gone and no zombie is left.
// Run it with -count=50 under -race.
func TestSubreaperNeverStealsAnExitCode(t *testing.T) {
	subreaperManager(t)
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "orphans")
	const orphans, direct = 12, 60
	var wg sync.WaitGroup
	errs := make(chan error, orphans+direct)
	wg.Go(func() {
		for i := 0; i < orphans; i++ {
			// The subshell exits at once: the grandchildren are orphans
			// and become this process's children; they exit a little
			// later, interleaved with the direct children below.
			script := fmt.Sprintf(`(setsid sh -c 'echo $$ >> %[1]s; sleep 0.0%[2]d' &) ; (sh -c 'echo $$ >> %[1]s; sleep 0.0%[3]d' &)`, pidFile, i%10, (i+5)%10)
			if err := exec.Command("/bin/sh", "-c", script).Run(); err != nil {
				errs <- fmt.Errorf("orphan maker %d: %w", i, err)
			}
		}
	})
	for w := 0; w < 4; w++ {
		wg.Go(func() {
			for i := w; i < direct; i += 4 {
				code := 1 + i
				err := exec.Command("/bin/sh", "-c", "exit "+strconv.Itoa(code)).Run()
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != code {
					errs <- fmt.Errorf("direct child %d: want exit code %d, got %v", i, code, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var pids []int
	deadline := time.Now().Add(10 * time.Second)
	for len(pids) < 2*orphans && time.Now().Before(deadline) {
		pids = readPids(pidFile)
		time.Sleep(2 * time.Millisecond)
	}
	if len(pids) != 2*orphans {
		t.Fatalf("%d orphan pids recorded, want %d", len(pids), 2*orphans)
	}
	for _, pid := range pids {
		if !gone(t, pid, 10*time.Second) {
			t.Errorf("orphan %d is still there (running or a zombie)", pid)
		}
	}
	if z := noZombiesWithin(5 * time.Second); len(z) > 0 {
		t.Errorf("zombie children left: %v", z)
	}
}

// waitPids waits (bounded) until path holds n pids.
func waitPids(t *testing.T, path string, n int) []int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if p := readPids(path); len(p) >= n {
			return p
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("%s: fewer than %d pids", path, n)
	return nil
}

// TestSubreaperKillsTheTree: a tree (its root started by os/exec in a
// session of its own, as osproc.Start does) leaves a setsid'd orphan, a
// double-forked orphan and a grandchild that ignores SIGTERM. The
// orphans really are adopted by this process (the control), and
// Group.Kill ends every one of them; no zombie is left, and the root's
// own exit status still reaches its Wait.
func TestSubreaperKillsTheTree(t *testing.T) {
	m := subreaperManager(t)
	g, err := m.NewGroup(Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Release()
	pidFile := filepath.Join(t.TempDir(), "pids")
	script := `(setsid sh -c 'echo $$ >> ` + pidFile + `; exec sleep 1000' &)
(sh -c 'echo $$ >> ` + pidFile + `; exec sleep 1000' &)
sh -c 'trap "" TERM; echo $$ >> ` + pidFile + `; while :; do sleep 1; done' &
exec sleep 1000`
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	if err := g.Started(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	pids := waitPids(t, pidFile, 3)
	t.Cleanup(func() {
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	})
	adopted := 0
	for _, p := range pids {
		if st, ok := readStat(p); ok && st.ppid == os.Getpid() {
			adopted++
		}
	}
	if adopted != 2 {
		t.Fatalf("%d of the 2 orphans were adopted by this process", adopted)
	}
	if !g.Contained() {
		t.Fatal("a registered subreaper tree is not Contained")
	}
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("root: want killed by SIGKILL, got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the root was not killed")
	}
	for _, p := range append(pids, cmd.Process.Pid) {
		if !gone(t, p, 10*time.Second) {
			t.Errorf("%d survived the tree's Kill", p)
		}
	}
	if z := noZombiesWithin(5 * time.Second); len(z) > 0 {
		t.Errorf("zombie children left: %v", z)
	}
}
