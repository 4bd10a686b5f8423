package actors

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A resume of a session held by a live connection is refused as attached
// (after the short grace); one held by a closing connection waits for its
// detach and gets the table; one held by a closing connection that never
// detaches is refused after ResumeDetachWait.
func TestResumeWaitsForAClosingHolder(t *testing.T) {
	sup := newTestSupervisor(t, 1<<20, 100)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	holder := make(chan struct{})
	tab, err := sup.NewSession(ctx, holder)
	if err != nil {
		t.Fatal(err)
	}

	// Live holder: refused, and not before the grace.
	start := time.Now()
	_, err = sup.ResumeSession(ctx, tab.ID, make(chan struct{}))
	var re *ResumeError
	if !errors.As(err, &re) || !re.Attached {
		t.Fatalf("resume of a session held by a live connection: %v; want an attached *ResumeError", err)
	}
	if d := time.Since(start); d < resumeLiveGrace || d > ResumeDetachWait {
		t.Fatalf("refused after %v; want the grace %v (and well under %v)", d, resumeLiveGrace, ResumeDetachWait)
	}

	// Closing holder: the resume waits; the detach hands it the table.
	close(holder)
	got := make(chan error, 1)
	var resumed *SessionTable
	go func() {
		var err error
		resumed, err = sup.ResumeSession(ctx, tab.ID, make(chan struct{}))
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("resume of a session held by a closing connection answered before the detach: %v", err)
	case <-time.After(3 * resumeLiveGrace): // the answer must not come; this bounds how long we look
	}
	sup.DetachSession(ctx, tab, time.Minute)
	select {
	case err := <-got:
		if err != nil || resumed != tab {
			t.Fatalf("resume after the detach: %v (table %p, want %p)", err, resumed, tab)
		}
	case <-ctx.Done():
		t.Fatal("the parked resume was never answered")
	}

	// Its new holder closes and never detaches: refused after ResumeDetachWait.
	tab2, err := sup.NewSession(ctx, holder) // holder is closed: closing from the start
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	_, err = sup.ResumeSession(ctx, tab2.ID, make(chan struct{}))
	if !errors.As(err, &re) || !re.Attached {
		t.Fatalf("resume of a session whose closing holder never detached: %v; want an attached *ResumeError", err)
	}
	if d := time.Since(start); d < ResumeDetachWait {
		t.Fatalf("refused after %v; want a wait of %v", d, ResumeDetachWait)
	}
	sup.DetachSession(ctx, tab2, 0)
}
