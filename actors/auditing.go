package actors

import (
	"context"
	"encoding/json"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/runtimed/runtimed/actors/audit"
	"github.com/runtimed/runtimed/actors/netproxy"
	"github.com/runtimed/runtimed/wire"
)

// Auditor receives the audit events the actors raise (package audit's Log
// implements it). Like Metrics, it must be safe for concurrent use and
// must never block: it is called from process actors and connections.
type Auditor interface {
	Audit(e audit.Event)
}

// Watcher learns of every process Start starts, with its start event (the
// web console); it must not block. It follows the process through the
// ref (Subscribe: a lag-mode subscriber that never holds the process back).
type Watcher interface {
	Started(ref *ProcessRef, e audit.Event)
}

type nopAuditor struct{}

func (nopAuditor) Audit(audit.Event) {}

// Who is who asked for something: the token's name, the client, the
// session and the connection. It is immutable once made.
type Who struct {
	Token   string
	Client  string
	Session string
	Peer    string
	Conn    uint64
}

func (w *Who) event(typ string) audit.Event {
	e := audit.Event{Type: typ}
	if w != nil {
		e.Token, e.Client, e.Session, e.Peer, e.Conn = w.Token, w.Client, w.Session, w.Peer, w.Conn
	}
	return e
}

// TokenName is the name of the token the process was started with ("" for
// a process started without one: no auth, the Go API).
func (r *ProcessRef) TokenName() string {
	if r.who == nil {
		return ""
	}
	return r.who.Token
}

// Start admits and starts a process (see admit for the checks), and
// audits the start or its refusal.
func (s *Supervisor) Start(ctx context.Context, owner Owner, req StartRequest) (StartResult, error) {
	res, err := s.admit(ctx, owner, req)
	if _, nop := s.audit.(nopAuditor); nop && s.cfg.Watch == nil {
		return res, err
	}
	if err != nil {
		e := startEvent(audit.ProcessRefused, &req)
		if se, ok := err.(*StartError); ok {
			e.Check = se.Check.String()
			if se.Field != "" {
				e.Check += " (" + se.Field + ")"
			}
			e.Reason = se.Err.Error()
		} else {
			e.Reason = err.Error()
		}
		s.audit.Audit(e)
		return res, err
	}
	e := startEvent(audit.ProcessStart, &req)
	e.PID = res.Ref.pid
	e.Sandbox = sandboxSummary(req.Sandbox, res.Sandboxed, s.cfg.DefaultSandbox)
	e.Time = time.Now().UTC()
	s.audit.Audit(e)
	if s.cfg.Watch != nil {
		s.cfg.Watch.Started(res.Ref, e)
	}
	return res, err
}

func startEvent(typ string, req *StartRequest) audit.Event {
	e := req.Who.event(typ)
	e.Process, e.Argv, e.Cwd, e.TTY = req.ID, req.Argv, req.Cwd, req.TTY
	for k := range req.Env {
		e.EnvNames = append(e.EnvNames, k)
	}
	sort.Strings(e.EnvNames)
	e.Limits = limitsMap(req)
	switch {
	case req.Network.LaunchProxy:
		e.Network = "proxy-launch"
	case req.Network.Enforce && req.Network.Managed:
		e.Network = "managed"
	case req.Network.Enforce:
		e.Network = "enforce"
	}
	if m := req.Metadata; m != nil {
		if m.ThreadID != nil {
			e.ThreadID = *m.ThreadID
		}
		if m.ToolCallID != nil {
			e.ToolCallID = *m.ToolCallID
		}
	}
	return e
}

func limitsMap(req *StartRequest) map[string]string {
	l := req.Limits
	m := map[string]string{}
	add := func(k string, v uint64) {
		if v > 0 {
			m[k] = strconv.FormatUint(v, 10)
		}
	}
	add("memoryBytes", l.MemoryBytes)
	add("pids", l.Pids)
	add("cpuSeconds", l.CPUSeconds)
	add("openFiles", l.OpenFiles)
	add("fileSizeBytes", l.FileSizeBytes)
	if req.Timeout > 0 {
		m["timeout"] = req.Timeout.String()
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

// sandboxSummary: "none", or "linux: fs=<n entries|full> network=<on|off>"
// (the floor's name when the operator's default applied).
func sandboxSummary(sb *wire.Sandbox, sandboxed bool, floor string) string {
	if !sandboxed {
		return "none"
	}
	if sb == nil {
		return "floor:" + floor
	}
	var b strings.Builder
	b.WriteString("linux fs=")
	if sb.FS == nil {
		b.WriteString("unrestricted")
	} else {
		b.WriteString(strconv.Itoa(len(sb.FS.Entries)) + " entries")
	}
	if sb.Network {
		b.WriteString(" network=on")
	} else {
		b.WriteString(" network=off")
	}
	return b.String()
}

// auditExit is the process actor's exit event (called once, by run).
func (p *process) auditExit(code int) {
	if p.cfg.audit == nil {
		return
	}
	if _, nop := p.cfg.audit.(nopAuditor); nop {
		return
	}
	e := p.who.event(audit.ProcessExit)
	e.Process, e.PID, e.Limit, e.BytesOut = p.id, p.pid, p.limit, p.bytesOut
	e.ExitCode = &code
	if !p.startedAt.IsZero() {
		e.DurationMs = time.Since(p.startedAt).Milliseconds()
	}
	e.Reason = EndReason(p.limit, p.timedOut, p.phase == phaseDraining)
	p.cfg.audit.Audit(e)
}

// auditConn raises a connection-level event with the connection's identity.
func (c *conn) auditEvent(typ string) audit.Event {
	e := audit.Event{Type: typ, Token: c.opts.TokenName, Peer: c.opts.Peer, Conn: c.opts.ConnID, Client: c.clientName}
	if c.session != nil {
		e.Session = c.session.ID
	}
	return e
}

// who is the identity a start of this connection carries.
func (c *conn) who() *Who {
	w := &Who{Token: c.opts.TokenName, Client: c.clientName, Peer: c.opts.Peer, Conn: c.opts.ConnID}
	if c.session != nil {
		w.Session = c.session.ID
	}
	return w
}

// auditFs raises an fs.change event for a successful mutating fs method.
func (c *conn) auditFs(msg wire.Message) {
	if _, nop := c.sup.audit.(nopAuditor); nop {
		return
	}
	var op string
	switch msg.Method {
	case wire.MethodFsWriteFile:
		op = "write"
	case wire.MethodFsRemove:
		op = "remove"
	case wire.MethodFsCopy:
		op = "copy"
	case wire.MethodFsCreateDirectory:
		op = "mkdir"
	default:
		return
	}
	var p struct {
		Path        string `json:"path"`
		Source      string `json:"sourcePath"`
		Destination string `json:"destinationPath"`
		Data        string `json:"dataBase64"`
	}
	_ = json.Unmarshal(msg.Params, &p)
	e := c.auditEvent(audit.FsChange)
	e.Method, e.Op, e.Path = msg.Method, op, p.Path
	if op == "copy" {
		e.Path, e.Dest = p.Source, p.Destination
	}
	if op == "write" {
		n := int64(len(p.Data) / 4 * 3)
		if l := len(p.Data); l > 0 && p.Data[l-1] == '=' {
			n--
			if l > 1 && p.Data[l-2] == '=' {
				n--
			}
		}
		e.Size = &n
	}
	c.sup.audit.Audit(e)
}

// auditHTTP raises an http.request event: the method and the host only
// (the path and query may carry secrets).
func (c *conn) auditHTTP(method, rawURL string) {
	if _, nop := c.sup.audit.(nopAuditor); nop {
		return
	}
	e := c.auditEvent(audit.HTTPRequest)
	e.Method = method
	if u, err := url.Parse(rawURL); err == nil {
		e.Host = u.Host
	}
	c.sup.audit.Audit(e)
}

// auditNetwork raises a network.decision event for a managed-network
// proxy's decision (on the process's forwarder goroutine; never blocks).
func (s *Supervisor) auditNetwork(mn *ManagedNetwork, e netproxy.Event, decision string) {
	if _, nop := s.audit.(nopAuditor); nop {
		return
	}
	ev := mn.Who.event(audit.NetworkDecision)
	ev.Process, ev.Action, ev.Check, ev.Reason, ev.Method = mn.ProcessID, decision, e.Source, e.Reason, e.Method
	ev.Host = e.Host
	if e.Port > 0 {
		ev.Host = net.JoinHostPort(e.Host, strconv.Itoa(e.Port))
	}
	s.audit.Audit(ev)
}

// auditConn raises a connection or session event. It is kept out of line
// (and does nothing without an audit log) so that the connection's
// goroutine does not carry an Event in its frames: an idle connection's
// stack stays at its first size.
//
//go:noinline
func (c *conn) auditConn(typ string, cause error) {
	if _, nop := c.sup.audit.(nopAuditor); nop {
		return
	}
	e := c.auditEvent(typ)
	if cause != nil {
		e.Reason = cause.Error()
	}
	c.sup.audit.Audit(e)
}

// auditRefusedConn: a connection the budgets refused.
//
//go:noinline
func (s *Supervisor) auditRefusedConn(opts *ConnOptions, err error) {
	if _, nop := s.audit.(nopAuditor); nop {
		return
	}
	s.audit.Audit(audit.Event{Type: audit.Refused, Check: "budget (connection)", Token: opts.TokenName, Peer: opts.Peer, Conn: opts.ConnID, Reason: err.Error()})
}
