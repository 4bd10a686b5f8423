package actors

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/runtimed/runtimed/wire"
)

// Budgets are the server-wide limits the budget actor enforces. A zero
// field means unlimited. Package runtime derives the defaults from the
// machine (RLIMIT_NOFILE, memory) and documents them.
type Budgets struct {
	// MaxConnections bounds open connections.
	MaxConnections int
	// MaxProcesses bounds active (not yet closed) processes server-wide.
	MaxProcesses int
	// MaxOpenFiles bounds the descriptors charged to connections
	// (FDsPerConnection each) and active processes (FDsPerProcess each).
	// FDReserve of them only new connections and first starts may use.
	MaxOpenFiles int
	FDReserve    int
	// MaxRetainedBytes bounds the output memory processes may hold:
	// each charges its retention plus its read-ahead (RetainedPerProcess)
	// while it runs, and its retention until its actor ends.
	MaxRetainedBytes int64
	// MaxOutboundBytes bounds the outbound queues server-wide: each
	// connection charges its OutboundQueueBytes while it is open.
	MaxOutboundBytes int64
	// OutboundQueueBytes is one connection's outbound queue budget.
	OutboundQueueBytes int
	// MaxInboundBytes bounds the bytes of requests being read, decoded
	// or handled server-wide, ConnInboundBytes those of one connection; a
	// message being read counts at the message limit once it outgrows
	// wire.LargeReadBytes (inbound.go). Each is at least the message limit.
	MaxInboundBytes  int64
	ConnInboundBytes int64
	// InboundAdmitWait bounds a large message's wait for the inbound
	// budgets before it is refused (0: DefaultInboundAdmitWait).
	InboundAdmitWait time.Duration
	// SlowConsumerTimeout closes a websocket connection whose outbound
	// queue makes no progress for this long (0: never).
	SlowConsumerTimeout time.Duration
	// RLimitNoFile is the process's descriptor limit, for messages.
	RLimitNoFile int
}

// Descriptor estimates charged to the open-files budget. A process holds
// its two output pipes, stdin, two pidfds and a cgroup directory while it
// runs (and a few more for a moment while it starts); a connection its
// socket (its fs worker opens files only while it answers, and a
// spawn or fs request that meets EMFILE anyway is refused as this budget).
// The reserve covers the difference.
const (
	FDsPerProcess    = 6
	FDsPerConnection = 1
)

// FirstStarts is how many active processes a session may have and still
// use the budgets' reserve: a new connection and its first starts work
// while a greedy session is refused.
const FirstStarts = 2

// RetainedPerProcess is what one running process charges to the
// retained-output budget: its retention plus the output its readers may
// hold ahead of it (the facts queue and one read per stream). Once it is
// closed it holds only its retention (readAhead returns).
func RetainedPerProcess(cfg ProcConfig) int64 {
	return int64(cfg.RetainBytes) + readAhead(cfg)
}

// readAhead is the output a running process's readers may hold beyond its
// retention: the facts queue and one read per stream.
func readAhead(cfg ProcConfig) int64 {
	read := min(maxReadChunk, max(cfg.RetainBytes, 1))
	return int64(factsCap+2) * int64(read)
}

// BudgetError is a refusal by a budget: it names the limit, its value and
// the setting that changes it.
type BudgetError struct {
	Limit  string // e.g. "processes per session"
	Value  string // the limit's value, e.g. "4096" or "1.0 GiB"
	Flag   string // the runtimed serve flag (or Config field) that sets it
	Detail string // the state that made it refuse
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("limit reached: %s = %s (%s): %s", e.Limit, e.Value, e.Flag, e.Detail)
}

// Wire returns the JSON-RPC error of the refusal.
func (e *BudgetError) Wire() *wire.Error {
	return wire.ErrBudget(e.Limit, e.Value, e.Flag, e.Detail)
}

// ErrBudget matches every *BudgetError with errors.Is.
var ErrBudget = errors.New("actors: budget exhausted")

func (e *BudgetError) Is(target error) bool { return target == ErrBudget }

// budgetMailboxCap bounds requests to the budget actor; senders block (with ctx).
const budgetMailboxCap = 64

// charge is what one acquisition holds. A process's readAhead is part of
// retained while it runs and returns when it closes; the rest of retained
// returns when its actor ends.
type charge struct {
	conns, procs, fds int
	retained          int64
	readAhead         int64
	outbound          int64
}

type budgetMsg interface{ isBudgetMsg() }

type acquireMsg struct {
	want       charge
	privileged bool // may use the reserve
	reply      chan<- *BudgetError
}

// releaseMsg returns a charge now (a connection's end, a failed spawn).
type releaseMsg struct{ c charge }

// bindMsg hands a started process's charge to the actor, which returns its
// process and fd parts when the process is closed and its retained part
// when the actor ends.
type bindMsg struct {
	ref *ProcessRef
	c   charge
}

type usageMsg struct{ reply chan<- BudgetUsage }

func (acquireMsg) isBudgetMsg() {}
func (releaseMsg) isBudgetMsg() {}
func (bindMsg) isBudgetMsg()    {}
func (usageMsg) isBudgetMsg()   {}

// BudgetUsage is the budget actor's current accounting.
type BudgetUsage struct {
	Connections, Processes, OpenFiles int
	RetainedBytes, OutboundBytes      int64
	InboundBytes                      int64 // requests being read or handled (inbound.go)
	InboundWaiting                    int   // large messages waiting for the inbound budgets
}

type boundProc struct {
	ref    *ProcessRef
	c      charge
	closed bool // its process and fd parts were returned
}

// budgets is the budget actor.
//
// Immutable: lim, mbox, done. Owned by run: used, bound, sinceSweep,
// inbound.
type budgets struct {
	lim  Budgets
	mbox chan budgetMsg
	done chan struct{}

	used       charge
	bound      []boundProc
	sinceSweep int
	inbound    inboundState
}

func newBudgets(lim Budgets) *budgets {
	return &budgets{lim: lim, mbox: make(chan budgetMsg, budgetMailboxCap), done: make(chan struct{})}
}

func (b *budgets) run(stop <-chan struct{}) {
	defer close(b.done)
	for {
		select {
		case m := <-b.mbox:
			b.handle(m)
		case <-stop:
			return
		}
	}
}

func (b *budgets) handle(m budgetMsg) {
	switch m := m.(type) {
	case acquireMsg:
		err := b.check(m.want, m.privileged)
		if err != nil && len(b.bound) > 0 {
			b.sweep() // closed processes may have returned enough
			err = b.check(m.want, m.privileged)
		}
		if err == nil {
			b.add(m.want, 1)
		}
		m.reply <- err
	case releaseMsg:
		b.add(m.c, -1)
	case bindMsg:
		b.bound = append(b.bound, boundProc{ref: m.ref, c: m.c})
		if b.sinceSweep++; b.sinceSweep >= 256 {
			b.sweep()
		}
	case usageMsg:
		b.sweep()
		m.reply <- BudgetUsage{Connections: b.used.conns, Processes: b.used.procs, OpenFiles: b.used.fds,
			RetainedBytes: b.used.retained, OutboundBytes: b.used.outbound, InboundBytes: b.inbound.used,
			InboundWaiting: len(b.inbound.waiting)}
	default:
		b.handleInbound(m)
	}
}

func (b *budgets) add(c charge, sign int) {
	b.used.conns += sign * c.conns
	b.used.procs += sign * c.procs
	b.used.fds += sign * c.fds
	b.used.retained += int64(sign) * c.retained
	b.used.outbound += int64(sign) * c.outbound
}

// sweep returns the charges of processes that closed (processes, fds) or
// whose actor ended (retained output).
func (b *budgets) sweep() {
	b.sinceSweep = 0
	kept := b.bound[:0]
	for _, p := range b.bound {
		closing := charge{procs: p.c.procs, fds: p.c.fds, retained: p.c.readAhead}
		if !p.closed && isClosed(p.ref.Closed()) {
			p.closed = true
			b.add(closing, -1)
		}
		if !p.ref.Alive() {
			if !p.closed {
				b.add(closing, -1)
			}
			b.add(charge{retained: p.c.retained - p.c.readAhead}, -1)
			continue
		}
		kept = append(kept, p)
	}
	clear(b.bound[len(kept):])
	b.bound = kept
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// check reports the first budget that want would exceed. A privileged
// acquisition (a connection, a session's first starts) may use the whole of
// each budget; any other must leave the reserve free: FDReserve
// descriptors, and room for ReservedFirstStarts processes (at most half of
// a budget).
func (b *budgets) check(want charge, privileged bool) *BudgetError {
	l := b.lim
	if want.conns > 0 && l.MaxConnections > 0 && b.used.conns+want.conns > l.MaxConnections {
		return &BudgetError{Limit: "connections", Value: fmt.Sprint(l.MaxConnections), Flag: "--max-connections",
			Detail: fmt.Sprintf("%d connections are open", b.used.conns)}
	}
	if want.outbound > 0 && l.MaxOutboundBytes > 0 && b.used.outbound+want.outbound > l.MaxOutboundBytes {
		return &BudgetError{Limit: "outbound queue memory", Value: FormatBytes(l.MaxOutboundBytes), Flag: "--max-outbound-bytes",
			Detail: fmt.Sprintf("%d connections hold %s of outbound queue each", b.used.conns, FormatBytes(int64(l.OutboundQueueBytes)))}
	}
	reserved := func(total, per int64) int64 {
		if privileged {
			return 0
		}
		return min(total/2, per*ReservedFirstStarts)
	}
	if want.procs > 0 && l.MaxProcesses > 0 {
		res := reserved(int64(l.MaxProcesses), 1)
		if int64(b.used.procs+want.procs) > int64(l.MaxProcesses)-res {
			return &BudgetError{Limit: "processes", Value: fmt.Sprint(l.MaxProcesses), Flag: "--max-processes-total",
				Detail: fmt.Sprintf("%d processes are active on this server%s", b.used.procs, reserveNote(res, "process slots"))}
		}
	}
	if want.fds > 0 && l.MaxOpenFiles > 0 {
		res := 0
		if !privileged {
			res = min(l.FDReserve, l.MaxOpenFiles/2)
		}
		if b.used.fds+want.fds > l.MaxOpenFiles-res {
			return &BudgetError{Limit: "open files", Value: fmt.Sprint(l.MaxOpenFiles), Flag: "--max-open-files",
				Detail: fmt.Sprintf("%d descriptors are in use by connections and processes%s", b.used.fds, reserveNote(int64(res), "descriptors"))}
		}
	}
	if want.retained > 0 && l.MaxRetainedBytes > 0 {
		res := reserved(l.MaxRetainedBytes, want.retained)
		if b.used.retained+want.retained > l.MaxRetainedBytes-res {
			return &BudgetError{Limit: "retained output memory", Value: FormatBytes(l.MaxRetainedBytes), Flag: "--max-retained-bytes",
				Detail: fmt.Sprintf("%s is held by %d processes (up to %s each while running, its retention once closed)%s",
					FormatBytes(b.used.retained), len(b.bound), FormatBytes(want.retained), reserveNote(res, "bytes"))}
		}
	}
	return nil
}

// ReservedFirstStarts is how many first starts the reserve of the process
// and retained-output budgets holds room for.
const ReservedFirstStarts = 64

// reserveNote tells a refused session that part of a budget is kept for
// new connections and sessions' first starts.
func reserveNote(reserve int64, what string) string {
	if reserve <= 0 {
		return ""
	}
	if what == "bytes" {
		return fmt.Sprintf("; %s more are kept for new sessions' first starts", FormatBytes(reserve))
	}
	return fmt.Sprintf("; %d more %s are kept for new connections and sessions' first starts", reserve, what)
}

// FormatBytes prints n in binary units for messages ("1.5 GiB").
func FormatBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// acquire asks the budget actor for c. A nil *BudgetError means granted.
func (s *Supervisor) acquire(ctx context.Context, c charge, privileged bool) (*BudgetError, error) {
	return ask(ctx, s.budgets.mbox, s.budgets.done, func(r chan<- *BudgetError) budgetMsg {
		return acquireMsg{want: c, privileged: privileged, reply: r}
	})
}

// release returns c (best effort: after a stop nothing is counted any more).
func (s *Supervisor) release(c charge) {
	_ = send(context.Background(), s.budgets.mbox, budgetMsg(releaseMsg{c: c}), s.budgets.done)
}

// AcquireConnection charges a new connection (its descriptor and its
// outbound queue budget); the error is a *BudgetError naming the limit.
// Call the returned function when the connection has ended.
func (s *Supervisor) AcquireConnection(ctx context.Context) (release func(), err error) {
	c := charge{conns: 1, fds: FDsPerConnection, outbound: int64(s.cfg.Budgets.OutboundQueueBytes)}
	berr, err := s.acquire(ctx, c, true)
	if err != nil {
		return nil, err
	}
	if berr != nil {
		return nil, berr
	}
	done := false
	return func() {
		if !done {
			done = true
			s.release(c)
		}
	}, nil
}

// BudgetUsage returns the current accounting (after returning the charges
// of closed processes).
func (s *Supervisor) BudgetUsage(ctx context.Context) (BudgetUsage, error) {
	return ask(ctx, s.budgets.mbox, s.budgets.done, func(r chan<- BudgetUsage) budgetMsg { return usageMsg{reply: r} })
}

// processCharge is what one process start charges.
func (s *Supervisor) processCharge() charge {
	return charge{procs: 1, fds: FDsPerProcess, retained: RetainedPerProcess(s.cfg.Proc), readAhead: readAhead(s.cfg.Proc)}
}

// fdExhausted reports a spawn that failed for lack of descriptors (the
// estimate was short, or something else holds them): it is reported as the
// open-files budget, not as an internal error.
func fdExhausted(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}
