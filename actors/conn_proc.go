package actors

import (
	"errors"
	"sort"
	"syscall"
	"time"

	"github.com/runtimed/runtimed/actors/osproc"
	"github.com/runtimed/runtimed/wire"
)

// The process/* request handlers of the connection actor (PROTOCOL.md
// section 4). Each runs on the reader; a long poll or a stdin write is
// answered by a waiter goroutine (deferred).

// deferred runs wait on a tracked goroutine so the reader can go on; it
// holds an inflight slot until the reply to request id is queued.
func (c *conn) deferred(id wire.ID, wait func()) {
	observe := c.deferObservation()
	c.outbound()
	select {
	case c.inflight <- struct{}{}:
	case <-c.ctx.Done():
		return
	}
	c.wg.Go(func() {
		defer func() { <-c.inflight }()
		defer c.recoverPanic("request waiter", id)
		wait()
		observe()
	})
}

func (c *conn) read(msg wire.Message) {
	var p wire.ReadParams
	if !c.params(msg, &p) {
		return
	}
	ref, ok := c.process(msg, p.ProcessID)
	if !ok {
		return
	}
	maxBytes := 0
	if p.MaxBytes != nil {
		maxBytes = int(min(*p.MaxBytes, 1<<40))
		if maxBytes == 0 {
			maxBytes = 1 // maxBytes 0 still returns the first chunk
		}
	}
	wait := time.Duration(min(p.WaitMs, 24*3600*1000)) * time.Millisecond
	if wait <= 0 {
		// An idle process answers from its published view: no hop to
		// the actor (a cross-thread wake-up, most of a small read's cost).
		if r, ok := ref.ReadIdle(p.AfterSeq); ok {
			c.reply(msg.ID, readResult(r), nil)
			return
		}
	}
	ch, err := ref.ReadAsync(c.ctx, p.AfterSeq, maxBytes, wait)
	if err != nil {
		c.reply(msg.ID, nil, c.actorError(ref, err, p.ProcessID))
		return
	}
	answer := func() {
		select {
		case r := <-ch:
			c.reply(msg.ID, readResult(r), nil)
		case <-ref.Done():
			select {
			case r := <-ch:
				c.reply(msg.ID, readResult(r), nil)
			default:
				c.reply(msg.ID, nil, c.actorError(ref, ErrStopped, p.ProcessID))
			}
		case <-c.ctx.Done():
		}
	}
	if wait <= 0 {
		answer()
		return
	}
	c.deferred(msg.ID, answer)
}

// actorError maps the error of a request to a process actor: a failed
// process answers -32603 with its failure, an ended one "unknown process".
func (c *conn) actorError(ref *ProcessRef, err error, id string) *wire.Error {
	if errors.Is(err, ErrStopped) {
		if f := ref.Failure(); f != nil {
			return wire.ErrProcessFailed(f.Error())
		}
		return wire.ErrUnknownProcess(id)
	}
	return wire.AsError(err)
}

// failed answers a request about a failed process with -32603 and reports
// whether it did.
func (c *conn) failed(msg wire.Message, ref *ProcessRef) bool {
	if f := ref.Failure(); f != nil {
		c.reply(msg.ID, nil, wire.ErrProcessFailed(f.Error()))
		return true
	}
	return false
}

func readResult(r ReadReply) wire.ReadResult {
	out := wire.ReadResult{
		Chunks:  make([]wire.Chunk, len(r.Chunks)),
		NextSeq: r.NextSeq,
		Exited:  r.Exited,
		Closed:  r.Closed,
	}
	for i, ch := range r.Chunks {
		out.Chunks[i] = wire.Chunk{Seq: ch.Seq, Stream: ch.Stream.String(), Chunk: ch.Data}
	}
	if r.Exited {
		code, sig := r.ExitCode, r.ExitSignal
		out.ExitCode, out.ExitSignal = &code, &sig
		out.Limit = r.Limit
	}
	return out
}

func (c *conn) write(msg wire.Message) {
	var p wire.WriteParams
	if !c.params(msg, &p) {
		return
	}
	writeID := ""
	if p.WriteID != nil {
		if *p.WriteID == "" {
			c.reply(msg.ID, nil, wire.ErrEmptyWriteID())
			return
		}
		writeID = *p.WriteID
	}
	ref, ok := c.session.Lookup(p.ProcessID)
	if !ok {
		c.reply(msg.ID, wire.WriteResult{Status: wire.WriteUnknownProcess}, nil)
		return
	}
	ch, err := ref.WriteAsync(c.ctx, p.Chunk, writeID)
	if err != nil {
		if !c.failed(msg, ref) {
			c.reply(msg.ID, wire.WriteResult{Status: wire.WriteUnknownProcess}, nil)
		}
		return
	}
	large := len(p.Chunk) >= LargeMessageBytes
	c.deferred(msg.ID, func() {
		if large {
			// Its buffers are garbage once it is answered: poke the
			// reclaimer again then (the poke on arrival may have run out
			// while the write was still in progress).
			defer c.sup.largeMessage()
		}
		select {
		case r := <-ch:
			if r.Err != nil {
				c.reply(msg.ID, nil, wire.Errorf(wire.CodeInternal, "%s", r.Err.Error()))
				return
			}
			c.reply(msg.ID, wire.WriteResult{Status: writeStatus(r.Status)}, nil)
		case <-ref.Done():
			if !c.failed(msg, ref) {
				c.reply(msg.ID, wire.WriteResult{Status: wire.WriteStdinClosed}, nil)
			}
		case <-c.ctx.Done():
		}
	})
}

func writeStatus(s WriteStatus) string {
	switch s {
	case WriteAccepted:
		return wire.WriteAccepted
	case WriteStdinClosed:
		return wire.WriteStdinClosed
	}
	return wire.WriteUnknownProcess
}

func (c *conn) terminate(msg wire.Message) {
	var p wire.TerminateParams
	if !c.params(msg, &p) {
		return
	}
	ref, ok := c.session.Lookup(p.ProcessID)
	if !ok {
		c.reply(msg.ID, wire.TerminateResult{Running: false}, nil)
		return
	}
	var grace time.Duration
	if p.GraceMs != nil {
		grace = time.Duration(min(*p.GraceMs, 24*3600*1000)) * time.Millisecond
	}
	running, err := ref.Terminate(c.ctx, grace)
	if err != nil {
		if c.failed(msg, ref) {
			return
		}
		running = false
	}
	c.reply(msg.ID, wire.TerminateResult{Running: running}, nil)
}

// Signals maps the protocol's signal names to signals.
var Signals = map[string]syscall.Signal{
	"interrupt": syscall.SIGINT,
	"terminate": syscall.SIGTERM,
	"kill":      syscall.SIGKILL,
	"hangup":    syscall.SIGHUP,
	"quit":      syscall.SIGQUIT,
	"user1":     syscall.SIGUSR1,
	"user2":     syscall.SIGUSR2,
}

func (c *conn) signal(msg wire.Message) {
	var p wire.SignalParams
	if !c.params(msg, &p) {
		return
	}
	sig, ok := Signals[p.Signal]
	if !ok {
		c.reply(msg.ID, nil, wire.Errorf(wire.CodeInvalidParams, "unknown signal `%s`; expected one of interrupt, terminate, kill, hangup, quit, user1, user2", p.Signal))
		return
	}
	ref, ok := c.session.Lookup(p.ProcessID)
	if !ok {
		c.reply(msg.ID, struct{}{}, nil)
		return
	}
	if err := ref.Signal(c.ctx, sig); err != nil && !errors.Is(err, ErrStopped) {
		c.reply(msg.ID, nil, wire.Errorf(wire.CodeInternal, "signal failure: %v", err))
		return
	} else if err != nil && c.failed(msg, ref) {
		return
	}
	c.reply(msg.ID, struct{}{}, nil)
}

func (c *conn) resize(msg wire.Message) {
	var p wire.ResizeParams
	if !c.params(msg, &p) {
		return
	}
	ref, ok := c.process(msg, p.ProcessID)
	if !ok {
		return
	}
	if err := ref.Resize(c.ctx, p.Rows, p.Cols); err != nil {
		if errors.Is(err, osproc.ErrNotPTY) {
			c.reply(msg.ID, nil, wire.ErrNotPTY())
		} else {
			c.reply(msg.ID, nil, c.actorError(ref, err, p.ProcessID))
		}
		return
	}
	c.reply(msg.ID, struct{}{}, nil)
}

func (c *conn) closeStdin(msg wire.Message) {
	var p wire.ProcessParams
	if !c.params(msg, &p) {
		return
	}
	ref, ok := c.process(msg, p.ProcessID)
	if !ok {
		return
	}
	if err := ref.CloseStdin(c.ctx); err != nil && !errors.Is(err, ErrStopped) {
		c.reply(msg.ID, nil, wire.Errorf(wire.CodeInternal, "stdin failure: %v", err))
		return
	} else if err != nil && c.failed(msg, ref) {
		return
	}
	c.reply(msg.ID, struct{}{}, nil)
}

// ack (process/ack, ext): the client has the process's output up to a
// seq. Answered once the acknowledgement is in the actor's mailbox, which
// takes it before any later request of this connection.
func (c *conn) ack(msg wire.Message) {
	var p wire.AckParams
	if !c.params(msg, &p) {
		return
	}
	ref, ok := c.process(msg, p.ProcessID)
	if !ok {
		return
	}
	if err := ref.Ack(c.ctx, p.Seq); err != nil && c.failed(msg, ref) {
		return
	}
	c.reply(msg.ID, struct{}{}, nil)
}

func (c *conn) list(msg wire.Message) {
	var p wire.NoParams
	if !c.params(msg, &p) {
		return
	}
	out := wire.ListResult{Processes: []wire.ProcessInfo{}}
	for id := range c.session.Procs {
		ref, ok := c.session.Lookup(id)
		if !ok {
			continue
		}
		info, err := ref.Info(c.ctx)
		if err != nil {
			continue
		}
		wi := wire.ProcessInfo{ProcessID: info.ID, PID: info.Pid, Argv: info.Argv, TTY: info.TTY, State: info.State.String(), NextSeq: info.NextSeq, Limit: info.Limit, Metadata: wireMetadata(ref.Metadata()), TokenName: ref.TokenName()}
		if info.State >= StateExited {
			code, sig := info.ExitCode, info.ExitSignal
			wi.ExitCode, wi.ExitSignal = &code, &sig
		}
		out.Processes = append(out.Processes, wi)
	}
	sortInfos(out.Processes)
	if c.sup.cfg.Services != nil {
		out.Processes = append(out.Processes, c.sup.cfg.Services(c.ctx)...)
	}
	c.reply(msg.ID, out, nil)
}

func sortInfos(infos []wire.ProcessInfo) {
	sort.Slice(infos, func(i, j int) bool { return infos[i].ProcessID < infos[j].ProcessID })
}
