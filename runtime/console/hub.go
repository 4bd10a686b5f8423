package console

import (
	"crypto/rand"
	"encoding/hex"
	"sort"
	"sync/atomic"
	"time"

	"github.com/runtimed/runtimed/actors/audit"
	"github.com/runtimed/runtimed/runtime"
)

const (
	hubMailboxCap = 4096
	trailCap      = 64   // audit events kept per process
	maxRows       = 2000 // rows kept; the oldest ended ones go first
	historyCap    = 3600 // chart points: one per second for an hour
)

// row is one process as the console shows it (owned by the hub).
type row struct {
	N          uint64            `json:"n"`
	Token      string            `json:"token"`
	Client     string            `json:"client"`
	Session    string            `json:"session"`
	ID         string            `json:"processId"`
	PID        int               `json:"pid"`
	Argv       []string          `json:"argv"`
	Cwd        string            `json:"cwd"`
	TTY        bool              `json:"tty"`
	Sandbox    string            `json:"sandbox"`
	Limits     map[string]string `json:"limits,omitempty"`
	Network    string            `json:"network,omitempty"`
	ThreadID   string            `json:"threadId,omitempty"`
	ToolCallID string            `json:"toolCallId,omitempty"`
	Started    time.Time         `json:"started"`
	State      string            `json:"state"` // running, exited
	ExitCode   *int              `json:"exitCode,omitempty"`
	Limit      string            `json:"limit,omitempty"`
	BytesOut   int64             `json:"bytesOut"`
	DurationMs int64             `json:"durationMs,omitempty"`
	EndReason  string            `json:"endReason,omitempty"`

	ref   *runtime.ProcessRef
	trail []audit.Event
}

type point struct {
	T       int64 `json:"t"` // unix seconds
	Running int   `json:"running"`
	Started int   `json:"started"` // in that second
	Bytes   int64 `json:"bytes"`   // output of processes that exited in that second
}

// hub messages: a closed set.
type hubMsg interface{ hubMsg() }

type startedMsg struct {
	ref *runtime.ProcessRef
	e   audit.Event
}
type auditMsg struct{ e audit.Event }
type listMsg struct{ reply chan []row }
type getMsg struct {
	n     uint64
	reply chan *row
}
type loginMsg struct {
	token string
	reply chan string
}
type sessionMsg struct {
	id    string
	reply chan string
}
type logoutMsg struct{ id string }
type statsMsg struct{ reply chan []point }

func (startedMsg) hubMsg() {}
func (auditMsg) hubMsg()   {}
func (listMsg) hubMsg()    {}
func (getMsg) hubMsg()     {}
func (loginMsg) hubMsg()   {}
func (sessionMsg) hubMsg() {}
func (logoutMsg) hubMsg()  {}
func (statsMsg) hubMsg()   {}

// hub owns rows, byKey, logins and history; only run touches them.
type hub struct {
	mbox    chan hubMsg
	done    chan struct{}
	stop    chan struct{}
	dropped atomic.Uint64

	next    uint64
	rows    map[uint64]*row
	byKey   map[string]uint64 // conn/session + process id -> n
	logins  map[string]string // console session id -> token
	history []point
	cur     point
}

func newHub() *hub {
	return &hub{mbox: make(chan hubMsg, hubMailboxCap), done: make(chan struct{}), stop: make(chan struct{}),
		rows: map[uint64]*row{}, byKey: map[string]uint64{}, logins: map[string]string{}}
}

// post sends without blocking; a full mailbox drops (counted).
func (h *hub) post(m hubMsg) {
	select {
	case h.mbox <- m:
	default:
		h.dropped.Add(1)
	}
}

// ask sends m (waiting for room, bounded by the hub's end) and waits for
// its reply.
func ask[T any](h *hub, m hubMsg, reply chan T) (T, bool) {
	var zero T
	select {
	case h.mbox <- m:
	case <-h.done:
		return zero, false
	}
	select {
	case v := <-reply:
		return v, true
	case <-h.done:
		return zero, false
	}
}

func key(e audit.Event) string {
	return e.Session + "\x00" + e.Process
}

func (h *hub) run() {
	defer close(h.done)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	h.cur.T = time.Now().Unix()
	for {
		select {
		case <-h.stop:
			return
		case now := <-tick.C:
			h.sample(now)
		case m := <-h.mbox:
			h.handle(m)
		}
	}
}

func (h *hub) sample(now time.Time) {
	running := 0
	for _, r := range h.rows {
		if r.State == "running" {
			running++
		}
	}
	h.cur.Running = running
	h.history = append(h.history, h.cur)
	if len(h.history) > historyCap {
		h.history = h.history[len(h.history)-historyCap:]
	}
	h.cur = point{T: now.Unix()}
}

func (h *hub) handle(m hubMsg) {
	switch m := m.(type) {
	case startedMsg:
		h.next++
		e := m.e
		r := &row{N: h.next, Token: e.Token, Client: e.Client, Session: e.Session, ID: e.Process, PID: e.PID, Argv: e.Argv, Cwd: e.Cwd,
			TTY: e.TTY, Sandbox: e.Sandbox, Limits: e.Limits, Network: e.Network, ThreadID: e.ThreadID, ToolCallID: e.ToolCallID,
			Started: e.Time, State: "running", ref: m.ref, trail: []audit.Event{e}}
		if r.Started.IsZero() {
			r.Started = time.Now()
		}
		h.rows[r.N] = r
		h.byKey[key(e)] = r.N
		h.cur.Started++
		h.trim()
	case auditMsg:
		e := m.e
		if e.Type == audit.ProcessStart || e.Process == "" {
			return // starts come with their ref (startedMsg)
		}
		n, ok := h.byKey[key(e)]
		if !ok {
			return
		}
		r := h.rows[n]
		if len(r.trail) < trailCap {
			r.trail = append(r.trail, e)
		}
		if e.Type == audit.ProcessExit {
			r.State, r.ExitCode, r.Limit, r.BytesOut, r.DurationMs, r.EndReason = "exited", e.ExitCode, e.Limit, e.BytesOut, e.DurationMs, e.Reason
			h.cur.Bytes += e.BytesOut
		}
	case listMsg:
		out := make([]row, 0, len(h.rows))
		for _, r := range h.rows {
			out = append(out, *r)
		}
		sort.Slice(out, func(i, j int) bool { return out[i].N > out[j].N })
		m.reply <- out
	case getMsg:
		r, ok := h.rows[m.n]
		if !ok {
			m.reply <- nil
			return
		}
		cp := *r
		cp.trail = append([]audit.Event(nil), r.trail...)
		m.reply <- &cp
	case loginMsg:
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		id := hex.EncodeToString(b)
		if len(h.logins) > 10000 {
			clear(h.logins) // bounded: everybody logs in again
		}
		h.logins[id] = m.token
		m.reply <- id
	case sessionMsg:
		m.reply <- h.logins[m.id]
	case logoutMsg:
		delete(h.logins, m.id)
	case statsMsg:
		out := append([]point(nil), h.history...)
		m.reply <- append(out, h.cur)
	}
}

// trim drops the oldest ended rows beyond maxRows.
func (h *hub) trim() {
	if len(h.rows) <= maxRows {
		return
	}
	ns := make([]uint64, 0, len(h.rows))
	for n, r := range h.rows {
		if r.State != "running" {
			ns = append(ns, n)
		}
	}
	sort.Slice(ns, func(i, j int) bool { return ns[i] < ns[j] })
	for _, n := range ns {
		if len(h.rows) <= maxRows {
			break
		}
		r := h.rows[n]
		delete(h.byKey, r.Session+"\x00"+r.ID)
		delete(h.rows, n)
	}
}
