package actors

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// TestBudgetLimitsExact: each budget admits exactly its limit (a
// privileged acquisition, a connection or a first start, the whole of it;
// any other leaves the reserve: FDReserve descriptors, and room for
// ReservedFirstStarts processes' retention, at most half a budget), and
// names itself when it refuses.
func TestBudgetLimitsExact(t *testing.T) {
	b := newBudgets(Budgets{MaxConnections: 2, MaxOutboundBytes: 300, MaxOpenFiles: 100, FDReserve: 10, MaxRetainedBytes: 1000})
	conn := charge{conns: 1, fds: 1, outbound: 100}
	for i := range 2 {
		if err := acquireOf(b, conn, true); err != nil {
			t.Fatalf("connection %d of 2: %v", i+1, err)
		}
	}
	if err := acquireOf(b, conn, true); err == nil || err.Limit != "connections" || err.Flag != "--max-connections" {
		t.Fatalf("a third connection: %v; want the connections budget", err)
	}
	if err := acquireOf(b, charge{outbound: 100}, true); err != nil {
		t.Fatalf("outbound up to its limit: %v", err)
	}
	if err := acquireOf(b, charge{outbound: 1}, true); err == nil || err.Limit != "outbound queue memory" {
		t.Fatalf("outbound past its limit: %v; want the outbound budget", err)
	}
	// Descriptors: 2 in use; an ordinary acquisition may reach 90, a
	// privileged one 100.
	if err := acquireOf(b, charge{fds: 88}, false); err != nil {
		t.Fatalf("descriptors up to the reserve: %v", err)
	}
	if err := acquireOf(b, charge{fds: 1}, false); err == nil || err.Limit != "open files" || !strings.Contains(err.Detail, "10 more descriptors are kept") {
		t.Fatalf("an ordinary acquisition into the reserve: %v; want the open-files budget", err)
	}
	if err := acquireOf(b, charge{fds: 10}, true); err != nil {
		t.Fatalf("a privileged acquisition into the reserve: %v", err)
	}
	if err := acquireOf(b, charge{fds: 1}, true); err == nil || err.Limit != "open files" {
		t.Fatalf("past the open-files budget: %v", err)
	}
	// Retained: an ordinary acquisition of 100 leaves min(1000/2, 100*64)
	// = 500 free.
	if err := acquireOf(b, charge{retained: 100}, false); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if err := acquireOf(b, charge{retained: 100}, false); err != nil {
			t.Fatalf("retained up to the reserve: %v", err)
		}
	}
	if err := acquireOf(b, charge{retained: 100}, false); err == nil || err.Limit != "retained output memory" {
		t.Fatalf("an ordinary acquisition into the retained reserve: %v", err)
	}
	for range 5 {
		if err := acquireOf(b, charge{retained: 100}, true); err != nil {
			t.Fatalf("a first start into the retained reserve: %v", err)
		}
	}
	if err := acquireOf(b, charge{retained: 1}, true); err == nil || err.Limit != "retained output memory" {
		t.Fatalf("past the retained budget: %v", err)
	}
}

// A connection's charge returns once however often its release is called.
func TestConnectionReleasedOnce(t *testing.T) {
	sup := budgetSupervisor(t, 64<<10, Budgets{MaxConnections: 1, OutboundQueueBytes: 1000, MaxOutboundBytes: 1000})
	ctx := context.Background()
	for range 3 {
		release, err := sup.AcquireConnection(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if u, _ := sup.BudgetUsage(ctx); u.Connections != 1 || u.OpenFiles != FDsPerConnection || u.OutboundBytes != 1000 {
			t.Fatalf("an open connection charges %+v", u)
		}
		release()
		release()
		if u, _ := sup.BudgetUsage(ctx); u != (BudgetUsage{}) {
			t.Fatalf("after its release (twice): %+v; want all zero", u)
		}
	}
}

// The budget actor forgets processes whose actors ended without waiting
// for a usage or a refusal: its list stays bounded under churn.
func TestBudgetBoundListSwept(t *testing.T) {
	b := newBudgets(Budgets{})
	for range 1000 {
		f := newFakeBound()
		close(f.closed)
		close(f.actorDone)
		b.handle(bindMsg{ref: f.ref, c: charge{procs: 1}})
	}
	if len(b.bound) > 256 {
		t.Fatalf("%d ended processes still listed after 1000 binds", len(b.bound))
	}
}
