package actors

import (
	"fmt"
	"slices"
	"syscall"
	"time"
)

// The model of the process actor's lifecycle that TestProcessStateMachine
// (fsm_test.go) holds the actor to: written from the specification
// (ARCHITECTURE.md, "The process actor's state machine"), independently of
// process_fsm.go. Its time is the fake clock's.

type transRec struct {
	from, to phase
	why      reason
}

func (r transRec) String() string { return fmt.Sprintf("%v→%v(%v)", r.from, r.to, r.why) }

// modelLag is the model of one lag-mode listener's queue.
type modelLag struct {
	capacity int
	queued   []uint64 // seqs published and not yet read
	lagged   bool     // closed for lack of room
	ended    bool     // closed (lagged, or after the closed event)
}

// modelPoll is an outstanding long poll for anything after `after`.
type modelPoll struct {
	after    uint64
	deadline time.Time
	reply    chan ReadReply
	answered bool // the model says it must have been answered
	seen     bool // the harness received the answer
}

// fsmModel is the specification of the lifecycle (see process_fsm.go).
type fsmModel struct {
	cfg   ProcConfig
	tty   bool
	limit string // the session's limit for a nonzero code
	now   func() time.Time

	phase        phase
	trans        []transRec
	streamOpen   []bool
	exitSent     bool
	held         bool
	heldUntil    time.Time
	heldCode     int
	exitCode     int
	timedOut     bool
	killAt       time.Time
	drainAt      time.Time
	timeoutAt    time.Time
	expireAt     time.Time
	forget       reason
	dropped      reason
	nextSeq      uint64
	exitSeq      uint64
	closedSeq    uint64
	kinds        []EventKind // kinds[seq-1]
	signals      []syscall.Signal
	closeOutputs int
	subAttached  bool
	subCursor    uint64
	lags         []*modelLag
	polls        []*modelPoll
}

func (m *fsmModel) tr(to phase, why reason) {
	m.trans = append(m.trans, transRec{m.phase, to, why})
	m.phase = to
}

func (m *fsmModel) reaped() bool   { return m.held || m.phase >= phaseExited }
func (m *fsmModel) allEnded() bool { return !slices.Contains(m.streamOpen, true) }
func (m *fsmModel) sig(s syscall.Signal) {
	m.signals = append(m.signals, s)
}

// emit gives the next seq to an event: listeners are offered it (a full
// one is closed: it lagged), and every long poll is answered (each waits
// for anything after the seq it was issued at).
func (m *fsmModel) emit(k EventKind) {
	seq := m.nextSeq
	m.nextSeq++
	m.kinds = append(m.kinds, k)
	for _, l := range m.lags {
		if l.ended {
			continue
		}
		if len(l.queued) < l.capacity {
			l.queued = append(l.queued, seq)
		} else {
			l.lagged, l.ended = true, true
		}
		if k == EventClosed {
			l.ended = true
		}
	}
	for _, p := range m.polls {
		p.answered = true
	}
}

func (m *fsmModel) kill(why reason, grace time.Duration) {
	switch m.phase {
	case phaseRunning, phaseStopping:
		if m.phase == phaseRunning {
			m.tr(phaseStopping, why)
		}
		if grace > 0 && !m.held {
			if m.tty {
				m.sig(syscall.SIGHUP)
			} else {
				m.sig(syscall.SIGTERM)
			}
			if at := m.now().Add(grace); m.killAt.IsZero() || at.Before(m.killAt) {
				m.killAt = at
			}
			return
		}
		m.sig(syscall.SIGKILL)
		m.killAt = time.Time{}
	case phaseExited, phaseDraining:
		if m.phase == phaseExited {
			m.tr(phaseDraining, why)
			m.drainAt = m.now().Add(m.cfg.DrainAfterTerminate)
		}
		m.sig(syscall.SIGKILL)
	}
}

func (m *fsmModel) reap(code int) {
	m.exitSent, m.held, m.heldCode, m.heldUntil = true, true, code, m.now().Add(exitHold)
	if m.allEnded() {
		m.number()
	}
}

func (m *fsmModel) number() {
	m.held, m.heldUntil = false, time.Time{}
	code := m.heldCode
	if m.timedOut {
		code = TimeoutExitCode
	}
	m.timeoutAt = time.Time{}
	draining := m.phase == phaseStopping
	if draining {
		m.tr(phaseDraining, reasonExit)
	} else {
		m.tr(phaseExited, reasonExit)
	}
	m.exitCode, m.exitSeq = code, m.nextSeq
	m.emit(EventExited)
	if draining {
		if m.drainAt.IsZero() {
			m.drainAt = m.now().Add(m.cfg.DrainAfterTerminate)
		}
		m.sig(syscall.SIGKILL)
		m.killAt = time.Time{}
	}
	if code != 0 && m.limit != "" && m.phase == phaseExited {
		m.kill(reasonLimit, 0)
	}
	m.maybeClose()
}

func (m *fsmModel) endStream(i int) {
	m.streamOpen[i] = false
	if m.held && m.allEnded() {
		m.number()
	}
	m.maybeClose()
}

func (m *fsmModel) maybeClose() {
	if (m.phase == phaseExited || m.phase == phaseDraining) && m.allEnded() {
		m.tr(phaseClosed, reasonStreamsEnded)
		m.closedSeq = m.nextSeq
		m.drainAt = time.Time{}
		m.closeOutputs++
		m.emit(EventClosed)
	}
}

func (m *fsmModel) delivered() bool {
	return !m.subAttached || (m.phase >= phaseClosed && m.subCursor > m.closedSeq)
}

func (m *fsmModel) dropSub(why reason) {
	if !m.subAttached {
		return
	}
	if !m.delivered() {
		m.dropped = why
	}
	m.subAttached = false
}

func (m *fsmModel) settle() {
	if m.phase == phaseClosed && m.delivered() {
		why := reasonDelivered
		if !m.subAttached && m.dropped != reasonNone {
			why = m.dropped
		}
		m.tr(phaseRetained, why)
		m.expireAt = m.now().Add(max(m.cfg.ClosedRetention, 0))
	}
	if m.phase == phaseRetained {
		switch {
		case m.forget != reasonNone:
			m.tr(phaseGone, m.forget)
		case !m.now().Before(m.expireAt):
			m.tr(phaseGone, reasonRetention)
		}
	}
}

func (m *fsmModel) earliest() time.Time {
	var next time.Time
	for _, t := range []time.Time{m.heldUntil, m.killAt, m.timeoutAt, m.drainAt} {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, p := range m.polls {
		if !p.answered && (next.IsZero() || p.deadline.Before(next)) {
			next = p.deadline
		}
	}
	if m.phase == phaseRetained && (next.IsZero() || m.expireAt.Before(next)) {
		next = m.expireAt
	}
	return next
}

func (m *fsmModel) onTimer() {
	now := m.now()
	if m.held && !now.Before(m.heldUntil) {
		m.number()
	}
	for _, p := range m.polls {
		if !now.Before(p.deadline) {
			p.answered = true
		}
	}
	if !m.killAt.IsZero() && !now.Before(m.killAt) {
		m.sig(syscall.SIGKILL)
		m.killAt = time.Time{}
	}
	if !m.timeoutAt.IsZero() && !now.Before(m.timeoutAt) {
		m.timeoutAt = time.Time{}
		if !m.reaped() {
			m.timedOut = true
			m.kill(reasonTimeout, 0)
		}
	}
	if !m.drainAt.IsZero() && !now.Before(m.drainAt) {
		m.drainAt = time.Time{}
		if m.phase == phaseDraining {
			m.closeOutputs++
		}
	}
}

// pump is the top of the model's loop: settle, then any deadline passed.
func (m *fsmModel) pump() {
	for m.phase != phaseGone {
		m.settle()
		if m.phase == phaseGone {
			return
		}
		if d := m.earliest(); d.IsZero() || m.now().Before(d) {
			return
		}
		m.onTimer()
	}
}
