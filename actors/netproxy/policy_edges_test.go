package netproxy

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// The tests below pin down edges a sampled mutation pass (issue 29) found
// unguarded: each fails if the named check is dropped.

// TestNormalizeHostEdges: host syntax a proxy must refuse or fold, since a
// name that slips through reaches the resolver or a pattern as something
// else.
func TestNormalizeHostEdges(t *testing.T) {
	label63 := strings.Repeat("a", 63)
	name253 := strings.Repeat(label63+".", 3) + strings.Repeat("b", 61) // 4*63+1 = 253 bytes
	if len(name253) != 253 {
		t.Fatalf("fixture is %d bytes", len(name253))
	}
	for _, c := range []struct{ in, want string }{
		{"::ffff:127.0.0.1", "127.0.0.1"}, // IPv4-mapped folds to the IPv4 form patterns use
		{"[2606:4700::1111]", "2606:4700::1111"},
		{"Example.TEST.", "example.test"},
		{label63 + ".test", label63 + ".test"},
		{name253, name253},
		{"a-b.test", "a-b.test"},
	} {
		if got, ok := NormalizeHost(c.in); !ok || got != c.want {
			t.Errorf("NormalizeHost(%q) = %q, %v; want %q", c.in, got, ok, c.want)
		}
	}
	for _, in := range []string{
		"[1.2.3.4]",          // brackets are for IPv6 only
		"[fe80::1%eth0]",     // zones are refused
		"fe80::1%eth0",       // unbracketed too
		label63 + "a.test",   // a 64-byte label
		name253 + "b",        // 254 bytes
		"-a.test", "a-.test", // hyphen at a label's edge
		"0x7f000001", "a.0x7f", // hex literals some resolvers read as IPv4
		"a*b.test",
	} {
		if got, ok := NormalizeHost(in); ok {
			t.Errorf("NormalizeHost(%q) = %q, ok; want refused", in, got)
		}
	}
}

// TestPatternErrorReason: a misplaced wildcard is reported as such, not as
// a bad host name.
func TestPatternErrorReason(t *testing.T) {
	err := ParsePattern("a.*.test", true)
	var pe *PatternError
	if !errors.As(err, &pe) || !strings.Contains(pe.Reason, "wildcard") {
		t.Fatalf("ParsePattern(a.*.test) = %v, want a wildcard reason", err)
	}
}

// TestLocalEdges: *.localhost is local, a wildcard allow never reaches a
// local destination (only an exact one does), and limited mode lets no
// SOCKS5 through whatever the method string says.
func TestLocalEdges(t *testing.T) {
	star := mustCompile(t, Policy{Allow: []string{"*"}})
	if v := star.Decide("x.localhost", HTTP, "GET"); v.Allow || v.Reason != ReasonNotAllowedLocal {
		t.Errorf(`"*" Decide(x.localhost) = %+v, want not_allowed_local`, v)
	}
	wild := mustCompile(t, Policy{Allow: []string{"**.localhost", "**.corp.test"}})
	if v := wild.Decide("localhost", HTTP, "GET"); v.Allow || v.Reason != ReasonNotAllowedLocal {
		t.Errorf(`"**.localhost" Decide(localhost) = %+v, want not_allowed_local`, v)
	}
	if v := wild.CheckResolved("corp.test", []netip.Addr{netip.MustParseAddr("10.0.0.1")}); v.Allow || v.Reason != ReasonNotAllowedLocal {
		t.Errorf(`"**.corp.test" CheckResolved(corp.test -> 10.0.0.1) = %+v, want not_allowed_local`, v)
	}
	exact := mustCompile(t, Policy{Allow: []string{"corp.test"}})
	if v := exact.CheckResolved("corp.test", []netip.Addr{netip.MustParseAddr("10.0.0.1")}); !v.Allow {
		t.Errorf(`exact "corp.test" CheckResolved(corp.test -> 10.0.0.1) = %+v, want allowed`, v)
	}
	limited := mustCompile(t, Policy{Mode: Limited})
	for _, p := range []Protocol{SOCKS5TCP, SOCKS5UDP, HTTPSConnect} {
		if v := limited.ModeGuard(p, "GET"); v.Allow {
			t.Errorf("limited ModeGuard(%s, GET) = %+v, want refused", p, v)
		}
	}
}

// TestIsPublicZone: an address with a zone is never public (a zoned
// address is link-scoped, and netip prefixes never contain one, so the
// range table alone would call fe80::1%eth0 public).
func TestIsPublicZone(t *testing.T) {
	for _, s := range []string{"fe80::1%eth0", "2606:4700::1111%eth0", "ff02::1%lo"} {
		if IsPublic(netip.MustParseAddr(s)) {
			t.Errorf("IsPublic(%s) = true", s)
		}
	}
}
