package actors

import (
	"context"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"
)

// registryMailboxCap bounds requests to the registry; senders block (with ctx).
const registryMailboxCap = 64

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

type newSessionMsg struct{ reply chan<- *SessionTable }
type resumeMsg struct {
	id    string
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

// registry is the session registry actor.
//
// Immutable: sup, log, mbox, done. Owned by run: attached, detached, timer.
type registry struct {
	sup  *Supervisor
	log  *zap.Logger
	mbox chan regMsg
	done chan struct{}

	attached map[string]struct{}
	detached map[string]*detached
}

func newRegistry(s *Supervisor) *registry {
	return &registry{
		sup:      s,
		log:      s.log.Named("registry"),
		mbox:     make(chan regMsg, registryMailboxCap),
		done:     make(chan struct{}),
		attached: make(map[string]struct{}),
		detached: make(map[string]*detached),
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
	return next
}

func (r *registry) handle(m regMsg) {
	switch m := m.(type) {
	case newSessionMsg:
		t := &SessionTable{ID: uuid.NewString(), Procs: make(map[string]*ProcessRef)}
		r.attached[t.ID] = struct{}{}
		m.reply <- t
	case resumeMsg:
		if _, ok := r.attached[m.id]; ok {
			m.reply <- resumeReply{err: &ResumeError{ID: m.id, Attached: true}}
			return
		}
		d, ok := r.detached[m.id]
		if !ok {
			m.reply <- resumeReply{err: &ResumeError{ID: m.id}}
			return
		}
		delete(r.detached, m.id)
		r.attached[m.id] = struct{}{}
		r.log.Debug("session resumed", zap.String("session_id", m.id))
		m.reply <- resumeReply{table: d.table}
	case detachMsg:
		delete(r.attached, m.table.ID)
		if m.ttl <= 0 {
			r.discard(m.table, reasonConnEnd)
			return
		}
		r.log.Debug("session detached", zap.String("session_id", m.table.ID), zap.Duration("ttl", m.ttl))
		r.detached[m.table.ID] = &detached{table: m.table, deadline: time.Now().Add(m.ttl)}
	}
}

func (r *registry) expire(now time.Time) {
	for id, d := range r.detached {
		if !now.Before(d.deadline) {
			r.log.Info("detached session expired; terminating its processes", zap.String("session_id", id), zap.Int("processes", len(d.table.Procs)))
			delete(r.detached, id)
			r.sup.metrics.SessionExpired()
			r.discard(d.table, reasonTTL)
		}
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

// NewSession registers a new attached session.
func (s *Supervisor) NewSession(ctx context.Context) (*SessionTable, error) {
	return ask(ctx, s.registry.mbox, s.registry.done, func(c chan<- *SessionTable) regMsg { return newSessionMsg{reply: c} })
}

// ResumeSession takes a detached session back; the error is a *ResumeError.
func (s *Supervisor) ResumeSession(ctx context.Context, id string) (*SessionTable, error) {
	rep, err := ask(ctx, s.registry.mbox, s.registry.done, func(c chan<- resumeReply) regMsg { return resumeMsg{id: id, reply: c} })
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
