package proptest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"pgregory.net/rapid"

	"github.com/runtimed/runtimed/actors"
	"github.com/runtimed/runtimed/wire"
	"github.com/runtimed/runtimed/wire/wiretest"
)

var errCut = errors.New("proptest: transport cut")

type procKind int

const (
	kindQuick   procKind = iota // prints a payload and exits with a chosen code
	kindChatty                  // prints to both streams over ~60 ms, exits 1
	kindCat                     // cat with pipeStdin: echoes what is written
	kindSleeper                 // sleep 30: runs until terminated
	kindFlood                   // 300 one-byte writes: many events in flight at the cut
)

func (k procKind) String() string {
	return [...]string{"quick", "chatty", "cat", "sleeper", "flood"}[k]
}

// fproc is one process of the failure property and what the client knows
// of it.
type fproc struct {
	id         string
	kind       procKind
	code       int
	payload    string
	startSure  bool // process/start was answered with success
	writes     []fwrite
	terminated bool // a process/terminate was sent (it may or may not have been applied)
}

type fwrite struct{ id, data string }

func (p *fproc) startParams() map[string]any {
	var argv []string
	switch p.kind {
	case kindQuick:
		argv = []string{"/bin/sh", "-c", fmt.Sprintf("printf '%s'; exit %d", p.payload, p.code)}
	case kindChatty:
		argv = []string{"/bin/sh", "-c", "for i in 1 2 3; do printf c$i; printf e$i >&2; sleep 0.02; done; exit 1"}
	case kindCat:
		argv = []string{"cat"}
	case kindSleeper:
		argv = []string{"sleep", "30"}
	case kindFlood:
		argv = []string{"/bin/sh", "-c", "i=0; while [ $i -lt 300 ]; do printf x; i=$((i+1)); done"}
	}
	return map[string]any{
		"processId": p.id, "argv": argv, "cwd": "/", "env": map[string]string{"PATH": "/bin:/usr/bin"},
		"tty": false, "pipeStdin": p.kind == kindCat,
	}
}

// expect returns the exit codes and per-stream output the process may end
// with; exact is false when a terminate may have cut it short (then output
// is a prefix).
func (p *fproc) expect() (codes []int, out map[string]string, exact bool) {
	out = map[string]string{}
	switch p.kind {
	case kindQuick:
		codes, out["stdout"] = []int{p.code}, p.payload
	case kindChatty:
		codes, out["stdout"], out["stderr"] = []int{1}, "c1c2c3", "e1e2e3"
	case kindCat:
		codes = []int{0}
		var b strings.Builder
		for _, w := range p.writes {
			b.WriteString(w.data)
		}
		out["stdout"] = b.String()
	case kindSleeper:
		codes = []int{137}
	case kindFlood:
		codes, out["stdout"] = []int{0}, strings.Repeat("x", 300)
	}
	if p.terminated {
		codes = append(codes, 137) // SIGKILL: 128+9
	}
	return codes, out, !p.terminated
}

// memConn is one connection of the supervisor over an unbuffered
// wiretest.MemPipe (a completed send means the other side has taken the
// message); pipe is its client end, which the test cuts.
type memConn struct {
	pipe   *wiretest.MemTransport
	client *rpcClient
	served chan struct{} // closed when ServeConn has returned
	cause  error         // ServeConn's result, once served is closed
}

func serveMem(ctx context.Context, sup *actors.Supervisor, firstID int64) *memConn {
	client, server := wiretest.MemPipe(0)
	c := &memConn{pipe: client, served: make(chan struct{})}
	go func() {
		defer close(c.served)
		c.cause = sup.ServeConn(ctx, server, actors.ConnOptions{Resumable: true, Logger: zap.NewNop()})
	}()
	c.client = newRPCClient(client, firstID)
	return c
}

// sentReq is a request sent on the first connection.
type sentReq struct {
	method string
	proc   *fproc
	params map[string]any
	ch     chan inMsg
	wait   time.Duration // the long poll's waitMs
}

// TestFailureFanOut: when the transport fails at any moment, with any mix
// of processes in any state and requests in flight, every request sent
// while the connection lived is answered, the connection ends with the
// transport's error, the session resumes on a new transport with every
// process's history intact and consistent (gap-free seqs, one exited, one
// closed, same bytes in notifications and reads), a write retried with its
// writeId after the resume is applied exactly once, and stopping the
// supervisor leaves no goroutine behind.
func TestFailureFanOut(t *testing.T) {
	capChecks(t, 80)
	rapid.Check(t, func(t *rapid.T) {
		sup := actors.NewSupervisor(actors.Config{
			Proc: actors.ProcConfig{
				RetainBytes: 1 << 20, RetainChunks: 50_000, ClosedRetention: time.Minute,
				DrainAfterTerminate: 100 * time.Millisecond, ShutdownGrace: time.Second,
			},
			DetachTTL: time.Minute,
			Logger:    zap.NewNop(),
		})
		ctx, cancel := context.WithCancel(context.Background())
		var conns []*memConn
		t.Cleanup(func() {
			sup.Kill()
			cancel()
			for _, c := range conns {
				c.client.Close()
			}
			wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer wcancel()
			if err := sup.Wait(wctx); err != nil {
				t.Errorf("supervisor did not stop: %v", err)
			}
			for _, c := range conns {
				select {
				case <-c.served:
				case <-wctx.Done():
					t.Errorf("ServeConn did not return after Kill")
				}
			}
		})

		// First connection: handshake, start the processes.
		c1 := serveMem(ctx, sup, 1000)
		conns = append(conns, c1)
		sid, err := c1.client.handshake("")
		if err != nil {
			t.Fatalf("initialize: %v", err)
		}
		var procs []*fproc
		newProc := func(t *rapid.T, id string) *fproc {
			p := &fproc{id: id, kind: procKind(rapid.IntRange(0, 4).Draw(t, "kind"))}
			if p.kind == kindQuick {
				p.code = rapid.IntRange(0, 3).Draw(t, "code")
				p.payload = rapid.StringMatching(`[a-z]{0,6}`).Draw(t, "payload")
			}
			procs = append(procs, p)
			return p
		}
		n := rapid.IntRange(1, 4).Draw(t, "processes")
		for i := range n {
			p := newProc(t, fmt.Sprintf("p%d", i))
			if rerr, err := c1.client.Call(wire.MethodProcessStart, p.startParams(), nil, stepWait); err != nil || rerr != nil {
				t.Fatalf("start %s: %v %v", p.id, err, rerr)
			}
			p.startSure = true
		}

		// Requests, some answered before the next, until the cut.
		var sent []*sentReq
		steps := rapid.IntRange(0, 10).Draw(t, "steps")
		nwrites := 0
		for i := range steps {
			var r *sentReq
			switch op := rapid.IntRange(0, 6).Draw(t, "op"); op {
			case 0, 1: // read, maybe a long poll, maybe with maxBytes
				p := rapid.SampledFrom(procs).Draw(t, "proc")
				wait := rapid.SampledFrom([]int{0, 0, 20, 300}).Draw(t, "waitMs")
				params := map[string]any{"processId": p.id, "afterSeq": rapid.IntRange(0, 4).Draw(t, "afterSeq"), "waitMs": wait}
				if rapid.Bool().Draw(t, "withMaxBytes") {
					params["maxBytes"] = rapid.IntRange(0, 4).Draw(t, "maxBytes")
				}
				r = &sentReq{method: wire.MethodProcessRead, proc: p, params: params, wait: time.Duration(wait) * time.Millisecond}
			case 2: // write to a cat
				var cats []*fproc
				for _, p := range procs {
					if p.kind == kindCat && p.startSure {
						cats = append(cats, p)
					}
				}
				if len(cats) == 0 {
					continue
				}
				p := rapid.SampledFrom(cats).Draw(t, "cat")
				nwrites++
				w := fwrite{id: fmt.Sprintf("w%d", nwrites), data: rapid.StringMatching(`[a-z]{1,5}`).Draw(t, "data")}
				p.writes = append(p.writes, w)
				r = &sentReq{method: wire.MethodProcessWrite, proc: p, params: map[string]any{"processId": p.id, "chunk": wire.Base64(w.data), "writeId": w.id}}
			case 3: // terminate
				p := rapid.SampledFrom(procs).Draw(t, "proc")
				p.terminated = true
				r = &sentReq{method: wire.MethodProcessTerminate, proc: p, params: map[string]any{"processId": p.id}}
			case 4:
				r = &sentReq{method: wire.MethodProcessList, params: map[string]any{}}
			case 5:
				r = &sentReq{method: wire.MethodEnvironmentStatus}
			case 6: // a start whose answer may be lost
				p := newProc(t, fmt.Sprintf("late%d", i))
				r = &sentReq{method: wire.MethodProcessStart, proc: p, params: p.startParams()}
			}
			var params any
			if r.params != nil {
				params = r.params
			}
			ch, err := c1.client.Send(r.method, params)
			if err != nil {
				t.Fatalf("send %s: %v", r.method, err)
			}
			r.ch = ch
			sent = append(sent, r)
			if rapid.Bool().Draw(t, "awaitAll") {
				// While the connection lives, every request is answered.
				for _, s := range sent {
					m, err := c1.client.Await(s.ch, s.wait+stepWait)
					if err != nil {
						t.Fatalf("%s %v: %v", s.method, s.params, err)
					}
					s.ch <- m // keep it for the checks below
				}
			}
		}

		// Cut. The connection must end, with the transport's error.
		c1.pipe.Cut(errCut)
		select {
		case <-c1.served:
			cause := c1.cause
			var ce *actors.ConnError
			if !errors.As(cause, &ce) || ce.Reason != actors.ReasonTransportLost || !errors.Is(cause, errCut) {
				t.Fatalf("connection ended with %v, want transport lost: %v", cause, errCut)
			}
		case <-time.After(stepWait):
			t.Fatalf("connection did not end within %v of the cut", stepWait)
		}
		<-c1.client.done
		if probs := c1.client.Problems(); len(probs) > 0 {
			t.Fatalf("first connection: %v", probs)
		}

		// What the first connection learnt.
		hist := map[string]*history{}
		for _, p := range procs {
			hist[p.id] = newHistory()
		}
		for _, s := range sent {
			var m inMsg
			select {
			case m = <-s.ch:
			default:
				continue // abandoned with the connection
			}
			if m.Error != nil {
				// Writing to a killed child's stdin may fail (EPIPE): -32603.
				if !(s.method == wire.MethodProcessWrite && s.proc.terminated && m.Error.Code == wire.CodeInternal) {
					t.Fatalf("%s %v: error %v", s.method, s.params, m.Error)
				}
				continue
			}
			switch s.method {
			case wire.MethodProcessStart:
				s.proc.startSure = true
			case wire.MethodProcessRead:
				var rr wire.ReadResult
				if err := json.Unmarshal(m.Result, &rr); err != nil {
					t.Fatalf("read result %s: %v", m.Result, err)
				}
				var mb *uint64
				if v, ok := s.params["maxBytes"]; ok {
					u := uint64(v.(int))
					mb = &u
				}
				if err := hist[s.proc.id].addRead(uint64(s.params["afterSeq"].(int)), mb, rr); err != nil {
					t.Fatalf("%s first connection: %v", s.proc.id, err)
				}
			case wire.MethodProcessWrite:
				var wr wire.WriteResult
				_ = json.Unmarshal(m.Result, &wr)
				if wr.Status != wire.WriteAccepted && !s.proc.terminated {
					t.Fatalf("write to %s: %s", s.proc.id, m.Result)
				}
			}
		}

		// Resume on a new transport.
		c2 := serveMem(ctx, sup, 2000)
		conns = append(conns, c2)
		sid2, err := c2.client.handshake(sid)
		if err != nil {
			t.Fatalf("resume %s: %v", sid, err)
		}
		if sid2 != sid {
			t.Fatalf("resumed session %s, want %s", sid2, sid)
		}

		for _, p := range procs {
			h := hist[p.id]
			// Finish it: retry every write with its writeId, close stdin, or terminate.
			gone := false
			switch p.kind {
			case kindCat:
				for _, w := range p.writes {
					var wr wire.WriteResult
					rerr, err := c2.client.Call(wire.MethodProcessWrite, map[string]any{"processId": p.id, "chunk": wire.Base64(w.data), "writeId": w.id}, &wr, stepWait)
					if rerr != nil && p.terminated && rerr.Code == wire.CodeInternal {
						continue // EPIPE: the child was killed
					}
					if err != nil || rerr != nil {
						t.Fatalf("retry write %s to %s: %v %v", w.id, p.id, err, rerr)
					}
					if wr.Status == wire.WriteUnknownProcess && !p.startSure {
						gone = true
						break
					}
					if wr.Status != wire.WriteAccepted && !p.terminated {
						t.Fatalf("retry write %s to %s: %s", w.id, p.id, wr.Status)
					}
				}
				rerr, err := c2.client.Call(wire.MethodProcessCloseStdin, map[string]any{"processId": p.id}, nil, stepWait)
				if err != nil {
					t.Fatalf("closeStdin %s: %v", p.id, err)
				}
				if rerr != nil && (p.startSure || rerr.Code != wire.CodeInvalidRequest) {
					t.Fatalf("closeStdin %s: %v", p.id, rerr)
				}
			case kindSleeper:
				var tr wire.TerminateResult
				if rerr, err := c2.client.Call(wire.MethodProcessTerminate, map[string]any{"processId": p.id}, &tr, stepWait); err != nil || rerr != nil {
					t.Fatalf("terminate %s: %v %v", p.id, err, rerr)
				}
				if !tr.Running && !p.terminated && p.startSure {
					t.Fatalf("terminate %s: running=false, but nothing ended it", p.id)
				}
			}
			// Read the whole history, in pieces.
			cursor := uint64(0)
			deadline := time.Now().Add(15 * time.Second)
			for !gone {
				if time.Now().After(deadline) {
					t.Fatalf("%s (%v) not closed in time; history so far: next %d", p.id, p.kind, h.nextSeq)
				}
				params := map[string]any{"processId": p.id, "afterSeq": cursor, "waitMs": 1000}
				var mb *uint64
				if rapid.Bool().Draw(t, "readWithMaxBytes") {
					u := uint64(rapid.IntRange(1, 8).Draw(t, "readMaxBytes"))
					mb = &u
					params["maxBytes"] = u
				}
				var rr wire.ReadResult
				rerr, err := c2.client.Call(wire.MethodProcessRead, params, &rr, 5*time.Second)
				if err != nil {
					t.Fatalf("read %s: %v", p.id, err)
				}
				if rerr != nil {
					if !p.startSure && rerr.Code == wire.CodeInvalidRequest && cursor == 0 {
						gone = true // the start never reached the server
						break
					}
					t.Fatalf("read %s: %v", p.id, rerr)
				}
				if rr.NextSeq <= cursor {
					t.Fatalf("read %s after %d: nextSeq %d went back", p.id, cursor, rr.NextSeq)
				}
				if err := h.addRead(cursor, mb, rr); err != nil {
					t.Fatalf("%s: %v", p.id, err)
				}
				cursor = rr.NextSeq - 1 // the last seq this read accounts for
				if rr.Closed && len(rr.Chunks) == 0 {
					break
				}
			}
			if gone {
				if len(c1.client.Notes(p.id)) > 0 {
					t.Fatalf("%s: unknown after resume, but it sent notifications", p.id)
				}
				continue
			}
			// A process still running at the resume (a sleeper or a cat nobody
			// terminated), or one that notified the new connection of anything,
			// notifies it of its close: delivery is lossless while attached.
			runningAtResume := (p.kind == kindSleeper || p.kind == kindCat) && !p.terminated
			if runningAtResume || len(c2.client.Notes(p.id)) > 0 {
				if !c2.client.WaitNotes(p.id, stepWait, func(ns []note) bool { return len(ns) > 0 && ns[len(ns)-1].Method == wire.NotifyProcessClosed }) {
					t.Fatalf("%s: resumed connection was not notified of the close: %+v", p.id, c2.client.Notes(p.id))
				}
			}
			if err := h.addNotes(append(c1.client.Notes(p.id), c2.client.Notes(p.id)...)); err != nil {
				t.Fatalf("%s notifications: %v", p.id, err)
			}
			streams, err := h.complete()
			if err != nil {
				t.Fatalf("%s (%v): %v\n%s\nfirst connection notified %+v\nsecond connection notified %+v", p.id, p.kind, err, h.dump(), c1.client.Notes(p.id), c2.client.Notes(p.id))
			}
			codes, want, exact := p.expect()
			if h.exitCode == nil || !containsInt(codes, *h.exitCode) {
				t.Fatalf("%s (%v): exit code %v, want one of %v", p.id, p.kind, h.exitCode, codes)
			}
			for st, data := range streams {
				if _, ok := want[st]; !ok {
					t.Fatalf("%s: unexpected output on %s: %q", p.id, st, data)
				}
			}
			for st, w := range want {
				got := string(streams[st])
				if (exact && got != w) || !strings.HasPrefix(w, got) {
					t.Fatalf("%s (%v): %s %q, want %q (exact=%v)", p.id, p.kind, st, got, w, exact)
				}
			}
		}
		if probs := c2.client.Problems(); len(probs) > 0 {
			t.Fatalf("second connection: %v", probs)
		}
		c2.client.Close()
		select {
		case <-c2.served:
		case <-time.After(stepWait):
			t.Fatalf("second connection did not end after its transport closed")
		}
	})
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
