package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Adversarial review of prepared sandboxes (prepared.go, init.go): what the
// command inherits from its init and the daemon, its priority, and what a
// run of prepared starts leaves in the daemon.

// setProcessNice sets every thread of this process to nice n (Linux
// priorities are per thread; new threads inherit their creator's) and
// returns a func that sets them back to 0. A thread the runtime makes
// while the threads are being set may copy a priority not yet set: the
// threads are set again until one pass finds them all at n, after which
// every new thread inherits n.
func setProcessNice(t *testing.T, n int) func() {
	t.Helper()
	each := func(n int) (changed bool, err error) {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return false, err
		}
		for _, e := range ents {
			tid, _ := strconv.Atoi(e.Name())
			if prio, err := unix.Getpriority(unix.PRIO_PROCESS, tid); err == nil && 20-prio == n {
				continue // the system call answers 20 - nice
			}
			changed = true
			if err := unix.Setpriority(unix.PRIO_PROCESS, tid, n); err != nil && err != unix.ESRCH {
				return changed, fmt.Errorf("setpriority(%d, %d): %w", tid, n, err)
			}
		}
		return changed, nil
	}
	set := func(n int) error {
		for pass := 0; pass < 100; pass++ {
			changed, err := each(n)
			if err != nil || !changed {
				return err
			}
		}
		return fmt.Errorf("the threads kept changing priority")
	}
	if err := set(n); err != nil {
		t.Skipf("cannot set this process's priority: %v", err)
	}
	return func() { _ = set(0) }
}

// TestReviewPreparedNiceIsDaemons: a daemon run at a lower priority (nice
// 5, as an operator's unit file may ask) starts its commands at that
// priority: a fresh start's command inherits it. A prepared start's
// command must not run above it (the spawning thread's setpriority(0)
// raises it back to 0, above the daemon the operator niced).
func TestReviewPreparedNiceIsDaemons(t *testing.T) {
	h := preparedHost(t)
	fresh := *h
	fresh.NoPrepare = true
	ws := t.TempDir()
	p := codexWorkspaceWrite(ws)
	restore := setProcessNice(t, 5)
	defer restore()
	script := `cut -d' ' -f19 /proc/self/stat; exit 5`
	want, wcode, err := runPlan(&fresh, shPlan(p, script), ws)
	if err != nil || wcode != 5 {
		t.Fatalf("fresh: %q exit %d %v", want, wcode, err)
	}
	if want != "5\n" {
		t.Fatalf("fresh start's command at nice %q, want the daemon's 5", want)
	}
	used := primePrepared(t, h, Plan{Policy: p}, ws)
	got, gcode, err := runPlan(h, shPlan(p, script), ws)
	if err != nil || gcode != 5 {
		t.Fatalf("prepared: %q exit %d %v", got, gcode, err)
	}
	wantUsed(t, h, used, 1, "the nice case")
	if got != want {
		t.Errorf("prepared start's command at nice %q, fresh start's (the daemon's) %q", strings.TrimSpace(got), strings.TrimSpace(want))
	}
}

// TestReviewPreparedCommandFDs: on a prepared start the command holds
// exactly its stdio (0-2, the very files the start passed) and nothing of
// its init's socket, the received copies, the cgroup or the preparation.
func TestReviewPreparedCommandFDs(t *testing.T) {
	h := preparedHost(t)
	ws := t.TempDir()
	p := codexWorkspaceWrite(ws)
	used := primePrepared(t, h, Plan{Policy: p}, ws)
	// ls lists its own descriptors into a workspace file (no pipe of a
	// shell's in between): 0 the start's /dev/null, 1 that file, 2 the
	// start's pipe, 3 ls's own directory of /proc/self/fd.
	out, code, err := runPlan(h, shPlan(p, `ls -l /proc/self/fd/ > fds; exit 5`), ws)
	if err != nil || code != 5 {
		t.Fatalf("exit %d %v: %q", code, err, out)
	}
	wantUsed(t, h, used, 1, "the descriptors")
	b, err := os.ReadFile(filepath.Join(ws, "fds"))
	if err != nil {
		t.Fatal(err)
	}
	fds := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) >= 3 && f[len(f)-2] == "->" {
			fds[f[len(f)-3]] = f[len(f)-1]
		}
	}
	for num, target := range fds {
		switch num {
		case "0":
			if target != "/dev/null" {
				t.Errorf("stdin is %q, want /dev/null", target)
			}
		case "1":
			if target != filepath.Join(ws, "fds") {
				t.Errorf("stdout is %q", target)
			}
		case "2":
			if !strings.HasPrefix(target, "pipe:") {
				t.Errorf("stderr is %q, want the start's pipe", target)
			}
		case "3":
			if !strings.HasPrefix(target, "/proc/") || !strings.HasSuffix(target, "/fd") {
				t.Errorf("fd 3 is %q, want ls's own directory", target)
			}
		default:
			t.Errorf("the command holds fd %s -> %s", num, target)
		}
	}
	if len(fds) != 4 {
		t.Errorf("descriptors %v, want 0-3", fds)
	}
}

// TestReviewPreparedNoDaemonFDLeak: twenty prepared starts leave the
// daemon with the descriptors it had (one sandbox waiting before and
// after): every socket, received copy and report closed.
func TestReviewPreparedNoDaemonFDLeak(t *testing.T) {
	h := preparedHost(t)
	ws := t.TempDir()
	p := codexWorkspaceWrite(ws)
	used := primePrepared(t, h, Plan{Policy: p}, ws)
	count := func() (int, string) {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, e := range ents {
			l, _ := os.Readlink("/proc/self/fd/" + e.Name())
			s = append(s, e.Name()+"->"+l)
		}
		return len(ents), strings.Join(s, " ")
	}
	before, bl := count()
	const n = 20
	for i := 0; i < n; i++ {
		devnull, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		proc, report, err := StartReported(h, shPlan(p, `exit 3`), &os.ProcAttr{Dir: ws, Files: []*os.File{devnull, devnull, devnull}, Sys: &syscall.SysProcAttr{Setsid: true}})
		devnull.Close()
		if err != nil {
			t.Fatal(err)
		}
		status, ok := report.Wait()
		report.Close()
		st, werr := proc.Wait()
		if !ok || status != 3 || werr != nil || st.ExitCode() != 3 {
			t.Fatalf("start %d: report %d %v, init %v %v", i, status, ok, st, werr)
		}
		h.prepared.settle()
	}
	wantUsed(t, h, used, n, "the run")
	after, al := count()
	if after != before {
		t.Errorf("descriptors: %d before, %d after %d prepared starts\nbefore: %s\nafter:  %s", before, after, n, bl, al)
	}
}

// TestReviewPreparedRacingStarts: starts of one plan racing for the one
// waiting sandbox: exactly one takes it, every start runs its own command
// and gets its own status.
func TestReviewPreparedRacingStarts(t *testing.T) {
	h := preparedHost(t)
	ws := t.TempDir()
	p := codexWorkspaceWrite(ws)
	used := primePrepared(t, h, Plan{Policy: p}, ws)
	const n = 4
	var wg sync.WaitGroup
	outs := make([]string, n)
	codes := make([]int, n)
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			outs[i], codes[i], errs[i] = runPlan(h, shPlan(p, fmt.Sprintf(`echo me-%d; exit %d`, i, 10+i)), ws)
		}(i)
	}
	wg.Wait()
	for i := 0; i < n; i++ {
		if errs[i] != nil || codes[i] != 10+i || outs[i] != fmt.Sprintf("me-%d\n", i) {
			t.Errorf("start %d: %q exit %d %v", i, outs[i], codes[i], errs[i])
		}
	}
	if got := h.prepared.usedCount() - used; got < 1 {
		t.Errorf("%d of the racing starts took the waiting sandbox, want at least 1", got)
	}
}

// TestReviewPreparedHelperKilledBeforeStart: the waiting helper killed
// (as the OOM killer or an operator might) just before a start takes it:
// the start runs on a helper of its own, with its own status.
func TestReviewPreparedHelperKilledBeforeStart(t *testing.T) {
	h := preparedHost(t)
	ws := t.TempDir()
	p := codexWorkspaceWrite(ws)
	used, pid := primeOne(t, h, p, ws)
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The kill is delivered before the start looks (it is not reaped: the
	// pool is its parent).
	for deadline := time.Now().Add(5 * time.Second); ; {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if f := strings.Fields(string(b)); len(f) > 2 && f[2] == "Z" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the killed helper did not die")
		}
		time.Sleep(5 * time.Millisecond)
	}
	out, code, err := runPlan(h, shPlan(p, `echo fresh; exit 6`), ws)
	if err != nil || code != 6 || out != "fresh\n" {
		t.Errorf("start after the helper died: %q exit %d %v", out, code, err)
	}
	wantUsed(t, h, used, 0, "a dead helper")
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
		t.Errorf("the dead helper %d was not reaped", pid)
	}
}

// TestReviewPreparedCloseRace: Host.Close racing starts: every start
// either runs its command to its status or fails cleanly; no helper is
// left behind (each start reaps its own; Close the waiting ones).
func TestReviewPreparedCloseRace(t *testing.T) {
	base := preparedHost(t)
	ws := t.TempDir()
	p := codexWorkspaceWrite(ws)
	before := helperChildren(t)
	h, err := Probe(os.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h.Level, h.PidNamespace = base.Level, PidIsolate
	primePrepared(t, h, Plan{Policy: p}, ws)
	var wg sync.WaitGroup
	res := make([]string, 3)
	for i := range res {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			out, code, err := runPlan(h, shPlan(p, `echo ran; exit 9`), ws)
			res[i] = fmt.Sprintf("%q %d %v", out, code, err)
			if err == nil && (code != 9 || out != "ran\n") {
				t.Errorf("start %d during Close: %s", i, res[i])
			}
		}(i)
	}
	if err := h.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	wg.Wait()
	h.prepared.settle()
	t.Logf("starts racing Close: %v", res)
	for pid := range helperChildren(t) {
		if !before[pid] {
			t.Errorf("helper %d left after Close", pid)
		}
	}
}

// TestReviewPreparedConfinementAsFresh: the spawning thread confined
// ahead gives the command the confinement a fresh start gives, in each
// network mode a prepared sandbox is made for (own empty namespace, the
// host's network): every capability set, no_new_privs, the seccomp mode
// and its number of filters (one more would mean a filter installed twice,
// one less a missing one), credentials, Landlock (writes outside the
// roots), the cgroup namespace and the network interfaces. (A user
// namespace can be made in both: the filter does not refuse it.)
func TestReviewPreparedConfinementAsFresh(t *testing.T) {
	h := preparedHost(t)
	fresh := *h
	fresh.NoPrepare = true
	ws, outside := stageDirs(t, "ws", "outside")
	script := `grep -E '^(Cap|NoNewPrivs|Seccomp|Uid|Gid|Groups)' /proc/self/status
o() { a=$1; shift; if "$@" >/dev/null 2>&1; then echo "$a:OK"; else echo "$a:DENIED"; fi; }
o ws-write sh -c 'echo x > ` + ws + `/w'
o outside-write sh -c 'echo x > ` + outside + `/w'
o outside-mkdir mkdir ` + outside + `/d
o etc-write sh -c 'echo x >> /etc/hostname'
o root-write sh -c 'echo x > /w'
o fd-write sh -c 'exec 9<>` + outside + `/w9'
o unshare unshare -U true
o mount mount -t tmpfs none ` + ws + `
cat /proc/self/cgroup; awk 'NR>2{print $1}' /proc/net/dev; exit 4`
	for _, c := range []struct {
		name string
		p    *Policy
	}{
		{"own-network", codexWorkspaceWrite(ws)},
		{"host-network", func() *Policy { p := codexWorkspaceWrite(ws); p.Network = true; return p }()},
	} {
		t.Run(c.name, func(t *testing.T) {
			want, wcode, err := runPlan(&fresh, shPlan(c.p, script), ws)
			if err != nil || wcode != 4 {
				t.Fatalf("fresh: %q exit %d %v", want, wcode, err)
			}
			used := primePrepared(t, h, Plan{Policy: c.p}, ws)
			got, gcode, err := runPlan(h, shPlan(c.p, script), ws)
			if err != nil {
				t.Fatal(err)
			}
			wantUsed(t, h, used, 1, c.name)
			if got != want || gcode != wcode {
				t.Errorf("prepared (exit %d):\n%s\nfresh (exit %d):\n%s", gcode, got, wcode, want)
			}
			for _, a := range []string{"outside-write", "outside-mkdir", "etc-write", "root-write", "fd-write", "mount"} {
				if !strings.Contains(got, a+":DENIED\n") {
					t.Errorf("%s not denied on a prepared start: %q", a, got)
				}
			}
			if !strings.Contains(got, "ws-write:OK\n") || !strings.Contains(got, "NoNewPrivs:\t1\n") || !strings.Contains(got, "Seccomp:\t2\n") {
				t.Errorf("prepared start's confinement: %q", got)
			}
			// Interfaces: the own namespace has lo alone; the host's network
			// has more than lo.
			_, ifaces, _ := strings.Cut(got, "\n0::/\n")
			if own := !c.p.Network; own != (ifaces == "lo:\n") {
				t.Errorf("own network %v: interfaces %q", own, ifaces)
			}
		})
	}
}

// TestReviewPreparedSignalToInit: the command signals its init (pid 1)
// with signals the init catches and forwards: refused (EPERM), on a
// prepared sandbox as on a fresh one; nothing comes back to the command
// and the status is its own.
func TestReviewPreparedSignalToInit(t *testing.T) {
	h := preparedHost(t)
	fresh := *h
	fresh.NoPrepare = true
	ws := t.TempDir()
	p := codexWorkspaceWrite(ws)
	script := `trap 'echo got-usr1' USR1; kill -USR1 1; kill -TERM 1; i=0; while [ $i -lt 30 ]; do sleep 0.01; i=$((i+1)); done; echo alive; exit 7`
	want, wcode, err := runPlan(&fresh, shPlan(p, script), ws)
	if err != nil {
		t.Fatal(err)
	}
	used := primePrepared(t, h, Plan{Policy: p}, ws)
	got, gcode, err := runPlan(h, shPlan(p, script), ws)
	if err != nil {
		t.Fatal(err)
	}
	wantUsed(t, h, used, 1, "signals to the init")
	if got != want || gcode != wcode || gcode != 7 || strings.Count(got, "Operation not permitted") != 2 || strings.Contains(got, "got-usr1") {
		t.Errorf("prepared %q exit %d, fresh %q exit %d", got, gcode, want, wcode)
	}
}

// nonblocking reports whether f's descriptor is in non-blocking mode,
// read without f.Fd() (which itself puts it in blocking mode).
func nonblocking(t *testing.T, f *os.File) bool {
	t.Helper()
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var fl int
	var ferr error
	if err := rc.Control(func(fd uintptr) { fl, ferr = unix.FcntlInt(fd, unix.F_GETFL, 0) }); err != nil || ferr != nil {
		t.Fatal(err, ferr)
	}
	return fl&unix.O_NONBLOCK != 0
}

// TestReviewPreparedReportHoldsNoThread: ExitReport.Wait "blocks in the
// runtime poller: no thread" (an agent keeps many long commands running):
// the report's socket is still non-blocking when the start returns it
// (alive() takes its Fd(), which leaves it alone only because the pool
// made it non-blocking itself before os.NewFile), and many reports are
// waited on at once.
func TestReviewPreparedReportHoldsNoThread(t *testing.T) {
	h := preparedHost(t)
	ws := t.TempDir()
	p := codexWorkspaceWrite(ws)
	primePrepared(t, h, Plan{Policy: p}, ws)
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	attr := &os.ProcAttr{Dir: ws, Files: []*os.File{r, devnull, devnull}, Sys: &syscall.SysProcAttr{Setsid: true}}
	// Each command waits for the pipe's EOF (the test's write end closed).
	const n = 12
	type started struct {
		proc   *os.Process
		report *ExitReport
	}
	var all []started
	defer func() {
		w.Close()
		for _, s := range all {
			s.report.Close()
			_, _ = s.proc.Wait()
		}
	}()
	done := make(chan int, n)
	for i := 0; i < n; i++ {
		proc, report, err := StartReported(h, shPlan(p, `cat; exit 5`), attr)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, started{proc, report})
		if report == nil {
			t.Fatalf("start %d did not run on a prepared sandbox", i)
		}
		if !nonblocking(t, report.f) {
			t.Errorf("start %d: the report's socket is in blocking mode (a thread per waiting report)", i)
		}
		go func() {
			st, _ := report.Wait()
			done <- st
		}()
		h.prepared.settle()
	}
	w.Close()
	for i := 0; i < n; i++ {
		select {
		case st := <-done:
			if st != 5 {
				t.Errorf("report %d", st)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("reports not in after the commands' stdin closed")
		}
	}
}

// TestReviewPreparedGivenNetNS: a start in the caller's network namespace
// (the managed network's) on a prepared sandbox, whose filter is installed
// at the start rather than ahead: the command holds only its stdio (not
// the namespace's descriptor), has the confinement of a fresh start
// (seccomp mode and filter count, capabilities) and sees the caller's
// namespace's interfaces.
func TestReviewPreparedGivenNetNS(t *testing.T) {
	h := preparedHost(t)
	fresh := *h
	fresh.NoPrepare = true
	n, err := NewNetNS()
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ws := t.TempDir()
	p := codexWorkspaceWrite(ws)
	p.Network = true
	script := `ls /proc/self/fd/ > fds; grep -E '^(Cap|NoNewPrivs|Seccomp)' /proc/self/status; awk 'NR>2{print $1}' /proc/net/dev; cat fds; exit 4`
	plan := shPlan(p, script)
	plan.NetNS = n
	want, wcode, err := runPlan(&fresh, plan, ws)
	if err != nil || wcode != 4 {
		t.Fatalf("fresh: %q exit %d %v", want, wcode, err)
	}
	used := primePrepared(t, h, Plan{Policy: p, NetNS: n}, ws)
	got, gcode, err := runPlan(h, plan, ws)
	if err != nil {
		t.Fatal(err)
	}
	wantUsed(t, h, used, 1, "the start in the caller's namespace")
	if got != want || gcode != wcode {
		t.Errorf("prepared (exit %d):\n%s\nfresh (exit %d):\n%s", gcode, got, wcode, want)
	}
	if !strings.HasSuffix(got, "\nlo:\n0\n1\n2\n3\n") || !strings.Contains(got, "Seccomp_filters:\t1\n") {
		t.Errorf("prepared start in the caller's namespace: %q", got)
	}
}

// TestReviewPreparedHelperKilledAfterTake: the waiting helper is stopped
// (alive to take's check, reading nothing) and killed once a start has
// taken it, around its sendmsg: the start falls back to a helper of its
// own (EPIPE before the send, ECONNRESET after it) and runs its command
// to its status; the killed helper is reaped.
func TestReviewPreparedHelperKilledAfterTake(t *testing.T) {
	h := preparedHost(t)
	ws := t.TempDir()
	p := codexWorkspaceWrite(ws)
	used, pid := primeOne(t, h, p, ws)
	if err := unix.Kill(pid, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer unix.Kill(pid, unix.SIGKILL)
	// kill(2) returns before the group stop is complete: a thread of the
	// helper that was running may still read a start sent meanwhile (seen
	// under load). The start is sent once the helper is stopped.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Microsecond) {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); strings.Contains(string(b), ") T ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("helper %d not stopped", pid)
		}
	}
	type result struct {
		out  string
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		out, code, err := runPlan(h, shPlan(p, `echo fallback; exit 6`), ws)
		done <- result{out, code, err}
	}()
	key := planKey(t, h, Plan{Policy: p})
	for deadline := time.Now().Add(10 * time.Second); h.prepared.readyFor(key); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the start did not take the waiting sandbox")
		}
	}
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.code != 6 || r.out != "fallback\n" {
			t.Errorf("start whose helper was killed after the take: %q exit %d %v", r.out, r.code, r.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the start hangs on a helper killed after the take")
	}
	wantUsed(t, h, used, 0, "a helper killed after the take")
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
		t.Errorf("the killed helper %d was not reaped", pid)
	}
}
