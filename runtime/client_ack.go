package runtime

import (
	"time"

	"github.com/runtimed/runtimed/wire"
)

// Output acknowledgement (process/ack, a runtimed extension the server
// advertises as the runtimedOutputAck capability). The client declares in
// initialize (runtimedOutputAck) that it acknowledges, so the server's
// processes are in ack mode from their first byte, on every connection of
// the session: a server that is told what this client has keeps everything
// after it retained, so output that was in flight when a connection dropped
// abruptly (in the server's outbound queue or the socket buffers, megabytes
// on a fast loopback) is still there for the catch-up read after the
// resume, whatever the retention size: the resume is lossless. The price is
// flow control: the server's producer waits while its retention holds
// nothing but output this client has not acknowledged.
//
// The client acknowledges what reached it in order (rp.next-1), not what
// the application consumed: the events are in this process's memory from
// then on. One exception: a subscriber that lagged behind its queue (it
// gets EventLagged and resubscribes from its seq) may need more than the
// client's history holds, so until it has resubscribed and read what it
// missed, for lagHold at most, nothing past its seq is acknowledged and the
// server keeps it (a resume's catch-up, up to a retention's worth of events
// at once, overflows a subscriber's queue this way).
//
// It acknowledges every ackEvery bytes, so the server's retention (1 MiB
// by default) does not fill with output acknowledged late, and ackQuiet
// after the last output otherwise, so a stream that stops short of
// ackEvery is acknowledged too (a server with retention smaller than
// ackEvery then waits ackQuiet at most). An acknowledgement is never waited
// for: it goes to the writer's queue if there is room, or with the next
// tick. Its answer is not correlated (the response is ignored, like a
// duplicate answer to a resent request); a lost acknowledgement costs the
// server only retention until the next one or the catch-up read after a
// resume, which acknowledges as well.
const (
	ackEvery = 128 << 10
	ackQuiet = 20 * time.Millisecond
	lagHold  = 10 * time.Second
)

// lagFloor is the seq a lagged subscriber resubscribes after.
type lagFloor struct {
	seq   uint64
	until time.Time
}

// lagged: a subscriber of rp was closed for lag; it has every seq up to seq.
func (st *clientState) lagged(rp *rproc, seq uint64) {
	if st.c.acks {
		rp.lagFloors = append(rp.lagFloors, lagFloor{seq: seq, until: time.Now().Add(lagHold)})
	}
}

// lagRecovered: a subscriber resubscribed after seq and has what it
// missed (from the client's history or a server read): its floor goes.
func (st *clientState) lagRecovered(rp *rproc, after uint64) {
	for i, f := range rp.lagFloors {
		if f.seq == after {
			rp.lagFloors = append(rp.lagFloors[:i], rp.lagFloors[i+1:]...)
			if rp.unacked > 0 || rp.next-1 > rp.acked {
				st.ack(rp)
			}
			return
		}
	}
}

// ackable is the highest seq the server may be told: rp.next-1, or less
// while a lagged subscriber has not recovered (expired floors go).
func ackable(rp *rproc) (seq uint64, floored bool) {
	seq = rp.next - 1
	now := time.Now()
	kept := rp.lagFloors[:0]
	for _, f := range rp.lagFloors {
		if now.After(f.until) {
			continue
		}
		kept = append(kept, f)
		if f.seq < seq {
			seq, floored = f.seq, true
		}
	}
	rp.lagFloors = kept
	return seq, floored
}

// ackTickMsg: ackQuiet passed since the timer was armed.
type ackTickMsg struct{}

func (ackTickMsg) isClientMsg() {}

// received counts output that reached the client in order (run).
func (st *clientState) received(rp *rproc, n int) {
	if !st.c.acks {
		return
	}
	if rp.closed {
		delete(st.ackDue, rp.id)
		return
	}
	rp.unacked += n
	if rp.unacked >= ackEvery {
		st.ack(rp)
		return
	}
	if rp.unacked > 0 {
		st.due(rp)
	}
}

// ack tells the server this client has every seq up to rp.next-1, if the
// writer's queue has room; otherwise the tick retries.
func (st *clientState) ack(rp *rproc) {
	seq, floored := ackable(rp)
	if st.latched || rp.closed {
		delete(st.ackDue, rp.id)
		return
	}
	if seq <= rp.acked {
		if floored {
			// Held back for a lagged subscriber: look again shortly (the
			// floor goes when it recovers, or expires).
			st.due(rp)
		} else {
			delete(st.ackDue, rp.id)
		}
		return
	}
	frame, err := wire.AppendRequest(nil, wire.IntID(st.c.nextID.Add(1)), wire.MethodProcessAck, wire.AckParams{ProcessID: rp.id, Seq: seq})
	if err != nil {
		return
	}
	select {
	case st.c.outbound <- frame:
		rp.acked, rp.unacked = seq, 0
		if floored {
			st.due(rp)
		} else {
			delete(st.ackDue, rp.id)
		}
	default:
		st.due(rp)
	}
}

// due schedules rp's acknowledgement for the next tick.
func (st *clientState) due(rp *rproc) {
	if st.ackDue == nil {
		st.ackDue = map[string]*rproc{}
	}
	st.ackDue[rp.id] = rp
	st.armAck()
}

func (st *clientState) armAck() {
	if st.ackTimer != nil || st.latched {
		return
	}
	c := st.c
	st.ackTimer = time.AfterFunc(ackQuiet, func() { c.toActor(ackTickMsg{}) })
}

// ackTick acknowledges every process with output due.
func (st *clientState) ackTick() {
	st.ackTimer = nil
	for _, rp := range st.ackDue {
		if st.procs[rp.id] != rp {
			delete(st.ackDue, rp.id)
			continue
		}
		st.ack(rp)
	}
}
