// Package netproxy is a command's managed network: an HTTP proxy
// (absolute-URI requests and CONNECT) and a SOCKS5 proxy (CONNECT, and UDP
// ASSOCIATE when enabled) that let through only what a domain policy
// allows. It knows nothing of actors or the wire: the caller gives it
// listeners (placed where the command can reach them, e.g. inside the
// command's network namespace) and receives decisions through callbacks.
//
// # Usage
//
//	m, err := netproxy.Compile(netproxy.Policy{
//		Allow: []string{"pypi.org", "**.pythonhosted.org"},
//		Deny:  []string{"upload.pypi.org"},
//		Floor: operatorDeny, // patterns no client can allow
//		Mode:  netproxy.Full,
//	}, "networkProxy.proxy.domains") // *PatternError names the field
//	p, err := netproxy.New(netproxy.Config{Policy: m, OnDecision: report, Ask: ask})
//	go p.ServeHTTP(httpListener)
//	go p.ServeSOCKS5(socksListener)
//	env := netproxy.MergeEnv(env, netproxy.Env(httpAddr, socksAddr, false))
//	...
//	p.Close(ctx) // when the command ends
//
// # Policy
//
// Patterns: "host" exact; "*.d" the subdomains of d, not d; "**.d" d and
// its subdomains; "*" everything (allow only). Order of a decision: the
// operator floor, then deny (deny wins over every allow), then the mode
// (limited: GET, HEAD, OPTIONS over plain HTTP only; no CONNECT, no
// SOCKS5), then non-public destinations (loopback, RFC 1918, CGNAT,
// link-local, ULA, TEST-NET, multicast, reserved, and IPv6 forms that
// embed such an IPv4 address) which need allowLocalBinding or an exact
// allow of that host, then the allow list. A host no pattern covers is
// "not_allowed" and is the only refusal an Ask can turn into an allow.
// Names are resolved by the proxy, never by the command; every resolved
// address is checked again (a public name resolving to 127.0.0.1 or the
// LAN is refused) and only those checked addresses are dialed, so DNS
// rebinding between check and use is impossible. The absolute URI (or
// the CONNECT authority, or the SOCKS5 address) names the destination;
// the Host header is never believed, and the upstream gets the URI's host.
//
// A refused HTTP request or CONNECT gets 403 with x-proxy-error
// (blocked-by-allowlist for not_allowed and not_allowed_local,
// blocked-by-denylist, blocked-by-method-policy); a refused SOCKS5
// request gets reply 2 (not allowed by ruleset).
//
// # Concurrency
//
// A Matcher is immutable. A Proxy serves each connection on its own
// goroutine; OnDecision and Ask are called on those goroutines (possibly
// at once) and must be safe for that. The group (connections and
// goroutines) is guarded by one mutex held only for map updates.
//
// # Failure semantics
//
// New fails (ErrConfig) without a policy; Compile fails with
// *PatternError (ErrPattern). A name that does not resolve gets 502 /
// SOCKS5 reply 4 after an allow decision; an upstream that refuses, 502 /
// reply 5. An Ask that errors or passes AskTimeout (default 30 s) is a deny
// with reason not_allowed. Close ends the listeners, every connection
// and association, cancels pending asks, and returns when every goroutine
// of the proxy has ended; Serve* then return ErrClosed.
//
// # Backpressure
//
// Bounded per proxy (Limits): at most MaxConns client connections (one
// more gets 503 too-many-connections, or a closed SOCKS5 connection, and
// is counted), so at most 2*MaxConns+2 descriptors plus the transport's
// 16 idle upstream connections and two UDP sockets per association;
// MaxHeaderBytes per request (431 beyond); HeaderTimeout to send headers
// or the SOCKS5 handshake; a tunnel holds BufferSize bytes per direction
// and ends after IdleTimeout without a byte either way or when one write
// blocks StallTimeout (a peer that stopped reading cannot pin the
// other); a UDP association decides at most MaxUDPDests destinations and
// drops (and counts) datagrams beyond them, fragments, and datagrams from
// other sources. A slow HTTP request body is bounded by the connection
// limit only (it ties up the command's own slots, nothing of the daemon's).
package netproxy
