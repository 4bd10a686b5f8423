package actors

import (
	"bytes"
	"encoding/json"

	"github.com/runtimed/runtimed/wire"
)

// Helpers of process/start for the Codex 0.169 fields (PROTOCOL.md section
// 7.2), kept out of conn.start so that it stays short.

// managedNetwork is the start's managed network (nil without
// networkProxy), or why it cannot be provided (the field at fault and the
// refusal). sandboxed: the process will run in an enforced sandbox (the
// request's, or the server's default); floor: the operator's network
// floor; canLaunch: this host places proxies where only the command
// reaches them (Config.NetPlacer).
//
// networkProxy (launch a proxy here, section 7.5) was parsed by the front
// end; its domains are compiled here against the floor (a pattern the
// policy cannot use is -32602 naming networkProxy.proxy.domains), then it
// is refused unless canLaunch: the networkProxyLaunch capability is false
// until the command's network namespace makes the proxy its only way out.
//
// As in the reference exec-server, enforceManagedNetwork without a sandbox
// has nothing to enforce: the process runs unsandboxed ("sandboxType":
// "none"), managedNetwork is accepted and ignored. Under a sandbox (and
// without networkProxy) it means "let the process reach the network only
// through the managed proxy on managedNetwork.loopbackPorts": runtimed has
// no way to open exactly those loopback ports inside a sandbox whose
// network is cut, so it refuses rather than run the command with more (or
// less) network than asked; and without managedNetwork it fails closed, as
// the reference does.
func managedNetwork(n NetworkRequest, sandboxed bool, floor []string, canLaunch bool) (*NetworkSpec, string, *wire.Error) {
	if n.LaunchProxy || n.Proxy != nil {
		if n.Proxy == nil { // asked for, but nothing parsed: fail closed
			return nil, "networkProxy", wire.ErrManagedNetwork("networkProxy was not parsed")
		}
		ns, err := NetworkSpecFrom(n.Proxy, n.TimeoutMs, floor)
		if err != nil {
			return nil, "networkProxy", err
		}
		if !canLaunch {
			return nil, "networkProxy", wire.ErrManagedNetwork("this executor cannot launch a network proxy (capability networkProxyLaunch is false: " +
				"no network namespace confines the command to the proxy on this host)")
		}
		return ns, "", nil
	}
	if !n.Enforce || !sandboxed {
		return nil, "", nil
	}
	if !n.Managed {
		return nil, "managedNetwork", wire.ErrManagedNetwork("enforceManagedNetwork is set without managedNetwork, so the sandbox would have no proxy to allow")
	}
	return nil, "managedNetwork", wire.ErrManagedNetwork("this executor cannot confine a sandboxed process's network to the managed proxy's loopback ports")
}

// managedNetworkError is managedNetwork's refusal on a host that cannot
// launch proxies.
func managedNetworkError(n NetworkRequest, sandboxed bool) (string, *wire.Error) {
	_, field, err := managedNetwork(n, sandboxed, nil, false)
	return field, err
}

// networkRequest decodes process/start's managed-network fields,
// networkProxy strictly (-32602 naming the field).
func networkRequest(p *wire.StartParams) (NetworkRequest, *wire.Error) {
	n := NetworkRequest{
		LaunchProxy: len(p.NetworkProxy) > 0 && string(p.NetworkProxy) != "null",
		Enforce:     p.EnforceManagedNetwork,
		Managed:     p.ManagedNetwork != nil,
		TimeoutMs:   p.PolicyDecisionTimeoutMs,
	}
	np, err := wire.ParseNetworkProxy(p.NetworkProxy)
	n.Proxy = np
	return n, err
}

// networkRequest is networkRequest with, for a proxy, how its decisions
// reach this connection: network/policyDecision, and network/policyRequest
// when the start asks for review.
func (c *conn) networkRequest(p *wire.StartParams) (NetworkRequest, *wire.Error) {
	n, err := networkRequest(p)
	if err != nil || n.Proxy == nil {
		return n, err
	}
	n.Notify = c.policyNotifier(p.ProcessID)
	if reviewed(n.Proxy, p.PolicyDecisionTimeoutMs) {
		n.Ask = c.policyAsker(p.ProcessID)
	}
	return n, nil
}

// reviewed: the start asks the client to review uncovered hosts (a
// non-zero policyDecisionTimeoutMs, in networkProxy or beside it).
func reviewed(np *wire.NetworkProxy, top *uint64) bool {
	return np.PolicyDecisionTimeoutMs > 0 || top != nil && *top > 0
}

// processMetadata is the metadata kept with the process, or nil.
func processMetadata(m *wire.ProcessMetadata) *Metadata {
	if m == nil {
		return nil
	}
	return &Metadata{ThreadID: m.ThreadID, ToolCallID: m.ToolCallID}
}

// wireMetadata is process/list's metadata field for m.
func wireMetadata(m *Metadata) *wire.ProcessMetadata {
	if m == nil {
		return nil
	}
	return &wire.ProcessMetadata{ThreadID: m.ThreadID, ToolCallID: m.ToolCallID}
}

// sandboxCache is a connection's last process/start.sandbox object and its
// parse. A client sends the same object with every start (Codex does),
// and the strict parse of its usual workspace-write shape costs ~150 µs,
// as much as the rest of the request; the parsed value is only read
// (Supervisor.Start resolves it anew, against the file system, at
// each start). Objects over sandboxCacheMax are parsed every time, so an
// idle connection holds at most that much.
type sandboxCache struct {
	raw    []byte
	parsed *wire.Sandbox
}

const sandboxCacheMax = 16 << 10

func (s *sandboxCache) parse(raw json.RawMessage) (*wire.Sandbox, *wire.Error) {
	if s.parsed != nil && bytes.Equal(raw, s.raw) {
		return s.parsed, nil
	}
	sb, err := wire.ParseSandbox(raw)
	if err == nil && sb != nil && len(raw) <= sandboxCacheMax {
		s.raw, s.parsed = append(s.raw[:0], raw...), sb
	}
	return sb, err
}
