package sandbox

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Attacks from inside a direct start (direct.go): the command is the
// daemon's own child, forked by a daemon thread that joined the sandbox's
// namespaces and serves the sandbox's next commands too. Each test runs
// Codex's workspace-write policy, asserts the refusal and checks the host
// (and the daemon: this test process) afterwards.

// pyPrelude: raw system calls for the attack scripts.
const pyPrelude = `
import ctypes, errno, os, select, signal, socket, sys, time
l = ctypes.CDLL(None, use_errno=True)
X86 = os.uname().machine == 'x86_64'
NR = dict(pidfd_open=434, pidfd_getfd=438, pidfd_send_signal=424, clone=56 if X86 else 220,
          ptrace=101 if X86 else 117, add_key=248 if X86 else 217, keyctl=250 if X86 else 219,
          request_key=249 if X86 else 218, setns=308 if X86 else 268, unshare=272 if X86 else 97)
def sc(name, *a):
    r = l.syscall(NR[name], *[ctypes.c_long(x) if isinstance(x, int) else x for x in a])
    return r if r >= 0 else -ctypes.get_errno()
def en(r):
    return 'ok' if r >= 0 else errno.errorcode.get(-r, str(-r))
def ck(r):
    return 'ok' if r == 0 else errno.errorcode.get(ctypes.get_errno(), '?')
def say(*a):
    print(*a, flush=True)
def sibling(argv):
    # clone(CLONE_PARENT): a child of this process's parent (the daemon).
    pid = sc('clone', 0x8000 | signal.SIGCHLD, 0, 0, 0, 0)
    if pid == 0:
        if argv:
            os.execv(argv[0], argv)
        os._exit(0)
    return pid
`

func pyPlan(p *Policy, script string, args ...string) Plan {
	return Plan{Path: "/usr/bin/python3", Argv: append([]string{"python3", "-c", pyPrelude + script}, args...),
		Env: []string{"PATH=/usr/bin:/bin"}, Policy: p}
}

// directOut runs plan as a direct start in dir (it must go direct), its
// stdin closed, and returns its output and exit status. The output is
// read once the report is in: the tree has ended then, and nothing holds
// the pipe (a read that does not end is an error, not a hang).
func directOut(t *testing.T, h *Host, cgfd int, plan Plan, dir string) (string, int) {
	t.Helper()
	before := h.PreparedDirect()
	r := startDirectRun(t, h, cgfd, plan, dir)
	if h.PreparedDirect()-before != 1 {
		t.Fatal("not a direct start")
	}
	r.stdin.Close()
	code := waitReport(t, r)
	_ = r.outR.SetReadDeadline(time.Now().Add(5 * time.Second))
	out, err := io.ReadAll(r.out)
	if err != nil {
		t.Errorf("the command's output is still held after its report: %v (%q)", err, out)
	}
	return string(out), code
}

// sandboxZombies lists the daemon's children that are zombies in a pid
// namespace below its own, its sandboxes' inits aside: processes of a
// sandbox that the daemon should have reaped.
func sandboxZombies(t *testing.T) []int {
	t.Helper()
	var out []int
	for _, pid := range pidsWithArg(t, "") { // every process
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		f := map[string]string{}
		for _, l := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(l, ":")
			f[k] = strings.TrimSpace(v)
		}
		ns := strings.Fields(f["NSpid"])
		if f["PPid"] == strconv.Itoa(os.Getpid()) && strings.HasPrefix(f["State"], "Z") && len(ns) > 1 && ns[len(ns)-1] != "1" {
			out = append(out, pid)
		}
	}
	return out
}

// reapStrays kills and reaps the daemon's children pids (left by a
// failed attack test), so that the sandbox's init can end.
func reapStrays(pids []int) {
	for _, pid := range pids {
		_ = unix.Kill(pid, unix.SIGKILL)
		_, _ = unix.Wait4(pid, nil, unix.WALL, nil)
	}
}

// boundedBy returns f's result; f not returning within d fails the test.
func boundedBy[T any](t *testing.T, d time.Duration, what string, f func() T) T {
	t.Helper()
	c := make(chan T, 1)
	go func() { c <- f() }()
	select {
	case v := <-c:
		return v
	case <-time.After(d):
		t.Fatalf("%s: not within %v", what, d)
	}
	var zero T
	return zero
}

// closeBounded closes h's prepared sandboxes (their inits must end).
func closeBounded(t *testing.T, h *Host) {
	t.Helper()
	boundedBy(t, 10*time.Second, "the prepared sandboxes' end (an init waits for a process to be reaped?)",
		func() bool { h.prepared.close(); return true })
}

// TestDirectAttackReachDaemon: the command looks for its parent (the
// daemon) and anything outside its pid namespace to signal, trace or read:
// it finds nothing but itself. A host process (the daemon's child too)
// stays alive and untraced, a descriptor the daemon holds without
// close-on-exec does not reach the command, and the direct thread serves
// the next start.
func TestDirectAttackReachDaemon(t *testing.T) {
	needPython(t)
	h, cgfd, ws, p := directSetup(t)
	victim := exec.Command("/bin/sleep", fmt.Sprintf("1000.%d", time.Now().UnixNano()%1_000_000))
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = victim.Process.Kill(); _ = victim.Wait() })
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	inherited, err := syscall.Dup(int(devnull.Fd())) // no close-on-exec
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(inherited)
	out, code := directOut(t, h, cgfd, pyPlan(p, `
say("ppid", os.getppid())
say("pidfd-ppid", en(sc('pidfd_open', os.getppid(), 0)))
me = os.getpid()
pmax = min(int(open('/proc/sys/kernel/pid_max').read()), 1 << 16)
say("signallable", [p for p in range(1, pmax + 1) if p != me and l.kill(p, 0) == 0])
say("ptrace-init", en(sc('ptrace', 16, 1, 0, 0)), en(sc('ptrace', 0x4206, 1, 0, 0)))
fd = sc('pidfd_open', 1, 0)
if fd >= 0:
    say("getfd-init", sorted(set(en(sc('pidfd_getfd', fd, n, 0)) for n in range(64))))
    say("pidfd-signal-init", en(sc('pidfd_send_signal', fd, signal.SIGTERM, None, 0)), en(sc('pidfd_send_signal', fd, signal.SIGKILL, None, 0)))
    os.close(fd)
else:
    say("getfd-init", en(fd)); say("pidfd-signal-init", en(fd))
def probe(f, op):
    try:
        op(f); return f + ':ok'
    except OSError as e:
        return f + ':' + errno.errorcode[e.errno]
say("proc-init", [probe('/proc/1/' + f, lambda p: open(p, 'rb').read(1)) for f in ('environ', 'mem')] +
    [probe('/proc/1/' + f, os.listdir) for f in ('root/etc', 'fd', 'cwd')])
fds = [(int(f), probe('/proc/self/fd/' + f, os.readlink)) for f in os.listdir('/proc/self/fd')]
fds = [(n, os.readlink('/proc/self/fd/%d' % n)) for n, r in fds if r.endswith(':ok')]
say("fds", sorted(n for n, _ in fds), [k for n, k in fds if not k.startswith('pipe:')])
say("kill-all", ck(l.kill(-1, signal.SIGKILL)))
`), ws)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	for key, want := range map[string]string{"ppid": "0", "pidfd-ppid": "EINVAL", "signallable": "[]", "kill-all": "ESRCH",
		"fds": "[0, 1, 2] []"} {
		if got := field(t, out, key); got != want {
			t.Errorf("%s: %q, want %q", key, got, want)
		}
	}
	for _, key := range []string{"ptrace-init", "getfd-init", "pidfd-signal-init", "proc-init"} {
		if got := field(t, out, key); strings.Contains(got, "ok") {
			t.Errorf("%s: %q: the command reached outside its tree", key, got)
		}
	}
	// The host process: alive, not stopped, not traced.
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", victim.Process.Pid))
	if err != nil || unix.Kill(victim.Process.Pid, 0) != nil {
		t.Fatalf("the host's process is gone: %v", err)
	}
	if s := string(st); !strings.Contains(s, "TracerPid:\t0\n") || strings.Contains(s, "State:\tT") || strings.Contains(s, "State:\tt") {
		t.Errorf("the host's process was stopped or traced:\n%s", s)
	}
	// The direct thread and the sandbox serve the next start.
	if out, code := directOut(t, h, cgfd, shPlan(p, `echo next; exit 4`), ws); code != 4 || out != "next\n" {
		t.Errorf("next start: exit %d, %q", code, out)
	}
}

// TestDirectAttackCloneParent: clone(CLONE_PARENT) makes a sibling of the
// command: a child of the daemon's direct thread in the sandbox, which
// neither the command's report nor the init (it is not the init's child)
// reaps. A live one must not outlive the report of the command's exit
// (nor run into the next command on the recycled sandbox); a dead one
// must not stay a zombie of the daemon (it holds a host pid, and the
// init, ending, waits for it: the daemon's close would hang).
func TestDirectAttackCloneParent(t *testing.T) {
	needPython(t)
	for _, tc := range []struct {
		name, script string
	}{
		{"live", `say("sibling", sibling(['/bin/sleep', sys.argv[1]]))`},
		// In a pid namespace of its own (unshare(2) in a new user
		// namespace gives CAP_SYS_ADMIN there): the sibling is its init.
		{"nested", `
say("unshare", en(sc('unshare', 0x10000000 | 0x20000000)))
say("sibling", sibling(['/bin/sleep', sys.argv[1]]))`},
		// The sibling exits at once; the command waits until it is a
		// zombie (its pidfd readable), then exits.
		{"zombie", `
pid = sibling(None)
fd = sc('pidfd_open', pid, 0)
select.select([fd], [], [], 10)
say("sibling", pid, open('/proc/%d/stat' % pid).read().split(') ')[1][0])`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, cgfd, ws, p := directSetup(t)
			marker := fmt.Sprintf("1000.%d", time.Now().UnixNano()%1_000_000)
			// Before the cleanups (the sandbox's discard waits for them).
			defer func() { reapStrays(append(pidsWithArg(t, marker), sandboxZombies(t)...)) }()
			out, code := directOut(t, h, cgfd, pyPlan(p, tc.script, marker), ws)
			if code != 0 || !strings.Contains(out, "sibling ") || strings.Contains(out, "sibling -") {
				t.Fatalf("exit %d: %q (no sibling made)", code, out)
			}
			t.Logf("first command: %s", strings.TrimSpace(out))
			if pids := pidsWithArg(t, marker); len(pids) != 0 {
				t.Errorf("the command's sibling %v outlived the report of its exit", pids)
			}
			pattern := strings.Replace(marker, ".", "[.]", 1)
			out, code = directOut(t, h, cgfd, shPlan(p, `echo procs $(ls /proc | grep -c '^[0-9]'); `+
				`echo found $(cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' ' ' | grep -c `+pattern+`)`), ws)
			if code != 0 {
				t.Fatalf("next command: exit %d, %q", code, out)
			}
			if f := field(t, out, "found"); f != "0" {
				t.Errorf("the next command on the sandbox finds the last one's sibling running (%s)", out)
			}
			if z := sandboxZombies(t); len(z) != 0 {
				t.Errorf("sandbox processes left unreaped, zombies of the daemon: %v", z)
				reapStrays(z)
			}
			reapStrays(pidsWithArg(t, marker))
			closeBounded(t, h)
		})
	}
	// The command is abandoned (killed, its sandbox discarded) while its
	// sibling runs: the discard must end (the init waits for the
	// sibling's reaping), leaving no zombie.
	t.Run("abandoned", func(t *testing.T) {
		h, cgfd, ws, p := directSetup(t)
		marker := fmt.Sprintf("1000.%d", time.Now().UnixNano()%1_000_000)
		defer func() { reapStrays(append(pidsWithArg(t, marker), sandboxZombies(t)...)) }()
		r := startDirectRun(t, h, cgfd, pyPlan(p, `say("sibling", sibling(['/bin/sleep', sys.argv[1]])); sys.stdin.read()`, marker), ws)
		if l := r.line(t); !strings.HasPrefix(l, "sibling ") || strings.HasPrefix(l, "sibling -") {
			t.Fatalf("%q", l)
		}
		boundedBy(t, 10*time.Second, "Abandon (the init waits for the sibling's reaping?)", func() bool { r.report.Abandon(); return true })
		if pids, z := pidsWithArg(t, marker), sandboxZombies(t); len(pids)+len(z) != 0 {
			t.Errorf("after the discard: sibling %v, zombies %v", pids, z)
		}
	})
}

// TestDirectAttackPtraceStop: the command makes its parent, the daemon's
// direct thread, its tracer (PTRACE_TRACEME) and stops. The daemon's wait
// reports that ptrace stop whatever it asks: the report must not take it
// for the command's end (a made-up status while the command still runs).
// It reports the real end, the SIGKILL sent for it.
func TestDirectAttackPtraceStop(t *testing.T) {
	needPython(t)
	h, cgfd, ws, p := directSetup(t)
	p = networkOnPrimed(t, h, p, ws) // with the network restricted ptrace is refused (TestPtraceRefusedNetworkRestricted)
	r := startDirectRun(t, h, cgfd, pyPlan(p, `
r = sc('ptrace', 0, 0, 0, 0)
say("traceme", en(r))
if r == 0:
    os.kill(os.getpid(), signal.SIGSTOP)
    say("resumed")
sys.stdin.read()
sys.exit(5)`), ws)
	// A report fooled by the stop leaves the command unreaped (the init,
	// ending, would wait for it): killed and reaped before the cleanups.
	pidfd, err := unix.PidfdOpen(r.proc.Pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
		var info unix.Siginfo
		_ = unix.Waitid(unix.P_PIDFD, pidfd, &info, unix.WEXITED, nil) // ECHILD: reaped by the report
		unix.Close(pidfd)
	}()
	if l := r.line(t); l != "traceme ok" {
		t.Skipf("PTRACE_TRACEME refused here with the network on (%q; Yama?): nothing to attack", l)
	}
	// Stopped (and the stop still to be reported: WNOWAIT).
	if err := boundedBy(t, 10*time.Second, "the command's stop", func() error {
		var info unix.Siginfo
		return unix.Waitid(unix.P_PID, r.proc.Pid, &info, unix.WSTOPPED|unix.WNOWAIT, nil)
	}); err != nil {
		t.Fatalf("waitid(WSTOPPED): %v", err)
	}
	type result struct{ code, sig int }
	done := make(chan result, 1)
	go func() {
		code, ok := r.report.Wait()
		if !ok {
			code = -1
		}
		done <- result{code, r.report.ExitSignal()}
	}()
	// Before the fix the report took the stop for an end at once (status
	// 128+SIGSTOP); a command stopped for good is still running.
	select {
	case res := <-done:
		t.Fatalf("the report says the command ended (%d, signal %d) while it is stopped", res.code, res.sig)
	case <-time.After(200 * time.Millisecond):
	}
	if err := r.report.Signal(unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-done:
		if res.code != 128+int(unix.SIGKILL) || res.sig != int(unix.SIGKILL) {
			t.Errorf("report: %d, signal %d; want the SIGKILL", res.code, res.sig)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no report after SIGKILL")
	}
	if err := unix.Kill(r.proc.Pid, 0); err == nil {
		t.Errorf("the command %d still exists after its report", r.proc.Pid)
	}
	if z := sandboxZombies(t); len(z) != 0 {
		t.Errorf("zombies of the daemon: %v", z)
		reapStrays(z)
	}
	closeBounded(t, h)
}

// TestDirectReapsSiblingsWhileRuns: siblings the command makes with
// CLONE_PARENT (children of the daemon's direct thread) that end while the
// command still runs are reaped within orphanReap, not left as zombies of
// the daemon until the command's end (a command could pile them up). The
// command is not reaped by it: its report still says how it ended.
func TestDirectReapsSiblingsWhileRuns(t *testing.T) {
	needPython(t)
	h, cgfd, ws, p := directSetup(t)
	defer func() { reapStrays(sandboxZombies(t)) }()
	r := startDirectRun(t, h, cgfd, pyPlan(p, `
for i in range(20):
    sibling(None)
say("made", 20)
sys.stdin.read()
sys.exit(5)`), ws)
	if l := r.line(t); l != "made 20" {
		t.Fatalf("%q", l)
	}
	deadline := time.Now().Add(10 * time.Second)
	for z := sandboxZombies(t); len(z) != 0; z = sandboxZombies(t) {
		if time.Now().After(deadline) {
			t.Fatalf("the command's ended siblings are still zombies of the daemon while it runs: %v", z)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.stdin.Close()
	if code := waitReport(t, r); code != 5 {
		t.Errorf("the command's report: exit %d, want 5", code)
	}
}

// TestInitPathPtraceStop: TestDirectAttackPtraceStop on the init's path
// (Host.NoDirect): PTRACE_TRACEME makes the init's spawning thread the
// command's tracer, and the init's wait sees the command's ptrace stop. The
// init must not report that stop as the command's end (it reported "exit
// -1", which the daemon read as a killed init).
func TestInitPathPtraceStop(t *testing.T) {
	needPython(t)
	h, cgfd, ws, p := directSetup(t)
	p = networkOnPrimed(t, h, p, ws)
	viaInit := *h
	viaInit.NoDirect = true
	r := startDirectRun(t, &viaInit, cgfd, pyPlan(p, `
r = sc('ptrace', 0, 0, 0, 0)
say("traceme", en(r))
if r == 0:
    os.kill(os.getpid(), signal.SIGSTOP)
sys.stdin.read()
sys.exit(5)`), ws)
	if r.report.Direct() {
		t.Fatal("a direct start: want the init's path")
	}
	if l := r.line(t); l != "traceme ok" {
		t.Skipf("PTRACE_TRACEME refused here with the network on (%q; Yama?): nothing to attack", l)
	}
	type result struct {
		code int
		ok   bool
	}
	done := make(chan result, 1)
	go func() {
		code, ok := r.report.Wait()
		done <- result{code, ok}
	}()
	select {
	case res := <-done:
		t.Fatalf("the report says the command ended (%d, %v) while it is stopped", res.code, res.ok)
	case <-time.After(300 * time.Millisecond):
	}
	if err := r.report.Signal(unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-done:
		if !res.ok || res.code != 128+int(unix.SIGKILL) || r.report.ExitSignal() != int(unix.SIGKILL) {
			t.Errorf("report: %d %v, signal %d; want the SIGKILL", res.code, res.ok, r.report.ExitSignal())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no report after SIGKILL")
	}
}

// networkOnPrimed is p with the network allowed, a sandbox primed for it
// in ws.
func networkOnPrimed(t *testing.T, h *Host, p *Policy, ws string) *Policy {
	t.Helper()
	q := *p
	q.Network = true
	primeDirect(t, h, &q, ws)
	return &q
}
