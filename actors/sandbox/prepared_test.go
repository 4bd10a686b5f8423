package sandbox

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runtimed/runtimed/actors/sandbox/sandboxtest"
	"golang.org/x/sys/unix"
)

// Prepared sandboxes (prepared.go), on the real kernel. Each case primes
// the pool (a start of the same plan, then settle), checks that a sandbox
// prepared for exactly the plan of the case is waiting, runs the case and
// asserts through usedCount whether the case ran on it.

// readyFor reports whether a sandbox prepared for key is waiting.
func (pp *preparedPool) readyFor(key string) bool {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	for _, r := range pp.ready {
		if r.key == key {
			return true
		}
	}
	return false
}

// readyPids are the pids of the waiting prepared sandboxes' helpers.
func (pp *preparedPool) readyPids() []int {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	var out []int
	for _, r := range pp.ready {
		out = append(out, r.proc.Pid)
	}
	return out
}

// readySock is the daemon's end of the socket of the waiting sandbox
// whose helper is pid (-1: none).
func (pp *preparedPool) readySock(pid int) int {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	for _, r := range pp.ready {
		if r.proc.Pid == pid {
			return int(r.sock.Fd())
		}
	}
	return -1
}

// planKey is the key a start of plan on h would look its sandbox up by.
func planKey(t *testing.T, h *Host, plan Plan) string {
	t.Helper()
	wp, err := planWire(h, plan)
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	return prepKey(wp, netMode(plan))
}

// primePrepared starts /bin/false under plan's policy (and network
// namespace) in dir, waits for the preparation that follows, and checks
// that a sandbox prepared for exactly plan is waiting; it returns
// usedCount then. A UNIX socket bound or removed anywhere on the host
// between the preparation and the check changes the plan (the covered
// sockets are part of it): the priming is tried again, a bounded number
// of times.
func primePrepared(t *testing.T, h *Host, plan Plan, dir string) uint64 {
	t.Helper()
	// /bin/false: a helper built with -race sleeps a second before it
	// exits 0 (the race detector's atexit_sleep_ms), not before exit 1.
	plan.Path, plan.Argv = "/bin/false", []string{"false"}
	for i := 0; i < 5; i++ {
		if code, err := startAndWait(t, h, plan, dir); err != nil || code != 1 {
			t.Fatalf("priming start: exit %d, %v", code, err)
		}
		h.prepared.settle()
		if h.prepared.readyFor(planKey(t, h, plan)) {
			return h.prepared.usedCount()
		}
		t.Logf("priming %d: no sandbox prepared for this plan (failed preparations: %d)", i, h.prepared.failed.Load())
	}
	t.Fatalf("no sandbox prepared for the plan after 5 starts (failed preparations: %d)", h.prepared.failed.Load())
	return 0
}

// primeOne primes a sandbox for p in ws and returns the used count and
// the pid of the one sandbox that waits for it.
func primeOne(t *testing.T, h *Host, p *Policy, ws string) (uint64, int) {
	t.Helper()
	used := primePrepared(t, h, Plan{Policy: p}, ws)
	pids := h.prepared.readyPids()
	if len(pids) != 1 {
		t.Fatalf("waiting sandboxes: %v, want one", pids)
	}
	return used, pids[0]
}

// wantUsed asserts how many starts since before ran on a prepared sandbox.
func wantUsed(t *testing.T, h *Host, before, want uint64, what string) {
	t.Helper()
	if got := h.prepared.usedCount() - before; got != want {
		t.Errorf("%s: %d starts served by a prepared sandbox, want %d", what, got, want)
	}
}

// runPlan runs plan with dir as working directory and stdout/stderr to a
// pipe; it returns the output and exit code (safe off the test goroutine).
func runPlan(h *Host, plan Plan, dir string) (string, int, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return "", -1, err
	}
	defer r.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		w.Close()
		return "", -1, err
	}
	defer devnull.Close()
	proc, err := Start(h, plan, &os.ProcAttr{Dir: dir, Files: []*os.File{devnull, w, w}, Sys: &syscall.SysProcAttr{Setsid: true}})
	w.Close()
	if err != nil {
		return "", -1, fmt.Errorf("start: %w", err)
	}
	_ = r.SetReadDeadline(time.Now().Add(20 * time.Second))
	out, rerr := io.ReadAll(r)
	if rerr != nil {
		_ = proc.Kill()
	}
	st, werr := proc.Wait()
	if rerr != nil || werr != nil {
		return string(out), -1, fmt.Errorf("read: %v, wait: %v", rerr, werr)
	}
	return string(out), st.ExitCode(), nil
}

func shPlan(p *Policy, script string, env ...string) Plan {
	return Plan{Path: "/bin/sh", Argv: []string{"sh", "-c", script}, Env: append([]string{"PATH=/usr/bin:/bin"}, env...), Policy: p}
}

// preparedHost is a namespaces-level host with the pid namespace
// isolated, where starts are prepared.
func preparedHost(t *testing.T) *Host {
	t.Helper()
	h := nsHost(t)
	h.PidNamespace = PidIsolate
	if h.prepared == nil {
		t.Skip("no prepared sandboxes on this host")
	}
	return h
}

// TestPreparedAttacks: every attack of the kit, from a tree started on a
// prepared sandbox, read-only and workspace-write.
func TestPreparedAttacks(t *testing.T) {
	h := preparedHost(t)
	for _, mode := range []string{sandboxtest.ReadOnly, sandboxtest.WorkspaceWrite} {
		t.Run(mode, func(t *testing.T) {
			sc := sandboxtest.NewScene(t)
			p := codexReadOnly()
			if mode == sandboxtest.WorkspaceWrite {
				p = codexWorkspaceWrite(sc.WS)
			}
			used := primePrepared(t, h, Plan{Policy: p}, sc.WS)
			// exit 5: a helper built with -race sleeps a second before it
			// exits 0.
			out, code := runIn(t, h, p, sc.WS, sc.Script(sc.FD)+"exit 5\n")
			wantUsed(t, h, used, 1, "the attacks")
			if code != 5 {
				t.Errorf("exit %d", code)
			}
			sc.Check(t, out, mode)
		})
	}
}

// TestPreparedSameAsFresh: a command started on a prepared sandbox sees
// and does what it would on a sandbox built for it: the same exit
// statuses, its own working directory (another one than the priming
// start's too), its environment, nothing but its init in its pid
// namespace, its own session, the same descriptors, mounts, capabilities and
// seccomp state, a writable /proc/self/comm and workspace, a read-only
// /etc; orphans end with it and the init forwards SIGTERM.
func TestPreparedSameAsFresh(t *testing.T) {
	h := preparedHost(t)
	fresh := *h
	fresh.NoPrepare = true
	ws, other := stageDirs(t, "ws", "other")
	p := codexWorkspaceWrite(ws)
	// onPrepared runs plan on a prepared sandbox in dir.
	onPrepared := func(t *testing.T, plan Plan, dir string) (string, int) {
		t.Helper()
		used := primePrepared(t, h, Plan{Policy: plan.Policy, NetNS: plan.NetNS}, ws)
		out, code, err := runPlan(h, plan, dir)
		if err != nil {
			t.Fatal(err)
		}
		wantUsed(t, h, used, 1, "the case")
		return out, code
	}

	t.Run("status", func(t *testing.T) {
		if _, code := onPrepared(t, shPlan(p, `exit 3`), ws); code != 3 {
			t.Errorf("exit 3: exit %d", code)
		}
		if _, code := onPrepared(t, shPlan(p, `kill -9 $$`), ws); code != 137 {
			t.Errorf("kill -9 of the command: exit %d, want 137", code)
		}
	})
	t.Run("cwd", func(t *testing.T) {
		if out, _ := onPrepared(t, shPlan(p, `pwd; exit 5`), ws); out != ws+"\n" {
			t.Errorf("pwd in %s: %q", ws, out)
		}
		// The sandbox was prepared after a start in ws; this start's
		// directory is another.
		if out, _ := onPrepared(t, shPlan(p, `pwd; exit 5`), other); out != other+"\n" {
			t.Errorf("pwd in %s: %q", other, out)
		}
	})
	t.Run("env", func(t *testing.T) {
		out, _ := onPrepared(t, shPlan(p, `echo "$MARK|$PATH|$(env | wc -l)"; exit 5`, "MARK=prepared-env"), ws)
		if out != "prepared-env|/usr/bin:/bin|3\n" { // PATH, MARK, PWD (sh's)
			t.Errorf("environment: %q", out)
		}
	})
	t.Run("writes", func(t *testing.T) {
		out, code := onPrepared(t, shPlan(p, `echo hi > f && cat f; printf me > /proc/$$/comm && cat /proc/$$/comm; touch /etc/passwd 2>/dev/null || echo DENIED-etc; { echo x > .git/c; } 2>/dev/null || echo DENIED-git; exit 5`), ws)
		if code != 5 || out != "hi\nme\nDENIED-etc\nDENIED-git\n" {
			t.Errorf("exit %d, output %q", code, out)
		}
		if b, err := os.ReadFile(filepath.Join(ws, "f")); err != nil || string(b) != "hi\n" {
			t.Errorf("the workspace write on the host: %q %v", b, err)
		}
	})
	// The same script on a fresh and on a prepared sandbox: the same
	// output, byte for byte (what the command can observe of its
	// sandbox).
	t.Run("observed", func(t *testing.T) {
		// Pids are left out: the init's Go threads take pid numbers too
		// (the command is not pid 2, and how many threads differs). So are
		// tmpfs mounts outside /dev: the covers of host sockets, which
		// another process may bind between the two starts (the later one
		// then covers one more).
		script := `ps -e -o comm=; ls /proc/self/fd; ls /dev /dev/pts; grep -E '^(Cap|NoNewPrivs|Seccomp:|Uid|Gid|Groups)' /proc/self/status; ` +
			`awk '$9 != "tmpfs" || $5 ~ /^\/dev/ {print $5, $6, $9}' /proc/self/mountinfo | sort; ulimit -a; umask; id; cat /proc/self/oom_score_adj; ` +
			`awk 'NR>2{print $1}' /proc/net/dev; cat /proc/self/cgroup; ps -o sid=,pgid=,tty= -p $$ | awk -v me=$$ '{print ($1==me), ($2==me), $3}'; exit 4`
		want, wcode, err := runPlan(&fresh, shPlan(p, script), ws)
		if err != nil {
			t.Fatal(err)
		}
		got, gcode := onPrepared(t, shPlan(p, script), ws)
		if got != want || gcode != wcode {
			t.Errorf("prepared (exit %d):\n%s\nfresh (exit %d):\n%s", gcode, got, wcode, want)
		}
		if gcode != 4 || !strings.HasSuffix(got, "\n1 1 ?\n") {
			t.Errorf("exit %d; the command is not in a session of its own: %q", gcode, got)
		}
	})
	t.Run("rlimits", func(t *testing.T) {
		plan := shPlan(p, `ulimit -n; ulimit -c; exit 5`)
		plan.Rlimits = []Rlimit{{Resource: unix.RLIMIT_NOFILE, Cur: 77, Max: 77}, {Resource: unix.RLIMIT_CORE, Cur: 0, Max: 0}}
		if out, code := onPrepared(t, plan, ws); code != 5 || out != "77\n0\n" {
			t.Errorf("rlimits: exit %d %q", code, out)
		}
	})
	// A start larger than the socket's buffer: the helper reads it in
	// many reads while the daemon writes.
	t.Run("large-start", func(t *testing.T) {
		plan := shPlan(p, `echo "$# ${#BIG}"; exit 5`)
		for i := 0; i < 1000; i++ {
			plan.Argv = append(plan.Argv, strings.Repeat("a", 999))
		}
		plan.Argv[3] = "sh" // $0 of sh -c
		plan.Env = append(plan.Env, "BIG="+strings.Repeat("b", 100_000))
		if out, code := onPrepared(t, plan, ws); code != 5 || out != "999 100000\n" {
			t.Errorf("large start: exit %d %q", code, out)
		}
	})
	t.Run("orphans", func(t *testing.T) {
		t0 := time.Now()
		out, code := onPrepared(t, shPlan(p, `(sleep 30; echo leaked) & echo started; exit 5`), ws)
		// The orphan holds the output pipe: EOF within the bound means it
		// died with the command.
		if code != 5 || out != "started\n" || time.Since(t0) > 15*time.Second {
			t.Errorf("orphan: exit %d %q after %v", code, out, time.Since(t0))
		}
	})
	t.Run("sigterm", func(t *testing.T) {
		used := primePrepared(t, h, Plan{Policy: p}, ws)
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		proc, err := Start(h, shPlan(p, `trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.05; done`),
			&os.ProcAttr{Dir: ws, Files: []*os.File{nil, w, w}, Sys: &syscall.SysProcAttr{Setsid: true}})
		w.Close()
		if err != nil {
			t.Fatal(err)
		}
		wantUsed(t, h, used, 1, "the SIGTERM case")
		buf := make([]byte, 64)
		_ = r.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := r.Read(buf); err != nil || !strings.Contains(string(buf[:n]), "ready") {
			_ = proc.Kill()
			_, _ = proc.Wait()
			t.Fatalf("ready: %q %v", buf[:n], err)
		}
		if err := syscall.Kill(-proc.Pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		rest, _ := io.ReadAll(r)
		st, err := proc.Wait()
		if err != nil || st.ExitCode() != 7 || !strings.Contains(string(rest), "got-term") {
			t.Fatalf("after SIGTERM: exit %v (%v), output %q; want 7 and got-term", st, err, rest)
		}
	})
}

// TestPreparedExitReport: a start on a prepared sandbox reports the
// command's status (StartReported) as the init's own exit then says it:
// the code, 128+N for a signal; a killed init reports nothing (ok false).
// A fresh start has no report.
func TestPreparedExitReport(t *testing.T) {
	h := preparedHost(t)
	fresh := *h
	fresh.NoPrepare = true
	ws := t.TempDir()
	p := codexWorkspaceWrite(ws)
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	attr := &os.ProcAttr{Dir: ws, Files: []*os.File{devnull, devnull, devnull}, Sys: &syscall.SysProcAttr{Setsid: true}}
	for _, c := range []struct {
		script string
		want   int
	}{{`exit 3`, 3}, {`kill -9 $$`, 137}, {`kill -TERM $$`, 143}} {
		used := primePrepared(t, h, Plan{Policy: p}, ws)
		proc, report, err := StartReported(h, shPlan(p, c.script), attr)
		if err != nil {
			t.Fatal(err)
		}
		wantUsed(t, h, used, 1, c.script)
		status, ok := report.Wait()
		report.Close()
		st, werr := proc.Wait()
		if werr != nil || !ok || status != c.want || st.ExitCode() != c.want {
			t.Errorf("%s: report %d %v, init's exit %v %v; want %d", c.script, status, ok, st, werr, c.want)
		}
	}
	// The init killed while the command runs: no report.
	used := primePrepared(t, h, Plan{Policy: p}, ws)
	proc, report, err := StartReported(h, shPlan(p, `sleep 30; exit 5`), attr)
	if err != nil {
		t.Fatal(err)
	}
	wantUsed(t, h, used, 1, "the killed init")
	_ = proc.Kill()
	if status, ok := report.Wait(); ok {
		t.Errorf("a killed init reported %d", status)
	}
	report.Close()
	if st, err := proc.Wait(); err != nil || st.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("the killed init: %v %v", st, err)
	}
	// A fresh start with a pid namespace: its init reports too.
	proc, report, err = StartReported(&fresh, shPlan(p, `exit 3`), attr)
	if err != nil {
		t.Fatal(err)
	}
	if status, ok := report.Wait(); !ok || status != 3 {
		t.Errorf("a fresh start's report: %d %v, want 3 true", status, ok)
	}
	report.Close()
	if st, err := proc.Wait(); err != nil || st.ExitCode() != 3 {
		t.Errorf("fresh: %v %v", st, err)
	}
	// Without a pid namespace there is no init to report: none.
	inherit := fresh
	inherit.PidNamespace = PidInherit
	proc, report, err = StartReported(&inherit, shPlan(p, `exit 3`), attr)
	if err != nil {
		t.Fatal(err)
	}
	if report != nil {
		t.Errorf("a start without an init returned a report")
	}
	if st, err := proc.Wait(); err != nil || st.ExitCode() != 3 {
		t.Errorf("inherit: %v %v", st, err)
	}
}

// TestPreparedInitAttacks: the command attacks its init (the prepared
// helper, which holds the socket its start came on and its exit report
// goes out on): its environment, its descriptors' targets (their numbers
// can be listed) and its memory are out of reach, ptrace is refused,
// SIGSTOP and SIGKILL to pid 1 from inside are ignored (the kernel
// protects a namespace's init), and the report still carries the
// command's own status. A fresh sandbox gives the same answers.
func TestPreparedInitAttacks(t *testing.T) {
	h := preparedHost(t)
	needPython(t)
	fresh := *h
	fresh.NoPrepare = true
	ws := t.TempDir()
	p := codexWorkspaceWrite(ws)
	script := `o() { a=$1; shift; if "$@" >/dev/null 2>&1; then echo "$a:OK"; else echo "$a:DENIED"; fi; }
o environ cat /proc/1/environ
o fds ls -l /proc/1/fd/
o fd4 sh -c 'echo forged > /proc/1/fd/4'
o mem /usr/bin/python3 -c 'open("/proc/1/mem","r+b")'
o ptrace /usr/bin/python3 -c 'import ctypes,sys; l=ctypes.CDLL(None, use_errno=True); sys.exit(0 if l.ptrace(16, 1, 0, 0) == 0 else 1)'
kill -STOP 1 2>/dev/null; kill -KILL 1 2>/dev/null; kill -TERM 1 2>/dev/null
echo alive; exit 7`
	want, wcode, err := runPlan(&fresh, shPlan(p, script), ws)
	if err != nil {
		t.Fatal(err)
	}
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
	used := primePrepared(t, h, Plan{Policy: p}, ws)
	proc, report, err := StartReported(h, shPlan(p, script), &os.ProcAttr{Dir: ws, Files: []*os.File{devnull, w, w}, Sys: &syscall.SysProcAttr{Setsid: true}})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	wantUsed(t, h, used, 1, "the attacks on the init")
	_ = r.SetReadDeadline(time.Now().Add(20 * time.Second))
	got, _ := io.ReadAll(r)
	status, ok := report.Wait()
	report.Close()
	st, werr := proc.Wait()
	if string(got) != want || wcode != 7 || !ok || status != 7 || werr != nil || st.ExitCode() != 7 {
		t.Errorf("prepared: %q, report %d %v, init %v %v; fresh: %q exit %d", got, status, ok, st, werr, want, wcode)
	}
	for _, a := range []string{"environ", "fds", "fd4", "mem", "ptrace"} {
		if !strings.Contains(string(got), a+":DENIED\n") {
			t.Errorf("%s: not denied: %q", a, got)
		}
	}
	// The init is still the report's only author: "forged" went nowhere.
	if strings.Contains(string(got), "forged") {
		t.Errorf("output %q", got)
	}
}

// TestPreparedTwoPolicies: Codex alternates read-only and workspace-write
// starts: both have a sandbox waiting (maxPrepared), each start takes its
// own. A third policy evicts the oldest: never more than maxPrepared
// helpers wait, and the evicted one is ended and reaped.
func TestPreparedTwoPolicies(t *testing.T) {
	h := preparedHost(t)
	ws, ws2 := t.TempDir(), t.TempDir()
	ro, ww, ww2 := codexReadOnly(), codexWorkspaceWrite(ws), codexWorkspaceWrite(ws2)
	before := helperChildren(t)
	primePrepared(t, h, Plan{Policy: ro}, ws)
	used := primePrepared(t, h, Plan{Policy: ww}, ws)
	if !h.prepared.readyFor(planKey(t, h, Plan{Policy: ro})) {
		t.Fatal("the read-only sandbox was not kept next to the workspace-write one")
	}
	for i, p := range []*Policy{ro, ww, ro, ww} {
		if i > 0 {
			h.prepared.settle()
		}
		if out, code, err := runPlan(h, shPlan(p, `echo ok; exit 5`), ws); err != nil || code != 5 || out != "ok\n" {
			t.Fatalf("start %d: exit %d %q %v", i, code, out, err)
		}
		wantUsed(t, h, used, uint64(i+1), fmt.Sprintf("alternating start %d", i))
	}
	h.prepared.settle()
	first := h.prepared.readyPids()
	primePrepared(t, h, Plan{Policy: ww2}, ws2)
	ready := h.prepared.readyPids()
	if len(ready) != maxPrepared {
		t.Errorf("waiting sandboxes: %v, want %d", ready, maxPrepared)
	}
	var helpers []int
	for pid := range helperChildren(t) {
		if !before[pid] {
			helpers = append(helpers, pid)
		}
	}
	if len(helpers) != len(ready) {
		t.Errorf("helper children %v, waiting sandboxes %v: an evicted one is left", helpers, ready)
	}
	for _, pid := range first {
		if slicesContains(ready, pid) {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			t.Errorf("the evicted sandbox %d still exists (unreaped?)", pid)
		}
	}
}
