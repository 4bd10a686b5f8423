package actors

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/runtimed/runtimed/actors/netproxy"
	"github.com/runtimed/runtimed/wire"
)

// NetworkSpec is a start's managed network (PROTOCOL.md section 7.5): the
// compiled policy and what the proxies offer.
type NetworkSpec struct {
	Enabled   bool // false: the proxy is off, the command has no network
	Policy    *netproxy.Matcher
	SOCKS5    bool
	SOCKS5UDP bool
	// Review: the client reviews hosts the policy does not cover
	// (network/policyRequest), as the reference does when the start sends
	// a non-zero policyDecisionTimeoutMs; AskTimeout is that bound plus
	// the reference's 5 s transport margin (30 s + 5 s without one).
	Review          bool
	AskTimeout      time.Duration
	EnvironmentID   string
	ExecutionID     string
	AllowLocalBinds bool
}

// DefaultPolicyDecisionTimeout bounds a network/policyRequest without
// policyDecisionTimeoutMs.
const DefaultPolicyDecisionTimeout = 30*time.Second + askMargin

// askMargin is added to policyDecisionTimeoutMs for the round trip.
const askMargin = 5 * time.Second

// ParseNetworkSpec parses process/start's networkProxy (raw) strictly and
// compiles its domains with the operator's floor: nil, nil without one;
// -32602 naming the field for a malformed object or pattern, or for what
// runtimed does not build (transparentTcp).
func ParseNetworkSpec(raw json.RawMessage, timeoutMs *uint64, floor []string) (*NetworkSpec, *wire.Error) {
	np, werr := wire.ParseNetworkProxy(raw)
	if werr != nil || np == nil {
		return nil, werr
	}
	return NetworkSpecFrom(np, timeoutMs, floor)
}

// NetworkSpecFrom compiles a parsed networkProxy (see ParseNetworkSpec).
func NetworkSpecFrom(np *wire.NetworkProxy, timeoutMs *uint64, floor []string) (*NetworkSpec, *wire.Error) {
	if np.TransparentTCP {
		return nil, wire.Errorf(wire.CodeInvalidParams, "invalid field `networkProxy.proxy.transparentTcp`: not supported by this executor (capability networkProxyTransparentTcp is false)")
	}
	mode := netproxy.Full
	if np.Limited {
		mode = netproxy.Limited
	}
	const field = "networkProxy.proxy.domains"
	m, err := netproxy.Compile(netproxy.Policy{Allow: np.Allow, Deny: np.Deny, Floor: floor, Mode: mode, AllowLocalBinding: np.AllowLocalBinding}, field)
	if err != nil {
		var pe *netproxy.PatternError
		if errors.As(err, &pe) {
			return nil, wire.ErrNetworkPattern(pe.Field, pe.Pattern, pe.Reason)
		}
		return nil, wire.Errorf(wire.CodeInvalidParams, "invalid field `%s`: %v", field, err)
	}
	if !np.Enabled {
		// The proxy is off: every destination is refused (the patterns
		// were still checked above).
		m, _ = netproxy.Compile(netproxy.Policy{Floor: floor, Mode: mode}, field)
	}
	ns := &NetworkSpec{Enabled: np.Enabled, Policy: m, SOCKS5: np.EnableSOCKS5, SOCKS5UDP: np.EnableSOCKS5 && np.EnableSOCKS5UDP,
		AskTimeout: DefaultPolicyDecisionTimeout, EnvironmentID: np.EnvironmentID, ExecutionID: np.ExecutionID, AllowLocalBinds: np.AllowLocalBinding}
	ms := np.PolicyDecisionTimeoutMs
	if timeoutMs != nil {
		ms = *timeoutMs
	}
	if ms > 0 {
		ns.Review = true
		ns.AskTimeout = time.Duration(min(ms, uint64(24*time.Hour/time.Millisecond)))*time.Millisecond + askMargin
	}
	return ns, nil
}
