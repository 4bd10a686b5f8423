package main_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runtimed/runtimed/wire/wiretest"
)

// The real daemon forced into subreaper mode (this host has cgroups): the
// start-up log names the mode; a tree whose descendants left it by setsid
// and by double forks has its orphans adopted by the daemon (not by
// init), and SIGTERM to the daemon ends every one of them before it exits.
func TestSubreaperModeServerShutdown(t *testing.T) {
	t.Parallel()
	srv := wiretest.StartWS(t, bin, "--containment", "subreaper", "--shutdown-grace", "300ms")
	c := dial(t, srv.URL, nil)
	if _, err := c.Initialize(tctx(t, wait)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(srv.Stderr(), `"mode": "subreaper"`) {
		t.Fatalf("the start-up log does not name the subreaper mode:\n%s", srv.Stderr())
	}
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	script := fmt.Sprintf(`(setsid sh -c 'echo $$ >> %[1]s; exec sleep 1000' &)
(sh -c 'trap "" TERM; echo $$ >> %[1]s; exec sleep 1000' &)
echo $$ >> %[1]s
exec sleep 1000`, shq(pids))
	mustStart(t, c, shProc("tree", dir, script))
	var got []int
	pollUntil(10*time.Second, func() bool {
		b, _ := os.ReadFile(pids)
		got = got[:0]
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				got = append(got, n)
			}
		}
		return len(got) == 3
	})
	if len(got) != 3 {
		t.Fatalf("pids: %v", got)
	}
	t.Cleanup(func() {
		for _, p := range got {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	})
	// The orphans are the daemon's children: the control that shows the
	// subreaper, not a process group, has them.
	if !pollUntil(5*time.Second, func() bool {
		n := 0
		for _, p := range got {
			if ppid(p) == srv.Pid() {
				n++
			}
		}
		return n == 3 // the root and both orphans
	}) {
		t.Fatalf("the orphans were not adopted by the daemon (pid %d): parents %d %d %d", srv.Pid(), ppid(got[0]), ppid(got[1]), ppid(got[2]))
	}
	if err := srv.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, err := srv.Wait(tctx(t, 15*time.Second)); err != nil || code != 0 {
		t.Fatalf("server exit: code %d, %v", code, err)
	}
	for _, p := range got {
		waitPidGone(t, "a process of the tree", p, 5*time.Second)
	}
}

func ppid(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}
