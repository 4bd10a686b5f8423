package actors

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

func newTestSupervisor(t *testing.T, retainBytes, retainChunks int) *Supervisor {
	t.Helper()
	sup := NewSupervisor(Config{
		Proc: ProcConfig{
			RetainBytes: retainBytes, RetainChunks: retainChunks, ClosedRetention: time.Minute,
			DrainAfterTerminate: 50 * time.Millisecond, ShutdownGrace: time.Second,
		},
		DetachTTL: time.Second,
		Logger:    zaptest.NewLogger(t),
	})
	stopAtCleanup(t, sup)
	return sup
}

func shSpec(t *testing.T, script string) Spec {
	return Spec{Argv: []string{"/bin/sh", "-c", script}, Dir: t.TempDir(), Env: []string{"PATH=/usr/bin:/bin"}}
}

type recorder struct {
	ch   chan Event
	done chan struct{}
}

func newRecorder(capacity int) *recorder {
	return &recorder{ch: make(chan Event, capacity), done: make(chan struct{})}
}

func (r *recorder) sub() *Subscriber { return &Subscriber{Out: r.ch, Done: r.done} }

// untilClosed collects events until closed, failing after the timeout.
func (r *recorder) untilClosed(t *testing.T, timeout time.Duration) []Event {
	t.Helper()
	var evs []Event
	deadline := time.After(timeout)
	for {
		select {
		case ev := <-r.ch:
			evs = append(evs, ev)
			if ev.Kind == EventClosed {
				return evs
			}
		case <-deadline:
			t.Fatalf("no closed event within %v; got %d events", timeout, len(evs))
		}
	}
}

func next(t *testing.T, r *recorder) Event {
	t.Helper()
	select {
	case ev := <-r.ch:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return Event{}
}

func TestProcessSeqRules(t *testing.T) {
	sup := newTestSupervisor(t, 1<<20, 50_000)
	rec := newRecorder(16)
	ref, err := sup.Spawn("p", shSpec(t, `printf 'event output\n'; sleep 0.1; printf 'event err\n' >&2; sleep 0.1; exit 7`), rec.sub())
	if err != nil {
		t.Fatal(err)
	}
	evs := rec.untilClosed(t, 10*time.Second)
	want := []struct {
		kind   EventKind
		stream Stream
		data   string
	}{{EventOutput, Stdout, "event output\n"}, {EventOutput, Stderr, "event err\n"}, {EventExited, 0, ""}, {EventClosed, 0, ""}}
	if len(evs) != len(want) {
		t.Fatalf("events %+v", evs)
	}
	for i, w := range want {
		ev := evs[i]
		if ev.Seq != uint64(i+1) || ev.Kind != w.kind || ev.Stream != w.stream || string(ev.Data) != w.data || ev.ProcessID != "p" {
			t.Errorf("event %d = %+v; want seq %d %+v", i, ev, i+1, w)
		}
	}
	if evs[2].ExitCode != 7 {
		t.Errorf("exit code %d; want 7", evs[2].ExitCode)
	}
	ctx := context.Background()
	r, err := ref.Read(ctx, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Chunks) != 2 || r.NextSeq != 5 || !r.Exited || r.ExitCode != 7 || !r.Closed {
		t.Errorf("read = %+v", r)
	}
	// With maxBytes, nextSeq is the seq after the last returned chunk.
	r, _ = ref.Read(ctx, 0, 1, 0)
	if len(r.Chunks) != 1 || r.NextSeq != 2 {
		t.Errorf("read maxBytes=1 = %d chunks, nextSeq %d; want 1, 2", len(r.Chunks), r.NextSeq)
	}
	r, _ = ref.Read(ctx, 2, 1, 0) // nothing after 2: next unassigned seq
	if len(r.Chunks) != 0 || r.NextSeq != 5 {
		t.Errorf("read after 2 = %d chunks, nextSeq %d; want 0, 5", len(r.Chunks), r.NextSeq)
	}
	if running, _ := ref.Terminate(ctx, 0); running {
		t.Error("terminate of a closed process reported running")
	}
}

func TestClosedWaitsForDescendantOutput(t *testing.T) {
	sup := newTestSupervisor(t, 1<<20, 50_000)
	rec := newRecorder(16)
	dir := t.TempDir()
	rel := filepath.Join(dir, "release")
	spec := shSpec(t, `(while [ ! -e `+rel+` ]; do sleep 0.01; done; echo late) & exit 3`)
	ref, err := sup.Spawn("p", spec, rec.sub())
	if err != nil {
		t.Fatal(err)
	}
	ex := next(t, rec)
	if ex.Kind != EventExited || ex.ExitCode != 3 || ex.Seq != 1 {
		t.Fatalf("first event %+v; want exited(1, 3)", ex)
	}
	info, _ := ref.Info(context.Background())
	if info.State != StateExited {
		t.Fatalf("state %v while a descendant holds stdout; want exited", info.State)
	}
	if err := os.WriteFile(rel, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	evs := rec.untilClosed(t, 10*time.Second)
	if len(evs) != 2 || evs[0].Kind != EventOutput || string(evs[0].Data) != "late\n" || evs[0].Seq != 2 || evs[1].Seq != 3 {
		t.Fatalf("after release: %+v; want output(2) closed(3)", evs)
	}
}

// A subscriber that does not read makes the actor stop reading the child;
// with a ring far smaller than the output, nothing may be lost.
func TestSlowSubscriberLosesNothing(t *testing.T) {
	sup := newTestSupervisor(t, 64<<10, 50_000)
	rec := newRecorder(1)
	const total = 4 << 20
	if _, err := sup.Spawn("p", shSpec(t, `head -c `+strconv.Itoa(total)+` /dev/urandom | od -An -v -tx1 | head -c `+strconv.Itoa(total)), rec.sub()); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	var seq uint64
	for _, ev := range rec.untilClosed(t, 30*time.Second) {
		seq++
		if ev.Seq != seq {
			t.Fatalf("seq %d after %d: gap or repeat", ev.Seq, seq-1)
		}
		out.Write(ev.Data)
	}
	if out.Len() != total {
		t.Fatalf("received %d bytes; want %d", out.Len(), total)
	}
}

func TestTerminateKillsGroupAndEscapedDescendantClosesPromptly(t *testing.T) {
	sup := newTestSupervisor(t, 1<<20, 50_000)
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "escaped")
	// One background child stays in the group; one leaves it with setsid
	// but keeps stdout open.
	script := `sleep 1000 & echo $! > ` + dir + `/inner; setsid sh -c 'echo $$ > ` + pidFile + `; exec sleep 1000' & echo started; wait`
	rec := newRecorder(16)
	ref, err := sup.Spawn("p", shSpec(t, script), rec.sub())
	if err != nil {
		t.Fatal(err)
	}
	if ev := next(t, rec); ev.Kind != EventOutput || !strings.Contains(string(ev.Data), "started") {
		t.Fatalf("first event %+v", ev)
	}
	escaped := waitPidFile(t, pidFile)
	t.Cleanup(func() { _ = syscall.Kill(escaped, syscall.SIGKILL) })
	inner := waitPidFile(t, filepath.Join(dir, "inner"))
	running, err := ref.Terminate(context.Background(), 0)
	if err != nil || !running {
		t.Fatalf("terminate = %v, %v; want running", running, err)
	}
	start := time.Now()
	evs := rec.untilClosed(t, 5*time.Second)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("closed took %v after terminate", d)
	}
	if ex := evs[len(evs)-2]; ex.Kind != EventExited || ex.ExitCode != 128+9 {
		t.Errorf("exit event %+v; want exit code 137", ex)
	}
	waitGone(t, inner)
}

func waitPidFile(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(path)
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && perr == nil && pid > 0 {
			return pid
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no pid in %s", path)
	return 0
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
			return
		}
		// A zombie not yet reaped by init still answers kill -0: check its state.
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil && strings.Contains(string(b), ") Z ") {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("pid %d still alive", pid)
}

func TestLongPollAndWrites(t *testing.T) {
	sup := newTestSupervisor(t, 1<<20, 50_000)
	spec := shSpec(t, "cat")
	spec.PipeStdin = true
	ref, err := sup.Spawn("p", spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	poll, err := ref.ReadAsync(ctx, 0, 0, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct{ data, id string }{{"one\n", "w1"}, {"one\n", "w1"}, {"two\n", ""}} {
		res, err := ref.Write(ctx, []byte(w.data), w.id)
		if err != nil || res.Status != WriteAccepted || res.Err != nil {
			t.Fatalf("write = %+v, %v", res, err)
		}
	}
	select {
	case r := <-poll:
		if len(r.Chunks) == 0 {
			t.Fatal("long poll returned without output")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("long poll did not return when output arrived")
	}
	if err := ref.CloseStdin(ctx); err != nil {
		t.Fatal(err)
	}
	if res, _ := ref.Write(ctx, []byte("x"), ""); res.Status != WriteStdinClosed {
		t.Errorf("write after closeStdin = %+v; want stdinClosed", res)
	}
	var out []byte
	after := uint64(0)
	for {
		r, err := ref.Read(ctx, after, 0, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range r.Chunks {
			out = append(out, c.Data...)
		}
		after = r.NextSeq - 1
		if r.Closed {
			break
		}
	}
	if string(out) != "one\ntwo\n" {
		t.Fatalf("cat echoed %q; want the deduplicated writes", out)
	}
}

func TestSpawnErrors(t *testing.T) {
	sup := newTestSupervisor(t, 1<<20, 50_000)
	_, err := sup.Spawn("p", Spec{Argv: []string{"definitely-not-a-binary"}, Dir: "/", Env: nil}, nil)
	if err == nil || !strings.Contains(err.Error(), "no such file or directory") {
		t.Errorf("missing binary: %v", err)
	}
	_, err = sup.Spawn("p", Spec{Argv: []string{"true"}, Dir: "/does/not/exist"}, nil)
	if err == nil || !strings.Contains(err.Error(), "no such file or directory") {
		t.Errorf("missing cwd: %v", err)
	}
}

// Output written before the exit is numbered before it: the exit waits
// briefly for the streams to end.
func TestOutputBeforeExitIsNumberedFirst(t *testing.T) {
	sup := newTestSupervisor(t, 1<<20, 50_000)
	for i := 0; i < 30; i++ {
		rec := newRecorder(16)
		if _, err := sup.Spawn("p"+strconv.Itoa(i), shSpec(t, `echo hello; echo err >&2; exit 3`), rec.sub()); err != nil {
			t.Fatal(err)
		}
		evs := rec.untilClosed(t, 10*time.Second)
		if len(evs) != 4 || evs[2].Kind != EventExited || evs[2].Seq != 3 || evs[3].Seq != 4 {
			t.Fatalf("run %d: %+v; want two outputs, exited(3), closed(4)", i, evs)
		}
	}
}

// A graceful stop kills what is left of a process group whose leader has
// already exited (a background child still holding the output).
func TestStopKillsDescendantsOfExitedLeader(t *testing.T) {
	sup := newTestSupervisor(t, 1<<20, 50_000)
	dir := t.TempDir()
	rec := newRecorder(16)
	ref, err := sup.Spawn("p", shSpec(t, `(trap '' TERM; echo $$ > /dev/null; sh -c 'echo $PPID' > `+dir+`/bg; while :; do sleep 0.01; done) & exit 5`), rec.sub())
	if err != nil {
		t.Fatal(err)
	}
	bg := waitPidFile(t, filepath.Join(dir, "bg"))
	if ev := next(t, rec); ev.Kind != EventExited {
		t.Fatalf("first event %+v; want exited", ev)
	}
	sup.Stop()
	select {
	case <-ref.Closed():
	case <-time.After(10 * time.Second):
		t.Fatal("process not closed after stop")
	}
	waitGone(t, bg)
}

// stopAtCleanup kills sup when the test ends and waits (10 s at most) for
// it to stop, failing the test if it does not; then runs after, in order.
func stopAtCleanup(t *testing.T, sup *Supervisor, after ...func()) {
	t.Cleanup(func() {
		sup.Kill()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := sup.Wait(ctx); err != nil {
			t.Errorf("supervisor did not stop: %v", err)
		}
		for _, f := range after {
			f()
		}
	})
}
