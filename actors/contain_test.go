package actors

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/runtimed/runtimed/actors/contain"
	"github.com/runtimed/runtimed/actors/osproc"
)

func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// A zombie (state Z) is dead for our purpose.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

// TestContainmentModes: a grandchild that left the process group and
// ignores SIGTERM, and one that holds the output pipe after its parent
// exited, both die on terminate in every cgroup mode, and closed follows.
// In pgroup mode (forced) the escaped grandchild is documented to survive.
func TestContainmentModes(t *testing.T) {
	for _, mode := range []string{contain.ModeCgroup2, contain.ModeCgroup1, contain.ModeSubreaper, contain.ModePgroup} {
		t.Run(mode, func(t *testing.T) {
			m := contain.NewManager(mode)
			if m.Mode() != mode {
				t.Skipf("this host offers %s, not %s", m.Mode(), mode)
			}
			sup := NewSupervisor(Config{
				Proc: ProcConfig{RetainBytes: 1 << 20, RetainChunks: 1000, ClosedRetention: time.Minute,
					DrainAfterTerminate: 50 * time.Millisecond, ShutdownGrace: time.Second},
				Isolation: osproc.Isolation{Contain: m},
				Logger:    zaptest.NewLogger(t),
			})
			stopAtCleanup(t, sup, func() { _ = m.Close() })
			dir := t.TempDir()
			escaped, holder := filepath.Join(dir, "escaped"), filepath.Join(dir, "holder")
			script := `setsid bash -c 'trap "" TERM; echo $$ > ` + escaped + `.tmp; mv ` + escaped + `.tmp ` + escaped + `; exec sleep 300' </dev/null >/dev/null 2>&1 &
( bash -c 'echo $$ > ` + holder + `.tmp; mv ` + holder + `.tmp ` + holder + `; exec sleep 300' & ) 
while [ ! -e ` + escaped + ` ] || [ ! -e ` + holder + ` ]; do sleep 0.01; done
echo ready; exec sleep 300`
			rec := newRecorder(64)
			ref, err := sup.Spawn("tree", Spec{Argv: []string{"/usr/bin/bash", "-c", script}, Dir: dir, Env: []string{"PATH=/usr/bin:/bin"}}, rec.sub())
			if err != nil {
				t.Fatal(err)
			}
			escPid := mustAtoi(t, waitPlain(t, escaped))
			holdPid := mustAtoi(t, waitPlain(t, holder))
			t.Cleanup(func() { _ = syscall.Kill(escPid, syscall.SIGKILL); _ = syscall.Kill(holdPid, syscall.SIGKILL) })
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := ref.Terminate(ctx, 100*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			rec.untilClosed(t, 10*time.Second) // closed follows although holder had the pipe
			if mode == contain.ModePgroup {
				// The control: the grandchild really left the group, so
				// only a cgroup mode can reach it.
				if !alive(escPid) {
					t.Errorf("pgroup: the escaped grandchild died; the test no longer shows an escape")
				}
				return
			}
			deadline := time.Now().Add(5 * time.Second)
			for time.Now().Before(deadline) && (alive(escPid) || alive(holdPid)) {
				time.Sleep(5 * time.Millisecond)
			}
			if alive(escPid) {
				t.Errorf("%s: the setsid grandchild that ignores SIGTERM survived terminate", mode)
			}
			if alive(holdPid) {
				t.Errorf("%s: the orphan holding the output pipe survived terminate", mode)
			}
		})
	}
}

func waitPlain(t *testing.T, path string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return strings.TrimSpace(string(b))
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s never appeared", path)
	return ""
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("not a pid: %q", s)
	}
	return n
}

// TestEscapeeKeepsItsCgroup: an attack on the spare cgroups from inside a
// tree. The command daemonizes a grandchild (setsid, streams closed) and
// exits at once, so the process closes and is retained while the
// grandchild lives in its cgroup. That cgroup must not be released early
// nor handed to the next start (whose tree would then share a cgroup with
// the escapee, and be killed with it or kill it); the grandchild dies when
// its process is discarded.
func TestEscapeeKeepsItsCgroup(t *testing.T) {
	m := contain.NewManager(contain.ModeCgroup2)
	if m.Mode() != contain.ModeCgroup2 {
		_ = m.Close()
		t.Skipf("this host offers %s, not cgroup2", m.Mode())
	}
	sup := NewSupervisor(Config{
		Proc:      ProcConfig{RetainBytes: 1 << 20, RetainChunks: 1000, ClosedRetention: time.Minute, DrainAfterTerminate: 50 * time.Millisecond, ShutdownGrace: time.Second},
		Isolation: osproc.Isolation{Contain: m},
		Logger:    zaptest.NewLogger(t),
	})
	stopAtCleanup(t, sup, func() { _ = m.Close() })
	dir := t.TempDir()
	escaped := filepath.Join(dir, "escaped")
	script := `setsid bash -c 'echo $$ > ` + escaped + `.tmp; mv ` + escaped + `.tmp ` + escaped + `; exec sleep 300' </dev/null >/dev/null 2>&1 &
while [ ! -e ` + escaped + ` ]; do sleep 0.01; done`
	cgroupOf := func(pid int) string {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil {
			t.Fatalf("cgroup of %d: %v", pid, err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "0::"); ok {
				return v
			}
		}
		t.Fatalf("no v2 cgroup for %d: %s", pid, b)
		return ""
	}
	rec := newRecorder(64)
	ref, err := sup.Spawn("daemonizer", Spec{Argv: []string{"/usr/bin/bash", "-c", script}, Dir: dir, Env: []string{"PATH=/usr/bin:/bin"}}, rec.sub())
	if err != nil {
		t.Fatal(err)
	}
	escPid := mustAtoi(t, waitPlain(t, escaped))
	t.Cleanup(func() { _ = syscall.Kill(escPid, syscall.SIGKILL) })
	rec.untilClosed(t, 10*time.Second) // delivered: the process is retained now
	esc := cgroupOf(escPid)
	// Starts that end by themselves cycle through the spares; none may
	// land in the escapee's cgroup.
	for i := range 20 {
		probe := filepath.Join(dir, fmt.Sprint("probe", i))
		rec2 := newRecorder(64)
		if _, err := sup.Spawn(fmt.Sprint("p", i), Spec{Argv: []string{"/usr/bin/bash", "-c", "cat /proc/self/cgroup > " + probe}, Dir: dir, Env: []string{"PATH=/usr/bin:/bin"}}, rec2.sub()); err != nil {
			t.Fatal(err)
		}
		rec2.untilClosed(t, 10*time.Second)
		b, err := os.ReadFile(probe)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "0::"+esc+"\n") {
			t.Fatalf("start %d was cloned into the cgroup the escapee %d still lives in (%s)", i, escPid, esc)
		}
	}
	if !alive(escPid) {
		t.Fatal("the escapee died before its process was discarded: the test proves nothing")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ref.Discard(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && alive(escPid) {
		time.Sleep(5 * time.Millisecond)
	}
	if alive(escPid) {
		t.Errorf("the escapee %d survived the discard of its process", escPid)
	}
}
