package runtime

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/runtimed/runtimed/wire"
)

// The remote backend's process side: Start, List and the Process handle,
// each a request over the Client's connection. Answers are mapped to the
// sentinels Local returns (remoteErr), so errors.Is works the same on both.

// register asks the client actor for a view of process m.id (Start and
// Attach); nil when the actor refuses it (the id is taken, or the client
// has failed: see c.Err). m.reply is set here.
func (c *Client) register(ctx context.Context, m registerProcMsg) (*rproc, error) {
	reply := make(chan *rproc, 1)
	m.reply = reply
	select {
	case c.mbox <- m:
	case <-c.failed:
		return nil, c.cause
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case rp := <-reply:
		return rp, nil
	case <-c.failed:
		return nil, c.cause
	}
}

// Start starts a process on the server. ctx bounds the call: if it ends
// before the server answered, Start returns ctx's error and a process the
// server started meanwhile is terminated (grace 0) once its answer comes,
// so a failed Start leaves nothing running, as with Local.
func (c *Client) Start(ctx context.Context, spec Spec) (Process, error) {
	if spec.ID == "" {
		spec.ID = "proc-" + strconv.FormatUint(c.procSeq.Add(1), 10)
	}
	if err := c.Err(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := spec.validate(); err != nil {
		return nil, err
	}
	params, err := startParams(spec)
	if err != nil {
		return nil, err
	}
	reg := registerProcMsg{id: spec.ID}
	if spec.Network != nil {
		reg.onDecision = spec.Network.OnDecision
	}
	rp, err := c.register(ctx, reg)
	if err != nil {
		return nil, err
	}
	if rp == nil {
		if err := c.Err(); err != nil {
			return nil, err
		}
		return nil, errProcessExists(spec.ID)
	}
	// The call runs detached from ctx so that its answer is never lost: a
	// caller that gives up still has the started process cleaned up.
	answer := make(chan callResult, 1)
	go func() { answer <- c.callResult(context.WithoutCancel(ctx), wire.MethodProcessStart, params) }()
	var r callResult
	select {
	case r = <-answer:
	case <-ctx.Done():
		go func() {
			if r := <-answer; r.err == nil {
				tctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = c.call(tctx, wire.MethodProcessTerminate, wire.TerminateParams{ProcessID: spec.ID}, nil)
			}
			c.toActor(forgetProcMsg{id: spec.ID})
		}()
		return nil, ctx.Err()
	}
	if r.err != nil {
		var re *RPCError
		if errors.As(r.err, &re) && re.Message == wire.ErrProcessExists(spec.ID).Message {
			if r.resent {
				// Our own start, resent after a reconnect, found the
				// process it had started before the drop: that is success.
				return &remoteProcess{c: c, rp: rp, id: spec.ID}, nil
			}
			re.sentinel = ErrProcessExists
		}
		c.toActor(forgetProcMsg{id: spec.ID})
		return nil, r.err
	}
	return &remoteProcess{c: c, rp: rp, id: spec.ID}, nil
}

// startParams is spec as process/start's params.
func startParams(spec Spec) (wire.StartParams, error) {
	params := wire.StartParams{ProcessID: spec.ID, Argv: spec.Argv, Cwd: spec.Dir, Env: spec.Env, TTY: spec.TTY, PipeStdin: spec.PipeStdin}
	if params.Env == nil {
		params.Env = map[string]string{}
	}
	if params.Argv == nil {
		params.Argv = []string{} // let the server say "argv must not be empty"
	}
	if spec.Arg0 != "" {
		params.Arg0 = &spec.Arg0
	}
	if spec.Size.Rows > 0 && spec.Size.Cols > 0 {
		params.Size = &wire.Size{Rows: spec.Size.Rows, Cols: spec.Size.Cols}
	}
	if p := spec.envPolicy(); p != nil {
		params.EnvPolicy = &wire.EnvPolicy{Inherit: p.Inherit, IgnoreDefaultExcludes: p.IgnoreDefaultExcludes, Exclude: p.Exclude, Set: p.Set, IncludeOnly: p.IncludeOnly}
	}
	if spec.Sandbox != nil {
		raw, err := spec.Sandbox.wire().MarshalJSON()
		if err != nil {
			return params, err
		}
		params.Sandbox = raw
	}
	params.Limits = spec.Limits.wire()
	params.Metadata = wireMetadata(spec.Metadata)
	if spec.Network != nil {
		params.NetworkProxy = spec.Network.wire()
		params.EnforceManagedNetwork = true
	}
	return params, nil
}

// ProcessInfo describes a process (process/list).
type ProcessInfo struct {
	ID       string    // the process id within its session
	Pid      int       // the OS process id (0 once unknown)
	Argv     []string  // the command
	TTY      bool      // whether it runs on a pseudo-terminal
	State    string    // "starting", "running", "exited" or "closed"
	ExitCode *int      // set once it exited
	NextSeq  uint64    // the seq its next event will take
	Metadata *Metadata // as given to Start, or nil
}

// List returns the processes of the client's session.
func (c *Client) List(ctx context.Context) ([]ProcessInfo, error) {
	var res wire.ListResult
	if err := c.call(ctx, wire.MethodProcessList, struct{}{}, &res); err != nil {
		return nil, err
	}
	out := make([]ProcessInfo, len(res.Processes))
	for i, p := range res.Processes {
		out[i] = ProcessInfo{ID: p.ProcessID, Pid: p.PID, Argv: p.Argv, TTY: p.TTY, State: p.State, ExitCode: p.ExitCode, NextSeq: p.NextSeq}
		if m := p.Metadata; m != nil {
			out[i].Metadata = &Metadata{ThreadID: deref(m.ThreadID), ToolCallID: deref(m.ToolCallID)}
		}
	}
	return out, nil
}

type remoteProcess struct {
	c  *Client
	rp *rproc // only done, exitCode and failure are read here, after done
	id string
}

// remoteErr maps the server's answers about process id to the errors Local
// returns for the same state: ErrUnknownProcess, ErrNotPTY, and a
// *ProcessError for a process the server failed.
func (p *remoteProcess) remoteErr(err error) error {
	var re *RPCError
	if !errors.As(err, &re) {
		return err
	}
	switch {
	case re.Code == wire.CodeInvalidRequest && re.Message == wire.ErrUnknownProcess(p.id).Message:
		return ErrUnknownProcess
	case re.Code == wire.CodeInvalidRequest && re.Message == wire.ErrNotPTY().Message:
		return ErrNotPTY
	case re.Code == wire.CodeInternal && strings.HasPrefix(re.Message, "process "+p.id+" failed: "):
		return &ProcessError{ID: p.id, Message: re.Message}
	}
	return err
}

func (p *remoteProcess) ID() string { return p.id }

func (p *remoteProcess) Write(ctx context.Context, b []byte) error {
	writeID := p.c.writePrefix + strconv.FormatUint(p.c.writeSeq.Add(1), 10)
	var res wire.WriteResult
	if err := p.c.call(ctx, wire.MethodProcessWrite, wire.WriteParams{ProcessID: p.id, Chunk: b, WriteID: &writeID}, &res); err != nil {
		return p.remoteErr(err)
	}
	switch res.Status {
	case wire.WriteAccepted:
		return nil
	case wire.WriteStdinClosed:
		return ErrStdinClosed
	case wire.WriteUnknownProcess:
		return ErrUnknownProcess
	default:
		return fmt.Errorf("runtime: write status %q", res.Status)
	}
}

func (p *remoteProcess) CloseStdin(ctx context.Context) error {
	return p.remoteErr(p.c.call(ctx, wire.MethodProcessCloseStdin, wire.ProcessParams{ProcessID: p.id}, nil))
}

func (p *remoteProcess) Resize(ctx context.Context, rows, cols uint16) error {
	return p.remoteErr(p.c.call(ctx, wire.MethodProcessResize, wire.ResizeParams{ProcessID: p.id, Rows: rows, Cols: cols}, nil))
}

func (p *remoteProcess) Signal(ctx context.Context, sig Signal) error {
	return p.remoteErr(p.c.call(ctx, wire.MethodProcessSignal, wire.SignalParams{ProcessID: p.id, Signal: string(sig)}, nil))
}

func (p *remoteProcess) Terminate(ctx context.Context, grace time.Duration) (bool, error) {
	params := wire.TerminateParams{ProcessID: p.id}
	if grace > 0 {
		ms := uint64(max(grace.Milliseconds(), 1))
		params.GraceMs = &ms
	}
	var res wire.TerminateResult
	err := p.c.call(ctx, wire.MethodProcessTerminate, params, &res)
	return res.Running, p.remoteErr(err)
}

func (p *remoteProcess) Read(ctx context.Context, opts ReadOptions) (ReadResult, error) {
	if err := opts.validate(); err != nil {
		return ReadResult{}, err
	}
	params := wire.ReadParams{ProcessID: p.id, AfterSeq: opts.After, WaitMs: uint64(opts.Wait.Milliseconds())}
	if opts.MaxBytes > 0 {
		mb := uint64(opts.MaxBytes)
		params.MaxBytes = &mb
	}
	var res wire.ReadResult
	if err := p.c.call(ctx, wire.MethodProcessRead, params, &res); err != nil {
		return ReadResult{}, p.remoteErr(err)
	}
	out := ReadResult{NextSeq: res.NextSeq, Exited: res.Exited, Closed: res.Closed, Chunks: make([]Chunk, len(res.Chunks))}
	if res.ExitCode != nil {
		out.ExitCode = *res.ExitCode
		out.Status = exitStatus(out.ExitCode, wireSignal(res.ExitSignal), res.Limit)
	}
	for i, ch := range res.Chunks {
		out.Chunks[i] = Chunk{Seq: ch.Seq, Stream: Stream(ch.Stream), Data: ch.Chunk}
	}
	return out, nil
}

func (p *remoteProcess) Wait(ctx context.Context) (ExitStatus, error) {
	select {
	case <-p.rp.done:
		if p.rp.failure != nil {
			return ExitStatus{}, p.rp.failure
		}
		return exitStatus(p.rp.exitCode, p.rp.exitSignal, p.rp.limit), nil
	case <-ctx.Done():
		return ExitStatus{}, ctx.Err()
	}
}

func (p *remoteProcess) Done() <-chan struct{} { return p.rp.done }

func (p *remoteProcess) Events(ctx context.Context) (*EventStream, error) {
	return newEventStream(ctx, p.subscribe)
}
