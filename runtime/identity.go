package runtime

import (
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/runtimed/runtimed/actors"
	"github.com/runtimed/runtimed/actors/audit"
	"github.com/runtimed/runtimed/actors/tokens"
)

// TokenSource looks up a presented bearer token and names it (package
// actors/tokens' Store, reloadable on SIGHUP, implements it). It must be
// safe for concurrent use.
type TokenSource interface {
	// Lookup returns the name of the presented token, or ok false.
	Lookup(presented string) (name string, ok bool)
}

// Auditor receives the server's audit events (package actors/audit's Log
// implements it); it must never block.
type Auditor = actors.Auditor

// tokenSource is the configured source: Config.Tokens, else
// Config.AuthToken named "default", else nil (no auth).
func (c Config) tokenSource() TokenSource {
	if c.Tokens != nil {
		return c.Tokens
	}
	if c.AuthToken != "" {
		return tokens.NewStore(tokens.Single(c.AuthToken))
	}
	return nil
}

// bearer is the token of "Authorization: Bearer <token>"; the scheme is
// case-insensitive (RFC 9110 section 11.1), spaces after it are skipped.
func bearer(r *http.Request) (string, bool) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimLeft(tok, " "), true
}

// identify checks the request's bearer token: the token's name, or ok
// false (audited as auth.refused). Without auth every request is
// anonymous ("", true).
func (s *Server) identify(r *http.Request) (name string, ok bool) {
	if s.tokens == nil {
		return "", true
	}
	tok, present := bearer(r)
	if present {
		name, ok = s.tokens.Lookup(tok)
	}
	if !ok {
		reason := "invalid bearer token"
		if !present {
			reason = "missing bearer token"
		}
		s.audit.Audit(audit.Event{Type: audit.AuthRefused, Peer: r.RemoteAddr, Reason: reason})
	}
	return name, ok
}

// Identify checks r's bearer token against the server's tokens, as the
// protocol's upgrade does (the console uses it for its login): the
// token's name, or false (audited).
func (s *Server) Identify(r *http.Request) (string, bool) { return s.identify(r) }

// LookupToken names a token presented some other way (the console's login
// form); a refusal is audited with peer.
func (s *Server) LookupToken(tok, peer string) (string, bool) {
	if s.tokens == nil {
		return "", true
	}
	name, ok := s.tokens.Lookup(tok)
	if !ok {
		s.audit.Audit(audit.Event{Type: audit.AuthRefused, Peer: peer, Reason: "invalid token (console login)"})
	}
	return name, ok
}

// AuthRequired reports whether clients must present a token.
func (s *Server) AuthRequired() bool { return s.tokens != nil }

// connIdentity is what a connection carries into its session.
type connIdentity struct {
	token string
	peer  string
}

var connSeq atomic.Uint64

// tokenLabels bounds the token label of runtimed_connections_by_token_total:
// the first maxTokenLabels names seen get their own label, later ones
// "other" (names come from the operator's file, but a file may be large).
const maxTokenLabels = 64

type tokenCounter struct {
	vec  *prometheus.CounterVec
	seen chan map[string]bool // a one-slot channel: the map's owner is whoever holds it
}

func newTokenCounter(reg *prometheus.Registry) *tokenCounter {
	t := &tokenCounter{
		vec:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runtimed_connections_by_token_total", Help: "Protocol connections accepted, by the name of the token presented (anonymous without auth; other beyond 64 names)."}, []string{"token"}),
		seen: make(chan map[string]bool, 1),
	}
	t.seen <- map[string]bool{}
	reg.MustRegister(t.vec)
	return t
}

func (t *tokenCounter) inc(name string) {
	if t == nil {
		return
	}
	if name == "" {
		name = "anonymous"
	}
	m := <-t.seen
	if !m[name] {
		if len(m) >= maxTokenLabels {
			name = "other"
		}
		m[name] = true
	}
	t.seen <- m
	t.vec.WithLabelValues(name).Inc()
}

type nopAudit struct{}

func (nopAudit) Audit(audit.Event) {}

// registerAuditMetrics exports the audit log's drop count when it keeps one.
func registerAuditMetrics(reg *prometheus.Registry, a Auditor) {
	d, ok := a.(interface{ Dropped() uint64 })
	if !ok {
		return
	}
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "runtimed_audit_dropped_total",
		Help: "Audit events lost: the queue was full (a stalled sink) or the write failed (a full disk)."},
		func() float64 { return float64(d.Dropped()) }))
}

// Watcher learns of every started process (see actors.Watcher).
type Watcher = actors.Watcher

// ProcessRef is a handle on a running process's actor (see actors.ProcessRef).
type ProcessRef = actors.ProcessRef

// TeeAuditor sends every event to each non-nil auditor.
func TeeAuditor(as ...Auditor) Auditor {
	var out tee
	for _, a := range as {
		if a != nil {
			out = append(out, a)
		}
	}
	switch len(out) {
	case 0:
		return nil
	case 1:
		return out[0]
	}
	return out
}

type tee []Auditor

// Dropped sums the drops of the auditors that count them.
func (t tee) Dropped() uint64 {
	var n uint64
	for _, a := range t {
		if d, ok := a.(interface{ Dropped() uint64 }); ok {
			n += d.Dropped()
		}
	}
	return n
}

func (t tee) Audit(e audit.Event) {
	for _, a := range t {
		a.Audit(e)
	}
}
