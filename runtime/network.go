package runtime

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/runtimed/runtimed/actors"
	"github.com/runtimed/runtimed/actors/netproxy"
	"github.com/runtimed/runtimed/wire"
)

// Network is a managed network (PROTOCOL.md section 7.5): the process
// reaches the network only through an HTTP and (optionally) a SOCKS5 proxy
// of its own that allow what the policy allows, and end with it. Patterns:
// "host" exact, "*.d" the subdomains of d, "**.d" d and its subdomains, "*"
// every host (Allow only). Deny wins over Allow, and the server's
// operator floor (Config.NetworkDeny) over both; loopback and private
// addresses are refused unless AllowLocalBinding or an exact Allow names
// them. Hosts no pattern covers are refused (the Go API sends no reviewer
// requests). A host that cannot enforce it (no network namespace for
// the proxies) refuses the Start: a managed network is never an open one.
type Network struct {
	Allow []string // host patterns the process may reach
	Deny  []string // host patterns it may not, whatever Allow says
	// Limited allows only GET, HEAD and OPTIONS over plain HTTP (no
	// CONNECT, no SOCKS5).
	Limited bool
	// AllowLocalBinding lets it reach loopback and private addresses
	// (CODEX_NETWORK_ALLOW_LOCAL_BINDING=1 in its environment).
	AllowLocalBinding bool
	// SOCKS5 adds a SOCKS5 proxy (ALL_PROXY=socks5h://...); SOCKS5UDP also
	// lets it relay UDP.
	SOCKS5, SOCKS5UDP bool
	// OnDecision, if set, receives each decision of the proxies, in order,
	// on one goroutine per process; it should return quickly: decisions
	// that find its queue full are dropped for it (the server still
	// counts and logs them). Local calls it for every decision before the
	// exit is reported; a Client may call it just after Wait returned.
	OnDecision func(NetworkDecision)
}

// NetworkDecision is one decision of a process's proxies
// (network/policyDecision).
type NetworkDecision struct {
	ProcessID string    // the process whose proxy decided
	Time      time.Time // when
	Allow     bool      // let through (true) or refused
	Scope     string    // "domain", or "non_domain" for limited mode's method guard
	Source    string    // baseline_policy, mode_guard, decider
	Reason    string    // allow, denied, not_allowed, not_allowed_local, method_not_allowed, ...
	Protocol  string    // http, https_connect, socks5_tcp, socks5_udp
	Host      string    // the destination as asked for (lower case)
	Port      int       // the destination port
	Method    string    // the HTTP method; "" for SOCKS5
	Override  bool      // a reviewer's answer decided
}

// decisionQueue bounds a Client process's decisions waiting for OnDecision.
const decisionQueue = 256

func (n *Network) validate() error {
	for i, p := range n.Allow {
		if err := netproxy.ParsePattern(p, true); err != nil {
			return invalid(fmt.Sprintf("Spec.Network.Allow[%d]", i), "%v", patternWhy(err))
		}
	}
	for i, p := range n.Deny {
		if err := netproxy.ParsePattern(p, false); err != nil {
			return invalid(fmt.Sprintf("Spec.Network.Deny[%d]", i), "%v", patternWhy(err))
		}
	}
	if n.SOCKS5UDP && !n.SOCKS5 {
		return invalid("Spec.Network.SOCKS5UDP", "needs SOCKS5")
	}
	return nil
}

func patternWhy(err error) string {
	if pe, ok := err.(*netproxy.PatternError); ok {
		return fmt.Sprintf("pattern %q: %s", pe.Pattern, pe.Reason)
	}
	return err.Error()
}

// wire is process/start's networkProxy for n.
func (n *Network) wire() json.RawMessage {
	doms := map[string]string{}
	for _, p := range n.Allow {
		doms[p] = "allow"
	}
	for _, p := range n.Deny {
		doms[p] = "deny" // a pattern in both is a deny: deny wins
	}
	mode := "full"
	if n.Limited {
		mode = "limited"
	}
	b, _ := json.Marshal(map[string]any{"proxy": map[string]any{
		"enabled": true, "enableSocks5": n.SOCKS5, "enableSocks5Udp": n.SOCKS5UDP, "mode": mode,
		"allowUpstreamProxy": false, "dangerouslyAllowAllUnixSockets": false,
		"domains": doms, "allowLocalBinding": n.AllowLocalBinding,
	}})
	return b
}

func decisionOf(processID string, e netproxy.Event) NetworkDecision {
	return NetworkDecision{ProcessID: processID, Time: e.Time, Allow: e.Allow, Scope: e.Scope, Source: e.Source, Reason: e.Reason,
		Protocol: string(e.Protocol), Host: e.Host, Port: e.Port, Method: e.Method, Override: e.Override}
}

func decisionFromWire(p wire.PolicyDecisionParams) NetworkDecision {
	ts, _ := time.Parse(wire.PolicyTimestampLayout, p.Timestamp)
	d := NetworkDecision{ProcessID: p.ProcessID, Time: ts, Allow: p.Decision == "allow", Scope: p.Scope, Source: p.Source,
		Reason: p.Reason, Protocol: p.Protocol, Host: p.Host, Port: p.Port, Override: p.PolicyOverride}
	if p.Method != nil {
		d.Method = *p.Method
	}
	return d
}

// localNetwork is Local's start request for spec.Network: the same
// networkProxy the wire carries (so one parser and one admission check,
// the operator's floor included, judge both), reporting to OnDecision.
func localNetwork(id string, n *Network) (actors.NetworkRequest, error) {
	np, werr := wire.ParseNetworkProxy(n.wire())
	if werr != nil {
		return actors.NetworkRequest{}, rpcErr(werr)
	}
	req := actors.NetworkRequest{LaunchProxy: true, Enforce: true, Proxy: np}
	if f := n.OnDecision; f != nil {
		req.Notify = func(e netproxy.Event) { f(decisionOf(id, e)) }
	}
	return req, nil
}

// startDecisions runs f over a bounded queue until done is closed (then
// what is queued is still delivered).
func startDecisions(f func(NetworkDecision), done <-chan struct{}) chan<- NetworkDecision {
	q := make(chan NetworkDecision, decisionQueue)
	go func() {
		for {
			select {
			case d := <-q:
				f(d)
			case <-done:
				for {
					select {
					case d := <-q:
						f(d)
					default:
						return
					}
				}
			}
		}
	}()
	return q
}
