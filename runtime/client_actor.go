package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/runtimed/runtimed/wire"
)

// The Client's actor: one goroutine (clientState.run) owns the pending
// calls, the connection of the moment and the view of each process. Each
// connection is a client core (wire.Client) in reader mode: its reader
// hands the actor every inbound message (output notifications through the
// Peek fast path), a watcher reports the core's failure, and a pump moves
// frames queued while no connection was usable (during a reconnect, and
// the resends after one). The actor, not the core, correlates answers:
// its pending calls outlive a connection (they are resent on the next
// one), so the cores are used without their own pending tables. reconnect
// runs beside the actor after a connection failure.

// clientMsg is the closed set of messages the client actor handles.
type clientMsg interface{ isClientMsg() }

type callMsg struct {
	id     int64
	frame  []byte
	method string
	reply  chan<- callResult
}
type cancelCallMsg struct{ id int64 }
type inboundMsg struct {
	gen int
	msg wire.Message
}
type outputMsg struct {
	gen int
	n   wire.OutputNotification
}
type transportLostMsg struct {
	gen int
	err error
}
type reconnectedMsg struct{ t wire.Transport }
type reconnectFailedMsg struct{ err error }
type closeClientMsg struct{}
type registerProcMsg struct {
	id string
	// onDecision, if set, receives the process's network/policyDecision
	// notifications (Spec.Network.OnDecision).
	onDecision func(NetworkDecision)
	attach     bool // an open process of that id is returned, not refused
	reply      chan<- *rproc
	known      chan<- bool // attach only: whether the process was known already (sent before reply)
}
type forgetProcMsg struct{ id string }
type subscribeRemoteMsg struct {
	id    string
	after uint64 // the subscriber has every seq up to it
	reply chan<- remoteSub
}

// lagReadMsg: a subscriber that resubscribed after lagging has read what
// it missed from the server (see rproc.lagFloors).
type lagReadMsg struct {
	id    string
	after uint64
}
type catchUpMsg struct {
	id    string
	res   wire.ReadResult
	limit string // Attach: the limit that ended the process (process/list), or ""
}

// holeReadFailedMsg: the read meant to fill a hole behind a full reorder
// buffer failed; the hole is then reported as lost.
type holeReadFailedMsg struct {
	id  string
	err error
}
type dropHistMsg struct {
	id string
	rp *rproc
}

func (callMsg) isClientMsg()            {}
func (cancelCallMsg) isClientMsg()      {}
func (inboundMsg) isClientMsg()         {}
func (outputMsg) isClientMsg()          {}
func (transportLostMsg) isClientMsg()   {}
func (reconnectedMsg) isClientMsg()     {}
func (reconnectFailedMsg) isClientMsg() {}
func (closeClientMsg) isClientMsg()     {}
func (registerProcMsg) isClientMsg()    {}
func (forgetProcMsg) isClientMsg()      {}
func (subscribeRemoteMsg) isClientMsg() {}
func (lagReadMsg) isClientMsg()         {}
func (catchUpMsg) isClientMsg()         {}
func (holeReadFailedMsg) isClientMsg()  {}
func (dropHistMsg) isClientMsg()        {}

type callResult struct {
	result json.RawMessage
	err    error
	resent bool // the request was sent again after a reconnect
}

type pendingCall struct {
	frame  []byte
	method string
	reply  chan<- callResult
	resent bool
}

// clientState is owned by the client actor goroutine (run).
type clientState struct {
	c            *Client
	pending      map[int64]*pendingCall
	procs        map[string]*rproc
	core         *wire.Client // the connection of generation gen
	gen          int
	stopIO       chan struct{} // closed to stop the current pump
	reconnecting bool
	latched      bool
	ackDue       map[string]*rproc // processes with output not acknowledged yet (client_ack.go)
	ackTimer     *time.Timer       // armed while ackDue is not empty
}

// attach starts generation gen+1 on t: a client core whose handlers send
// to the actor (tagged with the generation, so that a stale connection's
// messages are dropped), published in c.cur for callers' direct writes.
func (st *clientState) attach(t wire.Transport) {
	st.gen++
	st.stopIO = make(chan struct{})
	gen, stop, c := st.gen, st.stopIO, st.c
	core := wire.NewClient(t, wire.ClientOptions{
		Peek: func(data []byte) bool {
			n, ok := wire.ParseOutputNotification(data)
			if ok { // the hot path: no encoding/json for output chunks
				c.toActor(outputMsg{gen: gen, n: n})
			}
			return ok
		},
		Handle: func(m wire.Message) { c.toActor(inboundMsg{gen: gen, msg: m}) },
		Malformed: func(_ []byte, perr *wire.Error) {
			c.log.Warn("undecodable message from server", zap.String("error", perr.Message))
		},
	})
	st.core = core
	c.cur.Store(core)
	c.wg.Go(func() {
		<-core.Done()
		c.toActor(transportLostMsg{gen: gen, err: core.Err()})
		core.Close() // waits for the core's reader, which may be handing the actor a message
	})
	c.wg.Go(func() { c.pump(core, stop) })
}

// pump writes the frames of c.outbound (queued while no connection was
// usable, and resends) on core until the generation ends. A frame taken
// when the core has failed is resent by the next generation's resume, as
// every unanswered request is.
func (c *Client) pump(core *wire.Client, stop <-chan struct{}) {
	for {
		select {
		case f := <-c.outbound:
			if core.WriteRaw(context.Background(), f) != nil {
				return
			}
		case <-stop:
			return
		case <-core.Done():
			return
		}
	}
}

// toActor sends to the actor unless it has exited.
func (c *Client) toActor(m clientMsg) bool {
	select {
	case c.mbox <- m:
		return true
	case <-c.done:
		return false
	}
}

func (st *clientState) run() {
	c := st.c
	defer close(c.done)
	for m := range c.mbox {
		switch m := m.(type) {
		case callMsg:
			if st.latched {
				m.reply <- callResult{err: c.cause}
				continue
			}
			st.pending[m.id] = &pendingCall{frame: m.frame, method: m.method, reply: m.reply}
		case cancelCallMsg:
			delete(st.pending, m.id)
		case inboundMsg:
			if m.gen == st.gen {
				st.inbound(m.msg)
			}
		case outputMsg:
			if m.gen == st.gen {
				st.output(m.n)
			}
		case transportLostMsg:
			if m.gen != st.gen || st.latched || st.reconnecting {
				continue
			}
			close(st.stopIO)
			c.cur.Store(nil)
			st.core.Fail(m.err)
			if !c.opts.Reconnect || c.dial == nil {
				st.latch(fmt.Errorf("%w: %w", ErrDisconnected, m.err)) // a refused resume stays an *RPCError (ErrSessionGone)
				return
			}
			c.log.Info("transport lost; reconnecting", zap.Error(m.err))
			st.reconnecting = true
			st.gen++ // messages from the old transport are stale now
			c.wg.Go(func() { c.reconnect(m.err) })
		case reconnectedMsg:
			st.reconnecting = false
			if st.latched {
				m.t.Close()
				continue
			}
			st.attach(m.t)
			st.resume()
		case reconnectFailedMsg:
			st.reconnecting = false
			st.latch(fmt.Errorf("%w: %w", ErrDisconnected, m.err)) // a refused resume stays an *RPCError (ErrSessionGone)
			return
		case closeClientMsg:
			if !st.reconnecting {
				close(st.stopIO)
			}
			c.cur.Store(nil)
			st.core.Fail(wire.ErrClientClosed)
			st.latch(ErrClosed)
			return
		case registerProcMsg:
			if st.latched {
				m.reply <- nil
				continue
			}
			if old := st.procs[m.id]; old != nil && !old.closed {
				if m.attach {
					m.known <- true
					m.reply <- old
				} else {
					m.reply <- nil // the id is taken; Start reports it as the server would
				}
				continue
			}
			rp := &rproc{id: m.id, next: 1, done: make(chan struct{})}
			if m.onDecision != nil {
				rp.decisions = startDecisions(m.onDecision, rp.done)
			}
			st.procs[m.id] = rp
			if m.attach {
				m.known <- false
			}
			m.reply <- rp
		case forgetProcMsg:
			delete(st.procs, m.id)
		case subscribeRemoteMsg:
			m.reply <- st.subscribe(m.id, m.after)
		case lagReadMsg:
			if rp := st.procs[m.id]; rp != nil {
				st.lagRecovered(rp, m.after)
			}
		case catchUpMsg:
			st.presetLimit(m.id, m.limit)
			st.catchUp(m.id, m.res)
		case holeReadFailedMsg:
			st.holeLost(m.id, m.err)
		case ackTickMsg:
			st.ackTick()
		case dropHistMsg:
			if rp := st.procs[m.id]; rp == m.rp {
				rp.hist, rp.histSize, rp.histFrom = nil, 0, 0
			}
		}
	}
}

// latch records the first failure and fans it out.
func (st *clientState) latch(err error) {
	if st.latched {
		return
	}
	st.latched = true
	if st.ackTimer != nil {
		st.ackTimer.Stop()
	}
	c := st.c
	c.cause = err
	close(c.failed)
	for id, p := range st.pending {
		p.reply <- callResult{err: err}
		delete(st.pending, id)
	}
	for _, rp := range st.procs {
		if rp.histTimer != nil {
			rp.histTimer.Stop()
		}
		if !rp.closed {
			rp.failure = err
			close(rp.done)
		}
		for _, l := range rp.listeners {
			close(l)
		}
		rp.listeners = nil
	}
	// run returns after this; every caller still waiting selects on failed,
	// and readers/writers select on done.
}

func (st *clientState) inbound(msg wire.Message) {
	switch msg.Kind {
	case wire.KindResponse:
		id, err := strconv.ParseInt(string(msg.ID), 10, 64)
		if err != nil {
			return
		}
		p, ok := st.pending[id]
		if !ok {
			return // a duplicate answer to a resent request
		}
		delete(st.pending, id)
		if len(msg.Error) > 0 {
			p.reply <- callResult{err: decodeRPCError(msg.Error), resent: p.resent}
			return
		}
		p.reply <- callResult{result: msg.Result, resent: p.resent}
	case wire.KindNotification:
		st.notification(msg)
	}
}

// reconnect dials and resumes the session within the reconnect window.
func (c *Client) reconnect(cause error) {
	deadline := time.Now().Add(c.opts.ReconnectWindow)
	backoff := 20 * time.Millisecond
	lastErr := cause
	for time.Now().Before(deadline) {
		select {
		case <-c.done:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), min(c.opts.ConnectTimeout, time.Until(deadline)))
		t, err := c.dial(ctx)
		if err == nil {
			_, err = handshake(ctx, t, c.opts.ClientName, c.sessionID)
			if err == nil {
				cancel()
				c.log.Info("session resumed", zap.String("session_id", c.sessionID))
				if !c.toActor(reconnectedMsg{t: t}) {
					t.Close()
				}
				return
			}
			t.Close()
			var re *RPCError
			if errors.As(err, &re) && re.Code != wire.CodeSessionAttached {
				cancel()
				c.toActor(reconnectFailedMsg{err: fmt.Errorf("resume: %w", err)})
				return
			}
		}
		cancel()
		lastErr = err
		timer := time.NewTimer(backoff)
		select {
		case <-timer.C:
		case <-c.done:
			timer.Stop()
			return
		}
		backoff = min(backoff*2, time.Second)
	}
	c.toActor(reconnectFailedMsg{err: fmt.Errorf("reconnect gave up after %v: %w", c.opts.ReconnectWindow, lastErr)})
}
