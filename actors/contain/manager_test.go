package contain

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Two managers in one process (two embedded runtimes, or a test suite)
// each keep their own directories: closing one leaves the other able to
// make cgroups, with limits and without.
func TestManagersInOneProcessAreIndependent(t *testing.T) {
	a := NewManager(ModeCgroup2)
	b := NewManager(ModeCgroup2)
	t.Cleanup(func() { _ = b.Close() })
	if a.Mode() != ModeCgroup2 && a.Mode() != ModeCgroup1 {
		_ = a.Close()
		t.Skipf("no writable cgroup hierarchy here (mode %s)", a.Mode())
	}
	if a.v2 != "" && a.v2 == b.v2 {
		t.Errorf("both managers use %s", a.v2)
	}
	for c, d := range a.v1 {
		if b.v1[c] == d {
			t.Errorf("both managers use the v1 %s cgroup %s", c, d)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatalf("close the first manager: %v", err)
	}
	lims := []Limits{{}}
	if b.LimitsOnTree() {
		lims = append(lims, Limits{MemoryBytes: 64 << 20, Pids: 64})
	}
	for _, lim := range lims {
		g, err := b.NewGroup(lim)
		if err != nil {
			t.Fatalf("a group (limits %+v) after another manager closed: %v", lim, err)
		}
		if !g.Contained() {
			t.Errorf("a group (limits %+v) after another manager closed is not contained", lim)
		}
		g.Release()
	}
}

// A daemon that died without cleaning up leaves runtimed-<pid> and
// runtimed-<pid>.<n> directories behind; the next Manager removes the
// empty ones of a pid that no longer runs, and nothing of a live one.
func TestStaleDirectoriesRemoved(t *testing.T) {
	base := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	deadPid := dead.Process.Pid
	if syscall.Kill(deadPid, 0) == nil {
		t.Skipf("pid %d was reused already", deadPid)
	}
	stale := []string{managerName(deadPid, 1), managerName(deadPid, 3)}
	live := []string{managerName(os.Getppid(), 1), managerName(os.Getppid(), 2)}
	for _, n := range append(stale, live...) {
		if err := os.MkdirAll(filepath.Join(base, n, "7"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cleanStaleCgroups(base, "memory") // plain directories: no cgroup files
	for _, n := range stale {
		if _, err := os.Stat(filepath.Join(base, n)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s of a dead pid: %v; want it removed", n, err)
		}
	}
	for _, n := range live {
		if _, err := os.Stat(filepath.Join(base, n, "7")); err != nil {
			t.Errorf("%s of a live pid: %v; want it kept", n, err)
		}
	}
}

// The best containment the host offers is used: where a directory made in
// this process's unified cgroup has cgroup.kill (a writable cgroup v2 of
// Linux 5.14 or later), a Manager asked for ModeCgroup2 uses it and
// delegates it no v1 tracking.
func TestManagerUsesCgroup2WhereAvailable(t *testing.T) {
	mnt, ok := cgroupMounts()[""]
	if !ok {
		t.Skip("no unified cgroup hierarchy mounted")
	}
	probe := filepath.Join(mnt, ownCgroups()[""], fmt.Sprintf("runtimed-probe-%d", os.Getpid()))
	if err := os.Mkdir(probe, 0o755); err != nil {
		t.Skipf("the unified hierarchy is not writable here: %v", err)
	}
	_, err := os.Stat(filepath.Join(probe, "cgroup.kill"))
	_ = syscall.Rmdir(probe)
	if err != nil {
		t.Skipf("no cgroup.kill here (kernel before 5.14): %v", err)
	}
	m := NewManager(ModeCgroup2)
	defer m.Close()
	if m.Mode() != ModeCgroup2 || m.track != "" {
		t.Fatalf("mode %s (v1 tracking %q) on a host with a writable cgroup v2 that has cgroup.kill; want %s", m.Mode(), m.track, ModeCgroup2)
	}
	if !strings.Contains(m.Summary(), "tree containment: cgroup2") {
		t.Errorf("summary %q", m.Summary())
	}
}
