package actors

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/runtimed/runtimed/actors/contain"
	"github.com/runtimed/runtimed/actors/osproc"
)

// Attack tests of subreaper mode (forced, although this host has
// cgroups): a tree whose descendants leave it every way a shell can
// (setsid, a double fork, both, a grandchild ignoring SIGTERM) is ended
// by process/terminate, by the detach TTL and by the supervisor's
// shutdown; afterwards every pid is gone (kill(pid, 0) is ESRCH: neither
// running nor a zombie) and this process has no zombie child.

// escapeScript starts four descendants that each append their pid to
// pids, then reports the root's own pid and sleeps. The setsid'd orphan
// also writes its pid to pids.setsid.
func escapeScript(pids string) string {
	// The subshell leaves only once the grandchild has left the session,
	// so the orphan carries no session of the tree when it is adopted.
	return `(setsid sh -c 'echo $$ >> ` + pids + `; echo $$ > ` + pids + `.tmp; mv ` + pids + `.tmp ` + pids + `.setsid; exec sleep 1000' &
while [ ! -e ` + pids + `.setsid ]; do sleep 0.01; done)
(sh -c 'echo $$ >> ` + pids + `; exec sleep 1000' &)
setsid sh -c 'trap "" TERM; echo $$ >> ` + pids + `; exec sleep 1000' >/dev/null 2>&1 &
sh -c 'echo $$ >> ` + pids + `; exec sleep 1000' &
echo $$ >> ` + pids + `
exec sleep 1000`
}

func subreaperSupervisor(t *testing.T, ttl time.Duration) (*Supervisor, *contain.Manager) {
	t.Helper()
	m := contain.NewManager(contain.ModeSubreaper)
	if m.Mode() != contain.ModeSubreaper {
		t.Fatalf("subreaper mode unavailable here: %s", m.Mode())
	}
	sup := NewSupervisor(Config{
		Proc: ProcConfig{RetainBytes: 1 << 20, RetainChunks: 1000, ClosedRetention: time.Minute,
			DrainAfterTerminate: 50 * time.Millisecond, ShutdownGrace: 200 * time.Millisecond},
		DetachTTL: ttl,
		Isolation: osproc.Isolation{Contain: m},
		Logger:    zaptest.NewLogger(t),
	})
	stopAtCleanup(t, sup, func() { _ = m.Close() })
	return sup, m
}

// escapees waits for the five pids of escapeScript and checks that the
// two orphans really were adopted by this process (the control: without
// the subreaper they would belong to init and the test would prove
// nothing about them).
func escapees(t *testing.T, path string) []int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var pids []int
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(path)
		pids = pids[:0]
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				pids = append(pids, n)
			}
		}
		if len(pids) == 5 {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	if len(pids) != 5 {
		t.Fatalf("%d pids in %s, want 5", len(pids), path)
	}
	t.Cleanup(func() {
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	})
	adopted := 0
	for _, p := range pids {
		if ppidOf(p) == os.Getpid() {
			adopted++
		}
	}
	if adopted != 3 { // the root and the two double-forked orphans
		t.Fatalf("%d processes of the tree are children of this process, want 3 (root and two orphans)", adopted)
	}
	return pids
}

func ppidOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// allGone fails unless every pid is ESRCH within the bound and this
// process has no zombie child left.
func allGone(t *testing.T, how string, pids []int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range pids {
		for !errors.Is(syscall.Kill(p, 0), syscall.ESRCH) {
			if time.Now().After(deadline) {
				t.Errorf("%s: pid %d is still there (%s)", how, p, statState(p))
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	for time.Now().Before(deadline) && len(zombieKids()) > 0 {
		time.Sleep(2 * time.Millisecond)
	}
	if z := zombieKids(); len(z) > 0 {
		t.Errorf("%s: zombie children of the test process: %v", how, z)
	}
}

func statState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "no /proc entry"
	}
	return "state " + strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))[0]
}

func zombieKids() []int {
	tasks, _ := os.ReadDir("/proc/self/task")
	var out []int
	for _, tk := range tasks {
		b, _ := os.ReadFile("/proc/self/task/" + tk.Name() + "/children")
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil && strings.HasPrefix(statState(n), "state Z") {
				out = append(out, n)
			}
		}
	}
	return out
}

func startEscapes(t *testing.T, c *rawClient, id string) []int {
	pids, _ := startEscapesSetsid(t, c, id)
	return pids
}

// startEscapesSetsid also returns the pid of the orphan that called setsid.
func startEscapesSetsid(t *testing.T, c *rawClient, id string) ([]int, int) {
	t.Helper()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pids")
	mustOK(t, c.call("process/start", map[string]any{"processId": id, "argv": []string{"/bin/sh", "-c", escapeScript(pidFile)}, "cwd": dir}))
	pids := escapees(t, pidFile)
	return pids, waitPidFile(t, pidFile+".setsid")
}

func terminate(t *testing.T, c *rawClient, id string) {
	t.Helper()
	mustOK(t, c.call("process/terminate", map[string]any{"processId": id}))
	c.waitNote(func(m map[string]any) bool { return m["method"] == "process/closed" && params(m)["processId"] == id })
}

func allAlive(t *testing.T, how string, pids []int) {
	t.Helper()
	for _, p := range pids {
		if s := statState(p); s == "no /proc entry" || s == "state Z" {
			t.Errorf("%s: pid %d was killed (%s)", how, p, s)
		}
	}
}

// TestSubreaperConcurrentTrees: with trees alive side by side, ending one
// kills its own descendants and none of the other's. An orphan that
// called setsid carries no trace of its tree; it is attributed by start
// time: terminating the older tree A (B started after A's orphans) is
// exact; terminating the younger tree C while B lives leaves C's setsid'd
// orphan alive (it may be B's), the documented residual, until B ends too.
func TestSubreaperConcurrentTrees(t *testing.T) {
	sup, _ := subreaperSupervisor(t, time.Minute)
	c := startConn(t, sup, true)
	// Start times have a granularity of 10 ms (USER_HZ): each tree starts
	// in a later tick than the previous tree's descendants.
	tick := func() { time.Sleep(25 * time.Millisecond) }
	a := startEscapes(t, c, "a")
	tick()
	b := startEscapes(t, c, "b")
	tick()
	terminate(t, c, "a")
	allGone(t, "terminate of the older tree", a)
	allAlive(t, "terminate of another tree", b)
	cPids, cSetsid := startEscapesSetsid(t, c, "c")
	terminate(t, c, "c")
	var rest []int
	for _, p := range cPids {
		if p != cSetsid {
			rest = append(rest, p)
		}
	}
	allGone(t, "terminate of the younger tree", rest)
	allAlive(t, "terminate of the younger tree (residual: its setsid'd orphan may be the older tree's)", append(b, cSetsid))
	terminate(t, c, "b")
	allGone(t, "terminate of the last tree that could own the orphan", append(b, cSetsid))
}

func TestSubreaperTerminate(t *testing.T) {
	sup, _ := subreaperSupervisor(t, time.Minute)
	c := startConn(t, sup, true)
	pids := startEscapes(t, c, "tree")
	mustOK(t, c.call("process/terminate", map[string]any{"processId": "tree"}))
	c.waitNote(func(m map[string]any) bool {
		return m["method"] == "process/closed" && params(m)["processId"] == "tree"
	})
	allGone(t, "process/terminate", pids)
}

func TestSubreaperDetachTTL(t *testing.T) {
	sup, _ := subreaperSupervisor(t, 100*time.Millisecond)
	c := startConn(t, sup, true)
	pids := startEscapes(t, c, "tree")
	c.tr.Close() // the connection drops; the session expires after the TTL
	allGone(t, "detach TTL expiry", pids)
}

func TestSubreaperShutdown(t *testing.T) {
	sup, m := subreaperSupervisor(t, time.Minute)
	c := startConn(t, sup, true)
	pids := startEscapes(t, c, "a")
	pids = append(pids, startEscapes(t, c, "b")...)
	sup.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sup.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	_ = m.Close()
	allGone(t, "shutdown", pids)
}
