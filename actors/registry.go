package actors

import (
	"context"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"
)

// registryMailboxCap bounds requests to the registry; senders block (with ctx).
const registryMailboxCap = 64

// Waits of a resume that finds its session attached.
const (
	// ResumeDetachWait bounds how long a resume waits for a connection
	// that is closing (its latch fired: close frame received, socket gone,
	// shut down) to detach the session it asks for.
	ResumeDetachWait = 2 * time.Second
	// resumeLiveGrace is how long a resume waits for a connection that
	// still looks live before it is refused with -32010: a close frame
	// the peer already had answered may not have reached the reader yet.
	resumeLiveGrace = 100 * time.Millisecond
)

// SessionTable is a session's routing table from processId to process
// actor. It has exactly one owner at a time: the connection actor it is
// attached to, or the registry while it is detached. Ownership moves only
// through registry messages.
type SessionTable struct {
	ID    string
	Procs map[string]*ProcessRef
	// open holds the entries of Procs not yet seen closed (Add puts them
	// here, Active prunes them), so that counting the active processes at
	// each start costs the active ones, not every retained one.
	open map[string]*ProcessRef
}

// Remove forgets a process (its id is free).
func (t *SessionTable) Remove(id string) {
	delete(t.Procs, id)
	delete(t.open, id)
}

// Add enters a started process.
func (t *SessionTable) Add(id string, ref *ProcessRef) {
	t.Procs[id] = ref
	if t.open == nil {
		t.open = make(map[string]*ProcessRef)
	}
	t.open[id] = ref
}

// Lookup returns the live process with the given id. An entry whose actor
// has exited (closed-process retention ended) is removed: its id is free.
// A failed process (its actor panicked) stays, so that requests about it
// are answered with its failure.
func (t *SessionTable) Lookup(id string) (*ProcessRef, bool) {
	ref, ok := t.Procs[id]
	if !ok {
		return nil, false
	}
	if !ref.Alive() && ref.Failure() == nil {
		t.Remove(id)
		return nil, false
	}
	return ref, true
}

// Active counts the processes that are not closed yet (forgetting, in
// its count of them, the ones that closed since the last call).
func (t *SessionTable) Active() int {
	for id, ref := range t.open {
		select {
		case <-ref.Closed():
			delete(t.open, id)
		default:
		}
	}
	return len(t.open)
}

// ResumeError is why a session could not be resumed.
type ResumeError struct {
	ID       string
	Attached bool // true: attached to another live connection; false: unknown or expired
}

func (e *ResumeError) Error() string {
	if e.Attached {
		return "session " + e.ID + " is already attached to another connection"
	}
	return "unknown session id " + e.ID
}

type regMsg interface{ isRegMsg() }

// A connection's latch (owner) is its context's Done channel: closed once
// the connection is closing, so the registry can tell a session in use
// from one about to be detached.
type newSessionMsg struct {
	owner <-chan struct{}
	reply chan<- *SessionTable
}
type resumeMsg struct {
	id    string
	owner <-chan struct{}
	reply chan<- resumeReply
}
type resumeReply struct {
	table *SessionTable
	err   error
}
type detachMsg struct {
	table *SessionTable
	ttl   time.Duration
}

func (newSessionMsg) isRegMsg() {}
func (resumeMsg) isRegMsg()     {}
func (detachMsg) isRegMsg()     {}

type detached struct {
	table    *SessionTable
	deadline time.Time
}

// resumeWait is a resume parked until the connection its session is
// attached to detaches it (or the wait ends: -32010).
type resumeWait struct {
	owner    <-chan struct{} // the resuming connection's latch
	reply    chan<- resumeReply
	started  time.Time
	deadline time.Time // resumeLiveGrace after start while the holder looked live, then ResumeDetachWait after start
}

// registry is the session registry actor.
//
// Immutable: sup, log, mbox, done. Owned by run: attached, detached,
// waiting, timer.
type registry struct {
	sup  *Supervisor
	log  *zap.Logger
	mbox chan regMsg
	done chan struct{}

	attached map[string]<-chan struct{} // session id -> its connection's latch
	detached map[string]*detached
	waiting  map[string]*resumeWait // at most one parked resume per session
}

func newRegistry(s *Supervisor) *registry {
	return &registry{
		sup:      s,
		log:      s.log.Named("registry"),
		mbox:     make(chan regMsg, registryMailboxCap),
		done:     make(chan struct{}),
		attached: make(map[string]<-chan struct{}),
		detached: make(map[string]*detached),
		waiting:  make(map[string]*resumeWait),
	}
}

func (r *registry) run() {
	defer close(r.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := r.nextDeadline()
		timer.Stop()
		if !next.IsZero() {
			timer.Reset(time.Until(next))
		}
		select {
		case m := <-r.mbox:
			r.handle(m)
		case now := <-timer.C:
			r.expire(now)
		case <-r.sup.stopCh:
			// Every process actor got the same stop and terminates itself.
			return
		}
		r.sup.metrics.Sessions(len(r.attached), len(r.detached))
	}
}

func (r *registry) nextDeadline() time.Time {
	var next time.Time
	for _, d := range r.detached {
		if next.IsZero() || d.deadline.Before(next) {
			next = d.deadline
		}
	}
	for _, w := range r.waiting {
		if next.IsZero() || w.deadline.Before(next) {
			next = w.deadline
		}
	}
	return next
}

func (r *registry) handle(m regMsg) {
	switch m := m.(type) {
	case newSessionMsg:
		t := &SessionTable{ID: uuid.NewString(), Procs: make(map[string]*ProcessRef)}
		r.attached[t.ID] = m.owner
		m.reply <- t
	case resumeMsg:
		if holder, ok := r.attached[m.id]; ok {
			if _, parked := r.waiting[m.id]; parked {
				m.reply <- resumeReply{err: &ResumeError{ID: m.id, Attached: true}}
				return
			}
			// Park it: a closing holder detaches within moments; a live
			// one gets a short grace (its close may be in flight).
			now := time.Now()
			w := &resumeWait{owner: m.owner, reply: m.reply, started: now, deadline: now.Add(resumeLiveGrace)}
			if closed(holder) {
				w.deadline = now.Add(ResumeDetachWait)
			}
			r.waiting[m.id] = w
			return
		}
		d, ok := r.detached[m.id]
		if !ok {
			m.reply <- resumeReply{err: &ResumeError{ID: m.id}}
			return
		}
		delete(r.detached, m.id)
		r.attached[m.id] = m.owner
		r.log.Debug("session resumed", zap.String("session_id", m.id))
		m.reply <- resumeReply{table: d.table}
	case detachMsg:
		id := m.table.ID
		delete(r.attached, id)
		w := r.waiting[id]
		delete(r.waiting, id)
		if m.ttl <= 0 {
			r.discard(m.table, reasonConnEnd)
			if w != nil {
				w.reply <- resumeReply{err: &ResumeError{ID: id}}
			}
			return
		}
		if w != nil {
			// Straight to the resume that waited for it.
			r.attached[id] = w.owner
			r.log.Debug("session resumed after its connection detached it", zap.String("session_id", id), zap.Duration("waited", time.Since(w.started)))
			w.reply <- resumeReply{table: m.table}
			return
		}
		r.log.Debug("session detached", zap.String("session_id", m.table.ID), zap.Duration("ttl", m.ttl))
		r.detached[m.table.ID] = &detached{table: m.table, deadline: time.Now().Add(m.ttl)}
	}
}

func (r *registry) expire(now time.Time) {
	for id, w := range r.waiting {
		if now.Before(w.deadline) {
			continue
		}
		if holder, ok := r.attached[id]; ok && closed(holder) && now.Before(w.started.Add(ResumeDetachWait)) {
			w.deadline = w.started.Add(ResumeDetachWait) // its holder started closing during the grace
			continue
		}
		delete(r.waiting, id)
		r.log.Debug("resume refused: the session stayed attached", zap.String("session_id", id), zap.Duration("waited", now.Sub(w.started)))
		w.reply <- resumeReply{err: &ResumeError{ID: id, Attached: true}}
	}
	for id, d := range r.detached {
		if !now.Before(d.deadline) {
			r.log.Info("detached session expired; terminating its processes", zap.String("session_id", id), zap.Int("processes", len(d.table.Procs)))
			delete(r.detached, id)
			r.sup.metrics.SessionExpired()
			r.discard(d.table, reasonTTL)
		}
	}
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// discard terminates every process of a session that nobody can reach any
// more. The sends run on tracked goroutines so a full mailbox never blocks
// the registry.
func (r *registry) discard(t *SessionTable, why reason) {
	refs := make([]*ProcessRef, 0, len(t.Procs))
	for _, ref := range t.Procs {
		refs = append(refs, ref)
	}
	if len(refs) == 0 {
		return
	}
	r.sup.wg.Go(func() { discardAll(refs, why) })
}

func discardAll(refs []*ProcessRef, why reason) {
	for _, ref := range refs {
		_ = ref.discard(context.Background(), why) // returns once queued or the actor is gone
	}
}

// NewSession registers a new attached session; owner is the attaching
// connection's latch (closed once it is closing; nil: never).
func (s *Supervisor) NewSession(ctx context.Context, owner <-chan struct{}) (*SessionTable, error) {
	reply := make(chan *SessionTable, 1)
	if err := send(ctx, s.registry.mbox, regMsg(newSessionMsg{owner: owner, reply: reply}), s.registry.done); err != nil {
		return nil, err
	}
	return await(context.Background(), reply, s.registry.done) // answered at once; the caller then owns it
}

// ResumeSession takes a detached session back for the connection whose
// latch is owner; the error is a *ResumeError. A session attached to a
// connection that is closing is waited for (ResumeDetachWait at most), one
// attached to a live connection for resumeLiveGrace. Once the request is
// in the registry's mailbox the answer is awaited even if ctx ends (the
// registry answers within ResumeDetachWait), so a session handed over is
// never lost: the caller owns what it returns.
func (s *Supervisor) ResumeSession(ctx context.Context, id string, owner <-chan struct{}) (*SessionTable, error) {
	reply := make(chan resumeReply, 1)
	if err := send(ctx, s.registry.mbox, regMsg(resumeMsg{id: id, owner: owner, reply: reply}), s.registry.done); err != nil {
		return nil, err
	}
	rep, err := await(context.Background(), reply, s.registry.done)
	if err != nil {
		return nil, err
	}
	return rep.table, rep.err
}

// DetachSession hands a session to the registry: it survives for ttl (0:
// terminated at once). If the registry has stopped, the processes are
// discarded here.
func (s *Supervisor) DetachSession(ctx context.Context, t *SessionTable, ttl time.Duration) {
	if err := send(ctx, s.registry.mbox, regMsg(detachMsg{table: t, ttl: ttl}), s.registry.done); err != nil {
		refs := make([]*ProcessRef, 0, len(t.Procs))
		for _, ref := range t.Procs {
			refs = append(refs, ref)
		}
		discardAll(refs, reasonConnEnd)
	}
}
