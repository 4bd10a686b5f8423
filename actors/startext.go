package actors

import (
	"bytes"
	"encoding/json"

	"github.com/runtimed/runtimed/wire"
)

// Helpers of process/start for the Codex 0.169 fields (PROTOCOL.md section
// 7.2), kept out of conn.start so that it stays short.

// managedNetworkError says why the managed network p asks for cannot be
// provided, or nil. sandboxed: the process will run in an enforced sandbox
// (the request's, or the server's default).
//
// As in the reference exec-server, enforceManagedNetwork without a sandbox
// has nothing to enforce: the process runs unsandboxed ("sandboxType":
// "none"), managedNetwork is accepted and ignored. Under a sandbox it means
// "let the process reach the network only through the managed proxy on
// managedNetwork.loopbackPorts": runtimed has no way to open exactly those
// loopback ports inside a sandbox whose network is cut, so it refuses
// rather than run the command with more (or less) network than asked; and
// without managedNetwork it fails closed, as the reference does. networkProxy
// (launch a proxy here, section 7.5) is parsed and its policy compiled
// against the operator's floor (so a malformed one is -32602 naming the
// field), then refused: the networkProxyLaunch capability is false until
// the command's network namespace makes the proxy its only way out.
func managedNetworkError(p *wire.StartParams, sandboxed bool, floor []string) *wire.Error {
	_, err := managedNetwork(p, sandboxed, floor, false)
	return err
}

// managedNetwork is the start's managed network (nil without networkProxy)
// or why it cannot be provided; canLaunch: this host places proxies where
// only the command reaches them (Isolation.Net).
func managedNetwork(p *wire.StartParams, sandboxed bool, floor []string, canLaunch bool) (*NetworkSpec, *wire.Error) {
	if ns, err := ParseNetworkSpec(p.NetworkProxy, p.PolicyDecisionTimeoutMs, floor); err != nil {
		return nil, err
	} else if ns != nil {
		if canLaunch {
			return ns, nil
		}
		return nil, wire.ErrManagedNetwork("this executor cannot launch a network proxy (capability networkProxyLaunch is false: " +
			"no network namespace confines the command to the proxy on this host)")
	}
	return nil, managedNetworkRest(p, sandboxed)
}

// managedNetworkRest judges enforceManagedNetwork and managedNetwork.
func managedNetworkRest(p *wire.StartParams, sandboxed bool) *wire.Error {
	if !p.EnforceManagedNetwork || !sandboxed {
		return nil
	}
	if p.ManagedNetwork == nil {
		return wire.ErrManagedNetwork("enforceManagedNetwork is set without managedNetwork, so the sandbox would have no proxy to allow")
	}
	return wire.ErrManagedNetwork("this executor cannot confine a sandboxed process's network to the managed proxy's loopback ports")
}

// managedNetworkFor is processID's managed network, reporting to this
// connection; review: the client reviews uncovered hosts (it sent
// policyDecisionTimeoutMs), else they are refused without asking.
func (c *conn) managedNetworkFor(processID string, ns *NetworkSpec, review bool) *ManagedNetwork {
	mn := &ManagedNetwork{Spec: ns, ProcessID: processID, Notify: c.policyNotifier(processID)}
	if review {
		mn.Ask = c.policyAsker(processID)
	}
	return mn
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
// (Supervisor.SandboxFor resolves it anew, against the file system, at
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
