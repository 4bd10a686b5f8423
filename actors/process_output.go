package actors

import (
	"errors"
	"io"
	"time"

	"go.uber.org/zap"
)

// Output, retention and subscribers of the process actor: every event has
// a seq; output is retained in the ring; the attached subscriber is a
// cursor into that history; lag-mode listeners are offered each event; long
// polls wait for something newer than their seq. All of it is owned by run.

// subscription is the attached subscriber and its cursor.
type subscription struct {
	Subscriber
	cursor uint64 // next seq to deliver
}

// pendingRead is a long poll waiting for output, exit or close newer than
// after, or for its deadline.
type pendingRead struct {
	after    uint64
	maxBytes int
	deadline time.Time
	reply    chan<- ReadReply
}

func (p *process) handleFact(f fact) {
	switch f := f.(type) {
	case outputReadMsg:
		seq := p.nextSeq
		p.nextSeq++
		before := p.ring.Bytes()
		if n := p.ring.Append(OutputChunk{Seq: seq, Stream: f.stream, Data: f.data}); n > 0 {
			p.cfg.metrics.Evicted(n, before+len(f.data)-p.ring.Bytes())
		}
		p.cfg.metrics.OutputBytes(f.stream, len(f.data))
		p.bytesOut += int64(len(f.data))
		p.publish(Event{ProcessID: p.id, Kind: EventOutput, Seq: seq, Stream: f.stream, Data: f.data})
		p.wakePolls()
	case streamEndedMsg:
		p.openStreams--
		if p.openStreams == 0 && p.exitHeld {
			p.numberExit()
		}
		if f.err != nil && !errors.Is(f.err, io.EOF) && !isExpectedEnd(f.err) {
			p.log.Debug("output stream ended with error", zap.Stringer("stream", f.stream), zap.Error(f.err))
		}
		p.maybeClose()
	}
}

// Unread output. Output with seq >= unreadFrom() is unread: retention
// never evicts it, so while it fills retention the actor takes no more
// output (its readers block, the pipe or PTY fills, the child blocks on
// write). A seq counts as read once it was
//
//   - handed to the attached connection as a notification (the
//     subscriber's cursor passed it): "sent" is "read" while the
//     connection lives, as before;
//   - acknowledged: a process/read with afterSeq >= seq, or a process/ack
//     with seq >= it, says the client has it (or wants nothing up to it).
//
// A client that acknowledges (its first process/ack since it attached puts
// the process in ack mode) is trusted no further than it acknowledged:
// in ack mode "sent" is not "read", the output handed to the connection
// stays unread until acknowledged, so what a drop loses in flight (outbound
// queue, socket buffers, however large TCP grew them) is still retained at
// any retention size. A client that does not acknowledge (Codex) gets the
// half-retention rule of canConsume instead.
//
// When the connection is lost, what it was handed but never acknowledged
// is unread again, since a dropped connection may have lost it in flight:
// while detached, everything after acked is unread (and retention holds
// whatever of it is still retained at the drop). After a resume the new
// connection gets live events from the next seq; the backlog from acked+1
// up to that seq stays unread until process/read acknowledges past it,
// for backlogSentHold after a process/read answer carried it (the client
// that caught up in one read and reads no more), and for resumeHold (the
// detach TTL) at most; after that a client that did not catch up loses
// it to eviction (logged, counted in the evictions metric, a gap in
// process/read).
//
// Nothing is protected for a process nobody can read any more (discarded,
// shutting down) or whose streams were closed by force (the drain of a
// killed process ended: the kill path's bound wins), nor for one that never
// had a connection (Local's lag-mode listeners read at full speed and
// resubscribe when they lag).

// unreadFrom returns the lowest unread seq, and false when no output is
// protected from eviction.
func (p *process) unreadFrom() (uint64, bool) {
	switch {
	case p.sub != nil:
		from := p.sub.cursor
		if p.backlogFrom != 0 && p.backlogFrom < from {
			from = p.backlogFrom
		}
		if p.ackMode && p.acked+1 < from {
			from = p.acked + 1
		}
		return from, true
	case p.detached && p.forgetReason == reasonNone && !p.outputsCut:
		return p.acked + 1, true
	}
	return 0, false
}

// canConsume reports whether the actor may take more output: only while
// the next read cannot make retention evict unread output. While the
// connection lives and no backlog is held, the output not yet handed to it
// may fill only half of retention: the other half keeps the newest output
// it was handed, which is what a drop may lose in flight (its outbound
// queue and socket buffers) and a resume reads again.
func (p *process) canConsume() bool {
	from, ok := p.unreadFrom()
	if !ok {
		return true
	}
	bytes, chunks := p.ring.From(from)
	maxBytes, maxChunks := p.ring.MaxBytes(), p.ring.MaxChunks()
	if p.sub != nil && from == p.sub.cursor {
		maxBytes -= min(maxBytes/2, maxBytes-p.readSize) // at least one read
		maxChunks -= min(maxChunks/2, maxChunks-1)
	}
	return bytes+p.readSize <= maxBytes && chunks+1 <= maxChunks
}

// attach makes sub the subscriber from the next unassigned seq (a
// replaced subscriber is given nothing more). It is a resume: the output
// after acked that the lost connection was handed, or that was retained
// while detached, is the backlog the client catches up on with
// process/read; it stays unread for at most resumeHold.
func (p *process) attach(sub Subscriber) uint64 {
	p.sub = &subscription{Subscriber: sub, cursor: p.nextSeq}
	p.dropped = reasonNone
	p.detached = false
	p.ackMode = sub.Acks // a connection that does not declare it enters ack mode with its first process/ack
	p.backlogFrom = 0
	if p.acked+1 < p.nextSeq && p.cfg.resumeHold > 0 && p.forgetReason == reasonNone && !p.outputsCut {
		p.backlogFrom, p.backlogTo = p.acked+1, p.nextSeq
		p.backlogUntil = p.clock.Now().Add(p.cfg.resumeHold)
	}
	return p.nextSeq
}

// subscriberLost: the attached connection ended. Its session is detached
// (or about to be discarded): the output it was not known to have read
// stays until a resume reads it or the session ends.
func (p *process) subscriberLost() {
	p.log.Debug("subscriber lost; unread output is retained for process/read", zap.Uint64("acked", p.acked))
	p.dropSubscriber(reasonConnEnd) // the connection's latched cause is the detail
	p.detached = true
	p.backlogFrom = 0 // unread again from acked+1, which covers it
}

// acknowledge: a process/read with afterSeq after says the client has
// every seq up to it.
func (p *process) acknowledge(after uint64) {
	after = min(after, p.nextSeq-1)
	if after > p.acked {
		p.acked = after
	}
	p.backlogRead(p.acked + 1)
}

// backlogRead: the resumed client has read the backlog up to (not
// including) seq to; once it reached the live part, the backlog is gone.
func (p *process) backlogRead(to uint64) {
	if p.backlogFrom == 0 {
		return
	}
	p.backlogFrom = max(p.backlogFrom, to)
	if p.backlogFrom >= p.backlogTo {
		p.backlogFrom = 0
	}
}

// endBacklog stops protecting a backlog the client did not read: after
// resumeHold, when the streams were closed by force, or when nobody will
// read the process any more.
func (p *process) endBacklog(why string) {
	if p.backlogFrom == 0 {
		return
	}
	p.log.Info("backlog after resume no longer held: unread output may be evicted",
		zap.String("why", why), zap.Uint64("from_seq", p.backlogFrom), zap.Uint64("live_from_seq", p.backlogTo))
	p.backlogFrom = 0
}

// endingDelivered reports whether the subscriber, if any, has been handed
// the closed event (and with it every earlier one).
func (p *process) endingDelivered() bool {
	return p.sub == nil || (p.closed() && p.sub.cursor > p.closedSeq)
}

// dropSubscriber forgets the subscriber, logging why when it had not been
// handed the ending yet; that reason is what the closed → retained
// transition carries when no other subscriber comes.
func (p *process) dropSubscriber(why reason) {
	if p.sub == nil {
		return
	}
	if !p.endingDelivered() {
		p.log.Info("subscriber dropped before it was handed the process's ending",
			zap.Stringer("reason", why), zap.Uint64("cursor", p.sub.cursor), zap.Uint64("next_seq", p.nextSeq))
		p.dropped = why
	}
	p.sub = nil
}

// eventAt returns the event with the given seq, if it exists yet.
func (p *process) eventAt(seq uint64) (Event, bool) {
	if seq >= p.nextSeq {
		return Event{}, false
	}
	switch {
	case p.exited() && seq == p.exitSeq:
		return Event{ProcessID: p.id, Kind: EventExited, Seq: seq, ExitCode: p.exitCode, ExitSignal: p.exitSignal, Limit: p.limit}, true
	case p.closed() && seq == p.closedSeq:
		return Event{ProcessID: p.id, Kind: EventClosed, Seq: seq}, true
	}
	c, ok := p.ring.Get(seq)
	if !ok {
		// Unreachable while canConsume holds; reported, never silent.
		p.log.Error("subscriber cursor points at evicted output", zap.Uint64("seq", seq))
		p.sub.cursor = max(seq+1, p.ring.FirstSeq())
		return Event{}, false
	}
	return Event{ProcessID: p.id, Kind: EventOutput, Seq: seq, Stream: c.Stream, Data: c.Data}, true
}

// delivered: the subscriber took ev.
func (p *process) delivered(ev Event) {
	p.sub.cursor = ev.Seq + 1
}

// publish offers ev to every lag-mode listener without blocking; a full
// listener is closed and dropped (it lagged, and resubscribes from its seq).
func (p *process) publish(ev Event) {
	if len(p.listeners) == 0 {
		return
	}
	kept := p.listeners[:0]
	for _, l := range p.listeners {
		select {
		case l <- ev:
			kept = append(kept, l)
		default:
			close(l)
		}
	}
	clear(p.listeners[len(kept):])
	p.listeners = kept
}

// subscribe registers a lag-mode listener (none once closed: its queue is
// closed at once) and returns the history after seq after.
func (p *process) subscribe(after uint64, capacity int) Subscription {
	live := make(chan Event, capacity)
	if p.closed() {
		close(live)
	} else {
		p.listeners = append(p.listeners, live)
	}
	return Subscription{History: p.historyAfter(after), Live: live}
}

// historyAfter returns the events with seq > after in seq order, with
// evicted output ranges as EventGap.
func (p *process) historyAfter(after uint64) []Event {
	var out []Event
	cur := after + 1
	emit := func(ev Event) {
		if ev.Seq > cur {
			out = append(out, Event{ProcessID: p.id, Kind: EventGap, Seq: cur, To: ev.Seq - 1})
		}
		out = append(out, ev)
		cur = ev.Seq + 1
	}
	chunks := p.ring.After(nil, after, 0)
	life := make([]Event, 0, 2)
	if p.exited() && p.exitSeq > after {
		life = append(life, Event{ProcessID: p.id, Kind: EventExited, Seq: p.exitSeq, ExitCode: p.exitCode, ExitSignal: p.exitSignal, Limit: p.limit})
	}
	if p.closed() && p.closedSeq > after {
		life = append(life, Event{ProcessID: p.id, Kind: EventClosed, Seq: p.closedSeq})
	}
	for len(chunks) > 0 || len(life) > 0 {
		if len(life) == 0 || (len(chunks) > 0 && chunks[0].Seq < life[0].Seq) {
			c := chunks[0]
			chunks = chunks[1:]
			emit(Event{ProcessID: p.id, Kind: EventOutput, Seq: c.Seq, Stream: c.Stream, Data: c.Data})
		} else {
			emit(life[0])
			life = life[1:]
		}
	}
	if cur < p.nextSeq {
		out = append(out, Event{ProcessID: p.id, Kind: EventGap, Seq: cur, To: p.nextSeq - 1})
	}
	return out
}

// publishReadView stores the read view (see readView) if it changed.
func (p *process) publishReadView() {
	v := readView{nextSeq: p.nextSeq, acked: p.acked, backlog: p.backlogFrom != 0,
		exited: p.exited(), closed: p.closed(), exitCode: p.exitCode, exitSignal: p.exitSignal}
	if v.exited {
		v.limit = p.limit
	}
	if p.ring.Len() > 0 {
		v.lastChunk = p.ring.chunks[len(p.ring.chunks)-1].Seq
	}
	if old := p.final.view.Load(); old != nil && *old == v {
		return
	}
	p.final.view.Store(&v)
}

// read answers a read at once, or queues it as a long poll when wait > 0
// and nothing newer than after exists yet.
func (p *process) read(m readMsg) {
	p.acknowledge(m.after)
	if m.wait <= 0 || p.readReady(m.after) {
		p.answerRead(m.after, m.maxBytes, m.reply)
		return
	}
	p.polls = append(p.polls, &pendingRead{after: m.after, maxBytes: m.maxBytes, deadline: p.clock.Now().Add(m.wait), reply: m.reply})
}

func (p *process) readReady(after uint64) bool {
	return p.ring.index(after) < len(p.ring.chunks) || p.closed() || (p.exited() && p.exitSeq > after)
}

// answerRead answers a read. An answer that carries the backlog after a
// resume (from its first unread seq on) does not make it read: a
// connection dropped while that answer is in flight leaves the client
// reading from the same seq again. It shortens the hold to backlogSentHold:
// a client that took the answer and never reads again (its notifications
// carry the rest) holds its process back that long at most.
func (p *process) answerRead(after uint64, maxBytes int, reply chan<- ReadReply) {
	// The view first: a client that got this answer (a long poll woken
	// by output, mid-step) and reads again must not meet an older view.
	p.publishReadView()
	r := p.readNow(after, maxBytes)
	if p.backlogFrom != 0 && after < p.backlogFrom && len(r.Chunks) > 0 {
		if until := p.clock.Now().Add(backlogSentHold); until.Before(p.backlogUntil) {
			p.backlogUntil = until
		}
	}
	reply <- r
}

func (p *process) readNow(after uint64, maxBytes int) ReadReply {
	r := ReadReply{Exited: p.exited(), ExitCode: p.exitCode, ExitSignal: p.exitSignal, Closed: p.closed()}
	if r.Exited {
		r.Limit = p.limit
	}
	r.Chunks = p.ring.After(nil, after, maxBytes)
	r.NextSeq = p.nextSeq
	if maxBytes > 0 && len(r.Chunks) > 0 {
		r.NextSeq = r.Chunks[len(r.Chunks)-1].Seq + 1
	}
	return r
}

// wakePolls answers the long polls that are ready.
func (p *process) wakePolls() {
	p.answerPolls(func(pr *pendingRead) bool { return p.readReady(pr.after) })
}

// expirePolls answers the long polls whose wait is over.
func (p *process) expirePolls(now time.Time) {
	p.answerPolls(func(pr *pendingRead) bool { return !now.Before(pr.deadline) })
}

func (p *process) answerPolls(due func(*pendingRead) bool) {
	if len(p.polls) == 0 {
		return
	}
	kept := p.polls[:0]
	for _, pr := range p.polls {
		if due(pr) {
			p.answerRead(pr.after, pr.maxBytes, pr.reply)
			continue
		}
		kept = append(kept, pr)
	}
	clear(p.polls[len(kept):])
	p.polls = kept
}
