package actors

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/runtimed/runtimed/actors/osproc"
	"github.com/runtimed/runtimed/wire"
)

// The app-server dialect (PROTOCOL.md section 6) is a thin layer over the
// same process actors: a connection-scoped handle table, owned by the
// connection actor, and one adapter goroutine per process that turns its
// events into the dialect's notifications.

// appEventsCap bounds events waiting for an adapter (lossless delivery:
// the process actor waits, like for a connection).
const appEventsCap = 64

// appProc is one app-server process.
//
// Immutable after spawn: every field but the adapter-owned ones below, and
// done (closed by the adapter when it has sent process/exited).
type appProc struct {
	handle      string
	ref         *ProcessRef
	streamStdin bool
	events      chan Event
	done        chan struct{}

	// Owned by the adapter goroutine.
	streaming bool
	cap       uint64 // 0: no cap
	out       [2]appStream
	exitCode  int
	charged   int64 // buffered output charged to the retained-output budget
}

// appChargeStep is how much buffered output an adapter charges to the
// retained-output budget at a time.
const appChargeStep = 1 << 20

type appStream struct {
	buf        []byte
	sent       uint64
	capReached bool
}

func (a *appProc) active() bool {
	select {
	case <-a.done:
		return false
	default:
		return true
	}
}

// appLookup returns the active process of a handle.
func (c *conn) appLookup(handle string) (*appProc, bool) {
	a, ok := c.apps[handle]
	if !ok {
		return nil, false
	}
	if !a.active() {
		delete(c.apps, handle)
		return nil, false
	}
	return a, true
}

// spawnApp decodes process/spawn into a StartRequest for Supervisor.Start
// (the dialect's own fields, outputBytesCap and timeoutMs, first).
func (c *conn) spawnApp(msg wire.Message) {
	var p wire.SpawnParams
	if !c.params(msg, &p) {
		return
	}
	capBytes, _, e := wire.OptionalLimit(p.OutputBytesCap, "outputBytesCap", wire.AppDefaultOutputBytesCap)
	if e != nil {
		c.reply(msg.ID, nil, e)
		return
	}
	timeoutMs, _, e := wire.OptionalLimit(p.TimeoutMs, "timeoutMs", wire.AppDefaultTimeoutMs)
	if e != nil {
		c.reply(msg.ID, nil, e)
		return
	}
	// The environment is the server's own, with env laid over it; null
	// unsets. The dialect carries no sandbox: the operator's floor applies.
	req := StartRequest{
		Dialect: DialectApp, ID: p.ProcessHandle, Argv: p.Command, Cwd: p.Cwd, TTY: p.TTY, PipeStdin: p.StreamStdin,
		EnvPolicy: &osproc.EnvPolicy{Inherit: "all", IgnoreDefaultExcludes: true},
		Env:       make(map[string]string, len(p.Env)),
		Timeout:   time.Duration(timeoutMs) * time.Millisecond,
	}
	for k, v := range p.Env {
		if v == nil {
			req.Unset = append(req.Unset, k)
		} else {
			req.Env[k] = *v
		}
	}
	if p.Size != nil {
		req.Rows, req.Cols = p.Size.Rows, p.Size.Cols
	}
	a := &appProc{
		handle:      p.ProcessHandle,
		streamStdin: p.StreamStdin || p.TTY,
		events:      make(chan Event, appEventsCap),
		done:        make(chan struct{}),
		streaming:   p.StreamStdoutStderr,
		cap:         capBytes,
	}
	req.Subscriber = Subscriber{Out: a.events, Done: c.ctx.Done()}
	req.Who = c.who()
	res, err := c.sup.Start(context.Background(), appOwner{c}, req)
	if err != nil {
		c.reply(msg.ID, nil, startWireError(err))
		return
	}
	a.ref = res.Ref
	c.apps[p.ProcessHandle] = a
	c.wg.Go(func() { c.runApp(a) })
	c.reply(msg.ID, struct{}{}, nil)
}

// appOwner is the Owner of process/spawn: the connection's handle table.
type appOwner struct{ c *conn }

func (o appOwner) Reserve(handle string) (int, bool) {
	if _, ok := o.c.appLookup(handle); ok {
		return 0, true
	}
	active := 0
	for h := range o.c.apps {
		if _, ok := o.c.appLookup(h); ok {
			active++
		}
	}
	return active, false
}

func (o appOwner) Spawning() { o.c.outbound() }

// Started: spawnApp registers the handle once it has the adapter ready.
func (o appOwner) Started(string, *ProcessRef) {}

// runApp is the adapter goroutine of one app-server process. It releases
// the handle (closes a.done) before it queues the dialect's process/exited,
// so a client that re-spawns the same handle as soon as it sees the exit
// finds it free.
func (c *conn) runApp(a *appProc) {
	defer c.recoverPanic("app-server adapter", nil)
	defer func() {
		if a.charged > 0 {
			c.sup.release(charge{retained: a.charged})
		}
	}()
	released := false
	defer func() {
		if !released {
			close(a.done)
		}
	}()
	for {
		select {
		case ev := <-a.events:
			switch ev.Kind {
			case EventOutput:
				a.output(c, ev)
			case EventExited:
				a.exitCode = ev.ExitCode
			case EventClosed:
				released = true
				close(a.done)
				note := wire.AppExitedNotification{
					ProcessHandle:    a.handle,
					ExitCode:         a.exitCode,
					Stdout:           string(a.out[0].buf),
					StdoutCapReached: a.out[0].capReached,
					Stderr:           string(a.out[1].buf),
					StderrCapReached: a.out[1].capReached,
				}
				c.notify(wire.NotifyProcessExited, note)
				runTestHook(&hookAppExited, a.handle)
				return
			}
		case <-c.ctx.Done():
			return
		}
	}
}

func (a *appProc) output(c *conn, ev Event) {
	idx, name := 0, wire.StreamStdout // a PTY's output is reported as stdout
	if ev.Stream == Stderr {
		idx, name = 1, wire.StreamStderr
	}
	s := &a.out[idx]
	if s.capReached {
		return
	}
	data := ev.Data
	if a.cap > 0 && s.sent+uint64(len(data)) >= a.cap {
		data = data[:a.cap-s.sent]
		s.capReached = true
	}
	if !a.streaming {
		data = a.chargeBuffered(c, s, data)
	}
	s.sent += uint64(len(data))
	if a.streaming {
		if len(data) > 0 || s.capReached {
			c.notify(wire.NotifyProcessOutputDelta, wire.OutputDeltaNotification{ProcessHandle: a.handle, Stream: name, DeltaBase64: data, CapReached: s.capReached})
		}
		return
	}
	s.buf = append(s.buf, data...)
}

func (c *conn) writeStdinApp(msg wire.Message) {
	var p wire.WriteStdinParams
	if !c.params(msg, &p) {
		return
	}
	if p.DeltaBase64 == nil && !p.CloseStdin {
		c.reply(msg.ID, nil, wire.ErrWriteStdinEmpty())
		return
	}
	a, ok := c.app(msg, p.ProcessHandle)
	if !ok {
		return
	}
	if !a.streamStdin {
		c.reply(msg.ID, nil, wire.ErrStdinNotStreaming())
		return
	}
	var ch <-chan WriteResult
	if len(p.DeltaBase64) > 0 {
		var err error
		ch, err = a.ref.WriteAsync(c.ctx, p.DeltaBase64, "")
		if err != nil {
			c.reply(msg.ID, nil, wire.ErrNoActiveHandle(p.ProcessHandle))
			return
		}
	}
	closeStdin := p.CloseStdin
	c.deferred(msg.ID, func() {
		if ch != nil {
			select {
			case r := <-ch:
				if r.Err != nil {
					c.reply(msg.ID, nil, wire.Errorf(wire.CodeInternal, "%s", r.Err.Error()))
					return
				}
			case <-a.ref.Done():
				c.reply(msg.ID, nil, wire.ErrNoActiveHandle(p.ProcessHandle))
				return
			case <-c.ctx.Done():
				return
			}
		}
		if closeStdin {
			ctx, cancel := context.WithTimeout(c.ctx, time.Minute)
			err := a.ref.CloseStdin(ctx)
			cancel()
			if err != nil && !errors.Is(err, ErrStopped) {
				c.reply(msg.ID, nil, wire.Errorf(wire.CodeInternal, "stdin failure: %v", err))
				return
			}
		}
		c.reply(msg.ID, struct{}{}, nil)
	})
}

func (c *conn) resizeApp(msg wire.Message) {
	var p wire.ResizePtyParams
	if !c.params(msg, &p) {
		return
	}
	a, ok := c.app(msg, p.ProcessHandle)
	if !ok {
		return
	}
	if err := a.ref.Resize(c.ctx, p.Size.Rows, p.Size.Cols); err != nil {
		if errors.Is(err, osproc.ErrNotPTY) {
			c.reply(msg.ID, nil, wire.ErrResizeNotPTY())
		} else {
			c.reply(msg.ID, nil, wire.Errorf(wire.CodeInternal, "failed to resize PTY: %v", err))
		}
		return
	}
	c.reply(msg.ID, struct{}{}, nil)
}

func (c *conn) killApp(msg wire.Message) {
	var p wire.HandleParams
	if !c.params(msg, &p) {
		return
	}
	a, ok := c.app(msg, p.ProcessHandle)
	if !ok {
		return
	}
	_, _ = a.ref.Terminate(c.ctx, 0)
	c.reply(msg.ID, struct{}{}, nil)
}

// discardApps kills the connection's app-server processes: they die with
// their connection and are never detached.
func (c *conn) discardApps() {
	for _, a := range c.apps {
		_ = a.ref.Discard(context.Background())
	}
}

// app looks up an active app-server process, answering the dialect's
// "no active process" error itself when there is none.
func (c *conn) app(msg wire.Message, handle string) (*appProc, bool) {
	a, ok := c.appLookup(handle)
	if !ok {
		c.reply(msg.ID, nil, wire.ErrNoActiveHandle(handle))
	}
	return a, ok
}

// chargeBuffered charges buffered output to the server's retained-output
// budget before it is kept (appChargeStep at a time), so that
// outputBytesCap null cannot grow a connection's memory without bound:
// when the budget refuses, the stream is cut there and reported as
// capReached, as a cap would.
func (a *appProc) chargeBuffered(c *conn, s *appStream, data []byte) []byte {
	need := int64(len(a.out[0].buf)+len(a.out[1].buf)+len(data)) - a.charged
	for need > 0 {
		berr, err := c.sup.acquire(c.ctx, charge{retained: appChargeStep}, false)
		if err != nil || berr != nil {
			room := max(0, a.charged-int64(len(a.out[0].buf)+len(a.out[1].buf)))
			data = data[:min(int64(len(data)), room)]
			s.capReached = true
			if berr != nil {
				c.log.Warn("app-server output cut by the retained-output budget", zap.String("handle", a.handle), zap.Error(berr))
			}
			return data
		}
		a.charged += appChargeStep
		need -= appChargeStep
	}
	return data
}
