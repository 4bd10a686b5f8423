package actors

import "testing"

// Active counts the processes not yet closed, and forgets the closed ones
// as it sees them, so that a start in a session with many retained
// processes does not look at each of them again.
func TestSessionActiveForgetsClosed(t *testing.T) {
	tab := &SessionTable{Procs: map[string]*ProcessRef{}}
	closed := map[string]chan struct{}{}
	for _, id := range []string{"a", "b", "c"} {
		closed[id] = make(chan struct{})
		tab.Add(id, &ProcessRef{id: id, closedC: closed[id], done: make(chan struct{})})
	}
	if n := tab.Active(); n != 3 {
		t.Fatalf("Active = %d; want 3", n)
	}
	close(closed["a"])
	close(closed["c"])
	if n := tab.Active(); n != 1 {
		t.Fatalf("Active = %d after two closed; want 1", n)
	}
	if len(tab.open) != 1 || len(tab.Procs) != 3 {
		t.Fatalf("open %d, procs %d; want the closed ones forgotten by the count only (1, 3)", len(tab.open), len(tab.Procs))
	}
}
