package actors

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/runtimed/runtimed/wire"
)

// The inbound budget: bytes of requests being read, decoded or handled.
//
// A message is free while it is small (up to wire.LargeReadBytes, bounded
// by the connection count). When it outgrows that, the transport asks the
// connection's gate (AdmitRead) before it reads on: the gate asks the
// budget actor for the message limit (the size is not known yet), which
// grants it when both the connection's and the server's inbound budgets
// have room, or queues the request (the reader waits, the transport reads
// nothing: backpressure through TCP or the pipe). A grant is never waited
// for while a message is half read, so readers cannot deadlock on each
// other. Once read, the charge is cut to the message's buffer; it returns
// when the request is answered (a deferred one, e.g. a process/write to a
// child that reads slowly, when its answer is queued), and whatever a
// connection still holds returns when it ends. A request that waits
// DefaultInboundAdmitWait without a grant is refused: the rest of the message is
// read and dropped and the answer is -32011 naming the limit (the id read
// from the message's start, or null).

// DefaultInboundAdmitWait bounds how long a large message waits for the
// inbound budget before it is refused (-32011), unless
// Budgets.InboundAdmitWait says otherwise.
const DefaultInboundAdmitWait = time.Minute

// inboundKeys numbers connections for the budget actor.
var inboundKeys atomic.Uint64

type inboundAdmitMsg struct {
	key   uint64
	want  int64
	reply chan<- *BudgetError // cap 1: nil (granted) or the limit that can never admit it
}

// inboundWithdrawMsg takes back a queued admission (its wait ended);
// granted says it had been granted meanwhile (the grant is in its reply).
type inboundWithdrawMsg struct {
	key   uint64
	reply chan<- bool
}

type inboundReleaseMsg struct {
	key uint64
	n   int64
}

// inboundDoneMsg: the connection ended; everything it holds returns.
type inboundDoneMsg struct{ key uint64 }

func (inboundAdmitMsg) isBudgetMsg()    {}
func (inboundWithdrawMsg) isBudgetMsg() {}
func (inboundReleaseMsg) isBudgetMsg()  {}
func (inboundDoneMsg) isBudgetMsg()     {}

// inboundState is the budget actor's inbound accounting (owned by it).
// waiting holds at most one admission per connection (its reader reads
// one message at a time), so it is bounded by the connection budget;
// it is served in order, skipping a connection held back by its own
// per-connection budget.
type inboundState struct {
	used    int64
	held    map[uint64]int64
	waiting []inboundAdmitMsg
}

// holders counts the connections holding inbound bytes.
func (in *inboundState) holders() int {
	n := 0
	for _, h := range in.held {
		if h > 0 {
			n++
		}
	}
	return n
}

func (b *budgets) handleInbound(m budgetMsg) {
	in := &b.inbound
	if in.held == nil {
		in.held = make(map[uint64]int64)
	}
	switch m := m.(type) {
	case inboundAdmitMsg:
		if err := b.inboundNever(m.want); err != nil {
			m.reply <- err
			return
		}
		if b.inboundFits(m.key, m.want) && len(in.waiting) == 0 {
			b.inboundGrant(m)
			return
		}
		in.waiting = append(in.waiting, m)
	case inboundWithdrawMsg:
		for i, w := range in.waiting {
			if w.key == m.key {
				in.waiting = append(in.waiting[:i], in.waiting[i+1:]...)
				m.reply <- false
				return
			}
		}
		m.reply <- true
	case inboundReleaseMsg:
		if h, ok := in.held[m.key]; ok {
			n := min(m.n, h)
			in.held[m.key] = h - n
			in.used -= n
		}
		b.inboundServe()
	case inboundExplainMsg:
		m.reply <- b.inboundWaitError(m.key, m.want)
	case inboundDoneMsg:
		in.used -= in.held[m.key]
		delete(in.held, m.key)
		kept := in.waiting[:0]
		for _, w := range in.waiting {
			if w.key != m.key {
				kept = append(kept, w)
			}
		}
		clear(in.waiting[len(kept):])
		in.waiting = kept
		b.inboundServe()
	}
}

// inboundNever reports a message no amount of waiting can admit.
func (b *budgets) inboundNever(want int64) *BudgetError {
	l := b.lim
	if l.MaxInboundBytes > 0 && want > l.MaxInboundBytes {
		return b.inboundError(false)
	}
	if l.ConnInboundBytes > 0 && want > l.ConnInboundBytes {
		return b.inboundError(true)
	}
	return nil
}

func (b *budgets) inboundFits(key uint64, want int64) bool {
	l, in := b.lim, &b.inbound
	return (l.MaxInboundBytes <= 0 || in.used+want <= l.MaxInboundBytes) &&
		(l.ConnInboundBytes <= 0 || in.held[key]+want <= l.ConnInboundBytes)
}

func (b *budgets) inboundGrant(m inboundAdmitMsg) {
	b.inbound.held[m.key] += m.want
	b.inbound.used += m.want
	m.reply <- nil
}

// inboundServe grants queued admissions in order while the server-wide
// budget has room; one held back only by its own connection's budget is
// skipped.
func (b *budgets) inboundServe() {
	in := &b.inbound
	kept := in.waiting[:0]
	full := false
	for _, w := range in.waiting {
		if !full && b.inboundFits(w.key, w.want) {
			b.inboundGrant(w)
			continue
		}
		if b.lim.MaxInboundBytes > 0 && in.used+w.want > b.lim.MaxInboundBytes {
			full = true // later ones wait behind it
		}
		kept = append(kept, w)
	}
	clear(in.waiting[len(kept):])
	in.waiting = kept
}

// inboundError names the inbound limit that refused (or held back) a
// message.
func (b *budgets) inboundError(perConn bool) *BudgetError {
	l, in := b.lim, &b.inbound
	if perConn {
		return &BudgetError{Limit: "inbound request memory per connection", Value: FormatBytes(l.ConnInboundBytes), Flag: "--conn-inbound-bytes",
			Detail: "the connection's requests in flight leave no room for another large message (one being read counts at the message limit)"}
	}
	return &BudgetError{Limit: "inbound request memory", Value: FormatBytes(l.MaxInboundBytes), Flag: "--max-inbound-bytes",
		Detail: fmt.Sprintf("%s of requests are being read or handled by %d connections (one being read counts at the message limit)", FormatBytes(in.used), in.holders())}
}

// inboundWaitError is the refusal of a message that waited InboundAdmitWait.
func (b *budgets) inboundWaitError(key uint64, want int64) *BudgetError {
	in := &b.inbound
	perConn := b.lim.ConnInboundBytes > 0 && in.held[key]+want > b.lim.ConnInboundBytes
	e := b.inboundError(perConn)
	e.Detail = fmt.Sprintf("waited %v: %s", cmp.Or(b.lim.InboundAdmitWait, DefaultInboundAdmitWait), e.Detail)
	return e
}

// inboundGate is a connection's wire.ReadGate. Owned by the connection's
// reader: admitted (the charge of the message being read).
type inboundGate struct {
	c        *conn
	key      uint64
	want     int64 // what a message being read is charged: the message limit
	admitted int64
}

var _ wire.ReadGate = (*inboundGate)(nil)

// AdmitRead waits for the budget actor's grant of g.want (see the top of
// this file). It runs on the reader.
func (g *inboundGate) AdmitRead(context.Context) error {
	s := g.c.sup
	reply := make(chan *BudgetError, 1)
	if err := send(g.c.ctx, s.budgets.mbox, budgetMsg(inboundAdmitMsg{key: g.key, want: g.want, reply: reply}), s.budgets.done); err != nil {
		return err
	}
	timer := time.NewTimer(s.inboundAdmitWait())
	defer timer.Stop()
	select {
	case berr := <-reply:
		if berr != nil {
			return berr
		}
		g.admitted = g.want
		return nil
	case <-timer.C:
	case <-g.c.ctx.Done():
		return context.Cause(g.c.ctx) // a grant is returned when the connection ends
	case <-s.budgets.done:
		return ErrStopped
	}
	granted, err := ask(g.c.ctx, s.budgets.mbox, s.budgets.done, func(r chan<- bool) budgetMsg {
		return inboundWithdrawMsg{key: g.key, reply: r}
	})
	if err != nil {
		return err
	}
	if granted {
		if berr := <-reply; berr == nil { // it is there: granted before the withdrawal
			g.admitted = g.want
			return nil
		}
	}
	return s.inboundWaitError(g.key, g.want)
}

// inboundWaitError asks for the refusal's text (the actor owns the usage).
func (s *Supervisor) inboundWaitError(key uint64, want int64) *BudgetError {
	e, err := ask(context.Background(), s.budgets.mbox, s.budgets.done, func(r chan<- *BudgetError) budgetMsg {
		return inboundExplainMsg{key: key, want: want, reply: r}
	})
	if err != nil || e == nil {
		return &BudgetError{Limit: "inbound request memory", Value: "?", Flag: "--max-inbound-bytes", Detail: "the server is stopping"}
	}
	return e
}

type inboundExplainMsg struct {
	key   uint64
	want  int64
	reply chan<- *BudgetError
}

func (inboundExplainMsg) isBudgetMsg() {}

// took is what the message just read keeps charged: its buffer (at most
// what was granted); the rest of the grant returns now.
func (g *inboundGate) took(data []byte) int64 {
	if g.admitted == 0 {
		return 0
	}
	keep := min(int64(cap(data)), g.admitted)
	if rest := g.admitted - keep; rest > 0 {
		g.c.sup.inboundRelease(g.key, rest)
	}
	g.admitted = 0
	return keep
}

func (s *Supervisor) inboundAdmitWait() time.Duration {
	return cmp.Or(s.cfg.Budgets.InboundAdmitWait, DefaultInboundAdmitWait)
}

// inboundRelease returns n bytes of a connection's inbound charge.
func (s *Supervisor) inboundRelease(key uint64, n int64) {
	if n > 0 {
		_ = send(context.Background(), s.budgets.mbox, budgetMsg(inboundReleaseMsg{key: key, n: n}), s.budgets.done)
	}
}

// inboundDone returns whatever a connection still holds.
func (s *Supervisor) inboundDone(key uint64) {
	_ = send(context.Background(), s.budgets.mbox, budgetMsg(inboundDoneMsg{key: key}), s.budgets.done)
}

// answerRefused answers a message the inbound budget refused (its rest was
// dropped): -32011 under its id when its first bytes hold one, else null.
func (c *conn) answerRefused(refused *wire.ReadRefusedError) {
	id := wire.ScanID(refused.Prefix)
	if id == nil {
		id = wire.NullID
	}
	if be, ok := errors.AsType[*BudgetError](refused.Err); ok {
		c.reply(id, nil, be.Wire())
		return
	}
	c.reply(id, nil, wire.AsError(refused.Err))
}
