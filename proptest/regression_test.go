package proptest

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/runtimed/runtimed/actors"
)

// TestRegression_KillAfterGracefulTerminate: Supervisor.Kill ends a closed
// process actor at once even when an earlier terminate with a grace left
// its group SIGKILL pending. Shrunk from TestProcessActorModel (end the
// streams, terminate with a 1 h grace, exit, Kill): the actor instead waits
// for the pending kill (or the closed retention) before it exits, so
// Supervisor.Wait, and with it runtime.Server.Close/Shutdown, blocks for up
// to min(graceMs, ClosedRetention).
func TestRegression_KillAfterGracefulTerminate(t *testing.T) {
	const retention = 4 * time.Second // bounds the actor's life if Kill does not end it
	sup := actors.NewSupervisor(actors.Config{
		Proc: actors.ProcConfig{
			RetainBytes: 64, RetainChunks: 8, ClosedRetention: retention,
			DrainAfterTerminate: 50 * time.Millisecond, ShutdownGrace: time.Second,
		},
		DetachTTL: time.Minute,
		Logger:    zap.NewNop(),
	})
	fake := newFakeSession(true)
	ref := sup.SpawnSession("p", []string{"fake"}, true, fake, nil)
	ctx, cancel := context.WithTimeout(context.Background(), stepWait)
	defer cancel()

	fake.End(0) // the only stream ends
	if running, err := ref.Terminate(ctx, time.Hour); err != nil || !running {
		t.Fatalf("Terminate: running=%v err=%v", running, err)
	}
	fake.Exit(143) // the child obeys SIGHUP/SIGTERM
	if !waitFor(stepWait, func() bool {
		info, err := ref.Info(ctx)
		return err == nil && info.State == actors.StateClosed
	}) {
		t.Fatalf("process not closed after exit and stream end")
	}

	sup.Kill()
	start := time.Now()
	wctx, wcancel := context.WithTimeout(context.Background(), killWait)
	defer wcancel()
	err := sup.Wait(wctx)
	if err != nil {
		// Let the actor end (retention) so the leak check does not fail too.
		_ = sup.Wait(context.Background())
		t.Fatalf("Supervisor.Wait after Kill: %v; the actor exited only after %v (closed retention %v), not at once",
			err, time.Since(start).Round(100*time.Millisecond), retention)
	}
}
