package main_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runtimed/runtimed/wire/wiretest"
)

// initOf is the host pid of the parent (the sandbox's init) of the one
// live process whose command line holds marker.
func initOf(t *testing.T, marker string) int {
	t.Helper()
	var found []string
	if !pollUntil(wait, func() bool { found = procsWith(marker); return len(found) == 1 }) {
		t.Fatalf("processes with %q: %q", marker, found)
	}
	dir, _, _ := strings.Cut(found[0], ":")
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	i := strings.LastIndexByte(string(stat), ')')
	f := strings.Fields(string(stat[i+1:]))
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatal(err)
	}
	return ppid
}

// TestSandboxRecycledOverTheWire: two clients, on two connections to one
// runtimed, run sandboxed commands of one policy in a row, so that the
// second runs in the sandbox the first's command ended in (its init: the
// same host process). The first leaves what it can (a file, times and
// modes on /dev/shm, mode 0 on /proc, a System V semaphore, a background
// process) and dies of a SIGTERM it sends itself: the wire says 143. The
// second finds none of it, and its own SIGTERM from process/terminate
// ends it with 143 too.
func TestSandboxRecycledOverTheWire(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no python3")
	}
	t.Parallel()
	ps := startPreparedServer(t, 0)
	url, err := ps.srv.FirstLine(tctx(t, wait))
	if err != nil {
		t.Fatal(err)
	}
	c1 := ps.c
	c2 := dial(t, url, nil)
	if _, err := c2.Initialize(tctx(t, wait)); err != nil {
		t.Fatalf("initialize: %v", err)
	}
	ctx := tctx(t, 4*wait)
	ws := t.TempDir()
	mkProjectSubpaths(t, ws)
	sb := codexWorkspaceWrite(ws, "restricted")
	marker := fmt.Sprintf("recycle-%d-%d", os.Getpid(), time.Now().UnixNano()%1000000)
	start := func(c *wiretest.Client, id, script string) {
		t.Helper()
		req := startReq{StartParams: wiretest.StartParams{ProcessID: id, Argv: []string{"/usr/bin/bash", "-c", script, marker + "-" + id},
			Cwd: "file://" + ws, Env: baseEnv(), PipeStdin: true}, Sandbox: sb}
		if _, err := call(ctx, c, "process/start", req); err != nil {
			if strings.Contains(err.Error(), "cannot be enforced on this host") {
				t.Skipf("host: %v", err)
			}
			t.Fatalf("start %s: %v", id, err)
		}
	}
	write := func(c *wiretest.Client, id, s string) {
		t.Helper()
		var wr struct{ Status string }
		if err := c.CallResult(ctx, "process/write", map[string]any{"processId": id, "chunk": wiretest.B64(s)}, &wr); err != nil || wr.Status != "accepted" {
			t.Fatalf("write to %s: %+v %v", id, wr, err)
		}
	}
	// A first sandboxed start prepares the policy's sandbox for the next.
	if got := exitCodeOf(t, mustCollect(t, c1, func() string { start(c1, "prime", `exit 0`); return "prime" }())); got != 0 {
		t.Fatalf("priming start: exit %d", got)
	}
	ps.waitReady(t)

	start(c1, "a", `echo "pid $$"; echo secret > /dev/shm/left; touch -d @424242 /dev/shm
python3 -c 'import ctypes; print("sem", ctypes.CDLL(None).semget(0x5eed, 1, 0o1666) >= 0)'
setsid sleep 1000 </dev/null >/dev/null 2>&1 &
chmod 0 /proc
read x; kill -TERM $$; echo survived`)
	wa := c1.Watch("a")
	if err := wa.WaitOutput(ctx, "sem True\n"); err != nil {
		t.Fatal(err)
	}
	initA := initOf(t, marker+"-a")
	write(c1, "a", "go\n")
	la, err := wa.WaitClosed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := exitCodeOf(t, la); got != 128+15 || strings.Contains(string(la.Output("stdout")), "survived") {
		t.Errorf("first command (SIGTERM from itself): exit %d, %q; want 143", got, la.Output("stdout"))
	}

	start(c2, "b", `echo "pid $$"; echo "shm [$(ls -A /dev/shm)] $(stat -c '%a %Y' /dev/shm)"
python3 -c 'import ctypes; print("sem", ctypes.CDLL(None).semget(0x5eed, 0, 0) >= 0)'
cat /proc/self/comm >/dev/null && echo proc-ok
echo "sleeps $(cat /proc/[0-9]*/comm 2>/dev/null | grep -c '^sleep$')"
read x; echo "b $x"; exec sleep 1000`)
	wb := c2.Watch("b")
	if err := wb.WaitOutput(ctx, "sleeps "); err != nil {
		t.Fatal(err)
	}
	if initB := initOf(t, marker+"-b"); initB != initA {
		t.Skipf("the second command ran in init %d, the first in %d: not recycled (a mount changed meanwhile?)", initB, initA)
	}
	write(c2, "b", "go\n")
	if err := wb.WaitOutput(ctx, "b go\n"); err != nil {
		t.Fatal(err)
	}
	var res struct{ Running *bool }
	if err := c2.CallResult(ctx, "process/terminate", map[string]any{"processId": "b", "graceMs": 10000}, &res); err != nil || res.Running == nil || !*res.Running {
		t.Fatalf("terminate b: %+v %v", res, err)
	}
	lb, err := wb.WaitClosed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	outA, outB := string(la.Output("stdout")), string(lb.Output("stdout"))
	if got := exitCodeOf(t, lb); got != 128+15 {
		t.Errorf("second command terminated: exit %d, want 143", got)
	}
	for _, want := range []string{"shm [] 1777 ", "sem False\n", "proc-ok\n", "sleeps 0\n"} {
		if !strings.Contains(outB, want) {
			t.Errorf("the second command's view lacks %q:\n%s\n(the first's: %s)", want, outB, outA)
		}
	}
	if strings.Contains(outB, " 424242") {
		t.Errorf("the second command reads the first's /dev/shm time: %q", outB)
	}
}
