package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
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
		t.Skipf("PTRACE_TRACEME refused here (%q): nothing to attack", l)
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

// TestDirectAttackLeftovers: a command leaves what it can for the next
// one on the same sandbox (the same direct thread, pid and network
// namespaces): a stopped process, one in a session of its own that
// ignores signals, a file and a mode on /dev/shm, System V objects, an
// abstract UNIX listener in flight, a lowered umask and file limit. The
// next command finds none of it (its limits are the daemon's).
func TestDirectAttackLeftovers(t *testing.T) {
	needPython(t)
	h, cgfd, ws, p := directSetup(t)
	var limit unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &limit); err != nil {
		t.Fatal(err)
	}
	marker := fmt.Sprintf("1000.%d", time.Now().UnixNano()%1_000_000)
	defer func() { reapStrays(append(pidsWithArg(t, marker), sandboxZombies(t)...)) }()
	show := `echo "ns $(readlink /proc/self/ns/pid) $(readlink /proc/self/ns/net)"
echo "umask $(umask)"; echo "nofile $(ulimit -Sn) $(ulimit -Hn)"
`
	a := show + `sh -c 'printf leftover > /proc/self/comm; kill -STOP $$' </dev/null >/dev/null 2>&1 &
setsid sh -c '(trap "" HUP INT TERM QUIT USR1 USR2; printf leftover > /proc/self/comm; while :; do sleep ` + marker + `; done) &' </dev/null >/dev/null 2>&1
until [ "$(cat /proc/[0-9]*/comm 2>/dev/null | grep -c '^leftover$')" -ge 2 ]; do :; done
echo secret > /dev/shm/left && chmod 0700 /dev/shm
umask 077; ulimit -n 64
python3 -c '` + strings.ReplaceAll(pyPrelude, "'", `"`) + `
print("sem", l.semget(0x5eed, 1, 0o1666) >= 0, "msg", l.msgget(0x5eed, 0o1666) >= 0)
ln = socket.socket(socket.AF_UNIX); ln.bind("\0direct-leak"); ln.listen()
x, y = socket.socketpair()
socket.send_fds(x, [b"x"], [ln.fileno(), y.fileno()])
'
`
	outA, code := directOut(t, h, cgfd, shPlan(p, a), ws)
	if code != 0 || !strings.Contains(outA, "sem True msg True") {
		t.Fatalf("the first command did not leave what it should have: exit %d, %q", code, outA)
	}
	if pids := pidsWithArg(t, marker); len(pids) != 0 {
		t.Errorf("the first command's background process outlived its report: %v", pids)
	}
	outB, code := directOut(t, h, cgfd, shPlan(p, show+`echo "leftovers $(cat /proc/[0-9]*/comm 2>/dev/null | grep -c '^leftover$')"
echo "shm [$(ls -A /dev/shm)] $(stat -c %a /dev/shm)"
python3 -c '`+strings.ReplaceAll(pyPrelude, "'", `"`)+`
print("sem", l.semget(0x5eed, 0, 0) >= 0, "msg", l.msgget(0x5eed, 0, 0) >= 0)
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("\0direct-leak"); print("abstract CONNECTED")
except OSError as e:
    print("abstract", errno.errorcode[e.errno])
'
`), ws)
	if code != 0 {
		t.Fatalf("second command: exit %d, %q", code, outB)
	}
	if field(t, outB, "ns") != field(t, outA, "ns") {
		t.Fatalf("the second command ran in another sandbox (%s, the first in %s): not recycled", field(t, outB, "ns"), field(t, outA, "ns"))
	}
	want := map[string]string{"umask": field(t, outA, "umask"), "nofile": fmt.Sprintf("%d %d", limit.Cur, limit.Max),
		"leftovers": "0", "shm": "[] 1777", "sem": "False msg False", "abstract": "ECONNREFUSED"}
	for key, w := range want {
		if got := field(t, outB, key); got != w {
			t.Errorf("the second command's %s: %q, want %q", key, got, w)
		}
	}
}

// TestDirectAttackCwdSwap: between two direct starts in a subdirectory of
// the workspace, the host finds it replaced with a symlink (a command
// could do it: the workspace is writable). The start follows the path as
// the init's starts and os/exec do (the thread enters it in the
// sandbox's mount namespace), so it either fails as a working directory
// error, or runs where the link leads with only the policy's access
// there: never a write outside the policy, and a target the sandbox does
// not show (the init's /proc entry) is a failed start that runs nothing.
func TestDirectAttackCwdSwap(t *testing.T) {
	h, cgfd, ws, p := directSetup(t)
	sub := filepath.Join(ws, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	real, err := filepath.EvalSymlinks(sub)
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("runtimed-cwd-%d", time.Now().UnixNano())
	script := `pwd -P; echo x > ` + name + ` 2>/dev/null && echo wrote; exit 0`
	if out, code := directOut(t, h, cgfd, shPlan(p, script), sub); code != 0 || out != real+"\nwrote\n" {
		t.Fatalf("in the subdirectory: exit %d, %q", code, out)
	}
	if err := os.Rename(sub, sub+".old"); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"/etc", "/proc/1"} {
		_ = os.Remove(sub)
		if err := os.Symlink(target, sub); err != nil {
			t.Fatal(err)
		}
		before := h.PreparedDirect()
		out, err := tryStart(t, h, cgfd, shPlan(p, script), sub)
		t.Logf("%s: %q, %v", target, out, err)
		var ee *ExecError
		switch {
		case err != nil && (!errors.As(err, &ee) || ee.Stage != "cwd" || h.PreparedDirect() != before):
			t.Errorf("%s: %v (direct starts %d), want a working directory error and nothing run", target, err, h.PreparedDirect()-before)
		case err == nil && (h.PreparedDirect()-before != 1 || target == "/proc/1" || strings.Contains(out, "wrote")):
			t.Errorf("%s: ran (direct starts %d): %q; want no write, and no start in the init's /proc entry", target, h.PreparedDirect()-before, out)
		}
		if _, err := os.Stat(filepath.Join(target, name)); err == nil {
			os.Remove(filepath.Join(target, name))
			t.Errorf("%s/%s was created on the host", target, name)
		}
	}
	// The sandbox serves the next start, in the right place.
	_ = os.Remove(sub)
	if err := os.Rename(sub+".old", sub); err != nil {
		t.Fatal(err)
	}
	if out, code := directOut(t, h, cgfd, shPlan(p, `pwd -P`), sub); code != 0 || out != real+"\n" {
		t.Errorf("back in the subdirectory: exit %d, %q", code, out)
	}
}

// TestDirectAttackInitLimits: the command may set its init's limits
// (prlimit(2) on pid 1: the same uid; Landlock does not mediate it). The
// next command gets the daemon's limits whatever the init's are (the
// thread forks it), on the same sandbox when the init can serve it (soft
// limits lowered), else on another; the daemon's own are untouched. An
// init that cannot clean up with hard limits lowered exits: the next start
// must not wait forever for its direct thread, which ended with the init.
func TestDirectAttackInitLimits(t *testing.T) {
	needPython(t)
	var limit unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &limit); err != nil {
		t.Fatal(err)
	}
	show := `echo "ns $(readlink /proc/self/ns/pid)"; echo "nofile $(ulimit -Sn) $(ulimit -Hn)"`
	for _, tc := range []struct{ name, lower string }{
		{"soft", `r.prlimit(1, r.RLIMIT_NOFILE, (16, r.prlimit(1, r.RLIMIT_NOFILE)[1]))`},
		{"hard", `r.prlimit(1, r.RLIMIT_NOFILE, (8, 8))`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, cgfd, ws, p := directSetup(t)
			inits := h.prepared.readyPids()
			if len(inits) != 1 {
				t.Fatalf("sandboxes %v, want one", inits)
			}
			initFD, err := unix.PidfdOpen(inits[0], 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(initFD)
			outA, code := directOut(t, h, cgfd, shPlan(p, show+`
python3 -c 'import resource as r; `+tc.lower+`; print("init", r.prlimit(1, r.RLIMIT_NOFILE)[0])'`), ws)
			if code != 0 || !strings.Contains(outA, "init ") {
				t.Fatalf("exit %d: %q", code, outA)
			}
			t.Logf("first: %q", outA)
			if tc.name == "hard" {
				// The init has ended (its direct thread with it) before
				// the next start takes the sandbox.
				if n, err := unix.Poll([]unix.PollFd{{Fd: int32(initFD), Events: unix.POLLIN}}, 10_000); n != 1 {
					t.Fatalf("the init did not end: %v", err)
				}
			}
			direct := h.PreparedDirect()
			outB, err := tryStart(t, h, cgfd, shPlan(p, show), ws)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("second (direct: %v): %q", h.PreparedDirect() > direct, outB)
			if got, want := field(t, outB, "nofile"), fmt.Sprintf("%d %d", limit.Cur, limit.Max); got != want {
				t.Errorf("the next command's file limits %s, want the daemon's %s", got, want)
			}
			if tc.name == "soft" && (h.PreparedDirect() != direct+1 || field(t, outB, "ns") != field(t, outA, "ns")) {
				t.Errorf("the next command did not go direct on the same sandbox: %q then %q", outA, outB)
			}
			var after unix.Rlimit
			if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &after); err != nil || after != limit {
				t.Errorf("the daemon's file limit is now %+v, was %+v (%v)", after, limit, err)
			}
		})
	}
}

// tryStart runs plan recycled in dir and the tree's cgroup cgfd, direct
// or not, and returns its output (read once its report is in) or the
// start's error; a start that does not return is a failure.
func tryStart(t *testing.T, h *Host, cgfd int, plan Plan, dir string) (string, error) {
	t.Helper()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	plan.Recycle = true
	var report *ExitReport
	err = boundedBy(t, 20*time.Second, "the start", func() (err error) {
		_, report, err = StartReported(h, plan, &os.ProcAttr{Dir: dir, Files: []*os.File{devnull, outW, outW},
			Sys: &syscall.SysProcAttr{Setsid: true, UseCgroupFD: true, CgroupFD: cgfd}})
		return err
	})
	outW.Close()
	if err != nil {
		return "", err
	}
	t.Cleanup(report.Abandon)
	if code := waitReport(t, &recycledRun{report: report}); code != 0 {
		t.Errorf("exit %d", code)
	}
	_ = outR.SetReadDeadline(time.Now().Add(5 * time.Second))
	out, err := io.ReadAll(outR)
	if err != nil {
		t.Fatalf("read: %v (%q)", err, out)
	}
	return string(out), nil
}

// TestDirectAttackCgroup: the command tries to leave its cgroup (its pid
// into the root's cgroup.procs, wherever a v2 hierarchy shows in the
// sandbox), to make a sub-cgroup, to set limits, to kill or freeze its
// cgroup and to mount cgroup2 itself: all refused; on the host it is in
// the tree's cgroup and the tree is as it was.
func TestDirectAttackCgroup(t *testing.T) {
	h, cgfd, ws, p := directSetup(t)
	tree, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", cgfd))
	if err != nil {
		t.Fatal(err)
	}
	root := cgroup2Root()
	before := dirNames(t, tree)
	r := startDirectRun(t, h, cgfd, shPlan(p, `echo "cgroup $(grep '^0::' /proc/self/cgroup)"; n=0
for d in /sys/fs/cgroup /sys/fs/cgroup/unified /sys/fs/cgroup/.. /proc/self/root/sys/fs/cgroup; do
  for f in cgroup.procs cgroup.threads pids.max memory.max cgroup.kill cgroup.freeze cgroup.subtree_control; do
    [ -e $d/$f ] && n=$((n+1)) && (echo 1 > $d/$f) 2>/dev/null && echo "wrote $d/$f"
  done
  [ -d $d ] && mkdir $d/runtimed-attack 2>/dev/null && echo "made $d/runtimed-attack"
done
mkdir -p /tmp/cg-$$ && mount -t cgroup2 none /tmp/cg-$$ 2>/dev/null && echo mounted
echo "tried $n"; echo done; read x; exit 0`), ws)
	var lines []string
	for l := r.line(t); l != "done"; l = r.line(t) {
		lines = append(lines, l)
	}
	// While it runs: in the tree's cgroup, on the host.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", r.proc.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if rel := strings.TrimPrefix(tree, root); !strings.Contains(string(b), "0::"+rel+"\n") {
		t.Errorf("the command's cgroups on the host:\n%s want 0::%s", b, rel)
	}
	r.stdin.Close()
	if code := waitReport(t, r); code != 0 {
		t.Errorf("exit %d", code)
	}
	if len(lines) != 2 || lines[0] != "cgroup 0::/" || !strings.HasPrefix(lines[1], "tried ") || lines[1] == "tried 0" {
		t.Errorf("the command changed cgroups (or found no cgroup file to try): %q", lines)
	}
	if after := dirNames(t, tree); after != before {
		t.Errorf("the tree's cgroup changed:\nbefore %s\nafter  %s", before, after)
	}
	for _, d := range []string{root, filepath.Dir(tree)} {
		if _, err := os.Stat(filepath.Join(d, "runtimed-attack")); err == nil {
			os.Remove(filepath.Join(d, "runtimed-attack"))
			t.Errorf("the command made %s/runtimed-attack", d)
		}
	}
}

// TestDirectAttackEscapes: keyrings (the host's user keyring is reachable
// by name from any session), setns(2) into any namespace, unshare(2),
// mount(2); a new user namespace (the one unshare that works) gives no
// mount and no write. The host's keys are untouched.
func TestDirectAttackEscapes(t *testing.T) {
	needPython(t)
	h, cgfd, ws, p := directSetup(t)
	desc := fmt.Sprintf("runtimed-attack-%d", time.Now().UnixNano())
	out, code := directOut(t, h, cgfd, pyPlan(p, `
d = sys.argv[1].encode()
say("add_key", en(sc('add_key', b"user", d, b"x", 1, -4)), en(sc('add_key', b"keyring", d, None, 0, -3)))
say("keyctl", en(sc('keyctl', 0, -4, 0)), en(sc('keyctl', 1, d)), en(sc('keyctl', 8, -4, 0)))
say("request_key", en(sc('request_key', b"user", d, None, 0)))
res = []
for n in ('mnt', 'pid', 'net', 'ipc', 'uts', 'user', 'cgroup', 'time'):
    fd = os.open('/proc/self/ns/' + n, os.O_RDONLY)
    res.append(en(sc('setns', fd, 0))); os.close(fd)
say("setns", sorted(set(res)))
say("unshare", sorted(set(en(sc('unshare', f)) for f in (0x20000, 0x40000000, 0x20000000, 0x04000000, 0x02000000, 0x08000000, 0x80))))
say("mount", ck(l.mount(b"none", b"/tmp", b"tmpfs", 0, None)))
if sc('unshare', 0x10000000) == 0:
    say("userns-mount", en(sc('unshare', 0x20000)), ck(l.mount(b"none", b"/tmp", b"tmpfs", 0, None)), ck(l.mount(b"/", b"/", None, 0x1000 | 0x20, None)))
    try:
        open('/etc/' + sys.argv[1], 'w'); say("userns-write ok")
    except OSError as e:
        say("userns-write", errno.errorcode[e.errno])
else:
    say("userns-mount refused"); say("userns-write refused")
`, desc), ws)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	for key, want := range map[string]string{"add_key": "EPERM EPERM", "keyctl": "EPERM EPERM EPERM", "request_key": "EPERM",
		"setns": "['EPERM']", "unshare": "['EPERM']", "mount": "EPERM"} {
		if got := field(t, out, key); got != want {
			t.Errorf("%s: %q, want %q", key, got, want)
		}
	}
	// unshare(CLONE_NEWNS) in its own user namespace works; a mount there
	// does not (Landlock), nor a write through it.
	if got := field(t, out, "userns-mount"); strings.Count(got, "ok") > 1 || strings.Contains(field(t, out, "userns-write"), "ok") {
		t.Errorf("in a new user namespace: %q", out)
	}
	if b, err := os.ReadFile("/proc/keys"); err == nil && strings.Contains(string(b), desc) {
		t.Errorf("a key %s was made on the host:\n%s", desc, b)
	}
	if _, err := os.Stat("/etc/" + desc); err == nil {
		os.Remove("/etc/" + desc)
		t.Errorf("/etc/%s was created", desc)
	}
}
