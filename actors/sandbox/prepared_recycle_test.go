package sandbox

import (
	"bufio"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A recycled start (Plan.Recycle) and its pipes.
type recycledRun struct {
	pid    int // the init's (proc's, which Release clears)
	proc   *os.Process
	report *ExitReport
	out    *bufio.Reader
	outR   *os.File
	stdin  *os.File // the write end of the command's stdin
}

// startRecycled starts plan with Recycle in dir, stdin and stdout/stderr
// on pipes.
func startRecycled(t *testing.T, h *Host, plan Plan, dir string) *recycledRun {
	t.Helper()
	return startRecycledWith(t, h, plan, dir, nil)
}

// startRecycledWith is startRecycled with sys (nil: none).
func startRecycledWith(t *testing.T, h *Host, plan Plan, dir string, sys *syscall.SysProcAttr) *recycledRun {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	plan.Recycle = true
	proc, report, err := StartReported(h, plan, &os.ProcAttr{Dir: dir, Files: []*os.File{inR, outW, outW}, Sys: sys})
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		t.Fatalf("start: %v", err)
	}
	_ = outR.SetReadDeadline(time.Now().Add(20 * time.Second))
	r := &recycledRun{pid: proc.Pid, proc: proc, report: report, out: bufio.NewReader(outR), outR: outR, stdin: inW}
	t.Cleanup(func() { r.stdin.Close(); r.outR.Close() })
	return r
}

// startReady is startRecycled of a command that prints "ready" once it
// may be signalled: it waits for that line, and the start must be recycled.
func startReady(t *testing.T, h *Host, plan Plan, dir string) *recycledRun {
	t.Helper()
	r := startRecycled(t, h, plan, dir)
	if l := r.line(t); l != "ready" {
		t.Fatalf("command: %q, want ready", l)
	}
	if !r.report.Recycled() {
		t.Fatal("not a recycled start")
	}
	return r
}

// line reads the command's next line of output.
func (r *recycledRun) line(t *testing.T) string {
	t.Helper()
	l, err := r.out.ReadString('\n')
	if err != nil {
		t.Fatalf("read the command's output: %q, %v", l, err)
	}
	return strings.TrimSuffix(l, "\n")
}

// wait reads the rest of the output and waits for the command's end as
// osproc does: the report, and for a fresh helper's init the process.
func (r *recycledRun) wait(t *testing.T) (string, int, int) {
	t.Helper()
	r.stdin.Close()
	rest, err := io.ReadAll(r.out)
	if err != nil {
		t.Fatalf("read the command's output: %v", err)
	}
	status, ok := r.report.Wait()
	if !r.report.Recycled() {
		r.report.Close()
		_, _ = r.proc.Wait()
	} else {
		_ = r.proc.Release()
	}
	if !ok {
		t.Fatalf("no report of the command's exit (output %q)", rest)
	}
	return string(rest), status, r.report.ExitSignal()
}

// recycledHost is a prepared host with one sandbox waiting for p in ws.
func recycledHost(t *testing.T) (*Host, *Policy, string) {
	t.Helper()
	h := preparedHost(t)
	ws := stageDir(t)
	p := &Policy{RestrictFS: true, Rules: []Rule{{Path: "/", Access: Read}, {Path: ws, Access: Write}}}
	primeOne(t, h, p, ws)
	return h, p, ws
}

// TestRecycledSandboxLeavesNothing: a command leaves all it can in its
// sandbox (a file and a changed mode on /dev/shm, a System V segment, a
// process in the background); the next command, served by the same init,
// finds none of it.
func TestRecycledSandboxLeavesNothing(t *testing.T) {
	needPython(t)
	h, p, ws := recycledHost(t)
	recycled := h.prepared.recycled.Load()

	a := shPlan(p, `
touch /dev/shm/leftover && echo 'secret' > /dev/shm/leftover
python3 -c 'import ctypes; l = ctypes.CDLL(None); print("shmget", l.shmget(0x5eed, 4096, 0o1666) >= 0)'
setsid sleep 1000 </dev/null >/dev/null 2>&1 &
chmod 0700 /dev/shm
`)
	ra := startRecycled(t, h, a, ws)
	outA, code, _ := ra.wait(t)
	if code != 0 || !strings.Contains(outA, "shmget True") {
		t.Fatalf("the first command did not leave what it should have: exit %d, %q", code, outA)
	}
	if !ra.report.Recycled() {
		t.Fatal("the first command's sandbox is not recycled")
	}

	b := shPlan(p, `
echo "shm [$(ls -A /dev/shm)] $(stat -c %a /dev/shm)"
python3 -c 'import ctypes; l = ctypes.CDLL(None); print("segment", l.shmget(0x5eed, 0, 0) >= 0)'
echo "oom $(cat /proc/self/oom_score_adj)"
for d in /proc/[0-9]*; do [ "${d#/proc/}" = "$$" ] || echo "proc ${d#/proc/} $(cat $d/comm 2>/dev/null)"; done
`)
	rb := startRecycled(t, h, b, ws)
	outB, code, _ := rb.wait(t)
	if rb.pid != ra.pid {
		t.Fatalf("the second command ran in init %d, the first in %d: not recycled", rb.pid, ra.pid)
	}
	if got := h.prepared.recycled.Load() - recycled; got != 2 {
		t.Errorf("%d sandboxes given back, want 2", got)
	}
	if code != 0 {
		t.Fatalf("second command: exit %d, %q", code, outB)
	}
	for _, want := range []string{"shm [] 1777", "segment False", "oom 0"} {
		if !strings.Contains(outB, want) {
			t.Errorf("second command's view lacks %q:\n%s", want, outB)
		}
	}
	for _, l := range strings.Split(outB, "\n") {
		if strings.HasPrefix(l, "proc ") && !strings.HasPrefix(l, "proc 1 ") && strings.Contains(l, "sleep") {
			t.Errorf("the first command's background process is in the second's namespace: %s\n%s", l, outB)
		}
	}
}

// TestRecycledSignalsStayWithTheirStart: a signal sent through a recycled
// start's report reaches its command (and its death by signal is
// reported as such); one sent after the command's end, while the init
// serves the next start, is dropped, not delivered to the next command.
func TestRecycledSignalsStayWithTheirStart(t *testing.T) {
	h, p, ws := recycledHost(t)
	ra := startReady(t, h, shPlan(p, `echo ready; exec sleep 1000`), ws)
	if err := ra.report.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_, status, sig := ra.wait(t)
	if sig != int(syscall.SIGTERM) || status != 128+int(syscall.SIGTERM) {
		t.Fatalf("first command ended with status %d, signal %d; want SIGTERM", status, sig)
	}

	rb := startReady(t, h, shPlan(p, `trap 'echo usr1; kill $! 2>/dev/null; exit 0' USR1; sleep 1000 & echo ready; wait`), ws)
	if rb.pid != ra.pid {
		t.Fatalf("second command ran in init %d, the first in %d: not recycled", rb.pid, ra.pid)
	}
	// Late: the first start's kill, then the second's own signal. Frames
	// are taken in order: had the late kill reached the second command,
	// it would have died before its USR1.
	if err := ra.report.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := rb.report.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	out, status, sig := rb.wait(t)
	if status != 0 || sig != 0 || !strings.Contains(out, "usr1") {
		t.Fatalf("second command: status %d, signal %d, output %q; want its own USR1 and exit 0", status, sig, out)
	}
}

// TestRecycledAbandon: a recycled start abandoned before its command's end
// (the caller's panic path) kills the init, and its namespace with the
// command; the report then says there was no exit, and the sandbox serves
// no other start.
func TestRecycledAbandon(t *testing.T) {
	h, p, ws := recycledHost(t)
	r := startReady(t, h, shPlan(p, `echo ready; exec sleep 1000`), ws)
	r.report.Abandon()
	done := make(chan bool, 1)
	go func() { _, ok := r.report.Wait(); done <- ok }()
	select {
	case ok := <-done:
		if ok {
			t.Fatal("an abandoned start reported an exit")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the abandoned start's report never ended")
	}
	if err := syscall.Kill(r.pid, 0); err != syscall.ESRCH {
		t.Fatalf("the abandoned init %d: kill(0) = %v, want ESRCH (killed and reaped)", r.pid, err)
	}
	_ = r.proc.Release()
	for _, pid := range h.prepared.readyPids() {
		if pid == r.pid {
			t.Fatal("the abandoned sandbox is back among the ready ones")
		}
	}
}

// TestRecycledNotWithRlimits: a start that sets rlimits (process-wide in
// the init, which may not raise them again) is its sandbox's last: the
// report is not Recycled, the init exits after it, and the next start does
// not inherit the limits.
func TestRecycledNotWithRlimits(t *testing.T) {
	h, p, ws := recycledHost(t)
	a := shPlan(p, `echo "nofile $(ulimit -n)"`)
	a.Rlimits = []Rlimit{{Resource: syscall.RLIMIT_NOFILE, Cur: 64, Max: 64}}
	ra := startRecycled(t, h, a, ws)
	if ra.report.Recycled() {
		t.Fatal("a start with rlimits was recycled")
	}
	out, code, _ := ra.wait(t) // reaps the init too: it exited
	if code != 0 || !strings.Contains(out, "nofile 64") {
		t.Fatalf("exit %d, %q", code, out)
	}
	h.prepared.settle()
	rb := startRecycled(t, h, shPlan(p, `echo "nofile $(ulimit -n)"`), ws)
	out, code, _ = rb.wait(t)
	if code != 0 || strings.Contains(out, "nofile 64") || rb.pid == ra.pid {
		t.Fatalf("next start: init %d (the limited one's %d), exit %d, %q", rb.pid, ra.pid, code, out)
	}
}

// TestProcHidesInit: the namespace's /proc shows a command its own tree
// only (hidepid=2, and a gid no command has): its init, whose uid it
// shares, cannot be looked up there, so none of the init's /proc files a
// uid may write (autogroup, coredump_filter, ...) reaches it; its own
// processes are listed as always.
func TestProcHidesInit(t *testing.T) {
	h, p, ws := recycledHost(t)
	r := startRecycled(t, h, shPlan(p, `
sleep 1000 & bg=$!
[ -e /proc/1 ] && echo "init visible"
echo 5 > /proc/1/autogroup 2>/dev/null && echo "init writable"
[ -r /proc/$bg/stat ] && echo "own child visible"
[ -r /proc/self/status ] && echo "self visible"
kill $bg
`), ws)
	out, code, _ := r.wait(t)
	if code != 0 {
		t.Fatalf("exit %d: %q", code, out)
	}
	if strings.Contains(out, "init visible") || strings.Contains(out, "init writable") {
		t.Errorf("the command reaches its init through /proc:\n%s", out)
	}
	if !strings.Contains(out, "own child visible") || !strings.Contains(out, "self visible") {
		t.Errorf("the command lost sight of its own processes:\n%s", out)
	}
}
