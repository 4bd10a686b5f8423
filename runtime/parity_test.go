package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The parity test: every case runs against Local, a Client over a real
// websocket and a Client over stdio pipes, and must observe the same
// results and the same errors (compared through errors.Is on the
// sentinels, and the code and message of an *RPCError).

// errName names an error by the sentinel it matches, or its RPC code and
// message: what the backends must agree on.
func errName(err error) string {
	var re *RPCError
	var pe *ProcessError
	var oe *OptionError
	switch {
	case err == nil:
		return "nil"
	case errors.As(err, &oe) && errors.Is(err, ErrInvalidOption):
		return "ErrInvalidOption(" + oe.Option + ")"
	case errors.Is(err, ErrUnknownProcess):
		return "ErrUnknownProcess"
	case errors.Is(err, ErrNotPTY):
		return "ErrNotPTY"
	case errors.Is(err, ErrStdinClosed):
		return "ErrStdinClosed"
	case errors.Is(err, ErrInvalidOption):
		return "ErrInvalidOption"
	case errors.Is(err, context.Canceled):
		return "context.Canceled"
	case errors.As(err, &pe):
		return "ProcessError"
	case errors.Is(err, ErrProcessExists) && errors.As(err, &re):
		return fmt.Sprintf("ErrProcessExists(%d %s)", re.Code, re.Message)
	case errors.As(err, &re):
		return fmt.Sprintf("RPCError(%d %s)", re.Code, re.Message)
	}
	return "other: " + err.Error()
}

// obs records what a case observed.
type obs []string

func (o *obs) add(format string, args ...any) { *o = append(*o, fmt.Sprintf(format, args...)) }

func readObs(r ReadResult, err error) string {
	var data strings.Builder
	for _, c := range r.Chunks {
		fmt.Fprintf(&data, "%d:%s:%q ", c.Seq, c.Stream, c.Data)
	}
	return fmt.Sprintf("read %s[next %d exited %v code %d closed %v] %s", data.String(), r.NextSeq, r.Exited, r.ExitCode, r.Closed, errName(err))
}

// waitOut waits for the process's first output (a readiness handshake).
func waitOut(t *testing.T, ctx context.Context, p Process) {
	t.Helper()
	s, err := p.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if ev, err := s.Next(ctx); err != nil || ev.Kind != EventOutput {
		t.Fatalf("no output: %+v %v", ev, err)
	}
}

type parityCase struct {
	name string
	cfg  Config // the backends' config (zero: defaults)
	run  func(t *testing.T, ctx context.Context, b Backend, o *obs)
	want []string
}

var parityCases = []parityCase{
	{name: "start, exit status, events", run: func(t *testing.T, ctx context.Context, b Backend, o *obs) {
		p, err := b.Start(ctx, sh(t, `printf out; exit 3`))
		if err != nil {
			t.Fatal(err)
		}
		s, _ := p.Events(ctx)
		for _, e := range collect(t, ctx, s) {
			o.add("event %d %s %q %d", e.seq, e.kind, e.data, e.code)
		}
		st, err := p.Wait(ctx)
		o.add("wait %s exited=%v code=%d %s", st, st.Exited(), st.ExitCode(), errName(err))
	}, want: []string{`event 1 output "out" 0`, `event 2 exited "" 3`, `event 3 closed "" 0`, "wait exit status 3 exited=true code=3 nil"}},

	{name: "read: whole, after, long poll, bad options", run: func(t *testing.T, ctx context.Context, b Backend, o *obs) {
		p, err := b.Start(ctx, sh(t, `printf abc`))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = p.Wait(ctx)
		o.add("%s", readObs(p.Read(ctx, ReadOptions{})))
		o.add("%s", readObs(p.Read(ctx, ReadOptions{After: 1})))
		q, err := b.Start(ctx, sh(t, `exec sleep 1000`))
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		r, err := q.Read(ctx, ReadOptions{Wait: 100 * time.Millisecond})
		o.add("long poll waited %v: %s", time.Since(t0) >= 90*time.Millisecond, readObs(r, err))
		_, err = q.Read(ctx, ReadOptions{MaxBytes: -1})
		o.add("MaxBytes -1: %s", errName(err))
		_, err = q.Read(ctx, ReadOptions{Wait: -1})
		o.add("Wait -1: %s", errName(err))
		_, _ = q.Terminate(ctx, 0)
	}, want: []string{
		`read 1:stdout:"abc" [next 4 exited true code 0 closed true] nil`,
		`read [next 4 exited true code 0 closed true] nil`,
		`long poll waited true: read [next 1 exited false code 0 closed false] nil`,
		"MaxBytes -1: ErrInvalidOption(ReadOptions.MaxBytes)", "Wait -1: ErrInvalidOption(ReadOptions.Wait)"}},

	{name: "write and close stdin", run: func(t *testing.T, ctx context.Context, b Backend, o *obs) {
		spec := sh(t, `cat; echo eof`)
		spec.PipeStdin = true
		p, err := b.Start(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		o.add("write %s", errName(p.Write(ctx, []byte("hello "))))
		o.add("close %s", errName(p.CloseStdin(ctx)))
		o.add("write after close %s", errName(p.Write(ctx, []byte("late"))))
		pipe, _ := Pipe(ctx, p, PipeOptions{})
		buf := make([]byte, 64)
		var got strings.Builder
		for {
			n, err := pipe.Read(buf)
			got.Write(buf[:n])
			if err != nil {
				break
			}
		}
		o.add("output %q", got.String())
		q, err := b.Start(ctx, sh(t, `true`)) // no PipeStdin
		if err != nil {
			t.Fatal(err)
		}
		o.add("write without pipeStdin %s", errName(q.Write(ctx, []byte("x"))))
		_, _ = q.Wait(ctx)
	}, want: []string{"write nil", "close nil", "write after close ErrStdinClosed", `output "hello eof\n"`, "write without pipeStdin ErrStdinClosed"}},

	{name: "resize and signal", run: func(t *testing.T, ctx context.Context, b Backend, o *obs) {
		spec := sh(t, `echo ready; read x; stty size`)
		spec.TTY, spec.Size = true, Size{Rows: 10, Cols: 20}
		p, err := b.Start(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		waitOut(t, ctx, p)
		o.add("resize pty %s", errName(p.Resize(ctx, 33, 77)))
		_ = p.Write(ctx, []byte("\r"))
		pipe, _ := Pipe(ctx, p, PipeOptions{})
		var got strings.Builder
		buf := make([]byte, 64)
		for {
			n, err := pipe.Read(buf)
			got.Write(buf[:n])
			if err != nil {
				break
			}
		}
		o.add("stty says 33 77: %v", strings.Contains(got.String(), "33 77"))
		q, err := b.Start(ctx, sh(t, `trap 'exit 42' USR1; echo ready; while :; do sleep 0.05; done`))
		if err != nil {
			t.Fatal(err)
		}
		o.add("resize pipe %s", errName(q.Resize(ctx, 1, 1)))
		waitOut(t, ctx, q)
		o.add("signal %s", errName(q.Signal(ctx, SigUser1)))
		st, err := q.Wait(ctx)
		o.add("wait %s %s", st, errName(err))
		o.add("bad signal %s", errName(q.Signal(ctx, "nope")))
	}, want: []string{"resize pty nil", "stty says 33 77: true", "resize pipe ErrNotPTY", "signal nil", "wait exit status 42 nil", "bad signal RPCError(-32602 unknown signal `nope`; expected one of interrupt, terminate, kill, hangup, quit, user1, user2)"}},

	{name: "terminate and wait", run: func(t *testing.T, ctx context.Context, b Backend, o *obs) {
		p, err := b.Start(ctx, sh(t, `exec sleep 1000`))
		if err != nil {
			t.Fatal(err)
		}
		running, err := p.Terminate(ctx, 0)
		o.add("terminate running=%v %s", running, errName(err))
		st, err := p.Wait(ctx)
		o.add("wait %s signaled=%v code=%d %s", st, st.Signaled(), st.Code, errName(err))
		running, err = p.Terminate(ctx, 0)
		o.add("terminate again running=%v %s", running, errName(err))
		wctx, cancel := context.WithCancel(ctx)
		cancel()
		q, err := b.Start(ctx, sh(t, `exec sleep 1000`))
		if err != nil {
			t.Fatal(err)
		}
		_, err = q.Wait(wctx)
		o.add("wait with an ended ctx %s", errName(err))
		running, _ = q.Terminate(ctx, 50*time.Millisecond) // SIGTERM first
		st, _ = q.Wait(ctx)
		o.add("graceful terminate running=%v %s", running, st)
	}, want: []string{"terminate running=true nil", "wait signal: killed signaled=true code=137 nil", "terminate again running=false nil",
		"wait with an ended ctx context.Canceled", "graceful terminate running=true signal: terminated"}},

	{name: "exited process (retained)", run: func(t *testing.T, ctx context.Context, b Backend, o *obs) {
		spec := sh(t, `echo bye`)
		spec.PipeStdin = true
		p, err := b.Start(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = p.Wait(ctx)
		o.add("write %s", errName(p.Write(ctx, []byte("x"))))
		o.add("close stdin %s", errName(p.CloseStdin(ctx)))
		o.add("resize %s", errName(p.Resize(ctx, 1, 1)))
		o.add("signal %s", errName(p.Signal(ctx, SigTerminate)))
		running, err := p.Terminate(ctx, 0)
		o.add("terminate running=%v %s", running, errName(err))
		o.add("%s", readObs(p.Read(ctx, ReadOptions{})))
	}, want: []string{"write ErrStdinClosed", "close stdin nil", "resize ErrNotPTY", "signal nil", "terminate running=false nil",
		`read 1:stdout:"bye\n" [next 4 exited true code 0 closed true] nil`}},

	{name: "unknown process (forgotten)", cfg: Config{ClosedRetention: -1}, run: func(t *testing.T, ctx context.Context, b Backend, o *obs) {
		spec := sh(t, `true`)
		spec.PipeStdin = true
		p, err := b.Start(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = p.Wait(ctx)
		// Forgotten right after its ending was delivered: wait for that.
		var rerr error
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if _, rerr = p.Read(ctx, ReadOptions{}); errors.Is(rerr, ErrUnknownProcess) {
				break
			}
		}
		o.add("read %s", errName(rerr))
		o.add("write %s", errName(p.Write(ctx, []byte("x"))))
		o.add("close stdin %s", errName(p.CloseStdin(ctx)))
		o.add("resize %s", errName(p.Resize(ctx, 1, 1)))
		o.add("signal %s", errName(p.Signal(ctx, SigTerminate)))
		running, err := p.Terminate(ctx, 0)
		o.add("terminate running=%v %s", running, errName(err))
		st, err := p.Wait(ctx)
		o.add("wait %s %s", st, errName(err))
	}, want: []string{"read ErrUnknownProcess", "write ErrUnknownProcess", "close stdin ErrUnknownProcess", "resize ErrUnknownProcess",
		"signal nil", "terminate running=false nil", "wait exit status 0 nil"}},

	{name: "attach by id", run: func(t *testing.T, ctx context.Context, b Backend, o *obs) {
		spec := sh(t, `echo one; read x; echo "two $x"; exit 2`)
		spec.ID, spec.PipeStdin = "job", true
		p, err := b.Start(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		waitOut(t, ctx, p)
		_, err = b.(Attacher).Attach(ctx, "nope")
		o.add("attach unknown %s", errName(err))
		q, err := b.(Attacher).Attach(ctx, "job")
		o.add("attach %s", errName(err))
		s, _ := q.Events(ctx)
		if ev, err := s.Next(ctx); err == nil {
			o.add("first %d %q", ev.Seq, ev.Data)
		}
		o.add("write %s", errName(q.Write(ctx, []byte("x\n"))))
		for _, e := range collect(t, ctx, s) {
			o.add("event %d %s %q %d", e.seq, e.kind, e.data, e.code)
		}
		st, err := q.Wait(ctx)
		o.add("wait %s %s", st, errName(err))
	}, want: []string{"attach unknown ErrUnknownProcess", "attach nil", `first 1 "one\n"`, "write nil",
		`event 2 output "two x\n" 0`, `event 3 exited "" 2`, `event 4 closed "" 0`, "wait exit status 2 nil"}},

	{name: "start errors and duplicate id", run: func(t *testing.T, ctx context.Context, b Backend, o *obs) {
		spec := sh(t, `exec sleep 1000`)
		spec.ID = "dup"
		p, err := b.Start(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		_, err = b.Start(ctx, spec)
		o.add("duplicate while running %s", errName(err))
		_, _ = p.Terminate(ctx, 0)
		_, _ = p.Wait(ctx)
		_, err = b.Start(ctx, spec)
		o.add("duplicate while retained %s", errName(err))
		_, err = b.Start(ctx, Spec{Dir: "/"})
		o.add("empty argv %s", errName(err))
		_, err = b.Start(ctx, Spec{Argv: []string{"true"}, Dir: "rel"})
		o.add("relative dir %s", errName(err))
		_, err = b.Start(ctx, Spec{Argv: []string{"/no/such/program"}, Dir: "/"})
		o.add("missing program %s", errName(err))
		dead, cancel := context.WithCancel(ctx)
		cancel()
		_, err = b.Start(dead, Spec{Argv: []string{"true"}, Dir: "/"})
		o.add("ended ctx %s", errName(err))
	}, want: []string{"duplicate while running ErrProcessExists(-32600 process dup already exists)",
		"duplicate while retained ErrProcessExists(-32600 process dup already exists)",
		"empty argv ErrInvalidOption(Spec.Argv)", "relative dir ErrInvalidOption(Spec.Dir)",
		"missing program RPCError(-32603 failed to spawn /no/such/program: no such file or directory)",
		"ended ctx context.Canceled"}},
}

func TestParity(t *testing.T) {
	for _, c := range parityCases {
		t.Run(c.name, func(t *testing.T) {
			for _, bc := range backendsWith(c.cfg) {
				t.Run(bc.name, func(t *testing.T) {
					var o obs
					c.run(t, ctxT(t), bc.make(t), &o)
					if strings.Join(o, "\n") != strings.Join(c.want, "\n") {
						t.Errorf("observed:\n\t%s\nwant (the same on every backend):\n\t%s", strings.Join(o, "\n\t"), strings.Join(c.want, "\n\t"))
					}
				})
			}
		})
	}
}
