package actors

import (
	"bytes"
	"context"
	"strconv"
	"testing"
	"time"
)

// blocked waits (bounded) until the actor stopped taking the child's
// output: its next seq no longer moves, and the child is in state (running:
// blocked on its output; exited: reaped, its last output unread).
func blocked(t *testing.T, ref *ProcessRef, state ProcessState) ProcessInfo {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(15 * time.Second)
	last, still := uint64(0), 0
	for time.Now().Before(deadline) {
		info, err := ref.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State > state {
			t.Fatalf("the child is %v; want it %v, its output unread", info.State, state)
		}
		if info.State == state && info.NextSeq == last {
			if still++; still == 4 {
				return info
			}
		} else {
			last, still = info.NextSeq, 0
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the actor kept reading the detached child's output")
	return ProcessInfo{}
}

func ptySpec(t *testing.T, script string) Spec {
	s := shSpec(t, script)
	s.TTY = true
	return s
}

// A PTY child whose session is detached fills retention and the kernel's
// terminal buffer, then blocks (running), or exits with output unread
// (exited, not closed: nothing is lost by the exit);
// after the resume the client reads every byte from its last seq, then the
// exit and the close.
func TestDetachedPTYBlocksAndResumesLossless(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines int
		state ProcessState // while detached and blocked
	}{
		{"blocked running", 400_000, StateRunning},            // 5.3 MB through the terminal
		{"exited with its output unread", 2_000, StateExited}, // 11 KB: retention, the readers' queue and the terminal hold it
	} {
		t.Run(tc.name, func(t *testing.T) {
			sup := newTestSupervisor(t, 64<<10, 50_000)
			rec := newRecorder(16)
			ref, err := sup.Spawn("p", ptySpec(t, "seq 1 "+strconv.Itoa(tc.lines)+"; exit 3"), rec.sub())
			if err != nil {
				t.Fatal(err)
			}
			close(rec.done) // the connection drops at once
			blocked(t, ref, tc.state)
			// What the dropped connection had been handed, the client saw
			// (the in-flight case is TestUnreadOutputRule's and runtime's).
			var got []byte
			var last uint64
			for drained := false; !drained; {
				select {
				case ev := <-rec.ch:
					got = append(got, ev.Data...)
					last = ev.Seq
				default:
					drained = true
				}
			}
			// Resume: live events from liveFrom on, the backlog by reads.
			live := newRecorder(1 << 16)
			liveFrom, err := ref.Attach(context.Background(), *live.sub())
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			code := -1
			for last+1 < liveFrom {
				r, err := ref.Read(ctx, last, 16<<10, 0)
				if err != nil {
					t.Fatal(err)
				}
				if len(r.Chunks) == 0 || r.Chunks[0].Seq >= liveFrom {
					// Only the exit's seq may be missing from output reads.
					if !r.Exited || last+2 != liveFrom && (len(r.Chunks) == 0 || r.Chunks[0].Seq != last+2) {
						t.Fatalf("read after %d returned nothing below %d: the backlog was lost", last, liveFrom)
					}
					code, last = r.ExitCode, last+1
					continue
				}
				for _, c := range r.Chunks {
					if c.Seq >= liveFrom {
						break
					}
					if c.Seq == last+2 && r.Exited && code < 0 { // the exit came between
						code, last = r.ExitCode, last+1
					}
					if c.Seq != last+1 {
						t.Fatalf("read after %d returned seq %d: output was lost", last, c.Seq)
					}
					got = append(got, c.Data...)
					last = c.Seq
				}
			}
			for _, ev := range live.untilClosed(t, 30*time.Second) {
				if ev.Seq != last+1 {
					t.Fatalf("live event seq %d after %d", ev.Seq, last)
				}
				last = ev.Seq
				got = append(got, ev.Data...)
				if ev.Kind == EventExited {
					code = ev.ExitCode
				}
			}
			if code != 3 {
				t.Fatalf("exit code %d; want 3", code)
			}
			var want []byte
			for i := 1; i <= tc.lines; i++ {
				want = append(append(want, strconv.Itoa(i)...), '\r', '\n')
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("got %d bytes, want %d (the child's output through the terminal)", len(got), len(want))
			}
		})
	}
}

// Terminate and the detach TTL's end still work on a child blocked on
// its PTY: closed follows promptly (the drain is bounded), with the exit
// code of the signal.
func TestBlockedPTYChildEnds(t *testing.T) {
	sup := newTestSupervisor(t, 64<<10, 50_000)
	start := func(id string) *ProcessRef {
		rec := newRecorder(16)
		ref, err := sup.Spawn(id, ptySpec(t, "yes"), rec.sub())
		if err != nil {
			t.Fatal(err)
		}
		close(rec.done)
		blocked(t, ref, StateRunning)
		return ref
	}
	closedWithin := func(ref *ProcessRef, d time.Duration, wantCode int) {
		t.Helper()
		select {
		case <-ref.Closed():
		case <-time.After(d):
			t.Fatalf("%s: not closed within %v", ref.ID(), d)
		}
		if ref.ExitCode() != wantCode {
			t.Fatalf("%s: exit code %d; want %d", ref.ID(), ref.ExitCode(), wantCode)
		}
	}
	ctx := context.Background()

	// Resumed, backlog unread: terminate (SIGKILL).
	a := start("kill")
	if _, err := a.Attach(ctx, *newRecorder(1 << 16).sub()); err != nil {
		t.Fatal(err)
	}
	if running, err := a.Terminate(ctx, 0); err != nil || !running {
		t.Fatalf("terminate: running %v, %v", running, err)
	}
	closedWithin(a, 5*time.Second, 137)

	// Resumed: terminate with a grace (SIGHUP on a PTY).
	b := start("hangup")
	if _, err := b.Attach(ctx, *newRecorder(1 << 16).sub()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Terminate(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	closedWithin(b, 5*time.Second, 129)

	// Still detached when the TTL ends: the registry discards it.
	c := start("ttl")
	if err := c.discard(ctx, reasonTTL); err != nil {
		t.Fatal(err)
	}
	closedWithin(c, 5*time.Second, 137)
}
