package main_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/runtimed/runtimed/wire/wiretest"
)

// procStart reads a live process's start time (field 22 of /proc/<pid>/stat); ok is false for a process
// that is gone or a zombie.
func procStart(pid int) (string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", false
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return "", false
	}
	return f[19], true
}

// After kill -9 of the daemon its trees keep running (reparented); a new daemon started in the same place
// (same cgroup, same --state-dir) kills every process of them, an unsandboxed sleep, a grandchild and (with
// cgroups) one that left the process group, and logs what it did.
func TestDaemonCrashLeavesNoTree(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"auto", "subreaper", "pgroup"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			state := filepath.Join(dir, "state")
			args := []string{"--containment", mode, "--state-dir", state}
			srv := wiretest.StartWS(t, bin, args...)
			c := dial(t, srv.URL, nil)
			ctx := tctx(t, wait)
			if _, err := c.Initialize(ctx); err != nil {
				t.Fatal(err)
			}
			escape := ""
			if mode == "auto" {
				escape = `setsid sleep 1000 & echo $! >> pids; `
			}
			script := `echo $$ > pids; sleep 1000 & echo $! >> pids; sh -c 'echo $$ >> pids; sleep 1000 & echo $! >> pids; wait' & ` +
				escape + `: > started; wait`
			p := shProc("tree", dir, script)
			mustStart(t, c, p)
			want := 4
			if mode == "auto" {
				want = 5
			}
			var pids []int
			if !pollUntil(wait, func() bool {
				if _, err := os.Stat(filepath.Join(dir, "started")); err != nil {
					return false
				}
				b, _ := os.ReadFile(filepath.Join(dir, "pids"))
				pids = pids[:0]
				for _, f := range strings.Fields(string(b)) {
					n, _ := strconv.Atoi(f)
					pids = append(pids, n)
				}
				return len(pids) == want
			}) {
				t.Fatalf("the tree did not start: pids %v", pids)
			}
			starts := map[int]string{}
			for _, pid := range pids {
				st, ok := procStart(pid)
				if !ok {
					t.Fatalf("process %d of the tree is not running", pid)
				}
				starts[pid] = st
			}
			t.Cleanup(func() { // whatever the test's outcome, leave nothing running
				for pid, st := range starts {
					if now, ok := procStart(pid); ok && now == st {
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			})
			alive := func() []int {
				var out []int
				for pid, st := range starts {
					if now, ok := procStart(pid); ok && now == st {
						out = append(out, pid)
					}
				}
				return out
			}

			c.Close()
			srv.Kill()
			// With cgroups any daemon that starts now on this host (another test's) may be the one that
			// kills the tree: only the state directory is this test's own.
			if got := alive(); mode != "auto" && len(got) != len(pids) {
				t.Fatalf("after kill -9 of the daemon %d of %d processes of the tree are left; the test needs them running", len(got), len(pids))
			}

			srv2 := wiretest.StartWS(t, bin, args...)
			if !pollUntil(wait, func() bool { return len(alive()) == 0 }) {
				t.Fatalf("processes %v of the dead daemon's tree still run after a new daemon started; its log:\n%s", alive(), srv2.Stderr())
			}
			if mode != "auto" && !pollUntil(wait, func() bool {
				return strings.Contains(srv2.Stderr(), "killed what a runtime that died left running") && strings.Contains(srv2.Stderr(), strconv.Itoa(pids[0]))
			}) {
				t.Errorf("the new daemon did not log what it killed:\n%s", srv2.Stderr())
			}
		})
	}
}
