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
	cursor        uint64 // next seq to deliver
	pendingBytes  int    // bytes of retained output with seq >= cursor
	pendingChunks int
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
		if p.sub != nil {
			p.sub.pendingBytes += len(f.data)
			p.sub.pendingChunks++
		}
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

// canConsume reports whether the actor may take more output: always when no
// subscriber is attached (old output is evicted), and otherwise only while
// the next read cannot make retention evict something the subscriber has
// not been given.
func (p *process) canConsume() bool {
	if p.sub == nil {
		return true
	}
	return p.sub.pendingBytes+p.readSize <= p.ring.MaxBytes() && p.sub.pendingChunks+1 <= p.ring.MaxChunks()
}

// attach makes sub the subscriber from the next unassigned seq (a
// replaced subscriber is given nothing more).
func (p *process) attach(sub Subscriber) uint64 {
	p.sub = &subscription{Subscriber: sub, cursor: p.nextSeq}
	p.dropped = reasonNone
	return p.nextSeq
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
		return Event{ProcessID: p.id, Kind: EventExited, Seq: seq, ExitCode: p.exitCode, Limit: p.limit}, true
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
	if ev.Kind == EventOutput {
		p.sub.pendingBytes -= len(ev.Data)
		p.sub.pendingChunks--
	}
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
		life = append(life, Event{ProcessID: p.id, Kind: EventExited, Seq: p.exitSeq, ExitCode: p.exitCode, Limit: p.limit})
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

// read answers a read at once, or queues it as a long poll when wait > 0
// and nothing newer than after exists yet.
func (p *process) read(m readMsg) {
	if m.wait <= 0 || p.readReady(m.after) {
		m.reply <- p.readNow(m.after, m.maxBytes)
		return
	}
	p.polls = append(p.polls, &pendingRead{after: m.after, maxBytes: m.maxBytes, deadline: p.clock.Now().Add(m.wait), reply: m.reply})
}

func (p *process) readReady(after uint64) bool {
	return p.ring.index(after) < len(p.ring.chunks) || p.closed() || (p.exited() && p.exitSeq > after)
}

func (p *process) readNow(after uint64, maxBytes int) ReadReply {
	r := ReadReply{Exited: p.exited(), ExitCode: p.exitCode, Closed: p.closed()}
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
			pr.reply <- p.readNow(pr.after, pr.maxBytes)
			continue
		}
		kept = append(kept, pr)
	}
	clear(p.polls[len(kept):])
	p.polls = kept
}
