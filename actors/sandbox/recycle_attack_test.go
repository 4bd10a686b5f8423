package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Attacks on recycled prepared sandboxes (Plan.Recycle): a command leaves
// or changes what it can in the sandbox its init serves the next start
// from; the next command, on the same init, must find nothing of it.

// runTwo runs a then b, recycled, on h's sandbox for p in ws, and returns
// their outputs; it fails unless both exited 0 and b ran on a's init.
func runTwo(t *testing.T, h *Host, a, b Plan, ws string) (string, string) {
	t.Helper()
	ra := startRecycled(t, h, a, ws)
	outA, code, _ := ra.wait(t)
	if code != 0 {
		t.Fatalf("first command: exit %d, %q", code, outA)
	}
	if !ra.report.Recycled() {
		t.Fatal("the first command's sandbox is not recycled")
	}
	rb := startRecycled(t, h, b, ws)
	outB, code, _ := rb.wait(t)
	if code != 0 {
		t.Fatalf("second command: exit %d, %q", code, outB)
	}
	if rb.pid != ra.pid {
		t.Fatalf("the second command ran in init %d, the first in %d: not recycled", rb.pid, ra.pid)
	}
	return outA, outB
}

// field returns the value after "key " on the line that starts so in out.
func field(t *testing.T, out, key string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, key+" "); ok {
			return v
		}
	}
	t.Fatalf("no %q line in %q", key, out)
	return ""
}

// TestRecycleAttackIPCLeftovers: a stopped process and one in a session
// of its own that ignores every signal it can, System V semaphores and message queues,
// a POSIX message queue, a socket, a FIFO and a subdirectory on /dev/shm,
// an abstract UNIX name whose listener was left in flight (in a socket's
// own queue, no process holding it) — the next command finds none.
func TestRecycleAttackIPCLeftovers(t *testing.T) {
	needPython(t)
	h, p, ws := recycledHost(t)
	a := shPlan(p, `
sh -c 'printf leftover > /proc/self/comm; kill -STOP $$' </dev/null >/dev/null 2>&1 &
setsid sh -c 'trap "" HUP INT TERM USR1 USR2 QUIT; printf leftover > /proc/self/comm; while :; do sleep 1000; done' </dev/null >/dev/null 2>&1 &
until [ "$(cat /proc/[0-9]*/comm 2>/dev/null | grep -c '^leftover$')" = 2 ]; do :; done
mkdir -p /dev/shm/d/e && echo secret > /dev/shm/d/e/f && mkfifo /dev/shm/d/fifo
python3 -c '
import ctypes, os, socket
l = ctypes.CDLL(None, use_errno=True)
print("sem", l.semget(0x5eed, 1, 0o1666) >= 0, "msg", l.msgget(0x5eed, 0o1666) >= 0)
rt = ctypes.CDLL("librt.so.1", use_errno=True)
print("mq-created", rt.mq_open(b"/recycle-leak", os.O_CREAT | os.O_RDWR, 0o666, None) >= 0)
u = socket.socket(socket.AF_UNIX); u.bind("/dev/shm/d/sock"); u.listen()
ln = socket.socket(socket.AF_UNIX); ln.bind("\0recycle-leak"); ln.listen()
x, y = socket.socketpair()
socket.send_fds(x, [b"x"], [ln.fileno(), y.fileno()])  # y holds itself and the listener
print("left")
'
`)
	b := shPlan(p, `
echo "shm [$(ls -A /dev/shm)]"
echo "leftovers $(cat /proc/[0-9]*/comm 2>/dev/null | grep -c '^leftover$')"
python3 -c '
import ctypes, os, socket
l = ctypes.CDLL(None, use_errno=True)
print("sem", l.semget(0x5eed, 0, 0) >= 0, "msg", l.msgget(0x5eed, 0) >= 0)
rt = ctypes.CDLL("librt.so.1", use_errno=True)
print("mq", rt.mq_open(b"/recycle-leak", os.O_RDONLY) >= 0)
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("\0recycle-leak"); print("abstract CONNECTED")
except OSError as e:
    print("abstract", e.errno)
'
`)
	outA, outB := runTwo(t, h, a, b, ws)
	if !strings.Contains(outA, "sem True msg True") || !strings.Contains(outA, "left") {
		t.Fatalf("the first command did not leave what it should have: %q", outA)
	}
	for _, want := range []string{"shm []", "leftovers 0", "sem False msg False", "mq False", fmt.Sprintf("abstract %d", unix.ECONNREFUSED)} {
		if !strings.Contains(outB, want) {
			t.Errorf("the second command's view lacks %q:\n%s", want, outB)
		}
	}
}

// TestRecycleAttackOwnedMetadata: what a command owns (uid 0, no
// capability) in its sandbox's own file systems: /dev/shm, /dev/pts,
// /dev/pts/ptmx and the /proc root. A fresh sandbox's are as made; the
// next command on a recycled one must neither read what the first set
// (times: 64 bits each) nor be locked out by it (mode 0 on /proc and
// /dev/ptmx: no /proc/self, no PTY, for a uid 0 without
// CAP_DAC_OVERRIDE).
func TestRecycleAttackOwnedMetadata(t *testing.T) {
	needPython(t)
	h, p, ws := recycledHost(t)
	paths := []string{"/dev/shm", "/dev/pts", "/dev/pts/ptmx", "/proc"}
	stat := `for f in /dev/shm /dev/pts /dev/pts/ptmx /proc; do echo "$f $(stat -c '%a %u %g %X %Y' $f)"; done
`
	a := shPlan(p, stat+`
for f in /dev/shm /dev/pts /dev/pts/ptmx /proc; do touch -d @424242 $f && touch -a -d @434343 $f && echo "times-set $f"; done
python3 -c 'import os; os.setxattr("/dev/shm", "user.leak", b"secret"); print("xattr-set")' 2>/dev/null
chmod 0 /proc /dev/pts/ptmx; chmod 0700 /dev/shm /dev/pts; echo "chmod $?"
`)
	b := shPlan(p, stat+`
echo "xattr $(python3 -c 'import os; print(len(os.listxattr("/dev/shm")))')"
cat /proc/self/comm >/dev/null && echo proc-readable
python3 -c 'import os; os.openpty(); print("openpty")'
`)
	outA, outB := runTwo(t, h, a, b, ws)
	for _, f := range paths {
		if !strings.Contains(outA, "times-set "+f) {
			t.Fatalf("the first command could not set %s's times: %q", f, outA)
		}
		// What a fresh sandbox shows (the first command's view before it
		// changed anything): mode, owner and times.
		if got, want := field(t, outB, f), field(t, outA, f); got != want {
			t.Errorf("%s: the second command sees %q, the first saw %q before its changes", f, got, want)
		}
	}
	if !strings.Contains(outA, "chmod 0") {
		t.Fatalf("the first command could not change the modes: %q", outA)
	}
	for _, want := range []string{"xattr 0", "proc-readable", "openpty"} {
		if !strings.Contains(outB, want) {
			t.Errorf("the second command's view lacks %q:\n%s", want, outB)
		}
	}
}

// TestRecycleAttackPidCounter: the pid namespace outlives a recycled
// command, and with it the namespace's pid counter: the next command's
// pid (and /proc/sys/kernel/ns_last_pid, /proc/loadavg) says how many
// processes and threads the first made — a channel between commands
// that must not exist. On a fresh sandbox the command's pid is the same
// whatever ran before.
func TestRecycleAttackPidCounter(t *testing.T) {
	h, p, ws := recycledHost(t)
	const forks = 300
	a := shPlan(p, fmt.Sprintf(`echo "pid $$"; i=0; while [ $i -lt %d ]; do /bin/true; i=$((i+1)); done`, forks))
	b := shPlan(p, `echo "pid $$"`)
	outA, outB := runTwo(t, h, a, b, ws)
	pa, _ := strconv.Atoi(field(t, outA, "pid"))
	pb, _ := strconv.Atoi(field(t, outB, "pid"))
	// The init's own threads may take a pid or two in between: far
	// fewer than the first command's forks.
	t.Logf("first command pid %d, second %d", pa, pb)
	if pb-pa >= forks/2 {
		t.Errorf("the second command is pid %d, the first %d: it can count the first's %d forks", pb, pa, forks)
	}
}

// TestRecycleAttackInitRlimits: a command has the init's uid (0), so
// prlimit(2) on the init needs no capability to lower its limits; the
// init's limits are what it forks the next command with. The next
// command must start with the limits the first one started with, not
// those the first set on its init: on the same init (which set them
// back) or, where the init cannot raise a hard limit again (no
// CAP_SYS_RESOURCE), on a fresh one. A soft limit lowered alone is set
// back by any init: that one is recycled.
func TestRecycleAttackInitRlimits(t *testing.T) {
	needPython(t)
	h, p, ws := recycledHost(t)
	limits := `echo "limits $(ulimit -Sn) $(ulimit -Sf) $(ulimit -St) $(ulimit -Hn) $(ulimit -Hf)"
`
	for _, tc := range []struct {
		name, lower string
		recycled    bool
	}{
		{"soft", `r.prlimit(1, r.RLIMIT_NOFILE, (64, r.prlimit(1, r.RLIMIT_NOFILE)[1])); r.prlimit(1, r.RLIMIT_FSIZE, (8, r.RLIM_INFINITY))`, true},
		{"hard", `r.prlimit(1, r.RLIMIT_NOFILE, (64, 64)); r.prlimit(1, r.RLIMIT_FSIZE, (8, 8)); r.prlimit(1, r.RLIMIT_CPU, (100, 100))`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.prepared.settle()
			ra := startRecycled(t, h, shPlan(p, limits+`python3 -c 'import resource as r; `+tc.lower+`; print("lowered", r.prlimit(1, r.RLIMIT_NOFILE)[0])'`), ws)
			outA, code, _ := ra.wait(t)
			if code != 0 || !strings.Contains(outA, "lowered 64") {
				t.Fatalf("the command could not lower its init's limits: exit %d, %q", code, outA)
			}
			if !ra.report.Recycled() {
				t.Fatal("not a recycled start")
			}
			rb := startRecycled(t, h, shPlan(p, limits), ws)
			outB, code, _ := rb.wait(t)
			if code != 0 {
				t.Fatalf("second command: exit %d, %q", code, outB)
			}
			if got, want := field(t, outB, "limits"), field(t, outA, "limits"); got != want {
				t.Errorf("the second command (init %d, the first's %d) starts with limits (soft nofile, fsize, cpu; hard nofile, fsize) %s, the first with %s: the first set them on the init", rb.pid, ra.pid, got, want)
			}
			if tc.recycled && rb.pid != ra.pid {
				t.Errorf("the init did not serve the next start after its soft limits were lowered (init %d, then %d)", ra.pid, rb.pid)
			}
		})
	}
}

// TestRecycleAttackIPCInCallersNetNS: starts in the caller's network
// namespace (the managed network's: Plan.NetNS) are forked from a
// spawning thread that serves one start (it entered that namespace); the
// init makes a new one for the next. The next command must still get an
// IPC namespace of its own, not the one an earlier command left its
// System V objects in.
func TestRecycleAttackIPCInCallersNetNS(t *testing.T) {
	needPython(t)
	h := preparedHost(t)
	n, err := NewNetNS()
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ws := stageDir(t)
	p := &Policy{RestrictFS: true, Network: true, Rules: []Rule{{Path: "/", Access: Read}, {Path: ws, Access: Write}}}
	primePrepared(t, h, Plan{Policy: p, NetNS: n}, ws)
	leave := `python3 -c 'import ctypes; l = ctypes.CDLL(None); print("sem", l.semget(0x5eee, 1, 0o1666) >= 0, "msg", l.msgget(0x5eee, 0o1666) >= 0)'`
	look := `python3 -c 'import ctypes; l = ctypes.CDLL(None); print("sem", l.semget(0x5eee, 0, 0) >= 0, "msg", l.msgget(0x5eee, 0) >= 0)'`
	var pids []int
	for i, script := range []string{leave, look, look} {
		plan := shPlan(p, script)
		plan.NetNS = n
		r := startRecycled(t, h, plan, ws)
		out, code, _ := r.wait(t)
		pids = append(pids, r.pid)
		if i == 0 {
			if code != 0 || out != "sem True msg True\n" || !r.report.Recycled() {
				t.Fatalf("first command: exit %d, recycled %v, %q", code, r.report.Recycled(), out)
			}
			continue
		}
		if code != 0 || out != "sem False msg False\n" {
			t.Errorf("command %d (init %d, the first's %d): exit %d, %q: it sees the first command's System V objects", i+1, r.pid, pids[0], code, out)
		}
	}
	if pids[1] != pids[0] {
		t.Logf("not recycled: inits %v", pids)
	}
}

// TestRecycleAttackInFlightAbstract: a command binds abstract UNIX names
// and leaves each listener in flight (in the queue of a socket that holds
// itself, no process holding either): they outlive its processes until
// the kernel's garbage collector takes them (it runs when a UNIX socket
// is released while some are in flight: maybe long after). The
// restricted network namespace is the sandbox's, kept for the next
// command on a recycled init, in the same Landlock domain: that one must
// neither list the names (/proc/net/unix) nor connect to them (a channel
// of any width).
func TestRecycleAttackInFlightAbstract(t *testing.T) {
	needPython(t)
	h, p, ws := recycledHost(t)
	const n = 200
	a := shPlan(p, fmt.Sprintf(`python3 -c '
import socket
keep = []
for i in range(%d):
    ln = socket.socket(socket.AF_UNIX); ln.bind("\0recycle-inflight-%%d" %% i); ln.listen()
    x, y = socket.socketpair()
    socket.send_fds(x, [b"x"], [ln.fileno(), y.fileno()])
    keep.append((ln, x, y))
print("left")
'`, n))
	b := shPlan(p, fmt.Sprintf(`echo "listed $(grep -c recycle-inflight /proc/net/unix)"
python3 -c '
import socket
c = 0
for i in range(%d):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect("\0recycle-inflight-%%d" %% i); c += 1
    except OSError:
        pass
    s.close()
print("connected", c)
'`, n))
	outA, outB := runTwo(t, h, a, b, ws)
	if !strings.Contains(outA, "left") {
		t.Fatalf("first command: %q", outA)
	}
	if field(t, outB, "listed") != "0" || field(t, outB, "connected") != "0" {
		t.Errorf("the second command sees (/proc/net/unix) or connects to the first's abstract names left in flight: %q", outB)
	}
}

// TestRecycleAttackInitDescriptors: each start hands the init its
// command's stdio (and a PTY start its devpts): a recycled init that kept
// any of them would hold an earlier command's pipe or terminal open (its
// reader never sees EOF) and grow with every start. After many starts,
// pipes and PTYs alternating, the init holds what it held after the
// first.
func TestRecycleAttackInitDescriptors(t *testing.T) {
	h, p, ws := recycledHost(t)
	count := func(pid int) int {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	run := func(i int) int {
		if i%2 == 1 {
			m, r := ptyRecycled(t, h, shPlan(p, `echo up`), ws)
			readUntil(t, m, "up\n")
			if status, ok := r.report.Wait(); !ok || status != 0 || !r.report.Recycled() {
				t.Fatalf("PTY start %d: status %d ok %v recycled %v", i, status, ok, r.report.Recycled())
			}
			_ = r.proc.Release()
			m.Close()
			return r.pid
		}
		r := startRecycled(t, h, shPlan(p, `echo up`), ws)
		if out, code, _ := r.wait(t); code != 0 || out != "up\n" {
			t.Fatalf("start %d: exit %d, %q", i, code, out)
		}
		return r.pid
	}
	init := run(0)
	first := count(init)
	for i := 1; i <= 20; i++ {
		if pid := run(i); pid != init {
			t.Fatalf("start %d ran in init %d, the first in %d: not recycled", i, pid, init)
		}
	}
	// The init may be between a report and its clean-up (a descriptor or
	// two open for it) at either count: a leak is a count that stays above
	// the first one.
	n := count(init)
	for deadline := time.Now().Add(5 * time.Second); n > first && time.Now().Before(deadline); n = count(init) {
		time.Sleep(10 * time.Millisecond)
	}
	if n > first {
		ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", init))
		var held []string
		for _, e := range ents {
			l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", init, e.Name()))
			held = append(held, e.Name()+"->"+l)
		}
		t.Errorf("the init holds %d descriptors after 21 starts, %d after the first: %v", n, first, held)
	}
}

// TestRecycleAttackEnvAndCwd: a recycled init takes each start's
// command, environment and working directory afresh: the next command has
// none of the first's environment and runs where its own start says.
func TestRecycleAttackEnvAndCwd(t *testing.T) {
	h, p, ws := recycledHost(t)
	sub := filepath.Join(ws, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	ra := startRecycled(t, h, shPlan(p, `echo "pwd $(pwd) secret ${SECRET:-none}"; export LATER=1`, "SECRET=hunter2"), sub)
	outA, code, _ := ra.wait(t)
	if code != 0 || field(t, outA, "pwd") != sub+" secret hunter2" {
		t.Fatalf("first command: exit %d, %q", code, outA)
	}
	rb := startRecycled(t, h, shPlan(p, `echo "pwd $(pwd) secret ${SECRET:-none} later ${LATER:-none} env $(env | grep -c .)"`), ws)
	outB, code, _ := rb.wait(t)
	if rb.pid != ra.pid {
		t.Fatalf("not recycled: init %d then %d", ra.pid, rb.pid)
	}
	if code != 0 || !strings.HasPrefix(field(t, outB, "pwd"), ws+" secret none later none env ") {
		t.Errorf("second command: exit %d, %q", code, outB)
	}
}

// TestRecycleAttackInitAutogroup: /proc/1/autogroup is the init's
// scheduling autogroup, writable by its owner (uid 0, no capability
// needed to raise its nice value) and readable by all: a command writes
// a value there and the next command on the recycled init reads it. (An
// unprivileged write is refused with EAGAIN within 0.1s of any other
// write: the command tries until one goes through.)
//
// With /proc mounted hidepid=2 the command no longer sees /proc/1: refused
// at the source (the test passes saying so); scrub's restoration is the
// second wall, which the test checks wherever the first is missing.
func TestRecycleAttackInitAutogroup(t *testing.T) {
	if _, err := os.Stat("/proc/self/autogroup"); err != nil {
		t.Skip("no autogroups on this kernel")
	}
	attackInitProc(t, "ag", `sed 's/.* nice //' /proc/1/autogroup`, `sed 's/.* nice //' /proc/1/autogroup`,
		`i=0; until ! [ -e /proc/1/autogroup ] || echo 13 2>/dev/null > /proc/1/autogroup || [ $i -gt 100000 ]; do i=$((i+1)); done`,
		"13", "autogroup nice")
}

// TestRecycleAttackInitCoredumpFilter: /proc/1/coredump_filter is
// writable by the init's owner (a command's uid, 0), and the init's
// filter is what every process it forks starts with: the next command on
// the recycled init must not start with the one the first set.
//
// With /proc mounted hidepid=2 the command no longer sees /proc/1: refused
// at the source (the test passes saying so); scrub's restoration is the
// second wall, which the test checks wherever the first is missing.
func TestRecycleAttackInitCoredumpFilter(t *testing.T) {
	attackInitProc(t, "cdf", `cat /proc/self/coredump_filter`, `cat /proc/1/coredump_filter`,
		`echo 0x7e > /proc/1/coredump_filter`, "0000007e", "coredump filter")
}

// TestRecycleAttackInitOomScoreAdj: a command may raise its init's
// oom_score_adj (its owner: no capability needed to raise it), and the
// init's value is what the next command is forked with: that one must
// not start as the OOM killer's first pick, whether or not the init may
// lower its own value while commands run (CAP_SYS_RESOURCE).
//
// With /proc mounted hidepid=2 the command no longer sees /proc/1: refused
// at the source (the test passes saying so); scrub's restoration is the
// second wall, which the test checks wherever the first is missing.
func TestRecycleAttackInitOomScoreAdj(t *testing.T) {
	attackInitProc(t, "oom", `cat /proc/self/oom_score_adj`, `cat /proc/1/oom_score_adj`,
		`echo 1000 > /proc/1/oom_score_adj`, "1000", "oom_score_adj")
}

// attackInitProc runs two commands on one recycled init: the first reads
// an attribute of its own (own), sets its init's (set), and reads the
// init's back (init); the second reads its own. If the first could set
// the init's to want (no hidepid), the second must start with what the
// first started with, not with what it set.
func attackInitProc(t *testing.T, key, own, init, set, want, what string) {
	t.Helper()
	h, p, ws := recycledHost(t)
	read := `echo "` + key + ` $(` + own + `)"
`
	outA, outB := runTwo(t, h, shPlan(p, read+set+`; echo "set $(`+init+`)"`), shPlan(p, read), ws)
	if field(t, outA, "set") != want {
		t.Logf("refused at the source: the command could not set its init's %s: %q", what, outA)
		return
	}
	if got, first := field(t, outB, key), field(t, outA, key); got != first {
		t.Errorf("the second command starts with %s %s (the first set its init's to %s; it started with %s)", what, got, want, first)
	}
}

// TestRecycleAttackNice: a start's priority is the daemon thread's
// (preparedStart.Nice), set on the init's spawning thread before the fork:
// the next start of the recycled init, from a thread of a higher
// priority, must run at that priority, not the first start's.
func TestRecycleAttackNice(t *testing.T) {
	h, p, ws := recycledHost(t)
	niced := make(chan *recycledRun, 1)
	go func() {
		// A thread of its own at nice 5, which ends with the goroutine
		// (locked, never unlocked).
		runtime.LockOSThread()
		if err := unix.Setpriority(unix.PRIO_PROCESS, 0, 5); err != nil {
			niced <- nil
			return
		}
		niced <- startRecycled(t, h, shPlan(p, `echo "nice $(cut -d' ' -f19 /proc/self/stat)"`), ws)
	}()
	ra := <-niced
	if ra == nil {
		t.Skip("cannot renice a thread here")
	}
	outA, code, _ := ra.wait(t)
	if code != 0 || field(t, outA, "nice") != "5" || !ra.report.Recycled() {
		t.Fatalf("first command: exit %d, recycled %v, %q", code, ra.report.Recycled(), outA)
	}
	rb := startRecycled(t, h, shPlan(p, `echo "nice $(cut -d' ' -f19 /proc/self/stat)"`), ws)
	outB, code, _ := rb.wait(t)
	if code != 0 {
		t.Fatalf("second command: exit %d, %q", code, outB)
	}
	if rb.pid != ra.pid {
		t.Fatalf("not recycled: init %d then %d", ra.pid, rb.pid)
	}
	if want := strconv.Itoa(threadNice()); field(t, outB, "nice") != want {
		t.Errorf("second command at nice %s, want the daemon's %s", field(t, outB, "nice"), want)
	}
}

// ptyRecycled starts plan with Recycle on a PTY of h (the command's
// controlling terminal) and returns the master and the report.
func ptyRecycled(t *testing.T, h *Host, plan Plan, dir string) (*os.File, *recycledRun) {
	t.Helper()
	master, slave, devpts, ok, err := h.OpenPTY(24, 80)
	if err != nil || !ok {
		t.Fatalf("OpenPTY: %v %v", ok, err)
	}
	t.Cleanup(func() { master.Close() })
	plan.Recycle, plan.DevPts, plan.Ctty = true, devpts, true
	proc, report, err := StartReported(h, plan, &os.ProcAttr{Dir: dir, Files: []*os.File{slave, slave, slave}})
	slave.Close()
	devpts.Close()
	if err != nil {
		t.Fatal(err)
	}
	_ = master.SetReadDeadline(time.Now().Add(20 * time.Second))
	return master, &recycledRun{pid: proc.Pid, proc: proc, report: report}
}

// readUntil reads master until its output holds want (bounded by the
// master's deadline).
func readUntil(t *testing.T, master *os.File, want string) string {
	t.Helper()
	var out []byte
	buf := make([]byte, 512)
	for !strings.Contains(strings.ReplaceAll(string(out), "\r", ""), want) {
		n, err := master.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			t.Fatalf("read the terminal: %q before %v, want %q", out, err, want)
		}
	}
	return strings.ReplaceAll(string(out), "\r", "")
}

// TestRecycleAttackPTY: after a recycled PTY start whose master the
// daemon still holds, the next commands on that init (one on pipes, one
// on a PTY of its own) cannot reach the first's terminal: its pts is not
// in their /dev/pts, and what is typed into the old master reaches no one
// of them; the second PTY start gets a terminal of its own that works.
func TestRecycleAttackPTY(t *testing.T) {
	h, p, ws := recycledHost(t)
	m1, r1 := ptyRecycled(t, h, shPlan(p, `echo "tty $(tty)"; echo up`), ws)
	out1 := readUntil(t, m1, "up\n")
	if status, ok := r1.report.Wait(); !ok || status != 0 || !r1.report.Recycled() {
		t.Fatalf("PTY start: status %d ok %v recycled %v, %q", status, ok, r1.report.Recycled(), out1)
	}
	_ = r1.proc.Release()
	tty := field(t, out1, "tty")

	rb := startRecycled(t, h, shPlan(p, fmt.Sprintf(`
echo "pts [$(ls /dev/pts | tr '\n' ' ')]"
sh -c 'exec 3<>%s && echo OPENED && timeout 2 head -c 6 <&3' || echo refused
`, tty)), ws)
	if _, err := m1.Write([]byte("typed\n")); err != nil {
		t.Logf("write to the old master: %v", err)
	}
	outB, code, _ := rb.wait(t)
	if rb.pid != r1.pid {
		t.Fatalf("not recycled: init %d then %d", r1.pid, rb.pid)
	}
	if code != 0 || strings.Contains(outB, "OPENED") || strings.Contains(outB, "typed") {
		t.Errorf("the next command reached the earlier PTY %s: exit %d, %q", tty, code, outB)
	}
	if strings.Contains(" "+field(t, outB, "pts"), " "+strings.TrimPrefix(tty, "/dev/pts/")+" ") {
		t.Errorf("the earlier pts is listed: %q", outB)
	}

	m3, r3 := ptyRecycled(t, h, shPlan(p, `echo "tty $(tty)"; stty size; read x; echo "got $x"`), ws)
	readUntil(t, m3, "24 80\n")
	if _, err := m3.Write([]byte("mine\n")); err != nil {
		t.Fatal(err)
	}
	out3 := readUntil(t, m3, "got mine\n")
	if status, ok := r3.report.Wait(); !ok || status != 0 {
		t.Fatalf("second PTY start: status %d ok %v, %q", status, ok, out3)
	}
	_ = r3.proc.Release()
	if r3.pid != r1.pid {
		t.Fatalf("second PTY start not recycled: init %d then %d", r1.pid, r3.pid)
	}
	if strings.Contains(out3, "typed") {
		t.Errorf("what was typed into the first terminal reached the second: %q", out3)
	}
}

// TestRecycleAttackLateSignals: a stop (StopRelay, SIGSTOP), a SIGTERM
// and a SIGHUP sent through the first start's report after its command
// ended, while the same init runs the next command, reach neither that
// command nor its children. The second command's own SIGUSR1, sent after
// them, is the handshake: frames are handled in order, each by a kill()
// before the next is read, so a late stop or kill that reached the
// command would have stopped or ended it before its USR1 trap ran.
func TestRecycleAttackLateSignals(t *testing.T) {
	h, p, ws := recycledHost(t)
	ra := startRecycled(t, h, shPlan(p, `echo first`), ws)
	if out, code, _ := ra.wait(t); code != 0 || out != "first\n" {
		t.Fatalf("first: %d %q", code, out)
	}
	rb := startRecycled(t, h, shPlan(p, `trap 'echo usr1; kill $! 2>/dev/null; exit 0' USR1; sleep 1000 & echo ready; wait`), ws)
	if l := rb.line(t); l != "ready" {
		t.Fatalf("second: %q", l)
	}
	if rb.pid != ra.pid {
		t.Fatalf("not recycled: init %d then %d", ra.pid, rb.pid)
	}
	for _, s := range []syscall.Signal{StopRelay, syscall.SIGSTOP, syscall.SIGTERM, syscall.SIGHUP} {
		if err := ra.report.Signal(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := rb.report.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	out, status, sig := rb.wait(t)
	if status != 0 || sig != 0 || out != "usr1\n" {
		t.Fatalf("second command after the first's late signals: status %d, signal %d, output %q; want its own USR1 and exit 0", status, sig, out)
	}
}

// TestSandboxAttackProcEntryMode: a sandboxed command (uid 0, no
// capability; fresh or recycled alike) owns the kernel's global /proc
// entries (/proc/meminfo, /proc/slabinfo...) and chmod on one changes the
// mode the kernel keeps for it (proc_notify_change sets the
// proc_dir_entry's): every procfs mounted after (every later sandbox,
// fresh or not, every container) has the new mode, and the host's /proc
// too once its inode leaves the cache. A command can lock later commands
// out of /proc/meminfo (chmod 0) or open a root-only entry (slabinfo,
// pagetypeinfo) to every user. The test changes /proc/buddyinfo and puts
// it back (the host's chmod sets the kernel's mode again). Refused: the
// sandbox's /proc has every entry but the processes' own read-only.
func TestSandboxAttackProcEntryMode(t *testing.T) {
	h, p, ws := recycledHost(t)
	const entry = "/proc/buddyinfo"
	st, err := os.Stat(entry)
	if err != nil {
		t.Skipf("no %s: %v", entry, err)
	}
	mode := st.Mode().Perm()
	t.Cleanup(func() { _ = os.Chmod(entry, mode) })
	ra := startRecycled(t, h, shPlan(p, `chmod 0 `+entry+`; echo "chmod $?"`), ws)
	outA, code, _ := ra.wait(t)
	if code != 0 || !strings.Contains(outA, "chmod ") {
		t.Fatalf("exit %d, %q", code, outA)
	}
	// Refused: the entries are on a read-only mount (EROFS).
	if !strings.Contains(outA, "Read-only file system") || strings.Contains(outA, "chmod 0") {
		t.Errorf("a sandboxed command's chmod of %s was not refused as read-only: %q", entry, outA)
	}
	// Another sandbox, with a procfs of its own: a different policy.
	p2 := &Policy{RestrictFS: true, Rules: []Rule{{Path: "/", Access: Read}}}
	out, code, err := runPlan(h, shPlan(p2, `stat -c "mode %a" `+entry), ws)
	if err != nil || code != 0 {
		t.Fatalf("second sandbox: exit %d, %v, %q", code, err, out)
	}
	if got := field(t, out, "mode"); got != fmt.Sprintf("%o", mode) {
		t.Errorf("a later sandbox's %s has mode %s (the host's %o): the first sandbox's chmod outlived it", entry, got, mode)
	}
}

// TestRecycleAttackSignalStorm: a caller signals a recycled start's
// command without pause, across its end and while the same init runs the
// next command (SIGUSR1, whose default action kills): the first command
// (which ignores it) ends as it chooses, the next one, which does not
// ignore it, gets none of them. Under -race: Signal, Wait and Abandon of
// one report concurrently.
func TestRecycleAttackSignalStorm(t *testing.T) {
	h, p, ws := recycledHost(t)
	ra := startRecycled(t, h, shPlan(p, `trap '' USR1; echo ready; read x; exit 4`), ws)
	if l := ra.line(t); l != "ready" {
		t.Fatalf("first command: %q", l)
	}
	stop := make(chan struct{})
	stormDone := make(chan int, 1)
	go func() {
		n := 0
		defer func() { stormDone <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := ra.report.Signal(syscall.SIGUSR1); err != nil {
				t.Errorf("signal: %v", err)
				return
			}
			n++
		}
	}()
	if _, err := ra.stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	if _, status, sig := ra.wait(t); status != 4 || sig != 0 {
		t.Fatalf("first command: status %d, signal %d; want exit 4", status, sig)
	}
	rb := startRecycled(t, h, shPlan(p, `echo ready; read x; echo "b $x"`), ws)
	if l := rb.line(t); l != "ready" {
		t.Fatalf("second command: %q", l)
	}
	if rb.pid != ra.pid {
		t.Fatalf("not recycled: init %d then %d", ra.pid, rb.pid)
	}
	// The handshake: a frame of the second start after the storm's.
	if err := rb.report.Signal(syscall.SIGWINCH); err != nil {
		t.Fatal(err)
	}
	close(stop)
	n := <-stormDone
	ra.report.Abandon() // after its Wait: no-op, never the next start's sandbox
	if _, err := rb.stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	out, status, sig := rb.wait(t)
	if status != 0 || sig != 0 || out != "b go\n" {
		t.Fatalf("second command after %d SIGUSR1s for the first: status %d, signal %d, %q", n, status, sig, out)
	}
}

// TestRecycleAttackPlanChangedMeanwhile: the host changes what a sandbox
// was built for (.git, a read-only stub, becomes a symlink to a writable
// directory) while a command runs on it; given back after, it must not
// serve the next start with its stale view: that start runs on a sandbox
// built for the new plan, and .git stays unwritable.
func TestRecycleAttackPlanChangedMeanwhile(t *testing.T) {
	h := preparedHost(t)
	ws := stagedWS(t)
	target := t.TempDir() // under /tmp: writable by the policy itself
	p := codexWorkspaceWrite(ws)
	primeOne(t, h, p, ws)
	ra := startReady(t, h, shPlan(p, `echo ready; read x; echo "a $x"`), ws)
	git := filepath.Join(ws, ".git")
	if err := os.Remove(git); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, git); err != nil {
		t.Fatal(err)
	}
	if _, err := ra.stdin.Write([]byte("done\n")); err != nil {
		t.Fatal(err)
	}
	if out, code, _ := ra.wait(t); code != 0 || out != "a done\n" {
		t.Fatalf("first command: exit %d, %q", code, out)
	}
	rb := startRecycled(t, h, shPlan(p, `{ echo pwn > .git/config; } 2>/dev/null && echo WROTE || echo DENIED`), ws)
	out, code, _ := rb.wait(t)
	if rb.pid == ra.pid {
		t.Errorf("the next start ran on the sandbox built before .git changed (init %d)", ra.pid)
	}
	if code != 0 || out != "DENIED\n" {
		t.Errorf("exit %d, %q", code, out)
	}
	if _, err := os.Stat(filepath.Join(target, "config")); err == nil {
		t.Error("the command wrote through the .git symlink")
	}
}

// TestRecycleAttackCloseWhileRunning: the Host closes while a recycled
// start's command runs: the command runs on to its end, its report says
// so, and then its init is killed and reaped (no helper left, none
// unreaped), not given back.
func TestRecycleAttackCloseWhileRunning(t *testing.T) {
	before := helperChildren(t)
	h, p, ws := recycledHost(t)
	r := startRecycled(t, h, shPlan(p, `echo ready; read x; echo "got $x"; exit 3`), ws)
	if l := r.line(t); l != "ready" {
		t.Fatalf("command: %q", l)
	}
	if !r.report.Recycled() {
		t.Fatal("not a recycled start")
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	out, status, _ := r.wait(t)
	if status != 3 || out != "got go\n" {
		t.Fatalf("the command after Close: status %d, %q", status, out)
	}
	if err := syscall.Kill(r.pid, 0); err != syscall.ESRCH {
		t.Errorf("the init %d after its command's end on a closed host: kill(0) = %v, want ESRCH (killed and reaped)", r.pid, err)
	}
	for pid := range helperChildren(t) {
		if !before[pid] {
			t.Errorf("helper %d left after Close", pid)
		}
	}
}

// TestRecycleAttackConcurrentStarts: starts of one plan at once: one
// takes the recycled sandbox, the others fresh ones; each runs its own
// command with its own output and status, and the sandboxes given back
// serve the next starts with nothing of the earlier ones in /dev/shm.
func TestRecycleAttackConcurrentStarts(t *testing.T) {
	h, p, ws := recycledHost(t)
	const n = 3
	runs := make([]*recycledRun, n)
	for i := range runs {
		runs[i] = startRecycled(t, h, shPlan(p, fmt.Sprintf(`echo "shm [$(ls -A /dev/shm)]"; echo %d > /dev/shm/mine-%d; read x; echo "cmd %d $x"; exit %d`, i, i, i, 10+i)), ws)
	}
	for i, r := range runs {
		if l := r.line(t); l != "shm []" {
			t.Errorf("start %d: %q", i, l)
		}
	}
	for i, r := range runs {
		if _, err := r.stdin.Write([]byte(fmt.Sprintf("in%d\n", i))); err != nil {
			t.Fatal(err)
		}
	}
	inits := map[int]bool{}
	for i, r := range runs {
		out, status, _ := r.wait(t)
		if want := fmt.Sprintf("cmd %d in%d\n", i, i); out != want || status != 10+i {
			t.Errorf("start %d: status %d, %q; want %d, %q", i, status, out, 10+i, want)
		}
		if inits[r.pid] {
			t.Errorf("two running starts on init %d", r.pid)
		}
		inits[r.pid] = true
	}
	for i := 0; i < n; i++ {
		r := startRecycled(t, h, shPlan(p, `echo "shm [$(ls -A /dev/shm)]"`), ws)
		out, status, _ := r.wait(t)
		if status != 0 || out != "shm []\n" {
			t.Errorf("a later start: status %d, %q", status, out)
		}
	}
}
