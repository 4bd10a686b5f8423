package contain

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// cgroup2Manager is a ModeCgroup2 manager, or skips where the host has no
// writable unified hierarchy.
func cgroup2Manager(t *testing.T) *Manager {
	t.Helper()
	m := NewManager(ModeCgroup2)
	if m.Mode() != ModeCgroup2 {
		_ = m.Close()
		t.Skipf("no writable cgroup v2 hierarchy here (mode %s)", m.Mode())
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// startIn starts argv in g's cgroup (CLONE_INTO_CGROUP).
func startIn(t *testing.T, g *Group, argv ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: g.CgroupFD()}
	err := cmd.Start()
	g.CloseFD()
	if err != nil {
		t.Fatal(err)
	}
	return cmd
}

// runIn runs argv in g's cgroup to its end.
func runIn(t *testing.T, g *Group, argv ...string) error {
	t.Helper()
	return startIn(t, g, argv...).Wait()
}

// A tree that ended by itself leaves its cgroup to the next group without
// limits: same directory, empty, and a process cloned into it runs.
func TestSpareCgroupReused(t *testing.T) {
	m := cgroup2Manager(t)
	g1, err := m.NewGroup(Limits{})
	if err != nil {
		t.Fatal(err)
	}
	dir := g1.v2
	if err := runIn(t, g1, "true"); err != nil {
		t.Fatal(err)
	}
	if !g1.ReleaseIfEmpty() {
		t.Fatal("an ended tree's group was not released")
	}
	if g1.Contained() || g1.v2 != "" {
		t.Fatal("a released group still names its cgroup")
	}
	g2, err := m.NewGroup(Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer g2.Release()
	if g2.v2 != dir {
		t.Fatalf("new group in %s; want the spare %s", g2.v2, dir)
	}
	if err := runIn(t, g2, "sh", "-c", "exit 3"); exitCode(err) != 3 {
		t.Fatalf("a process in the reused cgroup ended with %v; want exit status 3", err)
	}
	// A group with limits never takes a spare (its settings would carry over).
	g3, err := m.NewGroup(Limits{Pids: 64})
	if err == nil {
		defer g3.Release()
		if g3.v2 == dir {
			t.Fatal("a group with limits took a spare cgroup")
		}
	}
}

// A cgroup that was killed (cgroup.kill) is never reused: on some kernels
// whatever is cloned into it later is killed at once.
func TestKilledCgroupNotReused(t *testing.T) {
	m := cgroup2Manager(t)
	g1, err := m.NewGroup(Limits{})
	if err != nil {
		t.Fatal(err)
	}
	dir := g1.v2
	cmd := startIn(t, g1, "sleep", "100")
	if err := g1.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	g1.Release()
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the killed cgroup %s was kept (%v); it must be removed", dir, err)
	}
	for range spareCap + 1 { // whatever spares there are, then a fresh one
		g, err := m.NewGroup(Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if g.v2 == dir {
			t.Fatal("a killed cgroup was handed out again")
		}
		if err := runIn(t, g, "sh", "-c", "exit 3"); exitCode(err) != 3 {
			t.Fatalf("a process started after a kill ended with %v; want exit status 3", err)
		}
		defer g.Release()
	}
}

// A tree with a process left keeps its group until Release.
func TestReleaseIfEmptyKeepsRunningTree(t *testing.T) {
	m := cgroup2Manager(t)
	g, err := m.NewGroup(Limits{})
	if err != nil {
		t.Fatal(err)
	}
	cmd := startIn(t, g, "sleep", "100")
	if g.ReleaseIfEmpty() {
		t.Fatal("released the group of a running tree")
	}
	g.Release() // kills it
	if err := cmd.Wait(); exitCode(err) != -1 {
		t.Fatalf("sleep ended with %v; want killed by Release", err)
	}
}

// exitCode is err's exit status, -1 for a signal, -2 for no exit error.
func exitCode(err error) int {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return -2
	}
	return ee.ExitCode()
}
