package actors

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// fakeBound is a process as the budget actor sees it: a closed channel and
// a done channel the test closes.
type fakeBound struct {
	ref               *ProcessRef
	closed, actorDone chan struct{}
}

func newFakeBound() fakeBound {
	c, d := make(chan struct{}), make(chan struct{})
	return fakeBound{ref: &ProcessRef{closedC: c, done: d}, closed: c, actorDone: d}
}

// usageOf asks b (driven by the test goroutine, its owner here) for its
// accounting.
func usageOf(b *budgets) BudgetUsage {
	r := make(chan BudgetUsage, 1)
	b.handle(usageMsg{reply: r})
	return <-r
}

func acquireOf(b *budgets, c charge, privileged bool) *BudgetError {
	r := make(chan *BudgetError, 1)
	b.handle(acquireMsg{want: c, privileged: privileged, reply: r})
	return <-r
}

// Budgets are released exactly once: a process one sweep saw closed (its
// process and descriptor charges returned) and a later sweep saw gone (its
// retention returned) gives nothing back twice. After churn the totals are
// back at zero, never negative, and the budgets admit exactly their limits.
func TestBudgetReleasedOnce(t *testing.T) {
	lim := Budgets{MaxProcesses: 4, MaxOpenFiles: 4 * FDsPerProcess, MaxRetainedBytes: 4 * 1000}
	b := newBudgets(lim)
	pc := charge{procs: 1, fds: FDsPerProcess, retained: 1000, readAhead: 400}
	for round := range 3 {
		var fs []fakeBound
		for range 4 {
			if err := acquireOf(b, pc, true); err != nil {
				t.Fatalf("round %d: start refused: %v", round, err)
			}
			f := newFakeBound()
			b.handle(bindMsg{ref: f.ref, c: pc})
			fs = append(fs, f)
		}
		if err := acquireOf(b, pc, true); err == nil {
			t.Fatalf("round %d: a fifth process was admitted with --max-processes-total 4", round)
		}
		// Closed, seen by a sweep (the usage): processes and fds return, the
		// retention stays.
		for _, f := range fs {
			close(f.closed)
		}
		u := usageOf(b)
		if u.Processes != 0 || u.OpenFiles != 0 || u.RetainedBytes != 4*(1000-400) {
			t.Fatalf("round %d: after the closes: %+v; want 0 processes, 0 fds, %d retained", round, u, 4*(1000-400))
		}
		// Gone, seen by a later sweep: only the retention returns.
		for _, f := range fs {
			close(f.actorDone)
		}
		u = usageOf(b)
		if u != (BudgetUsage{}) {
			t.Fatalf("round %d: after the actors ended: %+v; want all zero", round, u)
		}
		if len(b.bound) != 0 {
			t.Fatalf("round %d: %d processes still bound", round, len(b.bound))
		}
	}
	// Closed and gone seen by one sweep: returned once too.
	if err := acquireOf(b, pc, true); err != nil {
		t.Fatal(err)
	}
	f := newFakeBound()
	b.handle(bindMsg{ref: f.ref, c: pc})
	close(f.closed)
	close(f.actorDone)
	if u := usageOf(b); u != (BudgetUsage{}) {
		t.Fatalf("closed and gone in one sweep: %+v; want all zero", u)
	}
	// Exactly the limits are admitted after the churn, not one more.
	for i := range 4 {
		if err := acquireOf(b, pc, true); err != nil {
			t.Fatalf("start %d of 4 after churn: %v", i, err)
		}
	}
	if err := acquireOf(b, charge{procs: 1}, true); err == nil || err.Limit != "processes" {
		t.Fatalf("a fifth process after churn: %v; want the processes budget", err)
	}
	if err := acquireOf(b, charge{fds: 1}, true); err == nil || err.Limit != "open files" {
		t.Fatalf("a descriptor beyond --max-open-files after churn: %v; want the open-files budget", err)
	}
}

// The same through real processes: each one started, closed (seen by a
// usage), then discarded (its actor ends, seen by another): the usage
// goes back to zero every time, and the limits still admit what they say.
func TestBudgetReleasedOnceRealProcesses(t *testing.T) {
	sup := budgetSupervisor(t, 64<<10, Budgets{MaxProcesses: 2, MaxOpenFiles: 2 * FDsPerProcess})
	ctx := context.Background()
	wait := func(c <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-c:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: not within 10s", what)
		}
	}
	for i := range 3 {
		ref, err := sup.SpawnCharged(fmt.Sprint("p", i), Spec{Argv: []string{"true"}, Dir: "/"}, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		wait(ref.Closed(), "close")
		u, err := sup.BudgetUsage(ctx)
		if err != nil || u.Processes != 0 || u.OpenFiles != 0 || u.RetainedBytes <= 0 {
			t.Fatalf("closed, retained: %+v %v; want 0 processes, 0 fds, its retention", u, err)
		}
		if err := ref.Discard(ctx); err != nil {
			t.Fatal(err)
		}
		wait(ref.Done(), "actor end")
		if u, err := sup.BudgetUsage(ctx); err != nil || u != (BudgetUsage{}) {
			t.Fatalf("after the actor ended: %+v %v; want all zero", u, err)
		}
	}
	spec := Spec{Argv: []string{"sleep", "1000"}, Dir: "/"}
	for i := range 2 {
		if _, err := sup.SpawnCharged(fmt.Sprint("s", i), spec, nil, 0); err != nil {
			t.Fatalf("start %d of 2 after churn: %v", i, err)
		}
	}
	var be *BudgetError
	if _, err := sup.SpawnCharged("s2", spec, nil, 0); !errors.As(err, &be) || be.Limit != "processes" {
		t.Fatalf("a third start with --max-processes-total 2: %v", err)
	}
}
