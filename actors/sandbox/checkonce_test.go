package sandbox

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCheckedPolicyIsNotCheckedAgain: a policy is checked (and planned,
// stat-ing every rule) once per start, by the caller's Host.Check; a
// launch on that host enforces the plan Check made instead of planning
// again. The proof: a rule's directory removed after Check no longer
// fails NewLaunch (the helper's grants would, matching the plan's files),
// while the same policy unchecked, or checked by another host, is planned
// at NewLaunch and fails there.
func TestCheckedPolicyIsNotCheckedAgain(t *testing.T) {
	h := probeOrSkip(t)
	dir := filepath.Join(t.TempDir(), "ws")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	policy := func() *Policy {
		return &Policy{RestrictFS: true, Network: true, Rules: []Rule{{Path: "/", Access: Read}, {Path: dir, Access: Write}}}
	}
	checked, unchecked, other := policy(), policy(), policy()
	if err := h.Check(checked); err != nil {
		t.Fatal(err)
	}
	h2 := probeOrSkip(t)
	if err := h2.Check(other); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	launch := func(p *Policy) error {
		l, err := NewLaunch(h, Plan{Path: "/bin/true", Argv: []string{"true"}, Policy: p})
		if err == nil {
			l.Abort()
		}
		return err
	}
	if err := launch(checked); err != nil {
		t.Errorf("a policy this host checked was planned again at NewLaunch: %v", err)
	}
	// The start itself still fails closed: the grants match the plan's
	// files, and the directory is gone.
	if code, err := startAndWait(t, h, Plan{Path: "/bin/true", Argv: []string{"true"}, Policy: checked}, "/"); err == nil {
		t.Errorf("the command ran (exit %d) under a plan whose directory is gone", code)
	}
	if err := launch(unchecked); err == nil {
		t.Error("an unchecked policy whose rule is gone launched: NewLaunch did not check it")
	}
	if err := launch(other); err == nil {
		t.Error("a policy another host checked launched without a check on this one")
	}
}
