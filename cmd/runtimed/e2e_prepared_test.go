package main_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runtimed/runtimed/wire/wiretest"
)

// preparedServer is a runtimed serving one client, with its /metrics URL.
type preparedServer struct {
	c       *wiretest.Client
	srv     *wiretest.Server
	metrics string
}

// startPreparedServer starts a websocket server with a metrics listener
// (stdio serves no /metrics: --metrics-listen applies to a websocket
// --listen only).
// A nice value other than 0 runs it under nice(1).
func startPreparedServer(t *testing.T, nice int) preparedServer {
	t.Helper()
	var ps preparedServer
	args := []string{"serve", "--listen", "ws://127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"}
	if nice == 0 {
		ps.srv = wiretest.Start(t, bin, args...)
	} else {
		ps.srv = wiretest.Start(t, "/usr/bin/nice", append([]string{"-n", strconv.Itoa(nice), bin}, args...)...)
	}
	url, err := ps.srv.FirstLine(tctx(t, wait))
	if err != nil {
		t.Fatalf("server did not start: %v\n%s", err, ps.srv.Stderr())
	}
	ps.c = dial(t, url, nil)
	if _, err := ps.c.Initialize(tctx(t, wait)); err != nil {
		t.Fatalf("initialize: %v", err)
	}
	ps.metrics = waitStderr(t, ps.srv, regexp.MustCompile(`http://127\.0\.0\.1:\d+/metrics`))
	return ps
}

// preparedStats is what /metrics says of the prepared sandboxes.
type preparedStats struct{ used, missed, failed, ready, recycled float64 }

func (ps preparedServer) stats(t *testing.T) preparedStats {
	t.Helper()
	resp, err := http.Get(ps.metrics)
	if err != nil {
		t.Fatalf("GET %s: %v", ps.metrics, err)
	}
	defer resp.Body.Close()
	vals := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || !strings.HasPrefix(name, "runtimed_sandbox_prepared_") {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", sc.Text(), err)
		}
		vals[name] = f
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	for _, n := range []string{"starts_total", "misses_total", "failures_total", "ready", "recycled_total"} {
		if _, ok := vals["runtimed_sandbox_prepared_"+n]; !ok {
			t.Fatalf("/metrics lacks runtimed_sandbox_prepared_%s", n)
		}
	}
	return preparedStats{used: vals["runtimed_sandbox_prepared_starts_total"], missed: vals["runtimed_sandbox_prepared_misses_total"],
		failed: vals["runtimed_sandbox_prepared_failures_total"], ready: vals["runtimed_sandbox_prepared_ready"],
		recycled: vals["runtimed_sandbox_prepared_recycled_total"]}
}

// waitReady waits (bounded) until a prepared sandbox waits: the test uses
// one plan, so it is this plan's.
func (ps preparedServer) waitReady(t *testing.T) preparedStats {
	t.Helper()
	var st preparedStats
	if !pollUntil(wait, func() bool { st = ps.stats(t); return st.ready >= 1 }) {
		t.Fatalf("no prepared sandbox ready after %v: %+v\n%s", wait, st, ps.srv.Stderr())
	}
	return st
}

// mkProjectSubpaths makes ws's .git, .agents and .codex: where they are
// missing, a sandboxed start's read-only stubs make them (empty), and the
// plans of the starts before and after differ.
func mkProjectSubpaths(t *testing.T, ws string) {
	t.Helper()
	for _, d := range []string{".git", ".agents", ".codex"} {
		if err := os.Mkdir(filepath.Join(ws, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// niceOf is field 19 of /proc/PID/stat (after the command name, which may
// hold spaces, in parentheses).
func niceOf(t *testing.T, stat string) string {
	t.Helper()
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		t.Fatalf("bad stat %q", stat)
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 17 {
		t.Fatalf("bad stat %q", stat)
	}
	return f[16] // fields 3.. after the name: 19 is index 16
}

// procsWith lists the live processes on the host whose command line
// holds marker.
func procsWith(marker string) []string {
	var found []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(d + "/cmdline")
		if err == nil && strings.Contains(string(b), marker) {
			found = append(found, d+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return found
}

// TestSandboxPreparedOverTheWire: through the real binary (websocket),
// sandboxed starts
// with one workspace-write policy (Codex's shape) in sequence; before each
// the test waits until /metrics shows a sandbox prepared, and after it that
// the start was served by it (runtimed_sandbox_prepared_starts_total +1; a
// start that missed, which a mount made on the host meanwhile can cause, is
// run again once). Each such start must behave as a fresh one: exact
// stdout and stderr, exit 3 and 128+9, the cwd, a pid namespace of its own,
// a write landing in the workspace and none in /etc, the daemon's nice
// value (sandboxes are prepared at nice 10), a PTY of the asked size,
// process/terminate of a sleep (143) and of a shell trapping TERM (its own
// exit), and a SIGKILL of a tree with a background child leaving nothing.
func TestSandboxPreparedOverTheWire(t *testing.T) {
	t.Parallel()
	ps := startPreparedServer(t, 0)
	c := ps.c
	ctx := tctx(t, 4*wait)
	ws := t.TempDir()
	// The project-root subpaths exist: where they are missing, the
	// first start's read-only stubs create them (empty) in the
	// workspace, and every later start's plan includes them; the
	// sandbox prepared after the first start would be for a plan no
	// start has again (see the report of this test's commit).
	mkProjectSubpaths(t, ws)
	sb := codexWorkspaceWrite(ws, "restricted")
	daemonStat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", ps.srv.Pid()))
	if err != nil {
		t.Fatal(err)
	}
	daemonNice := niceOf(t, string(daemonStat))
	marker := fmt.Sprintf("7%d.%d", os.Getpid()%1000, time.Now().UnixNano()%100000) // a sleep length no other test uses

	n := 0
	// start runs script sandboxed and returns its id once started.
	start := func(script string, tty bool, size *wiretest.Size) string {
		t.Helper()
		n++
		id := fmt.Sprintf("p%d", n)
		req := startReq{StartParams: wiretest.StartParams{ProcessID: id, Argv: []string{"/usr/bin/bash", "-c", script},
			Cwd: "file://" + ws, Env: baseEnv(), TTY: tty, Size: size}, Sandbox: sb}
		if _, err := call(ctx, c, "process/start", req); err != nil {
			if strings.Contains(err.Error(), "cannot be enforced on this host") {
				t.Skipf("host: %v", err)
			}
			t.Fatalf("start %s: %v", id, err)
		}
		return id
	}

	// The first start of the plan finds nothing prepared.
	st := ps.stats(t)
	if st.used != 0 || st.missed != 0 || st.ready != 0 {
		t.Fatalf("before any start: %+v", st)
	}
	l := mustCollect(t, c, start(`printf out; printf err >&2; exit 3`, false, nil))
	if got := exitCodeOf(t, l); got != 3 || string(l.Output("stdout")) != "out" || string(l.Output("stderr")) != "err" {
		t.Errorf("fresh start: exit %d stdout %q stderr %q", got, l.Output("stdout"), l.Output("stderr"))
	}
	if st = ps.stats(t); st.used != 0 || st.missed != 1 {
		t.Errorf("after the first start: %+v, want 0 used and 1 missed", st)
	}

	// prepared runs one probe on a prepared sandbox: it waits until one
	// is ready, runs probe (which starts once through start), and checks
	// that the start took it; a start that missed runs again once.
	prepared := func(name string, probe func()) {
		t.Helper()
		for try := 0; ; try++ {
			before := ps.waitReady(t)
			probe()
			after := ps.stats(t)
			if after.used == before.used+1 && after.missed == before.missed {
				return
			}
			if try == 1 {
				t.Errorf("%s: not served by a prepared sandbox twice: before %+v after %+v", name, before, after)
				return
			}
			t.Logf("%s: missed the prepared sandbox (before %+v after %+v); again", name, before, after)
		}
	}

	prepared("exact output and exit 3", func() {
		l := mustCollect(t, c, start(`printf 'out\n'; printf 'e r r\n' >&2; printf 'more'; exit 3`, false, nil))
		if got := exitCodeOf(t, l); got != 3 || string(l.Output("stdout")) != "out\nmore" || string(l.Output("stderr")) != "e r r\n" {
			t.Errorf("exit %d stdout %q stderr %q", got, l.Output("stdout"), l.Output("stderr"))
		}
	})
	prepared("signal death", func() {
		l := mustCollect(t, c, start(`echo before; kill -9 $$; echo after`, false, nil))
		if got := exitCodeOf(t, l); got != 128+9 || string(l.Output()) != "before\n" {
			t.Errorf("kill -9 $$: exit %d output %q, want 137 %q", got, l.Output(), "before\n")
		}
	})
	prepared("cwd, pid namespace, writes, nice", func() {
		script := `pwd; ps -e --no-headers | wc -l; echo landed > landed.txt
(echo x > /etc/runtimed-e2e-prepared) 2>/dev/null && echo etc-written || echo etc-refused
cut -d' ' -f19 /proc/self/stat`
		l := mustCollect(t, c, start(script, false, nil))
		// ps -e: the shell and ps, and wc when it has started by then; the
		// init is hidden (hidepid), the host's processes are not there.
		want := fmt.Sprintf("%s\n2\netc-refused\n%s\n", ws, daemonNice)
		out := string(l.Output("stdout"))
		if alt := fmt.Sprintf("%s\n3\netc-refused\n%s\n", ws, daemonNice); out != want && out != alt {
			t.Errorf("stdout %q, want %q (or 3 processes)", out, want)
		}
		if exitCodeOf(t, l) != 0 || len(l.Output("stderr")) != 0 {
			t.Errorf("exit %d stderr %q", exitCodeOf(t, l), l.Output("stderr"))
		}
		if b, err := os.ReadFile(filepath.Join(ws, "landed.txt")); err != nil || string(b) != "landed\n" {
			t.Errorf("the workspace write did not land: %q %v", b, err)
		}
		if _, err := os.Stat("/etc/runtimed-e2e-prepared"); err == nil {
			os.Remove("/etc/runtimed-e2e-prepared")
			t.Errorf("a write reached /etc")
		}
	})
	prepared("pty", func() {
		l := mustCollect(t, c, start(`tty -s && echo is-tty; stty size; exit 4`, true, &wiretest.Size{Rows: 33, Cols: 91}))
		if got := exitCodeOf(t, l); got != 4 || string(l.Output("pty")) != "is-tty\r\n33 91\r\n" || len(l.Output("pty")) != len(l.Output()) {
			t.Errorf("pty: exit %d output %q", got, l.Output())
		}
	})
	terminate := func(id string, graceMs any) {
		t.Helper()
		var res struct{ Running *bool }
		p := map[string]any{"processId": id}
		if graceMs != nil {
			p["graceMs"] = graceMs
		}
		if err := c.CallResult(ctx, "process/terminate", p, &res); err != nil || res.Running == nil || !*res.Running {
			t.Errorf("terminate %s: %+v %v", id, res, err)
		}
	}
	prepared("terminate a sleep", func() {
		id := start(`exec sleep 1000`, false, nil)
		terminate(id, 10000)
		if got := exitCodeOf(t, mustCollect(t, c, id)); got != 128+15 {
			t.Errorf("terminated sleep: exit %d, want 143", got)
		}
	})
	prepared("terminate a shell trapping TERM", func() {
		id := start(`trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.01; done`, false, nil)
		w := c.Watch(id)
		if err := w.WaitOutput(ctx, "ready\n"); err != nil {
			t.Fatal(err)
		}
		terminate(id, 10000)
		l, err := w.WaitClosed(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := exitCodeOf(t, l); got != 7 || string(l.Output("stdout")) != "ready\ngot-term\n" {
			t.Errorf("trapping shell: exit %d stdout %q", got, l.Output("stdout"))
		}
	})
	prepared("kill a tree", func() {
		id := start(fmt.Sprintf(`sleep %s & echo bg; wait`, marker), false, nil)
		w := c.Watch(id)
		if err := w.WaitOutput(ctx, "bg\n"); err != nil {
			t.Fatal(err)
		}
		mark := "sleep\x00" + marker
		if !pollUntil(wait, func() bool { return len(procsWith(mark)) == 1 }) {
			t.Fatalf("the background sleep never ran: %q", procsWith(mark))
		}
		terminate(id, nil) // SIGKILL to the group at once
		l, err := w.WaitClosed(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := exitCodeOf(t, l); got != 128+9 {
			t.Errorf("killed tree: exit %d, want 137", got)
		}
		var left []string
		if !pollUntil(wait, func() bool { left = procsWith(mark); return len(left) == 0 }) {
			t.Errorf("the killed tree left its background child: %q", left)
		}
	})
	// The sandboxes came back after their commands (the daemon's starts
	// ask for it), and a later start ran on one of them.
	if st := ps.stats(t); st.failed != 0 || st.recycled < 1 || st.used < 2 {
		t.Errorf("after the sequence: %+v, want no failure, sandboxes recycled and used", st)
	}
}

// TestSandboxPreparedDaemonNice: a daemon run at nice 5 runs its commands
// at nice 5, on a fresh sandbox and on one prepared (at nice 10) alike.
func TestSandboxPreparedDaemonNice(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/usr/bin/nice"); err != nil {
		t.Skip("no /usr/bin/nice")
	}
	ps := startPreparedServer(t, 5)
	ws := t.TempDir()
	mkProjectSubpaths(t, ws)
	ctx := tctx(t, 2*wait)
	nice := func(id string) string {
		req := startReq{StartParams: wiretest.StartParams{ProcessID: id, Argv: []string{"/usr/bin/cut", "-d", " ", "-f19", "/proc/self/stat"},
			Cwd: "file://" + ws, Env: baseEnv()}, Sandbox: codexWorkspaceWrite(ws, "restricted")}
		if _, err := call(ctx, ps.c, "process/start", req); err != nil {
			if strings.Contains(err.Error(), "cannot be enforced on this host") {
				t.Skipf("host: %v", err)
			}
			t.Fatalf("start %s: %v", id, err)
		}
		return string(mustCollect(t, ps.c, id).Output())
	}
	if got := nice("fresh"); got != "5\n" {
		t.Errorf("fresh sandbox of a daemon at nice 5: the command's nice is %q", got)
	}
	before := ps.waitReady(t)
	got := nice("prepared")
	after := ps.stats(t)
	if after.used != before.used+1 {
		t.Fatalf("the second start was not served prepared: before %+v after %+v", before, after)
	}
	if got != "5\n" {
		t.Errorf("prepared sandbox of a daemon at nice 5: the command's nice is %q, want 5 as a fresh start's", got)
	}
}
