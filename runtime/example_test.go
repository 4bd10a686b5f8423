package runtime_test

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/runtimed/runtimed/runtime"
)

// The same code drives an embedded runtime or a remote one: only the
// Backend changes.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	var b runtime.Backend = runtime.NewLocal(runtime.Config{})
	// Remote instead: b, err := runtime.Dial(ctx, "ws://127.0.0.1:4500", nil)
	defer b.Close()

	p, err := b.Start(ctx, runtime.Spec{
		Argv: []string{"sh", "-c", "echo hello; exit 3"},
		Dir:  "/",
		Env:  map[string]string{"PATH": "/usr/bin:/bin"},
	})
	if err != nil {
		panic(err)
	}
	events, err := p.Events(ctx)
	if err != nil {
		panic(err)
	}
	for {
		ev, err := events.Next(ctx)
		if err == io.EOF {
			break // closed: every event was delivered
		}
		if err != nil {
			panic(err) // the context ended; without this the loop would spin
		}
		switch ev.Kind {
		case runtime.EventOutput:
			fmt.Printf("seq %d %s: %q\n", ev.Seq, ev.Stream, ev.Data)
		case runtime.EventExited:
			fmt.Printf("seq %d exited with %d\n", ev.Seq, ev.ExitCode)
		case runtime.EventClosed:
			fmt.Printf("seq %d closed\n", ev.Seq)
		}
	}
	st, _ := p.Wait(ctx)
	fmt.Println("exit code", st.Code)
	// Output:
	// seq 1 stdout: "hello\n"
	// seq 2 exited with 3
	// seq 3 closed
	// exit code 3
}
