package actors

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/runtimed/runtimed/actors/clock/clocktest"
	"github.com/runtimed/runtimed/wire"
)

// gatedTransport is a memTransport whose writes wait while its gate is
// shut: a client that stopped reading (its socket buffers full).
type gatedTransport struct {
	*memTransport
	mu      sync.Mutex // guards open; never held while writing
	open    chan struct{}
	writing atomic.Int32 // writes waiting at the gate
}

func newGated(t *memTransport) *gatedTransport {
	g := &gatedTransport{memTransport: t, open: make(chan struct{})}
	close(g.open)
	return g
}

func (g *gatedTransport) shut() {
	g.mu.Lock()
	g.open = make(chan struct{})
	g.mu.Unlock()
}

func (g *gatedTransport) reopen() {
	g.mu.Lock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
	g.mu.Unlock()
}

func (g *gatedTransport) WriteMessage(ctx context.Context, msg []byte) error {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	g.writing.Add(1)
	defer g.writing.Add(-1)
	select {
	case <-open:
	case <-g.Closed():
		return wire.ErrClosed
	case <-g.PeerClosed():
		return wire.ErrClosed
	}
	return g.memTransport.WriteMessage(ctx, msg)
}

// startGated serves a connection on a gated transport and completes the
// handshake; done is closed with the connection's cause when it ends.
func startGated(t *testing.T, sup *Supervisor, resumable bool) (*rawClient, *gatedTransport, <-chan error) {
	t.Helper()
	client, server := memPipe()
	g := newGated(server)
	done := make(chan error, 1)
	ended := make(chan struct{})
	go func() {
		done <- sup.ServeConn(context.Background(), g, ConnOptions{Resumable: resumable})
		close(ended)
	}()
	t.Cleanup(func() {
		g.reopen()
		client.Close()
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
			t.Error("connection actor did not end")
		}
	})
	c := newRawClient(t, client)
	res := c.call("initialize", map[string]any{"clientName": "test"})
	mustOK(t, res)
	var init struct{ SessionID string }
	_ = json.Unmarshal(res.Result, &init)
	c.session = init.SessionID
	c.send(`{"method":"initialized"}`)
	return c, g, done
}

func budgetSupervisor(t *testing.T, retain int, b Budgets) *Supervisor {
	t.Helper()
	sup := NewSupervisor(Config{
		Proc: ProcConfig{RetainBytes: retain, RetainChunks: 50_000, ClosedRetention: time.Minute,
			DrainAfterTerminate: 50 * time.Millisecond, ShutdownGrace: time.Second},
		DetachTTL:    10 * time.Second,
		MaxProcesses: 4096,
		Budgets:      b,
	})
	stopAtCleanup(t, sup)
	return sup
}

// blockWriter is a child that writes blocks of 64 KiB and records how many
// it wrote in dir/count after each; it starts when dir/go exists.
func blockWriter(dir string, blocks int) []string {
	script := fmt.Sprintf(`while [ ! -e %[1]s/go ]; do sleep 0.01; done; i=0; while [ $i -lt %[2]d ]; do head -c 65536 /dev/zero; i=$((i+1)); echo $i > %[1]s/count.tmp; mv %[1]s/count.tmp %[1]s/count; done`, dir, blocks)
	return []string{"/bin/sh", "-c", script}
}

func readCount(dir string) int {
	b, _ := os.ReadFile(filepath.Join(dir, "count"))
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// waitSteady waits (bounded) until the child's block count stops changing
// for a second, and returns it.
func waitSteady(t *testing.T, dir string) int {
	t.Helper()
	last, since := -1, time.Now()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		n := readCount(dir)
		if n != last {
			last, since = n, time.Now()
		} else if time.Since(since) >= time.Second && n > 0 {
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the child kept writing for 30s (at %d blocks): nothing stopped reading it", last)
	return 0
}

// A client that stops reading stops its processes once the outbound queue's
// byte budget is full: the child blocks on its pipe after a bounded amount
// of output (queue budget + retention + read-ahead + pipe), instead of the
// server buffering it. When the client reads again, every byte arrives, in
// order.
func TestOutboundBudgetStopsProducer(t *testing.T) {
	const retain, budget, blocks = 64 << 10, 128 << 10, 200
	sup := budgetSupervisor(t, retain, Budgets{OutboundQueueBytes: budget})
	c, g, _ := startGated(t, sup, true)
	dir := t.TempDir()
	mustOK(t, c.call("process/start", map[string]any{"processId": "p", "argv": blockWriter(dir, blocks), "cwd": dir}))
	g.shut()
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	n := waitSteady(t, dir)
	// What may be held before the child blocks: the queue (budget + one
	// chunk), the writer's message, retention, the facts queue and one read
	// per stream (18 reads of up to 64 KiB), and the 1 MiB pipe.
	bound := budget + retain + retain + int(RetainedPerProcess(ProcConfig{RetainBytes: retain})) + 1<<20
	t.Logf("the child blocked after %d KiB (bound %d KiB)", n*64, bound>>10)
	if got := n * 65536; got > bound+65536 {
		t.Fatalf("the child wrote %d bytes while the client did not read; the bound is %d", got, bound)
	}
	if n >= blocks {
		t.Fatalf("the child finished (%d blocks) while the client did not read", n)
	}
	g.reopen()
	total, next := 0, uint64(1)
	for {
		m := c.recv()
		p := params(m)
		if p == nil || p["processId"] != "p" {
			continue
		}
		seq := uint64(p["seq"].(float64))
		if seq != next {
			t.Fatalf("seq %d after %d: events lost or reordered", seq, next-1)
		}
		next++
		if m["method"] == "process/output" {
			b, _ := base64.StdEncoding.DecodeString(p["chunk"].(string))
			total += len(b)
		}
		if m["method"] == "process/closed" {
			break
		}
	}
	if total != blocks*65536 {
		t.Fatalf("received %d bytes; want %d", total, blocks*65536)
	}
}

// A connection whose outbound queue makes no progress for the slow-consumer
// timeout is closed; its session is detached (resumable) and can be resumed
// with its process.
func TestSlowConsumerClosedAndDetached(t *testing.T) {
	sup := budgetSupervisor(t, 64<<10, Budgets{OutboundQueueBytes: 64 << 10, SlowConsumerTimeout: 300 * time.Millisecond})
	c, g, done := startGated(t, sup, true)
	dir := t.TempDir()
	mustOK(t, c.call("process/start", map[string]any{"processId": "p", "argv": blockWriter(dir, 100000), "cwd": dir}))
	g.shut()
	start := time.Now()
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		var ce *ConnError
		if !errors.As(err, &ce) || ce.Reason != ReasonSlowConsumer {
			t.Fatalf("connection ended with %v; want a slow consumer", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("closed %v after it stopped reading; the timeout is 300ms", d)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("a connection that makes no progress was not closed")
	}
	// The detach rules apply: the session is resumable with its process.
	r, _, _ := startRawConn(t, sup, c.session)
	res := r.call("process/list", nil)
	mustOK(t, res)
	if !strings.Contains(string(res.Result), `"processId":"p"`) {
		t.Fatalf("resumed session lists %s", res.Result)
	}
	mustOK(t, r.call("process/terminate", map[string]any{"processId": "p"}))
}

// A connection the budget refuses is told why, with id null, and ended;
// its refusal costs the open connection nothing, and the slot returns
// when that one ends.
func TestConnectionBudgetRefusal(t *testing.T) {
	sup := budgetSupervisor(t, 64<<10, Budgets{MaxConnections: 1})
	first := startConn(t, sup, true)
	client, server := memPipe()
	err := sup.ServeConn(context.Background(), server, ConnOptions{Resumable: true})
	var be *BudgetError
	if !errors.As(err, &be) || be.Limit != "connections" {
		t.Fatalf("second connection: %v; want the connections budget", err)
	}
	msg, rerr := client.ReadMessage(context.Background())
	if rerr != nil {
		t.Fatal(rerr)
	}
	var reply struct {
		ID    json.RawMessage
		Error *wire.Error
	}
	if json.Unmarshal(msg, &reply) != nil || string(reply.ID) != "null" || reply.Error == nil ||
		reply.Error.Code != wire.CodeBudgetExceeded || reply.Error.Message != "limit reached: connections = 1 (--max-connections): 1 connections are open" {
		t.Fatalf("refused connection got %s", msg)
	}
	mustOK(t, first.call("environment/status", nil))
	first.tr.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		client, server := memPipe()
		done := make(chan error, 1)
		go func() { done <- sup.ServeConn(context.Background(), server, ConnOptions{}) }()
		_ = client.WriteMessage(context.Background(), []byte(`{"id":1,"method":"initialize","params":{"clientName":"later"}}`))
		msg, err := client.ReadMessage(context.Background())
		client.Close()
		<-done
		if err == nil && strings.HasPrefix(string(msg), `{"id":1,"result":`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot never came back: %s %v", msg, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The server-wide process budget keeps a reserve for sessions with fewer
// than FirstStarts active processes: a greedy session is refused while a
// new one still starts; slots return as processes close.
func TestProcessBudgetReserve(t *testing.T) {
	sup := budgetSupervisor(t, 64<<10, Budgets{MaxProcesses: 4})
	spec := Spec{Argv: []string{"sleep", "1000"}, Dir: "/"}
	var refs []*ProcessRef
	start := func(id string, active int) error {
		ref, err := sup.SpawnCharged(id, spec, nil, active)
		if err == nil {
			refs = append(refs, ref)
		}
		return err
	}
	// The greedy owner: two first starts, then it may not use the reserve (2).
	for i, active := range []int{0, 1} {
		if err := start(fmt.Sprint("g", i), active); err != nil {
			t.Fatal(err)
		}
	}
	err := start("g2", 2)
	var be *BudgetError
	if !errors.As(err, &be) || be.Limit != "processes" || be.Value != "4" || be.Flag != "--max-processes-total" {
		t.Fatalf("greedy third start: %v; want the processes budget", err)
	}
	if w := be.Wire(); w.Code != wire.CodeBudgetExceeded || !strings.HasPrefix(w.Message, "limit reached: processes = 4 (--max-processes-total): 2 processes are active") {
		t.Fatalf("wire error %d %q", w.Code, w.Message)
	}
	// New owners' first starts use the reserve, up to the limit itself.
	if err := start("n0", 0); err != nil {
		t.Fatalf("a new session's first start: %v", err)
	}
	if err := start("n1", 1); err != nil {
		t.Fatalf("a new session's second start: %v", err)
	}
	if err := start("n2", 0); !errors.Is(err, ErrBudget) {
		t.Fatalf("a start beyond the limit itself: %v", err)
	}
	if _, err := refs[0].Terminate(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	select {
	case <-refs[0].Closed():
	case <-time.After(10 * time.Second):
		t.Fatal("terminated process did not close")
	}
	if err := start("n3", 0); err != nil {
		t.Fatalf("after a process closed: %v", err)
	}
	u, err := sup.BudgetUsage(context.Background())
	if err != nil || u.Processes != 4 || u.OpenFiles != 4*FDsPerProcess {
		t.Fatalf("usage %+v %v; want 4 processes, %d fds", u, err, 4*FDsPerProcess)
	}
}

// The retained-output budget charges retention plus read-ahead per process.
func TestRetainedBudget(t *testing.T) {
	per := RetainedPerProcess(ProcConfig{RetainBytes: 64 << 10})
	sup := budgetSupervisor(t, 64<<10, Budgets{MaxRetainedBytes: 2 * per})
	spec := Spec{Argv: []string{"sleep", "1000"}, Dir: "/"}
	for i := range 2 {
		if _, err := sup.SpawnCharged(fmt.Sprint("p", i), spec, nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	_, err := sup.SpawnCharged("p2", spec, nil, 0)
	var be *BudgetError
	if !errors.As(err, &be) || be.Limit != "retained output memory" || be.Flag != "--max-retained-bytes" {
		t.Fatalf("third start: %v; want the retained-output budget", err)
	}
}

// outputBytesCap null does not let buffered app-server output grow without
// bound: it is charged to the retained-output budget as it arrives and cut
// (capReached) where the budget refuses; the charge returns at the exit.
func TestAppServerBufferedOutputIsCharged(t *testing.T) {
	const retain = 64 << 10
	per := RetainedPerProcess(ProcConfig{RetainBytes: retain})
	sup := NewSupervisor(Config{
		Proc: ProcConfig{RetainBytes: retain, RetainChunks: 50_000, ClosedRetention: time.Minute,
			DrainAfterTerminate: 50 * time.Millisecond, ShutdownGrace: time.Second},
		DetachTTL: time.Second,
		// Half of it is the reserve for first starts (not for buffered
		// output); the other half holds the process and three steps.
		Budgets: Budgets{MaxRetainedBytes: 2 * (per + 3*appChargeStep)},
		Logger:  zaptest.NewLogger(t),
	})
	t.Cleanup(func() { sup.Kill(); _ = sup.Wait(context.Background()) })
	c := startConn(t, sup, true)
	mustOK(t, c.call("process/spawn", spawnParams("big", `head -c 10000000 /dev/zero | tr '\0' a`, map[string]any{"outputBytesCap": nil, "timeoutMs": nil})))
	ex := params(c.waitNote(appExited("big")))
	if out, _ := ex["stdout"].(string); len(out) != 3*appChargeStep || ex["stdoutCapReached"] != true {
		t.Fatalf("uncapped buffered output: %d bytes, capReached %v; want %d bytes cut by the budget", len(out), ex["stdoutCapReached"], 3*appChargeStep)
	}
	// The charge came back: the same output fits again.
	mustOK(t, c.call("process/spawn", spawnParams("again", `head -c 2000000 /dev/zero | tr '\0' b`, map[string]any{"outputBytesCap": nil})))
	ex = params(c.waitNote(appExited("again")))
	if out, _ := ex["stdout"].(string); len(out) != 2000000 || ex["stdoutCapReached"] != false {
		t.Fatalf("after the first exit: %d bytes, capReached %v; want all 2000000", len(out), ex["stdoutCapReached"])
	}
}

// What a process actor hands over back to back leaves in one batch: the
// queue takes every event and answer already waiting (within the budget)
// before it takes the write token.
func TestQueueTakesReadyItemsTogether(t *testing.T) {
	c := &conn{events: make(chan Event, 4), responses: make(chan outItem, 1), budget: 1 << 20}
	c.events <- Event{ProcessID: "p", Kind: EventClosed, Seq: 3}
	c.responses <- outItem{b: []byte(`{"id":1,"result":{}}`), size: 20}
	fifo, queued := c.takeReady([]outItem{{ev: Event{ProcessID: "p", Kind: EventExited, Seq: 2}, size: 10}}, 10)
	if len(fifo) != 3 || queued != 10+20+eventSize(Event{ProcessID: "p", Kind: EventClosed, Seq: 3}) {
		t.Fatalf("took %d items (%d bytes); want the exited event with the closed event and the answer waiting behind it", len(fifo), queued)
	}
	// Within the budget only: a full queue takes nothing more.
	c.budget = 1
	c.events <- Event{ProcessID: "p", Kind: EventOutput, Seq: 4, Data: []byte("x")}
	if fifo, _ = c.takeReady(nil, 1); len(fifo) != 0 {
		t.Fatalf("took %d items over the budget", len(fifo))
	}
}

// countingClock is a fake clock whose timers count their Reset and Stop
// calls, each counted once it took effect: the slow-consumer watchdog
// ends its handling of every tick with one of them (or with the latch), so
// a test knows the tick was handled.
type countingClock struct {
	*clocktest.Clock
	ops atomic.Int64
}

type countingTimer struct {
	Timer
	ops *atomic.Int64
}

func (c *countingClock) NewTimer() Timer       { return &countingTimer{c.Clock.NewTimer(), &c.ops} }
func (t *countingTimer) Reset(d time.Duration) { t.Timer.Reset(d); t.ops.Add(1) }
func (t *countingTimer) Stop()                 { t.Timer.Stop(); t.ops.Add(1) }

// tick advances c by d, one due deadline at a time: after each fire it
// waits (bounded) until the queue goroutine handled the tick or the
// connection ended (done then holds its cause, put back for the caller).
func (c *countingClock) tick(t *testing.T, d time.Duration, done chan error) {
	t.Helper()
	end := c.Now().Add(d)
	for {
		before := c.ops.Load()
		if !c.AdvanceWithin(end.Sub(c.Now())) {
			c.Advance(end.Sub(c.Now()))
			return
		}
		deadline := time.After(10 * time.Second)
		for c.ops.Load() == before {
			select {
			case err := <-done:
				done <- err
				return
			case <-deadline:
				t.Fatal("the watchdog's tick was not handled within 10s")
			case <-time.After(time.Millisecond):
			}
		}
	}
}

// The slow-consumer watchdog acts only while a batch is being written: a
// client waiting quietly on a long-running process (nothing queued,
// nothing being written) stays connected however long the quiet lasts,
// here twenty timeouts on the connection's fake clock. The same clock
// then closes the connection as a slow consumer once a write stalls for
// the timeout (the control: the watchdog runs on that clock, and acts in
// time).
func TestIdleConnectionNotSlowConsumer(t *testing.T) {
	const timeout = time.Second
	clk := &countingClock{Clock: clocktest.New()}
	sup := NewSupervisor(Config{
		Proc: ProcConfig{RetainBytes: 64 << 10, RetainChunks: 50_000, ClosedRetention: time.Minute,
			DrainAfterTerminate: 50 * time.Millisecond, ShutdownGrace: time.Second},
		DetachTTL:    10 * time.Second,
		MaxProcesses: 16,
		Budgets:      Budgets{OutboundQueueBytes: 64 << 10, SlowConsumerTimeout: timeout},
		Clock:        clk,
	})
	stopAtCleanup(t, sup)
	c, g, ended := startGated(t, sup, true)
	done := make(chan error, 1)
	go func() { done <- <-ended }()
	dir := t.TempDir()
	script := fmt.Sprintf(`echo ready; while [ ! -e %[1]s/go ]; do sleep 0.01; done; head -c 4000000 /dev/zero`, dir)
	mustOK(t, c.call("process/start", map[string]any{"processId": "p", "argv": []string{"/bin/sh", "-c", script}, "cwd": dir}))
	c.waitNote(func(m map[string]any) bool {
		return m["method"] == "process/output" && params(m)["chunk"] == base64.StdEncoding.EncodeToString([]byte("ready\n"))
	})
	// "ready" was a batch: the watchdog was armed for it. Now nothing
	// moves, for twenty timeouts in steps of a quarter.
	for i := range 80 {
		clk.tick(t, timeout/4, done)
		select {
		case err := <-done:
			t.Fatalf("an idle connection ended after %v quiet: %v", time.Duration(i+1)*timeout/4, err)
		default:
		}
	}
	mustOK(t, c.call("process/list", nil)) // still connected
	// The control: a write that stalls is caught on the same clock.
	g.shut()
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for g.writing.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the flood's first write did not reach the shut gate")
		}
		time.Sleep(time.Millisecond)
	}
	// Closed once the timeout has passed without progress: at the
	// watchdog's first tick after it (one step more allows for the stall
	// being seen before the batch's mark was taken).
	for i := 0; ; i++ {
		if i == 5 {
			t.Fatalf("a stalled connection was not closed %v after the stall (timeout %v)", time.Duration(i)*timeout/4, timeout)
		}
		clk.tick(t, timeout/4, done)
		select {
		case err := <-done:
			var ce *ConnError
			if !errors.As(err, &ce) || ce.Reason != ReasonSlowConsumer {
				t.Fatalf("the stalled connection ended with %v; want a slow consumer", err)
			}
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// What an item charges to the outbound budget covers its encoded size
// (else the budget would hold more memory than it says), without charging
// grossly more: events of each kind, and the large responses the writer
// encodes itself.
func TestChargesCoverEncodedSize(t *testing.T) {
	within := func(what string, charged, encoded int) {
		t.Helper()
		if charged < encoded || charged > 2*encoded+256 {
			t.Errorf("%s: charges %d for %d encoded bytes", what, charged, encoded)
		}
	}
	for _, n := range []int{0, 1, 2, 3, 4, 1000, 65536} {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(i * 7)
		}
		ev := Event{ProcessID: "proc-1", Kind: EventOutput, Seq: 123456, Stream: Stderr, Data: data}
		within(fmt.Sprintf("output of %d bytes", n), eventSize(ev), len(encodeEvent(nil, ev)))
		rr := wire.ReadResult{Chunks: []wire.Chunk{{Seq: 1, Stream: "stdout", Chunk: data}, {Seq: 2, Stream: "pty", Chunk: data}}, NextSeq: 3}
		size, lazy := lazyResponse(rr)
		if !lazy {
			t.Fatalf("a read result is not encoded by the writer")
		}
		within(fmt.Sprintf("a read of 2x%d bytes", n), size, len(encodeResponse(nil, wire.IntID(7), rr, nil)))
		hr := wire.HTTPResponse{Status: 200, Headers: []wire.HTTPHeader{{Name: "content-type", Value: "text/plain"}}, BodyBase64: data}
		size, lazy = lazyResponse(hr)
		if !lazy {
			t.Fatalf("an http response is not encoded by the writer")
		}
		within(fmt.Sprintf("an http response of %d bytes", n), size, len(encodeResponse(nil, wire.IntID(7), hr, nil)))
	}
	for _, ev := range []Event{
		{ProcessID: "proc-1", Kind: EventExited, Seq: 99, ExitCode: 137, Limit: "memory"},
		{ProcessID: "proc-1", Kind: EventClosed, Seq: 100},
		{ProcessID: "proc-1", Kind: EventMessage, Data: []byte(`{"jsonrpc":"2.0","method":"x","params":{}}`)},
	} {
		within(fmt.Sprintf("event kind %d", ev.Kind), eventSize(ev), len(encodeEvent(nil, ev)))
	}
	if _, lazy := lazyResponse(map[string]any{"ok": true}); lazy {
		t.Errorf("a small result is encoded by the writer")
	}
}

// closeRecorder records the close frame a connection's end sends.
type closeRecorder struct {
	*memTransport
	code   int
	reason string
}

func (c *closeRecorder) CloseWith(code int, reason string) error {
	c.code, c.reason = code, reason
	return c.memTransport.Close()
}

// How a connection ends is told in its close frame: 1008 for a slow
// consumer, 1002 with the violation for a protocol error, 1001 for a
// shutdown; anything else ends it without one.
func TestCloseFrameForCause(t *testing.T) {
	for _, c := range []struct {
		cause  error
		code   int
		reason string
	}{
		{&ConnError{Reason: ReasonSlowConsumer}, wire.ClosePolicy, "slow consumer"},
		{&ConnError{Reason: ReasonProtocol, Err: errors.New("a response from the client")}, wire.CloseProtocolError, "protocol violation: a response from the client"},
		{&ConnError{Reason: ReasonShutdown}, wire.CloseGoingAway, "server shutting down"},
		{&ConnError{Reason: ReasonTransportLost}, 0, ""},
		{errors.New("other"), 0, ""},
	} {
		_, server := memPipe()
		r := &closeRecorder{memTransport: server}
		closeFor(r, c.cause)
		if r.code != c.code || !strings.HasPrefix(r.reason, c.reason) {
			t.Errorf("%v: close %d %q; want %d %q", c.cause, r.code, r.reason, c.code, c.reason)
		}
		select {
		case <-server.Closed():
		default:
			t.Errorf("%v: the transport was not closed", c.cause)
		}
	}
}
