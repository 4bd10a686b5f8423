package runtime

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// An embedding program that crashed leaves its trees running; the next
// program calls ReclaimOrphans (NewServer and NewLocal do it themselves)
// and they are killed. Here a Local in process-group containment records a
// tree in a state directory; a copy of that record under a dead pid's name
// stands for the crashed program's.
func TestReclaimOrphansKillsADeadRuntimesTree(t *testing.T) {
	state := t.TempDir()
	l := NewLocal(Config{Containment: ContainProcessGroup, StateDir: state})
	t.Cleanup(func() { _ = l.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := l.Start(ctx, Spec{Argv: []string{"sleep", "60"}, Dir: "/"})
	if err != nil {
		t.Fatal(err)
	}
	recs, _ := filepath.Glob(filepath.Join(state, "runtimed-*", "[0-9]*"))
	if len(recs) != 1 {
		t.Fatalf("records %v; want the one tree's", recs)
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	if syscall.Kill(dead.Process.Pid, 0) == nil {
		t.Skip("the dead pid was reused already")
	}
	// The crashed program's directory: the same record, under a pid that is gone.
	deadDir := filepath.Join(state, "runtimed-"+strconv.Itoa(dead.Process.Pid))
	if err := exec.Command("cp", "-r", filepath.Dir(recs[0]), deadDir).Run(); err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("rm", filepath.Join(deadDir, "owner")).Run(); err != nil {
		t.Fatal(err)
	}
	got := ReclaimOrphans(state)
	if len(got) != 1 || got[0].DeadPid != dead.Process.Pid || len(got[0].Killed) != 1 || got[0].Err != nil {
		t.Fatalf("ReclaimOrphans = %+v; want the dead runtime's one tree killed", got)
	}
	st, err := p.Wait(ctx)
	if err != nil || st.Signal() != syscall.SIGKILL {
		t.Fatalf("the reclaimed tree's process: %v, %v; want killed", st, err)
	}
}
