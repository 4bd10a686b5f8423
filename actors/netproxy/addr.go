package netproxy

import "net/netip"

// nonPublic are the ranges a command reaches only when allowed explicitly
// or by allowLocalBinding: "this network", private, shared (CGNAT),
// loopback, link-local, documentation (TEST-NET), benchmarking, IETF
// protocol assignments, multicast, reserved and broadcast; for IPv6 the
// unspecified and loopback addresses, ULA, link-local, site-local,
// multicast, documentation, discard, and the ranges that embed IPv4
// (mapped, NAT64 and 6to4), which are judged by the embedded address.
var nonPublic = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8",
		"169.254.0.0/16", "172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24",
		"192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24",
		"203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
		"::/128", "::1/128", "100::/64", "2001:db8::/32", "fc00::/7",
		"fe80::/10", "fec0::/10", "ff00::/8",
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

var (
	nat64   = netip.MustParsePrefix("64:ff9b::/96")
	nat64l  = netip.MustParsePrefix("64:ff9b:1::/48")
	sixTo4  = netip.MustParsePrefix("2002::/16")
	teredo  = netip.MustParsePrefix("2001::/32")
	compat4 = netip.MustParsePrefix("::/96")
)

// IsPublic reports whether a is a globally routable unicast address.
// Addresses that embed an IPv4 address (IPv4-mapped, IPv4-compatible,
// NAT64, 6to4) are judged by the embedded address, so ::ffff:127.0.0.1
// and 64:ff9b::a00:1 are not public. Teredo is refused outright (its
// embedded address is obfuscated).
func IsPublic(a netip.Addr) bool {
	if !a.IsValid() || a.Zone() != "" {
		return false
	}
	a = a.Unmap()
	if a.Is6() {
		b := a.As16()
		switch {
		case compat4.Contains(a) && !a.IsUnspecified() && !a.IsLoopback():
			return IsPublic(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}))
		case nat64.Contains(a):
			return IsPublic(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}))
		case nat64l.Contains(a):
			return false
		case sixTo4.Contains(a):
			return IsPublic(netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}))
		case teredo.Contains(a):
			return false
		}
	}
	if a.Is4() && a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
}
