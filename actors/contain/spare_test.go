package contain

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// A cgroup that carried limits is never a spare, either way: a group with
// limits does not take a spare that is waiting (its limits would be
// written into a cgroup the pool hands out again), and the cgroup of a
// limited tree that ended normally is not handed to the next start
// without limits (which would inherit its memory.max or pids.max and get
// OOM kills or fork failures). Both tree limits (v2 or v1 cgroups, as the
// host has them) and rlimit-only limits are tried: the pool takes groups
// without any limit only.
func TestLimitedCgroupNeverSpare(t *testing.T) {
	lims := []Limits{{CPUSeconds: 60, OpenFiles: 512}}
	if m := NewManager(ModeCgroup2); m.LimitsOnTree() {
		lims = append(lims, Limits{MemoryBytes: 256 << 20, Pids: 64})
		_ = m.Close()
	} else {
		_ = m.Close()
	}
	for _, lim := range lims {
		limitedNeverSpare(t, lim)
	}
}

func limitedNeverSpare(t *testing.T, lim Limits) {
	m := cgroup2Manager(t)
	// A spare waits.
	g0, err := m.NewGroup(Limits{})
	if err != nil {
		t.Fatal(err)
	}
	spareDir := g0.v2
	if err := runIn(t, g0, "true"); err != nil {
		t.Fatal(err)
	}
	if !g0.ReleaseIfEmpty() {
		t.Fatal("an ended tree's group was not released")
	}
	if len(m.spare) != 1 {
		t.Fatalf("%d spares after an unlimited tree ended; want 1", len(m.spare))
	}
	// A group with limits does not take it.
	g1, err := m.NewGroup(lim)
	if err != nil {
		t.Fatal(err)
	}
	limDir := g1.v2
	if limDir == spareDir {
		g1.Release()
		t.Fatalf("a group with limits %+v took the spare cgroup %s", lim, spareDir)
	}
	if len(m.spare) != 1 {
		t.Fatalf("%d spares after a limited group was made; want the 1 still waiting", len(m.spare))
	}
	// Its tree ends normally; its cgroup is removed, not kept.
	if err := runIn(t, g1, "true"); err != nil {
		t.Fatal(err)
	}
	if !g1.ReleaseIfEmpty() {
		g1.Release()
		t.Fatalf("an ended tree's group (limits %+v) was not released", lim)
	}
	if _, err := os.Stat(limDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the cgroup %s of a tree with limits %+v was kept (%v); it must be removed", limDir, lim, err)
	}
	if len(m.spare) != 1 {
		t.Errorf("%d spares after a tree with limits %+v ended; want 1 (its cgroup is not one)", len(m.spare), lim)
	}
	// Every start without limits from now on (the spares, then fresh
	// ones) gets a cgroup without limits.
	for range spareCap + 1 {
		g, err := m.NewGroup(Limits{})
		if err != nil {
			t.Fatal(err)
		}
		defer g.Release()
		if g.v2 == limDir {
			t.Fatalf("the cgroup %s of a tree with limits %+v was handed to a start without limits", limDir, lim)
		}
		for _, f := range []string{"memory.max", "pids.max"} {
			if b, err := os.ReadFile(filepath.Join(g.v2, f)); err == nil && strings.TrimSpace(string(b)) != "max" {
				t.Fatalf("a start without limits got a cgroup with %s = %s", f, b)
			}
		}
	}
}

// Release of a tree that already ended keeps its cgroup as a spare (it
// was never killed); a group released after its Manager closed is removed,
// not kept; Close removes the spares and the Manager's own directory.
func TestSpareLifecycleAroundClose(t *testing.T) {
	m := NewManager(ModeCgroup2)
	if m.Mode() != ModeCgroup2 {
		_ = m.Close()
		t.Skipf("no writable cgroup v2 hierarchy here (mode %s)", m.Mode())
	}
	g1, err := m.NewGroup(Limits{})
	if err != nil {
		t.Fatal(err)
	}
	spare := g1.v2
	if err := runIn(t, g1, "true"); err != nil {
		t.Fatal(err)
	}
	g1.Release()
	if len(m.spare) != 1 {
		t.Fatalf("Release of an ended tree: %d spares; want its cgroup kept", len(m.spare))
	}
	g2, err := m.NewGroup(Limits{})
	if err != nil {
		t.Fatal(err)
	}
	g3, err := m.NewGroup(Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if g2.v2 != spare {
		t.Fatalf("the next group got %s; want the spare %s", g2.v2, spare)
	}
	if err := runIn(t, g2, "true"); err != nil {
		t.Fatal(err)
	}
	if err := runIn(t, g3, "true"); err != nil {
		t.Fatal(err)
	}
	g2.Release() // a spare again
	if len(m.spare) != 1 {
		t.Fatalf("%d spares; want 1", len(m.spare))
	}
	// g3 outlives its Manager (release order is the caller's): Close fails
	// to remove the directory g3 still has, nothing else.
	err = m.Close()
	if _, serr := os.Stat(spare); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("Close left the spare %s (%v)", spare, serr)
	}
	if len(m.spare) != 0 {
		t.Errorf("Close left %d spares", len(m.spare))
	}
	if err == nil {
		t.Errorf("Close removed its directory though %s is in it", g3.v2)
	}
	dir := g3.v2
	if !g3.ReleaseIfEmpty() {
		t.Fatal("an ended tree's group was not released")
	}
	if _, serr := os.Stat(dir); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("a group released after its Manager closed kept its cgroup %s (%v)", dir, serr)
	}
	if len(m.spare) != 0 {
		t.Errorf("a group released after Close became a spare")
	}
	if err := m.Close(); err != nil {
		t.Errorf("Close again, nothing left: %v", err)
	}
	if _, serr := os.Stat(m.v2); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("the Manager's directory %s is left (%v)", m.v2, serr)
	}
}

// Without cgroups a group has nothing to release early: ReleaseIfEmpty
// says so, and the group contains nothing.
func TestReleaseIfEmptyWithoutCgroups(t *testing.T) {
	m := NewManager(ModePgroup)
	defer m.Close()
	g, err := m.NewGroup(Limits{CPUSeconds: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Release()
	if g.Contained() || g.CgroupFD() != -1 || g.ReleaseIfEmpty() {
		t.Errorf("a group without cgroups: contained %v, fd %d, released early %v", g.Contained(), g.CgroupFD(), g.ReleaseIfEmpty())
	}
}
