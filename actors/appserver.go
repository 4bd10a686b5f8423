package actors

import (
	"context"
	"errors"
	"strings"
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

func (c *conn) spawnApp(msg wire.Message) {
	var p wire.SpawnParams
	if !c.params(msg, &p) {
		return
	}
	if len(p.Command) == 0 {
		c.reply(msg.ID, nil, wire.Errorf(wire.CodeInvalidParams, "command must not be empty"))
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
	dir, derr := absPath(p.Cwd)
	if derr != nil {
		c.reply(msg.ID, nil, wire.Errorf(wire.CodeInvalidParams, "cwd %s", derr.Error()))
		return
	}
	if werr := c.sup.AllowCwd(p.Cwd); werr != nil { // --fs-root: the cwd too
		c.reply(msg.ID, nil, werr)
		return
	}
	if _, ok := c.appLookup(p.ProcessHandle); ok {
		c.reply(msg.ID, nil, wire.ErrDuplicateHandle(p.ProcessHandle))
		return
	}
	active := 0
	for h := range c.apps {
		if _, ok := c.appLookup(h); ok {
			active++
		}
	}
	if max := c.sup.cfg.MaxProcesses; max > 0 && active >= max {
		c.reply(msg.ID, nil, wire.ErrProcessLimit(max))
		return
	}
	names := make(map[string]string, len(p.Env))
	for k := range p.Env {
		names[k] = ""
	}
	if e := checkEnvNames("env", names); e != nil {
		c.reply(msg.ID, nil, e)
		return
	}
	// The environment is the server's own, with env laid over it; null unsets.
	set := map[string]string{}
	unset := map[string]bool{}
	for k, v := range p.Env {
		if v == nil {
			unset[k] = true
		} else {
			set[k] = *v
		}
	}
	env := withoutVars(osproc.BuildEnv(osproc.ServerEnv(), &osproc.EnvPolicy{Inherit: "all", IgnoreDefaultExcludes: true}, set), unset)
	spec := Spec{Argv: p.Command, Dir: dir, Env: env, TTY: p.TTY, PipeStdin: p.StreamStdin, Timeout: time.Duration(timeoutMs) * time.Millisecond}
	if p.Size != nil {
		spec.Rows, spec.Cols = p.Size.Rows, p.Size.Cols
	}
	// The dialect carries no sandbox: the operator's floor applies.
	var serr *wire.Error
	if spec.Sandbox, serr = c.sup.SandboxFor(nil, dir, env); serr != nil {
		c.reply(msg.ID, nil, serr)
		return
	}
	a := &appProc{
		handle:      p.ProcessHandle,
		streamStdin: p.StreamStdin || p.TTY,
		events:      make(chan Event, appEventsCap),
		done:        make(chan struct{}),
		streaming:   p.StreamStdoutStderr,
		cap:         capBytes,
	}
	// Internal ids keep the dialect's handles apart from process/start ids.
	c.outbound()
	ref, err := c.sup.SpawnCharged("app:"+p.ProcessHandle, spec, &Subscriber{Out: a.events, Done: c.ctx.Done()}, active)
	if err != nil {
		c.reply(msg.ID, nil, SpawnWireError(err))
		return
	}
	a.ref = ref
	c.apps[p.ProcessHandle] = a
	c.wg.Go(func() { c.runApp(a) })
	c.reply(msg.ID, struct{}{}, nil)
}

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

// withoutVars drops the named variables from a KEY=VALUE list.
func withoutVars(env []string, names map[string]bool) []string {
	if len(names) == 0 {
		return env
	}
	out := env[:0]
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if !names[k] {
			out = append(out, kv)
		}
	}
	return out
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
