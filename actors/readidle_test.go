package actors

import (
	"context"
	"reflect"
	"testing"
	"time"
)

// ReadIdle answers only what the actor would answer with no output and no
// new acknowledgment, and then exactly as the actor does.
func TestReadIdleMatchesTheActor(t *testing.T) {
	sup := newTestSupervisor(t, 1<<20, 50_000)
	ref, err := sup.Spawn("p", Spec{Argv: []string{"sh", "-c", "printf abc; read x; exit 7"}, Dir: "/", PipeStdin: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := ref.Read(ctx, 0, 0, 20*time.Second) // long poll: the output
	if err != nil || len(r.Chunks) == 0 {
		t.Fatalf("first output: %+v %v", r, err)
	}
	last := r.Chunks[len(r.Chunks)-1].Seq
	// Output after seq 0 is retained: the actor must answer.
	if _, ok := ref.ReadIdle(0); ok {
		t.Fatal("ReadIdle answered a read that has output")
	}
	same := func(after uint64) {
		t.Helper()
		// The actor publishes its view at the top of each step: once it
		// has answered another request, the step that changed the state
		// is published (a handshake, not a wait).
		if _, err := ref.Info(ctx); err != nil {
			t.Fatal(err)
		}
		fast, ok := ref.ReadIdle(after)
		if !ok {
			t.Fatalf("ReadIdle(%d) did not answer an idle read", after)
		}
		slow, err := ref.Read(ctx, after, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(slow.Chunks) == 0 {
			slow.Chunks = nil
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("after %d: ReadIdle %+v, actor %+v", after, fast, slow)
		}
	}
	// The long poll above acknowledged nothing past 0; a read after last
	// acknowledges it first (the actor), then the view answers.
	if _, err := ref.Read(ctx, last, 0, 0); err != nil {
		t.Fatal(err)
	}
	same(last)
	if _, err := ref.Write(ctx, []byte("x\n"), ""); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ref.Closed():
	case <-ctx.Done():
		t.Fatal("process did not close")
	}
	if r, err := ref.Read(ctx, last, 0, 0); err != nil || !r.Exited || r.ExitCode != 7 {
		t.Fatalf("after exit: %+v %v", r, err)
	}
	same(last)
	if fast, _ := ref.ReadIdle(last); !fast.Exited || !fast.Closed || fast.ExitCode != 7 {
		t.Fatalf("closed view: %+v", fast)
	}
}
