package runtime

import (
	"time"

	"github.com/runtimed/runtimed/wire"
)

// Output acknowledgement (process/ack, a runtimed extension the server
// advertises as the runtimedOutputAck capability). A server that is told
// what this client has keeps everything after it retained, so output that
// was in flight when a connection dropped abruptly (in the server's
// outbound queue or the socket buffers, megabytes on a fast loopback) is
// still there for the catch-up read after the resume, whatever the
// retention size: the resume is lossless. The price is flow control: the
// server's producer waits when its retention holds nothing but output this
// client has not acknowledged.
//
// The client acknowledges what reached it in order (rp.next-1), not what
// the application consumed: the events are in this process's memory from
// then on, and a slow subscriber has its own rules (EventLagged, the
// client's history). It acknowledges every ackEvery bytes, so the server's
// retention (1 MiB by default) never fills with acknowledged-later output,
// and ackQuiet after the last output otherwise, so a stream that stops
// short of ackEvery is acknowledged too (a server with retention smaller
// than ackEvery then waits ackQuiet at most). An acknowledgement is never
// waited for: it goes to the writer's queue if there is room, or with the
// next tick. Its answer is not correlated (the response is ignored, like a
// duplicate answer to a resent request); a lost acknowledgement costs the
// server only retention until the next one or the catch-up read after a
// resume, which acknowledges as well.
const (
	ackEvery = 128 << 10
	ackQuiet = 20 * time.Millisecond
)

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
		st.ack(rp, false)
		return
	}
	if rp.unacked > 0 {
		if st.ackDue == nil {
			st.ackDue = map[string]*rproc{}
		}
		st.ackDue[rp.id] = rp
		st.armAck()
	}
}

// ack tells the server this client has every seq up to rp.next-1, if the
// writer's queue has room; otherwise the tick retries. force sends it even
// when the server was told so already (a new connection: its ack mode
// starts with its first process/ack).
func (st *clientState) ack(rp *rproc, force bool) {
	seq := rp.next - 1
	if (seq <= rp.acked && !force) || st.latched || rp.closed {
		delete(st.ackDue, rp.id)
		return
	}
	frame, err := wire.AppendRequest(nil, wire.IntID(st.c.nextID.Add(1)), wire.MethodProcessAck, wire.AckParams{ProcessID: rp.id, Seq: seq})
	if err != nil {
		return
	}
	select {
	case st.c.outbound <- frame:
		rp.acked, rp.unacked = seq, 0
		delete(st.ackDue, rp.id)
	default:
		if st.ackDue == nil {
			st.ackDue = map[string]*rproc{}
		}
		st.ackDue[rp.id] = rp
		st.armAck()
	}
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
		st.ack(rp, false)
	}
}

// ackResumed puts every open process of a resumed session in ack mode on
// its new connection at once, before the catch-up read: from then on a
// second drop loses nothing in flight either.
func (st *clientState) ackResumed() {
	if !st.c.acks {
		return
	}
	for _, rp := range st.procs {
		st.ack(rp, true)
	}
}
