package runtime

import (
	"context"

	"github.com/runtimed/runtimed/wire"
)

// Attacher is implemented by both backends: it returns a handle on a
// process the backend already runs, whoever started it. A Client attaches
// to the processes of its session (with ClientOptions.ResumeSessionID,
// those of a detached session: what `runtimed attach` does).
type Attacher interface {
	// Attach returns a handle on process id, or ErrUnknownProcess.
	Attach(ctx context.Context, id string) (Process, error)
}

var (
	_ Attacher = (*Local)(nil)
	_ Attacher = (*Client)(nil)
)

// Attach returns a handle on the process id of this Local, or
// ErrUnknownProcess. Its Events start at seq 1 from retained history.
// ctx is not used: the lookup does not wait.
func (l *Local) Attach(_ context.Context, id string) (Process, error) {
	l.mu.Lock()
	ref := l.procs[id]
	l.mu.Unlock()
	if ref == nil || (!ref.Alive() && ref.Failure() == nil) {
		return nil, ErrUnknownProcess
	}
	return &localProcess{ref: ref}, nil
}

// Attach returns a handle on the process id of the client's session, one
// this client did not start (for example after resuming a detached
// session), or ErrUnknownProcess. It reads the process's retained output
// first (ctx bounds that read), so the handle's Events start at seq 1;
// output retention evicted comes as an EventGap, and an exit or close
// that happened already is known to Wait at once. A process this client
// already has a handle on is returned as it is.
func (c *Client) Attach(ctx context.Context, id string) (Process, error) {
	if err := c.Err(); err != nil {
		return nil, err
	}
	known := make(chan bool, 1)
	rp, err := c.register(ctx, registerProcMsg{id: id, attach: true, known: known})
	if err != nil {
		return nil, err
	}
	if rp == nil {
		return nil, c.Err()
	}
	p := &remoteProcess{c: c, rp: rp, id: id}
	if <-known {
		return p, nil
	}
	// Registered first, read second: a notification the read does not
	// cover arrives after the registration, so the two meet by seq.
	var res wire.ReadResult
	if err := c.call(ctx, wire.MethodProcessRead, wire.ReadParams{ProcessID: id}, &res); err != nil {
		c.toActor(forgetProcMsg{id: id})
		return nil, p.remoteErr(err)
	}
	// The exit happened before this client registered, so no
	// process/exited notification will bring the limit that ended it:
	// process/read carries it (ext, since the runtimed that advertises
	// runtimedOutputAck); an older server has it in process/list only.
	limit := res.Limit
	if res.Exited && limit == "" && !c.acks {
		limit = c.exitLimit(ctx, id)
	}
	if !c.toActor(catchUpMsg{id: id, res: res, limit: limit}) {
		return nil, c.Err()
	}
	return p, nil
}

// exitLimit asks process/list for the resource limit that ended process
// id ("" when none did, or when the list fails: the exit is known anyway).
func (c *Client) exitLimit(ctx context.Context, id string) string {
	var res wire.ListResult
	if err := c.call(ctx, wire.MethodProcessList, struct{}{}, &res); err != nil {
		return ""
	}
	for _, p := range res.Processes {
		if p.ProcessID == id {
			return p.Limit
		}
	}
	return ""
}

// presetLimit records the limit an attach learned from process/list
// before its catch-up read delivers the exit (emit keeps a limit it
// already has when the exit event carries none). The client actor calls it.
func (st *clientState) presetLimit(id, limit string) {
	if rp := st.procs[id]; rp != nil && limit != "" && !rp.exited {
		rp.limit = limit
	}
}
