package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// directHost is a prepared host and a v2 cgroup for direct starts (a
// direct start needs the tree's cgroup: directOK).
func directHost(t *testing.T) (*Host, int) {
	t.Helper()
	h := preparedHost(t)
	root := cgroup2Root()
	if root == "" {
		t.Skip("no cgroup v2 hierarchy mounted")
	}
	cg, err := os.MkdirTemp(root, "runtimed-direct-")
	if err != nil {
		t.Skipf("cannot make a cgroup: %v", err)
	}
	t.Cleanup(func() { _ = os.Remove(cg) })
	fd, err := unix.Open(cg, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return h, fd
}

// startDirectRun is startRecycled in the cgroup cgfd (a direct start,
// where the sandbox is prepared); the report is abandoned at the test's end.
func startDirectRun(t *testing.T, h *Host, cgfd int, plan Plan, dir string) *recycledRun {
	t.Helper()
	r := startRecycledWith(t, h, plan, dir, &syscall.SysProcAttr{Setsid: true, UseCgroupFD: true, CgroupFD: cgfd})
	t.Cleanup(r.report.Abandon)
	return r
}

// waitReport waits (bounded) for r's report of the command's exit.
func waitReport(t *testing.T, r *recycledRun) int {
	t.Helper()
	done := make(chan int, 1)
	go func() {
		code, ok := r.report.Wait()
		if !ok {
			code = -1
		}
		done <- code
	}()
	select {
	case c := <-done:
		return c
	case <-time.After(20 * time.Second):
		t.Fatal("no report of the command's exit")
		return 0
	}
}

// directSetup is a direct host and cgroup, a workspace, Codex's
// workspace-write policy for it and a sandbox primed for that policy.
func directSetup(t *testing.T) (*Host, int, string, *Policy) {
	t.Helper()
	h, cgfd := directHost(t)
	ws := t.TempDir()
	p := codexWorkspaceWrite(ws)
	primeDirect(t, h, p, ws)
	return h, cgfd, ws, p
}

// primeDirect primes a sandbox for p and checks that the next start in
// the cgroup is direct (the daemon's own child, outside the namespace).
func primeDirect(t *testing.T, h *Host, p *Policy, ws string) {
	t.Helper()
	primePrepared(t, h, Plan{Policy: p}, ws)
	if h.prepared.ready[0].direct == nil {
		t.Fatal("the prepared sandbox has no direct thread")
	}
}

// TestDirectStart: a start on a prepared sandbox with the tree's cgroup
// is forked by the daemon itself. The command is the daemon's child (its
// parent is outside its pid namespace: getppid is 0), its exit status is
// its own, and it runs confined exactly as one the init forks: the tree
// read-only, the workspace writable, its own /proc with only its tree,
// in the cgroup given, in an IPC namespace that is not the daemon's.
func TestDirectStart(t *testing.T) {
	h, cgfd, ws, p := directSetup(t)
	before := h.PreparedDirect()
	script := `echo ppid=$PPID; grep '^0::' /proc/self/cgroup; ls /proc | grep -c '^[0-9]'; ` +
		`touch /etc/runtimed-direct 2>/dev/null && echo etc-writable; echo w > direct.txt && echo ws-ok; ` +
		`readlink /proc/self/ns/ipc; read x; exit 7`
	r := startDirectRun(t, h, cgfd, shPlan(p, script), ws)
	if got := h.PreparedDirect() - before; got != 1 {
		t.Fatalf("%d direct starts, want 1", got)
	}
	// While it waits on stdin: the daemon's child, on the host.
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", r.proc.Pid))
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
	if ppid, _ := strconv.Atoi(fields[1]); ppid != os.Getpid() {
		t.Errorf("the command's parent is %d, want the daemon %d", ppid, os.Getpid())
	}
	if l := r.line(t); l != "ppid=0" {
		t.Errorf("inside: %q, want ppid=0 (a parent outside the pid namespace)", l)
	}
	if l := r.line(t); l != "0::/" {
		t.Errorf("cgroup: %q, want 0::/ (its cgroup namespace rooted at the tree's cgroup)", l)
	}
	// /proc: its tree (sh, ls, grep), not the host's processes.
	if n, _ := strconv.Atoi(r.line(t)); n < 1 || n > 4 {
		t.Errorf("/proc lists %d processes, want the command's tree only", n)
	}
	if l := r.line(t); l != "ws-ok" {
		t.Errorf("after the writes: %q, want ws-ok alone (/etc read-only, the workspace writable)", l)
	}
	ipc := r.line(t)
	if own, _ := os.Readlink("/proc/self/ns/ipc"); ipc == own || !strings.HasPrefix(ipc, "ipc:[") {
		t.Errorf("the command's IPC namespace %q, the daemon's %q", ipc, own)
	}
	if _, err := os.Stat("/etc/runtimed-direct"); err == nil {
		os.Remove("/etc/runtimed-direct")
		t.Error("the command created /etc/runtimed-direct")
	}
	r.stdin.Close()
	if code := waitReport(t, r); code != 7 {
		t.Errorf("exit %d, want 7", code)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "direct.txt")); err != nil || string(b) != "w\n" {
		t.Errorf("workspace file: %q %v", b, err)
	}
}

// TestDirectTreeEndedAtReport: when a direct start's report says the
// command exited, what it left running has been killed (the tree outlived
// it: the report waits for the init's clean-up), as on the init's starts
// (TestReportAfterTreeEnded).
func TestDirectTreeEndedAtReport(t *testing.T) {
	h, cgfd, ws, p := directSetup(t)
	before := h.PreparedDirect()
	marker := fmt.Sprintf("1000.%d", time.Now().UnixNano()%1_000_000)
	r := startDirectRun(t, h, cgfd, shPlan(p, "sleep "+marker+" & echo started; exit 3"), ws)
	if h.PreparedDirect()-before != 1 {
		t.Fatal("not a direct start")
	}
	if l := r.line(t); l != "started" {
		t.Fatalf("%q", l)
	}
	// Right as the report is in, in the same goroutine: a read of stdout
	// that does not wait finds it at EOF (the sleep held it).
	rc, err := r.outR.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		code int
		ok   bool
		n    int
		rerr error
	}
	done := make(chan result, 1)
	go func() {
		var res result
		res.code, res.ok = r.report.Wait()
		_ = rc.Control(func(fd uintptr) {
			var b [16]byte
			res.n, res.rerr = unix.Read(int(fd), b[:])
		})
		done <- res
	}()
	var res result
	select {
	case res = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("no report")
	}
	if !res.ok || res.code != 3 {
		t.Fatalf("exit %d %v, want 3", res.code, res.ok)
	}
	if res.n != 0 || res.rerr != nil {
		t.Errorf("stdout not at EOF as the report came in: read %d, %v (the tree still held it)", res.n, res.rerr)
	}
	if pids := pidsWithArg(t, marker); len(pids) != 0 {
		t.Errorf("the command's background sleep still runs after the report: %v", pids)
	}
}

// TestDirectRecycledClean: the next direct start on the same sandbox
// finds nothing of the last one: not its /dev/shm files, not its System V
// objects (a new IPC namespace), not its background processes; and a
// signal sent for the last command after its end reaches nobody.
func TestDirectRecycledClean(t *testing.T) {
	h, cgfd, ws, p := directSetup(t)
	before := h.PreparedDirect()
	first := startDirectRun(t, h, cgfd, shPlan(p, `echo x > /dev/shm/left; readlink /proc/self/ns/ipc; `+
		`(trap '' HUP TERM; exec sleep 1000.5) >/dev/null 2>&1 & exit 0`), ws)
	ipc1 := first.line(t)
	if code := waitReport(t, first); code != 0 {
		t.Fatalf("first: exit %d", code)
	}
	second := startDirectRun(t, h, cgfd, shPlan(p, `echo shm=$(ls /dev/shm | wc -l); readlink /proc/self/ns/ipc; ps -e -o comm= | grep -c sleep; read x; exit 0`), ws)
	if got := h.PreparedDirect() - before; got != 2 {
		t.Fatalf("%d direct starts, want 2 on the recycled sandbox", got)
	}
	// A late signal for the first command: not the second's.
	_ = first.report.Signal(unix.SIGTERM)
	if l := second.line(t); l != "shm=0" {
		t.Errorf("/dev/shm for the next command: %q, want shm=0", l)
	}
	if l := second.line(t); l == ipc1 {
		t.Errorf("the next command shares the last one's IPC namespace %s", l)
	}
	if n := second.line(t); n != "0" {
		t.Errorf("%s sleeps of the last command still run", n)
	}
	second.stdin.Close()
	if code := waitReport(t, second); code != 0 {
		t.Errorf("second: exit %d, want 0 (a late signal for the first reached it?)", code)
	}
}

// TestDirectSignals: signals through a direct start's report reach the
// command's process group; the report says which ended it.
func TestDirectSignals(t *testing.T) {
	h, cgfd, ws, p := directSetup(t)
	for _, sig := range []syscall.Signal{unix.SIGTERM, unix.SIGKILL} {
		r := startDirectRun(t, h, cgfd, shPlan(p, `echo up; sleep 1000.25; exit 0`), ws)
		if l := r.line(t); l != "up" {
			t.Fatalf("%q", l)
		}
		if err := r.report.Signal(sig); err != nil {
			t.Fatal(err)
		}
		if code := waitReport(t, r); code != 128+int(sig) || r.report.ExitSignal() != int(sig) {
			t.Errorf("%v: exit %d, signal %d", sig, code, r.report.ExitSignal())
		}
		if pids := pidsWithArg(t, "1000.25"); len(pids) != 0 {
			t.Errorf("%v: the sleep still runs: %v", sig, pids)
		}
	}
}

// TestDirectRelativeDir: a relative working directory (the library API
// allows one) is the daemon's, as in os/exec, not the direct thread's
// (which is the last start's).
func TestDirectRelativeDir(t *testing.T) {
	h, cgfd, ws, p := directSetup(t)
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for i, dir := range []string{ws, ".", "."} {
		r := startDirectRun(t, h, cgfd, shPlan(p, `pwd`), dir)
		want := ws
		if dir == "." {
			want = wd
		}
		if l := r.line(t); l != want {
			t.Errorf("start %d in %q: pwd %q, want %q", i, dir, l, want)
		}
		if code := waitReport(t, r); code != 0 {
			t.Errorf("start %d: exit %d", i, code)
		}
	}
}
