package actors

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/runtimed/runtimed/actors/osproc"
	"github.com/runtimed/runtimed/actors/osproc/osproctest"
)

func newRetentionSupervisor(t *testing.T, retention time.Duration) *Supervisor {
	t.Helper()
	sup := NewSupervisor(Config{
		Proc: ProcConfig{
			RetainBytes: 1 << 20, RetainChunks: 50_000, ClosedRetention: retention,
			DrainAfterTerminate: 50 * time.Millisecond, ShutdownGrace: time.Second,
		},
		DetachTTL: time.Second,
		Logger:    zaptest.NewLogger(t),
	})
	stopAtCleanup(t, sup)
	return sup
}

// A closed retention of zero forgets the process right after its ending
// was handed to the subscriber, never before: a subscriber that has not
// read anything when the process closes still gets every event, exited and
// closed, and only then does the actor end.
func TestZeroRetentionHandsTheEndingFirst(t *testing.T) {
	for _, retention := range []time.Duration{0, -time.Second} {
		sup := newRetentionSupervisor(t, retention)
		rec := newRecorder(1)
		ref, err := sup.Spawn("p", shSpec(t, `for i in 1 2 3 4 5 6 7 8; do echo line$i; done; exit 6`), rec.sub())
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-ref.Closed():
		case <-time.After(10 * time.Second):
			t.Fatal("not closed")
		}
		if !ref.Alive() {
			t.Fatal("actor ended with its ending not yet handed to the subscriber")
		}
		evs := rec.untilClosed(t, 10*time.Second)
		var out strings.Builder
		exits := 0
		for i, ev := range evs {
			if ev.Seq != uint64(i+1) {
				t.Fatalf("seq %d at %d: %+v", ev.Seq, i, evs)
			}
			out.Write(ev.Data)
			if ev.Kind == EventExited && ev.ExitCode == 6 {
				exits++
			}
		}
		if exits != 1 || !strings.HasSuffix(out.String(), "line8\n") {
			t.Fatalf("retention %v: events %+v", retention, evs)
		}
		select {
		case <-ref.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("retention %v: actor still alive 5s after its ending was delivered", retention)
		}
	}
}

// The same rule holds for a subscriber dropped before the ending: its
// connection's end is the reported reason, and the actor goes on.
func TestZeroRetentionDroppedSubscriber(t *testing.T) {
	sup := newRetentionSupervisor(t, 0)
	rec := newRecorder(1)
	ref, err := sup.Spawn("p", shSpec(t, `echo a; echo b; echo c`), rec.sub())
	if err != nil {
		t.Fatal(err)
	}
	<-ref.Closed()
	close(rec.done)
	select {
	case <-ref.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("actor kept a dropped subscriber's process")
	}
}

// The attached subscriber bounds how much output the actor takes: never
// more undelivered chunks than retention keeps, so a slow subscriber of
// many small chunks loses none (the chunk bound, beside the byte bound).
func TestSlowSubscriberChunkBound(t *testing.T) {
	const maxChunks = 8
	sess := oneStream()
	p, _ := newProcess("p", []string{"fake"}, false, sess, ProcConfig{RetainBytes: 1 << 20, RetainChunks: maxChunks}, zaptest.NewLogger(t), &Subscriber{Out: make(chan Event), Done: make(chan struct{})})
	taken := 0
	for i := 0; i < 4*maxChunks && p.canConsume(); i++ {
		p.handleFact(outputReadMsg{stream: Stdout, data: []byte("x" + strconv.Itoa(i))})
		taken++
	}
	if taken > maxChunks {
		t.Fatalf("took %d chunks for a subscriber that read none; retention keeps %d", taken, maxChunks)
	}
	if first := p.ring.FirstSeq(); first > p.sub.cursor {
		t.Fatalf("retention evicted seq %d..%d before the subscriber was given it", p.sub.cursor, first-1)
	}
	// Byte bound likewise.
	p2, _ := newProcess("p", []string{"fake"}, false, sess, ProcConfig{RetainBytes: 1 << 20, RetainChunks: 50_000}, zaptest.NewLogger(t), &Subscriber{Out: make(chan Event), Done: make(chan struct{})})
	big := make([]byte, 64<<10)
	for i := 0; i < 64 && p2.canConsume(); i++ {
		p2.handleFact(outputReadMsg{stream: Stdout, data: big})
	}
	pending, _ := p2.ring.From(p2.sub.cursor)
	if first := p2.ring.FirstSeq(); first > p2.sub.cursor || pending > p2.ring.MaxBytes() {
		t.Fatalf("byte bound: first retained seq %d, cursor %d, %d bytes pending", first, p2.sub.cursor, pending)
	}
}

// PROTOCOL.md §4: a death by signal N reports 128+N, also when the kernel
// dumped core (waitid's CLD_DUMPED, not only CLD_KILLED).
// oneStream is a fake session with stdout only, for tests that drive the
// actor's handlers directly.
func oneStream() *osproctest.Session {
	return osproctest.New(osproctest.Options{Streams: []osproc.Stream{osproc.Stdout}})
}

func TestCoreDumpSignalExitCodes(t *testing.T) {
	sup := newTestSupervisor(t, 1<<20, 50_000)
	for _, sig := range []syscall.Signal{syscall.SIGQUIT, syscall.SIGABRT, syscall.SIGSEGV} {
		spec := shSpec(t, `ulimit -c unlimited 2>/dev/null; kill -`+strconv.Itoa(int(sig))+` $$; sleep 5`)
		ref, err := sup.Spawn("core"+strconv.Itoa(int(sig)), spec, nil)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-ref.Closed():
		case <-time.After(10 * time.Second):
			t.Fatal("not closed")
		}
		if got := ref.ExitCode(); got != 128+int(sig) {
			t.Errorf("%v: exit code %d, want %d", sig, got, 128+int(sig))
		}
		entries, _ := os.ReadDir(spec.Dir)
		dumped := false
		for _, e := range entries {
			dumped = dumped || strings.HasPrefix(e.Name(), "core")
		}
		t.Logf("%v: core dumped: %v", sig, dumped)
	}
}

// A panic in a process actor fails that process only: its tree is
// killed, Closed() and Done() are released, requests and Failure report a
// *ProcessFailedError, the subscriber is handed an EventFailed at its
// cursor, and the other processes go on.
func TestProcessActorPanicIsIsolated(t *testing.T) {
	sup := newTestSupervisor(t, 1<<20, 50_000)
	defer SetTestHooks(TestHooks{ProcessRequest: func(id string) {
		if id == "bad" {
			panic("injected process fault")
		}
	}})()
	dir := t.TempDir()
	rec := newRecorder(16)
	bad, err := sup.Spawn("bad", shSpec(t, `echo $$ > `+dir+`/pid; echo hello; exec sleep 1000`), rec.sub())
	if err != nil {
		t.Fatal(err)
	}
	good, err := sup.Spawn("good", shSpec(t, `echo fine`), nil)
	if err != nil {
		t.Fatal(err)
	}
	pid := waitPidFile(t, filepath.Join(dir, "pid"))
	if ev := next(t, rec); ev.Kind != EventOutput {
		t.Fatalf("first event %+v", ev)
	}
	ctx := context.Background()
	if _, err := bad.Info(ctx); err == nil {
		t.Fatal("request to a panicking actor succeeded")
	}
	select {
	case <-bad.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("failed actor did not end")
	}
	<-bad.Closed()
	var pf *ProcessFailedError
	if f := bad.Failure(); !errors.As(f, &pf) || !errors.Is(f, ErrProcessFailed) || pf.Reason != "injected process fault" {
		t.Fatalf("Failure() = %v", f)
	}
	if ev := next(t, rec); ev.Kind != EventFailed || ev.Seq != 2 || !strings.Contains(ev.Failure, "injected process fault") {
		t.Fatalf("subscriber got %+v; want EventFailed at seq 2", ev)
	}
	waitGone(t, pid)
	r, err := good.Read(ctx, 0, 0, 5*time.Second)
	if err == nil && len(r.Chunks) == 0 {
		r, err = good.Read(ctx, 0, 0, 5*time.Second)
	}
	if err != nil || len(r.Chunks) == 0 || string(r.Chunks[0].Data) != "fine\n" {
		t.Fatalf("the other process: %+v %v", r, err)
	}
	if ref, err := sup.Spawn("after", shSpec(t, `true`), nil); err != nil {
		t.Fatal(err)
	} else {
		<-ref.Closed()
	}
}
