package main_test

// End-to-end tests of how processes and the server end: retention bounds, a closed retention of
// zero, and shutdown on a signal over each transport.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runtimed/runtimed/wire/wiretest"
)

// PROTOCOL.md §4 retention: process/read keeps the newest --retain-bytes (1 MiB) of output, however
// the server coalesced it: at least 1 MiB - 64 KiB and at most 1 MiB, the exact tail of what the child
// wrote, in contiguous seqs ending at the newest output.
func TestRead(t *testing.T) {
	t.Run("retained-cap-over-1MiB", func(t *testing.T) {
		forEachTransport(t, func(t *testing.T, tr transport) {
			c := session(t, tr)
			ctx := tctx(t, 90*time.Second)
			dir := t.TempDir()
			data := randomBytes(5<<20+12345, 7)
			file, rel := filepath.Join(dir, "big"), filepath.Join(dir, "rel")
			if err := os.WriteFile(file, data, 0o644); err != nil {
				t.Fatal(err)
			}
			w := c.Watch("big")
			mustStart(t, c, shProc("big", dir, fmt.Sprintf(`cat %s; gate %s`, shq(file), shq(rel))))
			if err := w.WaitFor(ctx, func(l *wiretest.ProcessLog) bool { return l.OutputLen() >= len(data) }); err != nil {
				t.Fatalf("%d bytes expected: %v", len(data), err)
			}
			r, err := c.Read(ctx, wiretest.ReadParams{ProcessID: "big"})
			if err != nil {
				t.Fatal(err)
			}
			tail := r.Bytes()
			const limit = 1 << 20
			if len(tail) > limit || len(tail) < limit-64<<10 {
				t.Errorf("retained %d bytes in %d chunks; want between %d and %d (the newest 1 MiB, less at most 64 KiB)",
					len(tail), len(r.Chunks), limit-64<<10, limit)
			}
			if !bytes.HasSuffix(data, tail) {
				t.Error("retained bytes are not the tail of the output")
			}
			for i := 1; i < len(r.Chunks); i++ {
				if r.Chunks[i].Seq != r.Chunks[i-1].Seq+1 {
					t.Fatalf("retained chunks skip from seq %d to %d", r.Chunks[i-1].Seq, r.Chunks[i].Seq)
				}
			}
			if n := len(r.Chunks); n == 0 || r.Chunks[n-1].Seq+1 != r.NextSeq {
				t.Errorf("retained chunks do not end at the newest output (nextSeq %d)", r.NextSeq)
			}
			release(t, rel)
			if _, err := w.WaitClosed(ctx); err != nil {
				t.Fatal(err)
			}
		})
	})
}

// --closed-retention 0 forgets a process right after its ending was delivered, never before:
// `runtimed exec --connect` gets every byte, the exit code and returns, every time.
func TestExecConnectClosedRetentionZero(t *testing.T) {
	t.Parallel()
	srv := wiretest.StartWS(t, bin, "--closed-retention", "0")
	dir := t.TempDir()
	for i := 0; i < 10; i++ {
		for _, tc := range []struct {
			script string
			want   string
			code   int
		}{
			{`echo hi; exit 3`, "hi\n", 3},
			{`i=0; while [ $i -lt 2000 ]; do echo line$i; i=$((i+1)); done`, linesUpTo(2000), 0},
		} {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			cmd := exec.CommandContext(ctx, bin, "exec", "--connect", srv.URL, "--cwd", dir, "--", "/bin/sh", "-c", tc.script)
			cmd.Stdin = strings.NewReader("")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			timedOut := ctx.Err() != nil
			cancel()
			if timedOut {
				t.Fatalf("run %d: exec --connect did not return within 20s (stdout %d bytes, stderr %q)", i, stdout.Len(), stderr.String())
			}
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.code || stdout.String() != tc.want || stderr.Len() != 0 {
				t.Fatalf("run %d of %q: exit %d stdout %d bytes (want %d, %d bytes) stderr %q",
					i, tc.script, code, stdout.Len(), tc.code, len(tc.want), stderr.String())
			}
		}
	}
	// Forgotten right after delivery: the id is unknown at once.
	c := dial(t, srv.URL, nil)
	ctx := tctx(t, wait)
	if _, err := c.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	mustStart(t, c, shProc("z", dir, "printf z"))
	mustCollect(t, c, "z")
	if !pollUntil(5*time.Second, func() bool {
		_, err := c.Read(ctx, wiretest.ReadParams{ProcessID: "z"})
		return err != nil
	}) {
		t.Fatal("process still readable 5s after its ending was delivered with --closed-retention 0")
	}
}

func linesUpTo(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "line%d\n", i)
	}
	return b.String()
}

// PROTOCOL.md §3: SIGTERM/SIGINT stop the server the same way on every transport: it stops accepting,
// terminates every tree (SIGKILL after --shutdown-grace for a child that ignores SIGTERM), flushes
// what its clients are owed (every process's exited and closed) and exits 0, within the grace plus one
// second. Over stdio the server must not wait for stdin to end.
func TestShutdownOnSignalEveryTransport(t *testing.T) {
	t.Parallel()
	const grace = 800 * time.Millisecond
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		for _, tr := range []string{"stdio", "ws"} {
			t.Run(tr+"/"+sig.String(), func(t *testing.T) {
				t.Parallel()
				args := []string{"--shutdown-grace", grace.String()}
				var c *wiretest.Client
				var srv *wiretest.Server
				if tr == "stdio" {
					c = wiretest.StartStdio(t, bin, args...)
					srv = c.Server
				} else {
					srv = wiretest.StartWS(t, bin, args...)
					c = dial(t, srv.URL, nil)
				}
				ctx := tctx(t, wait)
				if _, err := c.Initialize(ctx); err != nil {
					t.Fatal(err)
				}
				dir := t.TempDir()
				stubborn, polite := filepath.Join(dir, "stubborn"), filepath.Join(dir, "polite")
				ws, wp := c.Watch("stubborn"), c.Watch("polite")
				mustStart(t, c, shProc("stubborn", dir, fmt.Sprintf(`trap '' TERM; echo $$ > %s; while :; do sleep 0.01; done`, shq(stubborn))))
				mustStart(t, c, shProc("polite", dir, fmt.Sprintf(`echo $$ > %s; exec sleep 1000`, shq(polite))))
				sp, pp := readPidFile(t, stubborn, "sh"), readPidFile(t, polite, "sleep")

				sent := time.Now()
				if err := srv.Signal(sig); err != nil {
					t.Fatal(err)
				}
				code, err := srv.Wait(tctx(t, 15*time.Second))
				took := time.Since(sent)
				if err != nil {
					t.Fatalf("server did not exit after %v: %v", sig, err)
				}
				if code != 0 {
					t.Errorf("exit code %d after %v, want 0", code, sig)
				}
				if took > grace+time.Second {
					t.Errorf("server took %v to exit after %v; want at most the grace (%v) plus 1s", took, sig, grace)
				}
				if took < grace {
					t.Errorf("server exited %v after %v, before the grace (%v) that the TERM-ignoring child was owed", took, sig, grace)
				}
				// What the client was owed arrived before the connection ended.
				select {
				case <-c.Done():
				case <-time.After(5 * time.Second):
					t.Fatal("connection still open after the server exited")
				}
				for _, w := range []struct {
					name string
					w    *wiretest.Watcher
					code int
				}{{"stubborn", ws, 128 + 9}, {"polite", wp, 128 + 15}} {
					wctx, cancel := context.WithTimeout(context.Background(), time.Second)
					l, err := w.w.WaitClosed(wctx)
					cancel()
					if err != nil {
						t.Errorf("%s: exited/closed not delivered before the server exited: %v", w.name, err)
						continue
					}
					if got := exitCodeOf(t, l); got != w.code {
						t.Errorf("%s: exit code %d, want %d", w.name, got, w.code)
					}
				}
				if strings.Contains(srv.Stderr(), "did not finish") {
					t.Errorf("shutdown was not clean (a connection did not end in time):\n%s", srv.Stderr())
				}
				waitPidGone(t, "TERM-ignoring child", sp, 5*time.Second)
				waitPidGone(t, "sleeping child", pp, 5*time.Second)
			})
		}
	}
}
