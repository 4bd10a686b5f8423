package contain

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// A record of a dead manager whose process-group number now names a
// process started later (another start time) kills nothing; one whose
// leader is the recorded process kills its group.
func TestStaleRecordsKillOnlyTheRecordedGroup(t *testing.T) {
	state := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	if syscall.Kill(dead.Process.Pid, 0) == nil {
		t.Skip("the dead pid was reused already")
	}
	dir := filepath.Join(state, managerName(dead.Process.Pid, 1))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	start := func() *exec.Cmd {
		c := exec.Command("sleep", "60")
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
		return c
	}
	victim, bystander := start(), start()
	st, ok := readStat(bystander.Process.Pid)
	if !ok {
		t.Fatal("no stat of the bystander")
	}
	if record(dir, victim.Process.Pid) == "" {
		t.Fatal("record failed")
	}
	// The bystander's record says it started a tick earlier: its number names another process now.
	if err := os.WriteFile(filepath.Join(dir, strconv.Itoa(bystander.Process.Pid)), []byte(strconv.FormatUint(st.start-1, 10)), 0o600); err != nil {
		t.Fatal(err)
	}
	got := cleanStaleRecords(state)
	if len(got) != 1 || got[0].Where != filepath.Join(dir, strconv.Itoa(victim.Process.Pid)) || got[0].Daemon != dead.Process.Pid {
		t.Fatalf("reclaimed %v; want the victim's record only", got)
	}
	waited := make(chan error, 1)
	go func() { waited <- victim.Wait() }()
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("the recorded group was not killed")
	}
	if syscall.Kill(bystander.Process.Pid, 0) != nil {
		t.Fatal("the bystander, whose number matched a record but not its start time, was killed")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the dead manager's record directory is still there: %v", err)
	}
}
