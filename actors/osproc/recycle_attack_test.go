package osproc

import (
	"syscall"
	"testing"
	"time"

	"github.com/runtimed/runtimed/actors/contain"
)

// TestRecycleAttackSubreaperRelease: with the subreaper's containment
// (hosts without cgroups), a session registers its tree's root with the
// subreaper: for a start on a recycled sandbox that root is the init,
// which outlives the command and serves the next start. The first
// session's end (Release: the subreaper kills its tree, the root's
// descendants) must not reach the next session's command on that init,
// nor the init. (osproc does not recycle under the subreaper: the next
// start runs on another sandbox.)
func TestRecycleAttackSubreaperRelease(t *testing.T) {
	prep, _ := reviewIso(t)
	m := contain.NewManager(contain.ModeSubreaper)
	if m.Mode() != contain.ModeSubreaper {
		t.Skipf("this host offers %s, not the subreaper", m.Mode())
	}
	t.Cleanup(func() { _ = m.Close() })
	iso := Isolation{Host: prep.Host, Contain: m}
	a := startReviewed(t, iso, `exit 0`, true)
	if code := waitBounded(t, a, 10*time.Second); code != 0 {
		finish(a)
		t.Fatalf("first command: %d", code)
	}
	spec := reviewSpec(t, iso, `echo ready; exec sleep 1000`)
	s, err := Start(spec, iso)
	if err != nil {
		finish(a)
		t.Fatalf("the next start on the recycled init: %v", err)
	}
	b := s.(*osSession)
	defer finish(b)
	waitReady(t, b)
	if a.report.Recycled() != (b.pid == a.pid) {
		t.Logf("first start recycled: %v; next start in init %d, the first in %d", a.report.Recycled(), b.pid, a.pid)
	}
	finish(a) // the first session's end, while the next command runs
	if err := syscall.Kill(b.pid, 0); err != nil {
		t.Errorf("the recycled init %d after the first session's Release: %v", b.pid, err)
	}
	if err := b.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, want := waitBounded(t, b, 10*time.Second), SignaledBy(int(syscall.SIGTERM)); code != want {
		t.Errorf("the next command ended with status %#x, want %#x (its own SIGTERM); SIGKILL: the first session's Release killed it", code, want)
	}
}
