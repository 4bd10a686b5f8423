package runtime

import (
	"context"
	"encoding/json"
	"sort"
	"time"

	"go.uber.org/zap"

	"github.com/runtimed/runtimed/actors"
	"github.com/runtimed/runtimed/wire"
)

// The client actor's view of each remote process: notifications and
// catch-up reads ordered by seq, per-process listeners, subscriptions.
// Everything here runs on the client actor (clientState.run) except
// remoteProcess.subscribe, which talks to it by message.

// The client's own short history of each process (see rproc.hist).
const (
	histBytes  = 256 << 10        // output bytes kept per process
	histEvents = 4096             // events kept per process
	histKeep   = 10 * time.Second // kept this long after the process closed
)

// needsRead reports whether a subscriber that has every seq up to after
// must read the server: the client's history does not reach back to it.
func (rs remoteSub) needsRead(after uint64) bool {
	return after+1 < rs.upto && (rs.histFrom == 0 || rs.histFrom > after+1)
}

type remoteSub struct {
	live       <-chan actors.Event
	upto       uint64 // the first seq live will carry
	exited     bool
	exitSeq    uint64
	exitCode   int
	exitSignal int
	closed     bool
	closedSeq  uint64
	// hist is every event from seq histFrom up to upto, in seq order (a
	// copy); with histFrom <= after+1 the history needs no server read.
	hist     []actors.Event
	histFrom uint64 // 0: none kept
	err      error
}

// rproc is the client's view of one remote process, owned by run. Only
// done, exitCode and failure are read by others, after done is closed.
type rproc struct {
	id         string
	next       uint64 // next seq to deliver
	reorder    map[uint64]actors.Event
	exited     bool
	exitSeq    uint64
	exitCode   int
	exitSignal int    // as actors.Event.ExitSignal (-1: the server did not say)
	limit      string // the resource limit that ended it (from process/exited)
	closed     bool
	closedSeq  uint64
	listeners  []chan actors.Event
	done       chan struct{}
	// decisions feeds Spec.Network.OnDecision (nil without one); the
	// actor never waits on it: a full queue drops the decision for the
	// callback (the server counted and logged it).
	decisions chan<- NetworkDecision
	failure   error // the latched disconnect, or the process's *ProcessError
	// hist is the client's own history of the newest events (at most
	// histBytes of output in histEvents events), from seq histFrom on,
	// kept while the process runs and for histKeep after it closed. A
	// subscriber that arrives just after Start (runtimed exec), or one
	// that lagged behind its queue, resubscribes from it without asking
	// the server, which may have forgotten the process already (closed
	// retention 0). Older history comes from the server.
	hist      []actors.Event
	histSize  int // output bytes in hist
	histFrom  uint64
	histTimer *time.Timer // drops hist histKeep after closed
	// holeRead is set while a process/read fills the hole behind a full
	// reorder buffer (the notification of rp.next never came: a server
	// that dropped it). Notifications that find the buffer full meanwhile
	// are dropped here and come back with that read (or a later one);
	// what the server no longer retains is delivered as an EventGap, so
	// the loss is reported, never silent, and the stream never stalls.
	holeRead bool
	dropped  uint64 // the highest seq dropped because the buffer was full
	// What the server was told this client has (process/ack, see
	// client_ack.go): every seq up to acked; unacked output bytes came in
	// order since.
	acked   uint64
	unacked int
	// lagFloors: a subscriber closed for lag resubscribes from the seq
	// before the event it missed; until it read what it missed (or
	// lagHold passed), the server is told no more than that seq.
	lagFloors []lagFloor
}

func (st *clientState) notification(msg wire.Message) {
	switch msg.Method {
	case wire.NotifyNetworkPolicyDecision:
		var n wire.PolicyDecisionParams
		if json.Unmarshal(msg.Params, &n) != nil {
			return
		}
		if rp := st.procs[n.ProcessID]; rp != nil && rp.decisions != nil {
			select {
			case rp.decisions <- decisionFromWire(n):
			default:
			}
		}
	case wire.NotifyProcessOutput:
		var n wire.OutputNotification
		if json.Unmarshal(msg.Params, &n) == nil {
			st.output(n)
		}
	case wire.NotifyProcessExited:
		var n wire.ExitedNotification
		if json.Unmarshal(msg.Params, &n) != nil {
			return
		}
		if rp := st.procs[n.ProcessID]; rp != nil {
			st.deliver(rp, actors.Event{ProcessID: n.ProcessID, Kind: actors.EventExited, Seq: n.Seq, ExitCode: n.ExitCode, ExitSignal: wireSignal(n.ExitSignal), Limit: n.Limit})
		}
	case wire.NotifyProcessClosed:
		var n wire.ClosedNotification
		if json.Unmarshal(msg.Params, &n) != nil {
			return
		}
		if rp := st.procs[n.ProcessID]; rp != nil {
			if n.Failure != nil {
				// The server failed the process (ext): the stream ends with
				// the failure, and Wait returns it.
				st.deliver(rp, actors.Event{ProcessID: n.ProcessID, Kind: actors.EventFailed, Seq: n.Seq, Failure: *n.Failure})
				return
			}
			st.deliver(rp, actors.Event{ProcessID: n.ProcessID, Kind: actors.EventClosed, Seq: n.Seq})
		}
	}
}

func (st *clientState) output(n wire.OutputNotification) {
	if rp := st.procs[n.ProcessID]; rp != nil {
		st.deliver(rp, actors.Event{ProcessID: n.ProcessID, Kind: actors.EventOutput, Seq: n.Seq, Stream: streamOf(n.Stream), Data: n.Chunk})
	}
}

func streamOf(s string) actors.Stream {
	switch s {
	case wire.StreamStderr:
		return actors.Stderr
	case wire.StreamPTY:
		return actors.PTY
	}
	return actors.Stdout
}

// deliver orders events by seq: duplicates are dropped, early ones wait.
func (st *clientState) deliver(rp *rproc, ev actors.Event) {
	last := ev.Seq
	if ev.Kind == actors.EventGap {
		last = ev.To
	}
	if last < rp.next || rp.closed {
		return
	}
	if ev.Seq > rp.next {
		if rp.reorder == nil {
			rp.reorder = map[uint64]actors.Event{}
		}
		if _, held := rp.reorder[ev.Seq]; held {
			return
		}
		if len(rp.reorder) < reorderLimit {
			rp.reorder[ev.Seq] = ev
			return
		}
		rp.dropped = max(rp.dropped, last)
		st.fillHole(rp)
		return
	}
	st.emit(rp, ev)
	for {
		nx, ok := rp.reorder[rp.next]
		if !ok {
			break
		}
		delete(rp.reorder, rp.next)
		st.emit(rp, nx)
	}
}

func (st *clientState) emit(rp *rproc, ev actors.Event) {
	if ev.Kind == actors.EventGap {
		if ev.Seq < rp.next {
			ev.Seq = rp.next
		}
		rp.next = ev.To + 1
	} else {
		rp.next = ev.Seq + 1
	}
	switch ev.Kind {
	case actors.EventExited:
		rp.exited, rp.exitSeq, rp.exitCode, rp.exitSignal = true, ev.Seq, ev.ExitCode, ev.ExitSignal
		if ev.Limit != "" {
			rp.limit = ev.Limit
		}
	case actors.EventClosed:
		rp.closed, rp.closedSeq = true, ev.Seq
	case actors.EventFailed:
		rp.closed, rp.closedSeq = true, ev.Seq
		rp.failure = &ProcessError{ID: rp.id, Message: ev.Failure}
	}
	st.remember(rp, ev)
	kept := rp.listeners[:0]
	for _, l := range rp.listeners {
		select {
		case l <- ev:
			kept = append(kept, l)
		default:
			close(l) // lagged: the subscriber resubscribes from its seq (the client's history first)
			st.lagged(rp, ev.Seq-1)
		}
	}
	clear(rp.listeners[len(kept):])
	rp.listeners = kept
	st.received(rp, len(ev.Data))
	if rp.closed {
		for _, l := range rp.listeners {
			close(l)
		}
		rp.listeners = nil
		rp.reorder = nil
		close(rp.done)
	}
}

func (st *clientState) subscribe(id string, after uint64) remoteSub {
	if st.latched {
		return remoteSub{err: st.c.cause}
	}
	rp := st.procs[id]
	if rp == nil {
		return remoteSub{err: ErrUnknownProcess}
	}
	if rp.failure != nil && rp.closed {
		return remoteSub{err: rp.failure}
	}
	live := make(chan actors.Event, liveQueueCap)
	if rp.closed {
		close(live)
	} else {
		rp.listeners = append(rp.listeners, live)
	}
	rs := remoteSub{live: live, upto: rp.next, exited: rp.exited, exitSeq: rp.exitSeq, exitCode: rp.exitCode, exitSignal: rp.exitSignal, closed: rp.closed, closedSeq: rp.closedSeq}
	if rp.histFrom > 0 {
		rs.hist, rs.histFrom = append([]actors.Event(nil), rp.hist...), rp.histFrom
	}
	if !rs.needsRead(after) {
		st.lagRecovered(rp, after) // the history has it: nothing to hold on the server
	}
	return rs
}

// remember adds an emitted event to the process's own history, drops the
// oldest beyond the bounds, and schedules the history's release once the
// process closed.
func (st *clientState) remember(rp *rproc, ev actors.Event) {
	if rp.histFrom == 0 {
		if rp.histTimer != nil {
			return // released after the close
		}
		rp.histFrom = ev.Seq
	}
	rp.hist = append(rp.hist, ev)
	rp.histSize += len(ev.Data)
	drop := 0
	for drop < len(rp.hist)-1 && (rp.histSize > histBytes || len(rp.hist)-drop > histEvents) {
		rp.histSize -= len(rp.hist[drop].Data)
		drop++
	}
	if drop > 0 {
		// Subscribers got copies: the dropped events can be cleared.
		clear(rp.hist[:drop])
		rp.hist = rp.hist[drop:]
		rp.histFrom = rp.hist[0].Seq
	}
	if rp.closed {
		c, id := st.c, rp.id
		rp.histTimer = time.AfterFunc(histKeep, func() { c.toActor(dropHistMsg{id: id, rp: rp}) })
	}
}

// fillHole reads the process's retained output after the last seq
// delivered, once at a time: the reorder buffer is full, so the missing
// seq will not come by notification.
func (st *clientState) fillHole(rp *rproc) {
	if rp.holeRead || st.latched {
		return
	}
	rp.holeRead = true
	// From the seq a lagged subscriber still needs, if any: a read
	// acknowledges its afterSeq (client_ack.go); what this client has
	// already is dropped again by deliver.
	floor, _ := ackable(rp)
	c, id, after := st.c, rp.id, floor
	c.log.Warn("reorder buffer full; reading the missing output back", zap.String("process_id", id), zap.Uint64("missing_seq", rp.next))
	c.wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var res wire.ReadResult
		if err := c.call(ctx, wire.MethodProcessRead, wire.ReadParams{ProcessID: id, AfterSeq: after}, &res); err != nil {
			c.toActor(holeReadFailedMsg{id: id, err: err})
			return
		}
		c.toActor(catchUpMsg{id: id, res: res})
	})
}

// holeLost reports the hole a read could not fill as an EventGap (seqs up
// to the first one held), then delivers what the buffer holds.
func (st *clientState) holeLost(id string, err error) {
	rp := st.procs[id]
	if rp == nil || rp.closed {
		return
	}
	rp.holeRead = false
	first := uint64(0)
	for s := range rp.reorder {
		if first == 0 || s < first {
			first = s
		}
	}
	if first <= rp.next {
		return
	}
	st.c.log.Warn("output lost: the read of a hole failed", zap.String("process_id", id), zap.Uint64("from", rp.next), zap.Uint64("to", first-1), zap.Error(err))
	st.deliver(rp, actors.Event{ProcessID: id, Kind: actors.EventGap, Seq: rp.next, To: first - 1})
}

// resume runs on the actor after a reconnect: resend unanswered requests
// (writes keep their writeId) and catch every open process up.
func (st *clientState) resume() {
	c := st.c
	ids := make([]int64, 0, len(st.pending))
	for id, p := range st.pending {
		p.resent = true
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	frames := make([][]byte, len(ids))
	for i, id := range ids {
		frames[i] = st.pending[id].frame
	}
	stop := st.stopIO
	c.wg.Go(func() {
		for _, f := range frames {
			select {
			case c.outbound <- f:
			case <-stop:
				return
			}
		}
	})
	for _, rp := range st.procs {
		if rp.closed {
			continue
		}
		floor, _ := ackable(rp) // as in fillHole
		id, after := rp.id, floor
		c.wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var res wire.ReadResult
			if err := c.call(ctx, wire.MethodProcessRead, wire.ReadParams{ProcessID: id, AfterSeq: after}, &res); err != nil {
				c.log.Warn("catch-up read failed", zap.String("process_id", id), zap.Error(err))
				return
			}
			c.toActor(catchUpMsg{id: id, res: res})
			// Acknowledge the catch-up: a read from the last seq it carried
			// tells the server the backlog arrived, so it stops holding the
			// process back for it (PROTOCOL.md §3). What this read returns
			// is past the catch-up, where notifications carry it: dropped.
			// With process/ack the catch-up is acknowledged as it arrives.
			if res.NextSeq > after+1 && !res.Closed && !c.acks {
				one := uint64(1)
				_ = c.call(ctx, wire.MethodProcessRead, wire.ReadParams{ProcessID: id, AfterSeq: res.NextSeq - 1, MaxBytes: &one}, nil)
			}
		})
	}
}

// catchUp feeds a catch-up read into the seq order. Exit and close are
// inferred: closed holds the highest seq; an exit the read reports and this
// client has not seen is the newest seq that is neither output nor close
// (retention evicts the oldest output first). Every other seq the read
// lacks, and no notification brought, is output evicted while the client
// was away: it is delivered as a gap, one per run of seqs.
func (st *clientState) catchUp(id string, res wire.ReadResult) {
	rp := st.procs[id]
	if rp == nil || rp.closed {
		return
	}
	rp.holeRead = false
	have := map[uint64]bool{}
	evs := make([]actors.Event, 0, len(res.Chunks)+2)
	for _, ch := range res.Chunks {
		have[ch.Seq] = true
		evs = append(evs, actors.Event{ProcessID: id, Kind: actors.EventOutput, Seq: ch.Seq, Stream: streamOf(ch.Stream), Data: ch.Chunk})
	}
	top := res.NextSeq // first unassigned seq
	var closedSeq uint64
	if res.Closed && top > 0 {
		closedSeq = top - 1
	}
	exitKnown := rp.exited
	for _, ev := range rp.reorder {
		exitKnown = exitKnown || ev.Kind == actors.EventExited
	}
	var missing []uint64
	for s := rp.next; s < top; s++ {
		if _, held := rp.reorder[s]; !held && !have[s] && s != closedSeq {
			missing = append(missing, s)
		}
	}
	if res.Exited && !exitKnown && len(missing) > 0 {
		code := 0
		if res.ExitCode != nil {
			code = *res.ExitCode
		}
		evs = append(evs, actors.Event{ProcessID: id, Kind: actors.EventExited, Seq: missing[len(missing)-1], ExitCode: code, ExitSignal: wireSignal(res.ExitSignal), Limit: res.Limit})
		missing = missing[:len(missing)-1]
	}
	for i := 0; i < len(missing); {
		j := i
		for j+1 < len(missing) && missing[j+1] == missing[j]+1 {
			j++
		}
		evs = append(evs, actors.Event{ProcessID: id, Kind: actors.EventGap, Seq: missing[i], To: missing[j]})
		i = j + 1
	}
	if closedSeq > 0 {
		evs = append(evs, actors.Event{ProcessID: id, Kind: actors.EventClosed, Seq: closedSeq})
	}
	// In seq order, so that each fills the next hole and nothing has to
	// wait in the reorder buffer (which may be full).
	sort.Slice(evs, func(i, j int) bool { return evs[i].Seq < evs[j].Seq })
	for _, ev := range evs {
		st.deliver(rp, ev)
	}
	if !rp.closed && rp.dropped >= rp.next {
		// Dropped while the read was on its way, and newer than it: read again.
		st.fillHole(rp)
	}
}

// subscribe registers a live queue on the client actor, then fetches the
// history before it with process/read; seq addressing makes the two meet
// without gap or duplicate.
func (p *remoteProcess) subscribe(ctx context.Context, after uint64) (subscription, error) {
	reply := make(chan remoteSub, 1)
	select {
	case p.c.mbox <- subscribeRemoteMsg{id: p.id, after: after, reply: reply}:
	case <-p.c.failed:
		return subscription{}, p.c.cause
	case <-ctx.Done():
		return subscription{}, ctx.Err()
	}
	var rs remoteSub
	select {
	case rs = <-reply:
	case <-p.c.failed:
		return subscription{}, p.c.cause
	}
	if rs.err != nil {
		return subscription{}, rs.err
	}
	var history []actors.Event
	if !rs.needsRead(after) {
		// The client still has everything after `after`: no read, and
		// nothing the server may have forgotten is missed.
		for _, ev := range rs.hist {
			switch {
			case ev.Kind == actors.EventGap && ev.To > after:
				ev.Seq = max(ev.Seq, after+1)
				history = append(history, ev)
			case ev.Kind != actors.EventGap && ev.Seq > after:
				history = append(history, ev)
			}
		}
	} else {
		res, err := p.Read(ctx, ReadOptions{After: after})
		// Read or not, the server need hold nothing more for this
		// subscriber (a failed read ends its stream).
		p.c.toActor(lagReadMsg{id: p.id, after: after})
		if err != nil {
			return subscription{}, err
		}
		var evs []actors.Event
		for _, ch := range res.Chunks {
			if ch.Seq < rs.upto {
				evs = append(evs, actors.Event{ProcessID: p.id, Kind: actors.EventOutput, Seq: ch.Seq, Stream: streamOf(string(ch.Stream)), Data: ch.Data})
			}
		}
		if rs.exited && rs.exitSeq > after && rs.exitSeq < rs.upto {
			evs = append(evs, actors.Event{ProcessID: p.id, Kind: actors.EventExited, Seq: rs.exitSeq, ExitCode: rs.exitCode, ExitSignal: rs.exitSignal})
		}
		if rs.closed && rs.closedSeq > after && rs.closedSeq < rs.upto {
			evs = append(evs, actors.Event{ProcessID: p.id, Kind: actors.EventClosed, Seq: rs.closedSeq})
		}
		sort.Slice(evs, func(i, j int) bool { return evs[i].Seq < evs[j].Seq })
		cur := after + 1
		for _, ev := range evs {
			if ev.Seq > cur {
				history = append(history, actors.Event{ProcessID: p.id, Kind: actors.EventGap, Seq: cur, To: ev.Seq - 1})
			}
			history = append(history, ev)
			cur = ev.Seq + 1
		}
		if cur < rs.upto {
			history = append(history, actors.Event{ProcessID: p.id, Kind: actors.EventGap, Seq: cur, To: rs.upto - 1})
		}
	}
	return subscription{history: history, live: rs.live}, nil
}

// wireSignal is an exitSignal extension field as actors.Event.ExitSignal
// has it: -1 when the server did not send one.
func wireSignal(sig *int) int {
	if sig == nil || *sig < 0 {
		return -1
	}
	return *sig
}
