package main_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/runtimed/runtimed/wire/wiretest"
)

// A client that closes its connection cleanly (close frame) and resumes at once must get its session
// back on the first attempt: the server waits (bounded) for the closing connection to detach instead of
// refusing with -32010. Twenty clients at a time, twenty rounds, no retry anywhere (issue 26: 7 to 15 of
// 200 such resumes were refused).
func TestResumeRightAfterCleanClose(t *testing.T) {
	t.Parallel()
	srv := wiretest.StartWS(t, bin)
	dir := t.TempDir()
	const rounds, clients = 20, 20
	for round := range rounds {
		var wg sync.WaitGroup
		errs := make(chan error, clients)
		for i := range clients {
			wg.Go(func() {
				if err := resumeAfterCleanClose(t, srv.URL, dir, fmt.Sprintf("p%d-%d", round, i)); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		failed := 0
		for err := range errs {
			failed++
			t.Error(err)
		}
		if failed > 0 {
			t.Fatalf("round %d: %d of %d resumes right after a clean close failed", round, failed, clients)
		}
	}
}

// resumeAfterCleanClose runs on a goroutine of its own: it reports failures, never calls t.Fatal.
func resumeAfterCleanClose(t *testing.T, url, dir, id string) error {
	ctx := tctx(t, wait)
	dialWS := func() (*wiretest.Client, error) {
		c, err := wiretest.DialWS(ctx, url, nil)
		if err == nil {
			t.Cleanup(func() { c.Close() })
		}
		return c, err
	}
	c1, err := dialWS()
	if err != nil {
		return err
	}
	sid, err := c1.Initialize(ctx)
	if err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	if err := c1.Start(ctx, shProc(id, dir, "echo ready; exec sleep 60")); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	// The close frame is sent; its error may only say the server's close frame and its end of the TCP
	// connection raced the client library's wait for them.
	_ = c1.CloseClean()
	c2, err := dialWS()
	if err != nil {
		return err
	}
	got, err := c2.Resume(ctx, sid)
	if err != nil {
		return fmt.Errorf("resume at once after a clean close: %w", err)
	}
	if got != sid {
		return fmt.Errorf("resume returned session %q, want %q", got, sid)
	}
	if _, err := c2.Read(ctx, wiretest.ReadParams{ProcessID: id}); err != nil {
		return fmt.Errorf("read %s after the resume: %w", id, err)
	}
	if _, err := c2.Terminate(ctx, id); err != nil {
		return fmt.Errorf("terminate %s: %w", id, err)
	}
	_ = c2.CloseClean()
	return nil
}
