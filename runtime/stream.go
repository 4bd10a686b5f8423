package runtime

import (
	"context"
	"io"

	"github.com/runtimed/runtimed/actors"
)

// EventKind is the kind of an Event.
type EventKind uint8

const (
	// EventOutput carries Stream and Data.
	EventOutput EventKind = iota + 1
	// EventExited carries ExitCode.
	EventExited
	// EventClosed is the last event of a process; nothing follows it.
	EventClosed
	// EventFailed ends a stream whose backend failed (Err says why, e.g.
	// wrapping ErrDisconnected). It has no seq.
	EventFailed
	// EventLagged marks that the subscriber fell behind its queue; the
	// stream recovers what it missed from retained history, so the events
	// after it continue at the next seq. It has no seq.
	EventLagged
	// EventGap stands for output seqs Seq..To that retention evicted
	// before this subscriber could see them.
	EventGap
)

// String returns the kind's name: "output", "exited", "closed"...
func (k EventKind) String() string {
	return [...]string{"invalid", "output", "exited", "closed", "failed", "lagged", "gap"}[k]
}

// Event is one entry of a process's history, or a marker about the stream.
type Event struct {
	Kind     EventKind // what the event is
	Seq      uint64    // its place in the process's history (0 for markers)
	Stream   Stream    // of an EventOutput
	Data     []byte    // of an EventOutput
	ExitCode int       // of an EventExited
	// Status is the whole ending of an EventExited (signal or exit code,
	// the limit that ended it), as Wait returns it.
	Status ExitStatus
	To     uint64 // last seq of an EventGap
	Err    error  // of an EventFailed
}

// subscription is what a backend's subscribe returns: the history after a
// seq and the live events after that history, closed when the backend
// stops feeding it (lag, end, failure).
type subscription struct {
	history []actors.Event
	live    <-chan actors.Event
}

// subscribeFunc subscribes after a seq, atomically with respect to the
// process's history.
type subscribeFunc func(ctx context.Context, after uint64) (subscription, error)

// liveQueueCap is the capacity of each subscriber's own live queue (a
// variable only so tests can force lag).
var liveQueueCap = 256

// EventStream is a subscription to one process: first its retained history,
// then live events, in seq order, each seq exactly once. A subscriber that
// falls behind gets an EventLagged marker and the stream re-reads what it
// missed; output evicted by retention meanwhile comes as an EventGap.
//
// An EventStream is used by one goroutine at a time.
type EventStream struct {
	subscribe subscribeFunc
	history   []actors.Event
	live      <-chan actors.Event
	cursor    uint64 // highest seq delivered
	ended     bool
}

func newEventStream(ctx context.Context, sub subscribeFunc) (*EventStream, error) {
	s := &EventStream{subscribe: sub}
	first, err := sub(ctx, 0)
	if err != nil {
		return nil, err
	}
	s.history, s.live = first.history, first.live
	return s, nil
}

// Next returns the next event. After EventClosed or EventFailed it returns
// io.EOF. It returns ctx's error when ctx ends first.
func (s *EventStream) Next(ctx context.Context) (Event, error) {
	for {
		if s.ended {
			return Event{}, io.EOF
		}
		if len(s.history) > 0 {
			ev := convertEvent(s.history[0])
			s.history = s.history[1:]
			if ev, ok := s.accept(ev); ok {
				return ev, nil
			}
			continue
		}
		if s.live == nil {
			sub, err := s.subscribe(ctx, s.cursor)
			if err != nil {
				if ctx.Err() != nil {
					return Event{}, ctx.Err()
				}
				s.ended = true
				return Event{Kind: EventFailed, Err: err}, nil
			}
			s.history, s.live = sub.history, sub.live
			continue
		}
		select {
		case ev, ok := <-s.live:
			if !ok {
				// The backend stopped feeding us before closed: we lagged
				// (or it failed, which the resubscribe will tell).
				s.live = nil
				return Event{Kind: EventLagged, Seq: 0, To: s.cursor}, nil
			}
			if ev, ok := s.accept(convertEvent(ev)); ok {
				return ev, nil
			}
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// accept drops what was already delivered and advances the cursor.
func (s *EventStream) accept(ev Event) (Event, bool) {
	switch ev.Kind {
	case EventFailed:
		s.ended = true
		return ev, true
	case EventGap:
		if ev.To <= s.cursor {
			return ev, false
		}
		if ev.Seq <= s.cursor {
			ev.Seq = s.cursor + 1
		}
		s.cursor = ev.To
		return ev, true
	}
	if ev.Seq <= s.cursor {
		return ev, false
	}
	s.cursor = ev.Seq
	if ev.Kind == EventClosed {
		s.ended = true
	}
	return ev, true
}

// Close releases the stream. A live queue left behind is dropped by the
// backend the next time it would block.
func (s *EventStream) Close() { s.ended = true; s.history = nil; s.live = nil }

func convertEvent(ev actors.Event) Event {
	out := Event{Seq: ev.Seq, ExitCode: ev.ExitCode, To: ev.To}
	switch ev.Kind {
	case actors.EventOutput:
		out.Kind, out.Stream, out.Data = EventOutput, Stream(ev.Stream.String()), ev.Data
	case actors.EventExited:
		out.Kind = EventExited
		out.Status = exitStatus(ev.ExitCode, ev.ExitSignal, ev.Limit)
	case actors.EventClosed:
		out.Kind = EventClosed
	case actors.EventGap:
		out.Kind = EventGap
	case actors.EventFailed:
		out.Kind, out.Seq = EventFailed, 0
		out.Err = &ProcessError{ID: ev.ProcessID, Message: ev.Failure}
	}
	return out
}
