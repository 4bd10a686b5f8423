package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Attacks on direct starts (direct_attack_test.go): what a command may
// leave for the next one, and the walls around it.

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

// TestPtraceRefusedNetworkRestricted: with the network restricted, ptrace
// is refused (EPERM), as in the reference's sandbox (Codex 0.171 refuses
// PTRACE_TRACEME and an attach to the command's own child there); with
// the network on both allow it. On a direct start and through the init.
func TestPtraceRefusedNetworkRestricted(t *testing.T) {
	needPython(t)
	h, cgfd, ws, p := directSetup(t)
	pn := networkOnPrimed(t, h, p, ws)
	viaInit := *h
	viaInit.NoDirect = true
	attach := `
pid = os.fork()
if pid == 0:
    time.sleep(5)
    os._exit(0)
say("attach", en(sc('ptrace', 16, pid, 0, 0)))
os.kill(pid, 9)
os.waitpid(pid, 0)
# Last: a tracee would stop at its next signal, with nobody to resume it.
say("traceme", en(sc('ptrace', 0, 0, 0, 0)))
os._exit(0)`
	for _, c := range []struct {
		name string
		host *Host
		p    *Policy
		want string
	}{
		{"direct_restricted", h, p, "attach EPERM\ntraceme EPERM\n"},
		{"init_restricted", &viaInit, p, "attach EPERM\ntraceme EPERM\n"},
		{"direct_network_on", h, pn, "attach ok\ntraceme ok\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := startDirectRun(t, c.host, cgfd, pyPlan(c.p, "import time\n"+attach), ws)
			if r.report.Direct() != (c.host == h) {
				t.Fatalf("direct %v", r.report.Direct())
			}
			got := r.line(t) + "\n" + r.line(t) + "\n"
			if got != c.want {
				t.Errorf("%q, want %q", got, c.want)
			}
			if code := waitReport(t, r); code != 0 {
				t.Errorf("exit %d", code)
			}
		})
	}
}
