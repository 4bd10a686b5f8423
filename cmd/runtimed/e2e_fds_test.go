package main_test

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/runtimed/runtimed/wire/wiretest"
)

// serverFDs counts the open descriptors of the server process.
func serverFDs(t *testing.T, pid int) int {
	t.Helper()
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// Issue 14: ended processes release every descriptor at once (pidfds, pipes, PTY masters, cgroup
// directories), not at garbage collection: after starting and terminating thousands of processes the
// server's open descriptors are back to the idle baseline (+64) within 10 s, while the closed processes
// are still retained (readable) for the closed retention.
func TestEndedProcessesReleaseDescriptors(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 1500 processes")
	}
	t.Parallel()
	srv := wiretest.StartWS(t, bin, "--closed-retention", "10m")
	ctx := tctx(t, 3*time.Minute)
	c := dial(t, srv.URL, nil)
	if _, err := c.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	base := serverFDs(t, srv.Pid())
	const n = 1500
	dir := t.TempDir()
	for i := range n {
		p := wiretest.StartParams{ProcessID: fmt.Sprint("p", i), Argv: []string{"/bin/sleep", "600"}, Cwd: dir, Env: baseEnv()}
		switch i % 3 {
		case 1:
			p.TTY = true
		case 2:
			p.PipeStdin = true
		}
		if err := c.Start(ctx, p); err != nil {
			t.Fatalf("start %d: %v (server descriptors %d, baseline %d)", i, err, serverFDs(t, srv.Pid()), base)
		}
	}
	running := serverFDs(t, srv.Pid())
	if running < base+n { // at least one descriptor per running child, or the count below proves nothing
		t.Fatalf("server holds %d descriptors with %d children running (baseline %d)", running, n, base)
	}
	for i := range n {
		if _, err := c.Terminate(ctx, fmt.Sprint("p", i)); err != nil {
			t.Fatal(err)
		}
	}
	closed := 0
	for closed < n {
		if _, err := c.WaitNotification(ctx, func(m string, _ json.RawMessage) bool { return m == "process/closed" }); err != nil {
			t.Fatalf("%d of %d processes closed: %v", closed, n, err)
		}
		closed++
	}
	deadline := time.Now().Add(10 * time.Second)
	got := serverFDs(t, srv.Pid())
	for got > base+64 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		got = serverFDs(t, srv.Pid())
	}
	if got > base+64 {
		t.Fatalf("server holds %d descriptors 10 s after %d processes closed (baseline %d, %d while running): want at most baseline+64",
			got, n, base, running)
	}
	// Still retained: readable after the descriptors went.
	if r, err := c.Read(ctx, wiretest.ReadParams{ProcessID: "p0"}); err != nil || !r.Closed {
		t.Fatalf("closed process p0 not retained: %+v, %v", r, err)
	}
	t.Logf("server descriptors: baseline %d, %d with %d running, %d after they closed", base, running, n, got)
}
