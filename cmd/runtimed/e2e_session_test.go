package main_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runtimed/runtimed/wire/wiretest"
)

// resume dials url and re-attaches sessionID, retrying (bounded) while the server still thinks the old
// connection is attached (-32010). Each attempt uses a fresh connection.
func resume(t *testing.T, url, sessionID string) *wiretest.Client {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	backoff := 10 * time.Millisecond
	for {
		c := dial(t, url, nil)
		got, err := c.Resume(tctx(t, wait), sessionID)
		if err == nil {
			if got != sessionID {
				t.Fatalf("resume returned sessionId %q, want %q", got, sessionID)
			}
			return c
		}
		var rpcErr *wiretest.RPCError
		if !errors.As(err, &rpcErr) || rpcErr.Code != -32010 || time.Now().After(deadline) {
			t.Fatalf("resume %s: %v", sessionID, err)
		}
		c.Close()
		time.Sleep(backoff) // retry back-off, not synchronisation
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// PROTOCOL.md §3: a dropped websocket detaches the session; the process keeps running; resume returns
// the same session, and process/read catches up without gaps or duplicates.
func TestWebsocketResume(t *testing.T) {
	t.Parallel()
	srv := wiretest.StartWS(t, bin)
	dir := t.TempDir()
	ctx := tctx(t, 60*time.Second)
	const lines = 9
	script := fmt.Sprintf(`i=1; while [ $i -le %d ]; do gate %s/go.$i; echo "line-$i"; : > %s/printed.$i; i=$((i+1)); done`,
		lines, shq(dir), shq(dir))

	c1 := dial(t, srv.URL, nil)
	sid, err := c1.Initialize(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w1 := c1.Watch("seq")
	mustStart(t, c1, shProc("seq", dir, script))
	for i := 1; i <= 3; i++ {
		release(t, fmt.Sprintf("%s/go.%d", dir, i))
		if err := w1.WaitOutput(ctx, fmt.Sprintf("line-%d\n", i)); err != nil {
			t.Fatal(err)
		}
	}

	// While c1 is attached, another connection cannot take the session.
	c3 := dial(t, srv.URL, nil)
	_, err = c3.Resume(ctx, sid)
	wantRPCError(t, "resume of an attached session", err, -32010, fmt.Sprintf("session %s is already attached to another connection", sid))
	c3.Close()

	// Everything c1 saw, by seq; no seq twice.
	seen := map[uint64]wiretest.Event{}
	var lastSeq uint64
	for _, e := range w1.Log.Events {
		if _, dup := seen[e.Seq]; dup {
			t.Errorf("c1 got seq %d twice", e.Seq)
		}
		seen[e.Seq] = e
		lastSeq = max(lastSeq, e.Seq)
	}

	c1.Close() // abrupt: no close handshake

	// The process keeps running while detached.
	for i := 4; i <= 6; i++ {
		release(t, fmt.Sprintf("%s/go.%d", dir, i))
		printed := fmt.Sprintf("%s/printed.%d", dir, i)
		if !pollUntil(wait, func() bool { _, err := os.Stat(printed); return err == nil }) {
			t.Fatalf("detached process did not print line %d", i)
		}
	}

	c2 := resume(t, srv.URL, sid)
	w2 := c2.Watch("seq")
	r, err := c2.Read(ctx, wiretest.ReadParams{ProcessID: "seq", AfterSeq: lastSeq})
	if err != nil {
		t.Fatal(err)
	}
	fromRead := map[uint64]wiretest.Chunk{}
	for _, ch := range r.Chunks {
		if ch.Seq <= lastSeq {
			t.Errorf("read afterSeq %d returned seq %d", lastSeq, ch.Seq)
		}
		if _, dup := fromRead[ch.Seq]; dup {
			t.Errorf("read returned seq %d twice", ch.Seq)
		}
		fromRead[ch.Seq] = ch
	}
	for i := 7; i <= lines; i++ {
		release(t, fmt.Sprintf("%s/go.%d", dir, i))
	}
	l2, err := w2.WaitClosed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range l2.Events {
		if e.Seq <= lastSeq {
			t.Errorf("seq %d, already delivered to the old connection, was replayed to the new one", e.Seq)
		}
		if _, dup := seen[e.Seq]; dup {
			t.Errorf("c2 got seq %d twice", e.Seq)
		}
		if ch, ok := fromRead[e.Seq]; ok {
			if e.Method != "process/output" || ch.Stream != e.Stream || !bytes.Equal(ch.Chunk, e.Chunk) {
				t.Errorf("seq %d differs between process/read (%s %q) and the notification (%s %s %q)", e.Seq, ch.Stream, ch.Chunk, e.Method, e.Stream, e.Chunk)
			}
			continue
		}
		seen[e.Seq] = e
	}
	for seq, ch := range fromRead {
		if _, ok := seen[seq]; !ok {
			seen[seq] = wiretest.Event{Method: "process/output", Seq: seq, Stream: ch.Stream, Chunk: ch.Chunk}
		}
	}

	// The union is the whole history: 1..n, no gap, ending with exited and closed.
	merged := wiretest.ProcessLog{ProcessID: "seq"}
	for _, e := range seen {
		merged.Events = append(merged.Events, e)
	}
	if err := merged.CheckSequence(); err != nil {
		t.Error(err)
	}
	var want strings.Builder
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&want, "line-%d\n", i)
	}
	if got := string(merged.Output("stdout")); got != want.String() {
		t.Errorf("bytes across the reconnect = %q, want %q\n%s", got, want.String(), merged.Summary())
	}
	if e := merged.Exited(); e == nil || e.ExitCode == nil || *e.ExitCode != 0 {
		t.Errorf("want exit 0\n%s", merged.Summary())
	}
}

// PROTOCOL.md §3: process ids are scoped to the session.
func TestProcessIDsPerSession(t *testing.T) {
	t.Parallel()
	srv := wiretest.StartWS(t, bin)
	dir := t.TempDir()
	c1, c2 := dial(t, srv.URL, nil), dial(t, srv.URL, nil)
	ctx := tctx(t, wait)
	s1, err := c1.Initialize(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := c2.Initialize(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s1 == s2 {
		t.Errorf("two connections got the same session id %s", s1)
	}
	mustStart(t, c1, shProc("same", dir, "printf one"))
	mustStart(t, c2, shProc("same", dir, "printf two"))
	mustStart(t, c1, shProc("only-1", dir, "exit 0"))
	if got := string(mustCollect(t, c1, "same").Output()); got != "one" {
		t.Errorf("session 1 process output %q, want one", got)
	}
	if got := string(mustCollect(t, c2, "same").Output()); got != "two" {
		t.Errorf("session 2 process output %q, want two", got)
	}
	mustCollect(t, c1, "only-1")
	_, err = c2.Read(ctx, wiretest.ReadParams{ProcessID: "only-1"})
	wantRPCError(t, "read of another session's process", err, -32600, "unknown process id only-1")
	if running, err := c2.Terminate(ctx, "only-1"); err != nil || running {
		t.Errorf("terminate of another session's process: %v %v", running, err)
	}
	if st, err := c2.Write(ctx, "only-1", []byte("x"), ""); err != nil || st != "unknownProcess" {
		t.Errorf("write to another session's process: %q %v", st, err)
	}
}

// PROTOCOL.md §3: an unknown session id cannot be resumed.
func TestResumeUnknownSession(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		c := tr.connect(t)
		const id = "00000000-0000-4000-8000-000000000000"
		_, err := c.Resume(tctx(t, wait), id)
		wantRPCError(t, "resume of an unknown session", err, -32600, "unknown session id "+id)
	})
}

// startFamily starts `sh -c 'sleep 1000 & echo $! > F; echo $$ > G; wait'` and returns (shell, sleep) pids.
func startFamily(t *testing.T, c *wiretest.Client, id, dir string) (int, int) {
	t.Helper()
	f, g := filepath.Join(dir, id+".child"), filepath.Join(dir, id+".shell")
	mustStart(t, c, shProc(id, dir, fmt.Sprintf(`sleep 1000 & echo $! > %s; echo $$ > %s; wait`, shq(f), shq(g))))
	child := readPidFile(t, f, "sleep")
	shell := readPidFile(t, g, "sh")
	return shell, child
}

// PROTOCOL.md §3: when the detach TTL expires, the session's processes are terminated and the session
// is gone; a TTL of 0 terminates at once.
func TestDetachTTL(t *testing.T) {
	t.Parallel()
	for _, ttl := range []string{"1s", "0s"} {
		t.Run(ttl, func(t *testing.T) {
			t.Parallel()
			srv := wiretest.StartWS(t, bin, "--detach-ttl", ttl)
			dir := t.TempDir()
			c := dial(t, srv.URL, nil)
			sid, err := c.Initialize(tctx(t, wait))
			if err != nil {
				t.Fatal(err)
			}
			shell, child := startFamily(t, c, "fam", dir)
			c.Close()
			waitPidGone(t, "shell of an expired session", shell, 10*time.Second)
			waitPidGone(t, "background child of an expired session", child, 10*time.Second)
			c2 := dial(t, srv.URL, nil)
			_, err = c2.Resume(tctx(t, wait), sid)
			wantRPCError(t, "resume of an expired session", err, -32600, "unknown session id "+sid)
		})
	}
}

// PROTOCOL.md §3: the end of the stdio transport terminates the session's processes at once; the
// server then exits 0.
func TestStdioEOFKillsProcesses(t *testing.T) {
	t.Parallel()
	c := connectStdio(t)
	if _, err := c.Initialize(tctx(t, wait)); err != nil {
		t.Fatal(err)
	}
	shell, child := startFamily(t, c, "fam", t.TempDir())
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	code, err := c.Server.Wait(tctx(t, 15*time.Second))
	if err != nil {
		t.Fatalf("server did not exit after stdin EOF: %v", err)
	}
	if code != 0 {
		t.Errorf("server exit code %d after stdin EOF, want 0", code)
	}
	waitPidGone(t, "shell", shell, 10*time.Second)
	waitPidGone(t, "background child", child, 10*time.Second)
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Error("stdout still open after the server exited")
	}
}

// PROTOCOL.md §3: SIGTERM/SIGINT terminate all processes before the server exits.
func TestServerShutdownSignal(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			srv := wiretest.StartWS(t, bin)
			c := dial(t, srv.URL, nil)
			if _, err := c.Initialize(tctx(t, wait)); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			shell, child := startFamily(t, c, "fam", dir)
			// A detached session's processes must die too.
			c2 := dial(t, srv.URL, nil)
			if _, err := c2.Initialize(tctx(t, wait)); err != nil {
				t.Fatal(err)
			}
			shell2, child2 := startFamily(t, c2, "fam2", dir)
			c2.Close()
			// A child that ignores SIGTERM is killed after the shutdown grace.
			stubborn := filepath.Join(dir, "stubborn")
			mustStart(t, c, shProc("stubborn", dir, fmt.Sprintf(`trap '' TERM; echo $$ > %s; while :; do sleep 0.01; done`, shq(stubborn))))
			stubbornPid := readPidFile(t, stubborn, "sh")

			if err := srv.Signal(sig); err != nil {
				t.Fatal(err)
			}
			code, err := srv.Wait(tctx(t, 30*time.Second))
			if err != nil {
				t.Fatalf("server did not exit after %v: %v", sig, err)
			}
			if code != 0 {
				t.Errorf("server exit code %d after %v, want 0", code, sig)
			}
			for _, p := range []struct {
				what string
				pid  int
			}{{"shell", shell}, {"child", child}, {"detached shell", shell2}, {"detached child", child2}, {"TERM-ignoring shell", stubbornPid}} {
				waitPidGone(t, p.what, p.pid, 5*time.Second)
			}
			select {
			case <-c.Done():
			case <-time.After(5 * time.Second):
				t.Error("client connection still open after the server exited")
			}
		})
	}
}

// PROTOCOL.md §4 retention: a closed process is kept for the closed-retention time (30 s by default;
// this test shortens it with --closed-retention), then its id is unknown and free for reuse.
func TestClosedRetention(t *testing.T) {
	t.Parallel()
	srv := wiretest.StartWS(t, bin, "--closed-retention", "300ms")
	c := dial(t, srv.URL, nil)
	ctx := tctx(t, wait)
	if _, err := c.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mustStart(t, c, shProc("r", dir, "printf first"))
	mustCollect(t, c, "r")
	var lastErr error
	if !pollUntil(10*time.Second, func() bool {
		_, lastErr = c.Read(ctx, wiretest.ReadParams{ProcessID: "r"})
		return lastErr != nil
	}) {
		t.Fatal("closed process still readable 10s after closing with --closed-retention 300ms")
	}
	wantRPCError(t, "read after the closed retention", lastErr, -32600, "unknown process id r")
	mustStart(t, c, shProc("r", dir, "printf second"))
	l := mustCollect(t, c, "r")
	if got := string(l.Output()); got != "second" {
		t.Errorf("reused id output %q, want second", got)
	}
	if l.Sorted()[0].Seq != 1 {
		t.Errorf("a reused id starts a new seq counter at 1:\n%s", l.Summary())
	}
}
