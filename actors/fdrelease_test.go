package actors

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// Ended processes release every descriptor when they close (pipes, the PTY
// master, the pidfds of the waiter and of os.Process, the stdin pipe), not
// when their actor ends or the garbage collector runs: after thousands of
// terminated processes, still retained (their actors alive for the closed
// retention), the open descriptors are back to the idle baseline (+64)
// within 10 s.
func TestEndedProcessesReleaseDescriptors(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 2000 processes")
	}
	sup := newTestSupervisor(t, 1<<16, 1000) // closed retention: a minute
	base := openFDs(t)
	const n = 2000
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	refs := make([]*ProcessRef, 0, n)
	for i := range n {
		spec := Spec{Argv: []string{"/bin/sleep", "600"}, Dir: "/", Env: []string{"PATH=/usr/bin:/bin"}}
		switch i % 4 {
		case 1:
			spec.TTY = true
		case 2:
			spec.PipeStdin = true
		}
		ref, err := sup.Spawn(fmt.Sprint("p", i), spec, nil)
		if err != nil {
			t.Fatalf("start %d: %v (open descriptors %d, baseline %d)", i, err, openFDs(t), base)
		}
		refs = append(refs, ref)
	}
	running := openFDs(t)
	// Each running pipe process holds at least its two output pipes: the
	// count must see them, or the assertion below proves nothing.
	if running < base+2*n {
		t.Fatalf("%d descriptors open with %d processes running (baseline %d): want at least %d", running, n, base, base+2*n)
	}
	for _, ref := range refs {
		if _, err := ref.Terminate(ctx, 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, ref := range refs {
		select {
		case <-ref.Closed():
		case <-ctx.Done():
			t.Fatalf("process %s did not close", ref.ID())
		}
		if !ref.Alive() {
			t.Fatalf("process %s was forgotten: the test needs retained processes", ref.ID())
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	got := openFDs(t)
	for got > base+64 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		got = openFDs(t)
	}
	if got > base+64 {
		t.Fatalf("%d descriptors open 10 s after %d processes closed (baseline %d, %d while running): want at most baseline+64",
			got, n, base, running)
	}
	t.Logf("descriptors: baseline %d, %d running, %d after they closed", base, running, got)
}
