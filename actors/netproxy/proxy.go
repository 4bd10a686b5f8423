package netproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed is returned by Serve after Close.
var ErrClosed = errors.New("netproxy: proxy closed")

// ErrConfig is wrapped by configuration errors of New.
var ErrConfig = errors.New("netproxy: bad configuration")

// Resolver resolves names for the proxy (the sandbox never resolves).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Event is one decision, reported to Config.OnDecision.
type Event struct {
	Time time.Time
	// Scope is "domain" for the domain policy's decision, "non_domain" for
	// the mode guard's (limited mode), which follows an allowed domain
	// decision over HTTP, or stands alone for SOCKS5.
	Scope    string
	Allow    bool
	Source   string // baseline_policy, mode_guard, decider
	Reason   string // allowed, denied, not_allowed, not_allowed_local, method_not_allowed
	Protocol Protocol
	Host     string
	Port     int
	Method   string // the HTTP method, CONNECT, or "" for SOCKS5
	Client   string // the command's end of the connection (ip:port)
	Override bool   // the client's answer to an ask decided
	Floor    bool   // the operator floor refused
}

// Scopes of an Event.
const (
	ScopeDomain    = "domain"
	ScopeNonDomain = "non_domain"
)

// AskRequest is what AskFunc is asked about: a host the policy does not
// cover.
type AskRequest struct {
	Protocol Protocol
	Host     string
	Port     int
}

// AskFunc asks someone (network/policyRequest) whether a destination the
// policy does not cover may be reached. It must return when ctx ends;
// an error or a ctx end is a deny with reason not_allowed.
type AskFunc func(ctx context.Context, r AskRequest) (allow bool, reason string, err error)

// Limits bound what one proxy (one command) can hold. Zero fields take
// the defaults in DefaultLimits.
type Limits struct {
	MaxConns       int           // client connections, HTTP and SOCKS5 together
	MaxHeaderBytes int           // request line + headers of one HTTP request
	HeaderTimeout  time.Duration // to read one request's headers or the SOCKS5 handshake
	IdleTimeout    time.Duration // a tunnel or keep-alive connection with no byte either way
	StallTimeout   time.Duration // one write that cannot complete (a peer that stopped reading)
	DialTimeout    time.Duration // connecting upstream
	BufferSize     int           // per tunnel direction
	MaxUDPDests    int           // distinct destinations of one UDP association
}

// DefaultLimits are used for zero fields of Config.Limits.
var DefaultLimits = Limits{
	MaxConns:       128,
	MaxHeaderBytes: 32 << 10,
	HeaderTimeout:  10 * time.Second,
	IdleTimeout:    5 * time.Minute,
	StallTimeout:   30 * time.Second,
	DialTimeout:    10 * time.Second,
	BufferSize:     64 << 10,
	MaxUDPDests:    64,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	pick := func(v, def int) int {
		if v > 0 {
			return v
		}
		return def
	}
	pickD := func(v, def time.Duration) time.Duration {
		if v > 0 {
			return v
		}
		return def
	}
	return Limits{
		MaxConns:       pick(l.MaxConns, d.MaxConns),
		MaxHeaderBytes: pick(l.MaxHeaderBytes, d.MaxHeaderBytes),
		HeaderTimeout:  pickD(l.HeaderTimeout, d.HeaderTimeout),
		IdleTimeout:    pickD(l.IdleTimeout, d.IdleTimeout),
		StallTimeout:   pickD(l.StallTimeout, d.StallTimeout),
		DialTimeout:    pickD(l.DialTimeout, d.DialTimeout),
		BufferSize:     pick(l.BufferSize, d.BufferSize),
		MaxUDPDests:    pick(l.MaxUDPDests, d.MaxUDPDests),
	}
}

// Config configures one proxy.
type Config struct {
	Policy *Matcher // required
	// Resolver resolves names; nil uses net.DefaultResolver.
	Resolver Resolver
	// Dial connects to an already checked ip:port; nil uses a net.Dialer.
	// (Tests redirect here; the address given is always an IP literal.)
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// OnDecision is called once per decision, on the connection's
	// goroutine: it must not block (hand the event to a bounded queue).
	OnDecision func(Event)
	// Ask, if set, is asked about hosts the policy does not cover.
	Ask        AskFunc
	AskTimeout time.Duration // default 30 s
	// EnableSOCKS5UDP allows UDP ASSOCIATE.
	EnableSOCKS5UDP bool
	// ListenPacket opens the command-side UDP relay socket of a UDP
	// ASSOCIATE whose control connection arrived on local; nil binds a
	// UDP socket on local's IP (port 0) in the caller's namespace.
	ListenPacket func(local net.Addr) (net.PacketConn, error)
	Limits       Limits
}

// Stats are a proxy's counters.
type Stats struct {
	Allowed, Denied uint64
	ConnsRejected   uint64 // over MaxConns
	UDPDropped      uint64 // datagrams refused or malformed
	ActiveConns     int64
	TunnelBytesUp   uint64
	TunnelBytesDown uint64
}

// Proxy is one command's HTTP and SOCKS5 proxy.
type Proxy struct {
	cfg    Config     // immutable after New
	lim    Limits     // immutable after New
	dialer net.Dialer // immutable after New
	tr     *http.Transport
	srv    *http.Server

	ctx    context.Context // ends at Close: asks and dials of SOCKS5 connections
	cancel context.CancelFunc

	grp group // connections and goroutines; see group
	// serverConns are the HTTP server's connections whose goroutine is
	// counted in grp (written by the server's ConnState hook only).
	serverConns sync.Map

	allowed, denied, rejected, udpDropped atomic.Uint64
	up, down                              atomic.Uint64
	active                                atomic.Int64
}

// New checks cfg and returns a proxy that serves nothing yet.
func New(cfg Config) (*Proxy, error) {
	if cfg.Policy == nil {
		return nil, fmt.Errorf("%w: no policy", ErrConfig)
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.AskTimeout <= 0 {
		cfg.AskTimeout = 30 * time.Second
	}
	p := &Proxy{cfg: cfg, lim: cfg.Limits.withDefaults()}
	p.dialer = net.Dialer{Timeout: p.lim.DialTimeout, KeepAlive: 30 * time.Second}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.grp.init()
	p.initHTTP()
	return p, nil
}

// Stats returns the counters so far.
func (p *Proxy) Stats() Stats {
	return Stats{
		Allowed: p.allowed.Load(), Denied: p.denied.Load(),
		ConnsRejected: p.rejected.Load(), UDPDropped: p.udpDropped.Load(),
		ActiveConns:   p.active.Load(),
		TunnelBytesUp: p.up.Load(), TunnelBytesDown: p.down.Load(),
	}
}

// Close stops both proxies: listeners closed, every connection closed,
// and it returns once every goroutine of the proxy has ended (or ctx did).
func (p *Proxy) Close(ctx context.Context) error {
	p.cancel()
	for _, c := range p.grp.shut() {
		_ = c.Close()
	}
	_ = p.srv.Close()
	p.tr.CloseIdleConnections()
	return p.grp.wait(ctx)
}

// authorize decides one destination and, when allowed, resolves it; the
// addresses returned are the only ones the caller may dial. It reports
// exactly one Event.
func (p *Proxy) authorize(ctx context.Context, proto Protocol, rawHost string, port int, method, client string) ([]netip.Addr, Verdict, error) {
	host, ok := NormalizeHost(rawHost)
	if !ok {
		host = rawHost
	}
	// SOCKS5 in limited mode: refused before any domain decision.
	if proto == SOCKS5TCP || proto == SOCKS5UDP {
		if g := p.cfg.Policy.ModeGuard(proto, method); !g.Allow {
			p.report(Event{Scope: ScopeNonDomain, Source: g.Source, Reason: g.Reason, Protocol: proto, Host: host, Port: port, Method: method, Client: client})
			return nil, g, nil
		}
	}
	var v Verdict
	override := false
	if !ok || port <= 0 || port > 65535 {
		v = Verdict{Source: SourceBaseline, Reason: ReasonNotAllowed}
	} else {
		v = p.cfg.Policy.Decide(host, proto, method)
	}
	var addrs []netip.Addr
	resolved := false
	if !v.Allow && v.Askable && p.cfg.Ask != nil {
		// Only a host that resolves, and to public addresses, is worth a
		// reviewer's time (the reference checks the local ranges, with
		// the name resolved, before it asks).
		if a, err := p.cfg.Resolver.LookupNetIP(ctx, "ip", host); err != nil {
			p.report(Event{Scope: ScopeDomain, Source: v.Source, Reason: v.Reason, Protocol: proto, Host: host, Port: port, Method: method, Client: client})
			return nil, v, nil
		} else if rv := p.cfg.Policy.CheckResolved(host, a); !rv.Allow {
			p.report(Event{Scope: ScopeDomain, Source: rv.Source, Reason: rv.Reason, Protocol: proto, Host: host, Port: port, Method: method, Client: client, Floor: rv.Floor})
			return nil, rv, nil
		} else {
			addrs, resolved = a, true
		}
		actx, cancel := context.WithTimeout(ctx, p.cfg.AskTimeout)
		allow, reason, err := p.cfg.Ask(actx, AskRequest{Protocol: proto, Host: host, Port: port})
		cancel()
		override = err == nil
		switch {
		case err != nil:
			v = Verdict{Source: SourceDecider, Reason: ReasonNotAllowed}
		case allow:
			v = Verdict{Allow: true, Source: SourceDecider, Reason: ReasonAllowed}
		default:
			if reason == "" {
				reason = ReasonDenied
			}
			v = Verdict{Source: SourceDecider, Reason: reason}
		}
	}
	var rerr error
	if v.Allow && !resolved {
		if a, err := netip.ParseAddr(host); err == nil {
			addrs = []netip.Addr{a}
		} else {
			addrs, rerr = p.cfg.Resolver.LookupNetIP(ctx, "ip", host)
		}
		if rerr == nil {
			if rv := p.cfg.Policy.CheckResolved(host, addrs); !rv.Allow {
				v, addrs = rv, nil
			}
		}
	}
	if !v.Allow {
		addrs = nil
	}
	p.report(Event{Scope: ScopeDomain, Allow: v.Allow, Source: v.Source, Reason: v.Reason, Protocol: proto,
		Host: host, Port: port, Method: method, Client: client, Override: override, Floor: v.Floor})
	if rerr != nil {
		return nil, v, fmt.Errorf("netproxy: resolve %s: %w", host, rerr)
	}
	if v.Allow && proto != SOCKS5TCP && proto != SOCKS5UDP {
		if g := p.cfg.Policy.ModeGuard(proto, method); !g.Allow {
			p.report(Event{Scope: ScopeNonDomain, Source: g.Source, Reason: g.Reason, Protocol: proto, Host: host, Port: port, Method: method, Client: client})
			return nil, g, nil
		}
	}
	return addrs, v, nil
}

func (p *Proxy) report(e Event) {
	if e.Allow {
		p.allowed.Add(1)
	} else {
		p.denied.Add(1)
	}
	if p.cfg.OnDecision != nil {
		e.Time = time.Now()
		p.cfg.OnDecision(e)
	}
}

// dial connects to the first of addrs that answers; every conn it returns
// is tracked, so Close ends it.
func (p *Proxy) dial(ctx context.Context, network string, addrs []netip.Addr, port int) (net.Conn, error) {
	var last error = errors.New("no address")
	for _, a := range addrs {
		target := netip.AddrPortFrom(a.Unmap(), uint16(port)).String()
		var c net.Conn
		var err error
		dctx, cancel := context.WithTimeout(ctx, p.lim.DialTimeout)
		if p.cfg.Dial != nil {
			c, err = p.cfg.Dial(dctx, network, target)
		} else {
			c, err = p.dialer.DialContext(dctx, network, target)
		}
		cancel()
		if err != nil {
			last = err
			continue
		}
		tc := p.grp.track(c, nil)
		if tc == nil {
			return nil, ErrClosed
		}
		return tc, nil
	}
	return nil, last
}

func splitHostPort(hostport string, defPort int) (string, int, bool) {
	h, ps, err := net.SplitHostPort(hostport)
	if err != nil {
		// No port: the whole is the host.
		if defPort == 0 {
			return "", 0, false
		}
		return hostport, defPort, hostport != ""
	}
	n, err := strconv.Atoi(ps)
	if err != nil || n <= 0 || n > 65535 {
		return "", 0, false
	}
	return h, n, h != ""
}
