package actors

import (
	"bytes"
	"encoding/json"

	"github.com/runtimed/runtimed/wire"
)

// Helpers of process/start for the Codex 0.169 fields (PROTOCOL.md section
// 7.2), kept out of conn.start so that it stays short.

// managedNetworkError says why the managed network n asks for cannot be
// provided (the field at fault and the refusal), or nil. sandboxed: the
// process will run in an enforced sandbox (the request's, or the server's
// default).
//
// As in the reference exec-server, enforceManagedNetwork without a sandbox
// has nothing to enforce: the process runs unsandboxed ("sandboxType":
// "none"), managedNetwork is accepted and ignored. Under a sandbox it means
// "let the process reach the network only through the managed proxy on
// managedNetwork.loopbackPorts": runtimed has no way to open exactly those
// loopback ports inside a sandbox whose network is cut, so it refuses
// rather than run the command with more (or less) network than asked; and
// without managedNetwork it fails closed, as the reference does. networkProxy
// (launch a proxy here) is refused in any case: the networkProxyLaunch
// capability is false.
func managedNetworkError(n NetworkRequest, sandboxed bool) (string, *wire.Error) {
	if n.LaunchProxy {
		return "networkProxy", wire.ErrManagedNetwork("this executor cannot launch a network proxy (capability networkProxyLaunch is false)")
	}
	if !n.Enforce || !sandboxed {
		return "", nil
	}
	if !n.Managed {
		return "managedNetwork", wire.ErrManagedNetwork("enforceManagedNetwork is set without managedNetwork, so the sandbox would have no proxy to allow")
	}
	return "managedNetwork", wire.ErrManagedNetwork("this executor cannot confine a sandboxed process's network to the managed proxy's loopback ports")
}

// networkRequest decodes process/start's managed-network fields.
func networkRequest(p *wire.StartParams) NetworkRequest {
	return NetworkRequest{
		LaunchProxy: len(p.NetworkProxy) > 0 && string(p.NetworkProxy) != "null",
		Enforce:     p.EnforceManagedNetwork,
		Managed:     p.ManagedNetwork != nil,
	}
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
