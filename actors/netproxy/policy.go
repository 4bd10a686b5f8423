package netproxy

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Mode is the network mode of a policy: Full allows every method, Limited
// only GET, HEAD and OPTIONS over plain HTTP (no CONNECT, no SOCKS5).
type Mode int

const (
	// Full lets every method and tunnel through, subject to the domains.
	Full Mode = iota
	// Limited allows GET, HEAD and OPTIONS only.
	Limited
)

// String is the wire spelling of m.
func (m Mode) String() string {
	if m == Limited {
		return "limited"
	}
	return "full"
}

// Protocol is how a destination was asked for.
type Protocol string

// The protocols, spelled as in network/policyRequest.
const (
	HTTP         Protocol = "http"
	HTTPSConnect Protocol = "https_connect"
	SOCKS5TCP    Protocol = "socks5_tcp"
	SOCKS5UDP    Protocol = "socks5_udp"
)

// Reasons of a decision (the reference's spellings).
const (
	ReasonAllowed         = "allow"
	ReasonDenied          = "denied"
	ReasonNotAllowed      = "not_allowed"
	ReasonNotAllowedLocal = "not_allowed_local"
	ReasonMethod          = "method_not_allowed"
	// ReasonMITMRequired: a CONNECT in limited mode (the method inside a
	// tunnel cannot be checked without decrypting it).
	ReasonMITMRequired = "mitm_required"
	ReasonFloor        = "denied" // the operator floor reads as a deny to the client
	// ReasonUnresolvable: a name that resolved to no address.
	ReasonUnresolvable = "not_allowed"
)

// Sources of a decision.
const (
	SourceBaseline = "baseline_policy"
	SourceMode     = "mode_guard"
	SourceDecider  = "decider"
)

// Sentinel errors.
var (
	// ErrPattern is wrapped by every *PatternError.
	ErrPattern = errors.New("netproxy: bad domain pattern")
)

// PatternError names a pattern that does not parse and the field it came
// from (so the wire can answer -32602 naming it).
type PatternError struct {
	Field   string // e.g. networkProxy.proxy.domains
	Pattern string
	Reason  string
}

func (e *PatternError) Error() string {
	return fmt.Sprintf("%s: pattern %q: %s", e.Field, e.Pattern, e.Reason)
}

// Unwrap makes errors.Is(err, ErrPattern) true.
func (e *PatternError) Unwrap() error { return ErrPattern }

// Policy is what a client (and the operator) asks for.
type Policy struct {
	Allow []string // patterns: host, *.d, **.d, * (allow only)
	Deny  []string // patterns: host, *.d, **.d
	// Floor are the operator's patterns that no client can allow: they are
	// checked first and win over every allow, explicit or asked.
	Floor             []string
	Mode              Mode
	AllowLocalBinding bool
}

type patKind int

const (
	patExact patKind = iota
	patSub           // *.d: subdomains of d, not d
	patApex          // **.d: d and its subdomains
	patAny           // *
)

type pattern struct {
	kind patKind
	host string // normalized (lower case, no trailing dot, IPv6 unbracketed)
}

func (p pattern) match(host string) bool {
	switch p.kind {
	case patAny:
		return true
	case patExact:
		return host == p.host
	case patSub:
		return strings.HasSuffix(host, "."+p.host)
	case patApex:
		return host == p.host || strings.HasSuffix(host, "."+p.host)
	}
	return false
}

// Matcher is a compiled Policy. It is immutable and safe for concurrent use.
type Matcher struct {
	allow, deny, floor []pattern
	mode               Mode
	allowLocal         bool
}

// Compile parses p. field names where a bad pattern came from; the floor
// is reported as "floor".
func Compile(p Policy, field string) (*Matcher, error) {
	m := &Matcher{mode: p.Mode, allowLocal: p.AllowLocalBinding}
	var err error
	if m.floor, err = parsePatterns(p.Floor, "floor", false); err != nil {
		return nil, err
	}
	if m.deny, err = parsePatterns(p.Deny, field, false); err != nil {
		return nil, err
	}
	if m.allow, err = parsePatterns(p.Allow, field, true); err != nil {
		return nil, err
	}
	return m, nil
}

// ParsePattern checks one pattern; asAllow says whether "*" is acceptable.
func ParsePattern(s string, asAllow bool) error {
	_, err := parsePattern(s, "pattern", asAllow)
	return err
}

func parsePatterns(in []string, field string, asAllow bool) ([]pattern, error) {
	out := make([]pattern, 0, len(in))
	for _, s := range in {
		p, err := parsePattern(s, field, asAllow)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

func parsePattern(s, field string, asAllow bool) (pattern, error) {
	bad := func(why string) (pattern, error) {
		return pattern{}, &PatternError{Field: field, Pattern: s, Reason: why}
	}
	if s == "*" {
		if !asAllow {
			return bad(`"*" is only an allow`)
		}
		return pattern{kind: patAny}, nil
	}
	kind, rest := patExact, s
	switch {
	case strings.HasPrefix(s, "**."):
		kind, rest = patApex, s[3:]
	case strings.HasPrefix(s, "*."):
		kind, rest = patSub, s[2:]
	}
	if strings.Contains(rest, "*") {
		return bad("a wildcard is only allowed as a leading *. or **.")
	}
	h, ok := NormalizeHost(rest)
	if !ok {
		return bad("not a host name or IP address")
	}
	if kind != patExact {
		if _, err := netip.ParseAddr(h); err == nil {
			return bad("a wildcard cannot apply to an IP address")
		}
	}
	return pattern{kind: kind, host: h}, nil
}

// NormalizeHost lower-cases a host, drops one trailing dot and IPv6
// brackets, and checks it is a DNS name (LDH labels, 1..253 bytes) or an
// IP literal. IPv6 zones are refused.
func NormalizeHost(h string) (string, bool) {
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
		a, err := netip.ParseAddr(h)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return "", false
		}
		return a.String(), true
	}
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Zone() != "" {
			return "", false
		}
		return a.Unmap().String(), true
	}
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if h == "" || len(h) > 253 {
		return "", false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return "", false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
			if !ok || (c == '-' && (i == 0 || i == len(label)-1)) {
				return "", false
			}
		}
	}
	if isNumericish(h) {
		// "1.2.3" or "0x7f.1": names that some resolvers read as IPv4.
		return "", false
	}
	return h, true
}

// isNumericish reports a name whose last label is all digits or hex
// (inet_aton-style literals like 2130706433 or 0x7f.0.0.1).
func isNumericish(h string) bool {
	last := h[strings.LastIndexByte(h, '.')+1:]
	if strings.HasPrefix(last, "0x") {
		return true
	}
	for i := 0; i < len(last); i++ {
		if last[i] < '0' || last[i] > '9' {
			return false
		}
	}
	return true
}

// Verdict is the policy's answer before the destination is resolved.
type Verdict struct {
	Allow  bool
	Source string
	Reason string
	// Askable is true for a host the policy does not cover (not_allowed):
	// the only kind of refusal a client's answer can turn into an allow.
	Askable bool
	// Floor is true when the operator floor refused.
	Floor bool
}

// Mode returns the compiled mode.
func (m *Matcher) Mode() Mode { return m.mode }

// AllowLocalBinding reports whether non-public destinations are allowed.
func (m *Matcher) AllowLocalBinding() bool { return m.allowLocal }

// Decide judges host (as asked, before resolution) for protocol and
// method. host must already be normalized (NormalizeHost); an empty host
// is refused.
func (m *Matcher) Decide(host string, proto Protocol, method string) Verdict {
	if host == "" {
		return Verdict{Source: SourceBaseline, Reason: ReasonNotAllowed}
	}
	if matchAny(m.floor, host) {
		return Verdict{Source: SourceBaseline, Reason: ReasonFloor, Floor: true}
	}
	if matchAny(m.deny, host) {
		return Verdict{Source: SourceBaseline, Reason: ReasonDenied}
	}
	if a, err := netip.ParseAddr(host); err == nil && !IsPublic(a) || host == "localhost" || strings.HasSuffix(host, ".localhost") {
		if !m.LocalAllowed(host) {
			return Verdict{Source: SourceBaseline, Reason: ReasonNotAllowedLocal}
		}
		return Verdict{Allow: true, Source: SourceBaseline, Reason: ReasonAllowed}
	}
	if matchAny(m.allow, host) {
		return Verdict{Allow: true, Source: SourceBaseline, Reason: ReasonAllowed}
	}
	return Verdict{Source: SourceBaseline, Reason: ReasonNotAllowed, Askable: true}
}

// LocalAllowed reports whether host may reach a non-public address:
// allowLocalBinding, or an exact (not wildcard) allow of host itself.
func (m *Matcher) LocalAllowed(host string) bool {
	if m.allowLocal {
		return true
	}
	for _, p := range m.allow {
		if p.kind == patExact && p.host == host {
			return true
		}
	}
	return false
}

// CheckResolved judges the addresses host resolved to: a non-public one
// refuses the whole destination unless LocalAllowed(host). The floor and
// deny lists are also checked against the literal addresses, so an
// operator's "10.0.0.1" deny holds for names that resolve there.
func (m *Matcher) CheckResolved(host string, addrs []netip.Addr) Verdict {
	if len(addrs) == 0 {
		return Verdict{Source: SourceBaseline, Reason: ReasonUnresolvable}
	}
	for _, a := range addrs {
		s := a.Unmap().String()
		if matchAny(m.floor, s) {
			return Verdict{Source: SourceBaseline, Reason: ReasonFloor, Floor: true}
		}
		if matchAny(m.deny, s) {
			return Verdict{Source: SourceBaseline, Reason: ReasonDenied}
		}
		if !IsPublic(a) && !m.LocalAllowed(host) {
			return Verdict{Source: SourceBaseline, Reason: ReasonNotAllowedLocal}
		}
	}
	return Verdict{Allow: true, Source: SourceBaseline, Reason: ReasonAllowed}
}

// ModeGuard judges the mode, apart from the domains (the reference
// reports it as a decision of its own, scope "non_domain"): in limited
// mode only GET, HEAD and OPTIONS over plain HTTP pass; a CONNECT is
// mitm_required, anything else method_not_allowed.
func (m *Matcher) ModeGuard(proto Protocol, method string) Verdict {
	if m.mode != Limited {
		return Verdict{Allow: true, Source: SourceMode, Reason: ReasonAllowed}
	}
	switch {
	case proto == HTTP && (method == "GET" || method == "HEAD" || method == "OPTIONS"):
		return Verdict{Allow: true, Source: SourceMode, Reason: ReasonAllowed}
	case proto == HTTPSConnect:
		return Verdict{Source: SourceMode, Reason: ReasonMITMRequired}
	}
	return Verdict{Source: SourceMode, Reason: ReasonMethod}
}

func matchAny(ps []pattern, host string) bool {
	for _, p := range ps {
		if p.match(host) {
			return true
		}
	}
	return false
}
