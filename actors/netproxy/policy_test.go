package netproxy

import (
	"errors"
	"net/netip"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func mustCompile(t testing.TB, p Policy) *Matcher {
	t.Helper()
	m, err := Compile(p, "networkProxy.proxy.domains")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestDecideTable(t *testing.T) {
	base := Policy{
		Allow: []string{"exact.test", "*.sub.test", "**.apex.test", "10.1.2.3", "Upper.Test."},
		Deny:  []string{"bad.apex.test", "*.evil.sub.test"},
		Floor: []string{"**.floor.test"},
	}
	star := Policy{Allow: []string{"*"}, Deny: []string{"no.test"}, Floor: []string{"floor.test"}}
	limited := base
	limited.Mode = Limited
	local := Policy{Allow: []string{"**.test"}, AllowLocalBinding: true}
	cases := []struct {
		name   string
		p      Policy
		host   string
		proto  Protocol
		method string
		allow  bool
		reason string
		ask    bool
	}{
		{"exact", base, "exact.test", HTTP, "GET", true, ReasonAllowed, false},
		{"exact is not a suffix", base, "x.exact.test", HTTP, "GET", false, ReasonNotAllowed, true},
		{"sub matches subdomain", base, "a.sub.test", HTTP, "GET", true, ReasonAllowed, false},
		{"sub matches deep subdomain", base, "a.b.sub.test", HTTPSConnect, "CONNECT", true, ReasonAllowed, false},
		{"sub excludes apex", base, "sub.test", HTTP, "GET", false, ReasonNotAllowed, true},
		{"sub is label-aligned", base, "xsub.test", HTTP, "GET", false, ReasonNotAllowed, true},
		{"apex matches apex", base, "apex.test", HTTP, "GET", true, ReasonAllowed, false},
		{"apex matches subdomain", base, "w.apex.test", SOCKS5TCP, "", true, ReasonAllowed, false},
		{"deny wins over apex", base, "bad.apex.test", HTTP, "GET", false, ReasonDenied, false},
		{"deny wildcard wins over allow wildcard", base, "x.evil.sub.test", HTTP, "GET", false, ReasonDenied, false},
		{"floor wins", base, "x.floor.test", HTTP, "GET", false, ReasonDenied, false},
		{"case and trailing dot normalized in pattern", base, "upper.test", HTTP, "GET", true, ReasonAllowed, false},
		{"explicit private literal allowed", base, "10.1.2.3", HTTP, "GET", true, ReasonAllowed, false},
		{"other private literal refused", base, "10.1.2.4", HTTP, "GET", false, ReasonNotAllowedLocal, false},
		{"loopback refused", base, "127.0.0.1", HTTP, "GET", false, ReasonNotAllowedLocal, false},
		{"localhost refused", base, "localhost", HTTP, "GET", false, ReasonNotAllowedLocal, false},
		{"star allows any public", star, "anything.example", HTTP, "GET", true, ReasonAllowed, false},
		{"star does not allow loopback", star, "127.0.0.1", HTTP, "GET", false, ReasonNotAllowedLocal, false},
		{"star does not allow metadata", star, "169.254.169.254", HTTP, "GET", false, ReasonNotAllowedLocal, false},
		{"star does not allow ULA", star, "fd00::1", HTTP, "GET", false, ReasonNotAllowedLocal, false},
		{"deny wins over star", star, "no.test", HTTP, "GET", false, ReasonDenied, false},
		{"floor wins over star", star, "floor.test", HTTP, "GET", false, ReasonDenied, false},
		{"limited: the domain decision ignores the method", limited, "exact.test", HTTP, "POST", true, ReasonAllowed, false},
		{"limited deny still denied", limited, "bad.apex.test", HTTP, "GET", false, ReasonDenied, false},
		{"allowLocalBinding", local, "127.0.0.1", HTTP, "GET", true, ReasonAllowed, false},
		{"empty host", base, "", HTTP, "GET", false, ReasonNotAllowed, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := mustCompile(t, c.p)
			v := m.Decide(c.host, c.proto, c.method)
			if v.Allow != c.allow || v.Reason != c.reason || v.Askable != c.ask {
				t.Fatalf("Decide(%q) = %+v, want allow=%v reason=%s askable=%v", c.host, v, c.allow, c.reason, c.ask)
			}
		})
	}
}

func TestModeGuard(t *testing.T) {
	full := mustCompile(t, Policy{})
	limited := mustCompile(t, Policy{Mode: Limited})
	for _, c := range []struct {
		m      *Matcher
		proto  Protocol
		method string
		allow  bool
		reason string
	}{
		{full, HTTP, "POST", true, ReasonAllowed},
		{full, HTTPSConnect, "CONNECT", true, ReasonAllowed},
		{full, SOCKS5UDP, "", true, ReasonAllowed},
		{limited, HTTP, "GET", true, ReasonAllowed},
		{limited, HTTP, "HEAD", true, ReasonAllowed},
		{limited, HTTP, "OPTIONS", true, ReasonAllowed},
		{limited, HTTP, "POST", false, ReasonMethod},
		{limited, HTTP, "DELETE", false, ReasonMethod},
		{limited, HTTPSConnect, "CONNECT", false, ReasonMITMRequired},
		{limited, SOCKS5TCP, "", false, ReasonMethod},
		{limited, SOCKS5UDP, "", false, ReasonMethod},
	} {
		if v := c.m.ModeGuard(c.proto, c.method); v.Allow != c.allow || v.Reason != c.reason || v.Source != SourceMode {
			t.Errorf("%v %s %s: %+v", c.m.Mode(), c.proto, c.method, v)
		}
	}
}

func TestCheckResolved(t *testing.T) {
	m := mustCompile(t, Policy{Allow: []string{"**.test", "pinned.test"}, Deny: []string{"10.9.9.9"}, Floor: []string{"93.184.215.99"}})
	ip := netip.MustParseAddr
	cases := []struct {
		host   string
		addrs  []netip.Addr
		allow  bool
		reason string
	}{
		{"a.test", []netip.Addr{ip("93.184.215.14")}, true, ReasonAllowed},
		{"rebind.test", []netip.Addr{ip("127.0.0.1")}, false, ReasonNotAllowedLocal},
		{"mixed.test", []netip.Addr{ip("93.184.215.14"), ip("192.168.1.1")}, false, ReasonNotAllowedLocal},
		{"mapped.test", []netip.Addr{ip("::ffff:127.0.0.1")}, false, ReasonNotAllowedLocal},
		{"nat64.test", []netip.Addr{ip("64:ff9b::a00:1")}, false, ReasonNotAllowedLocal},
		{"pinned.test", []netip.Addr{ip("192.168.1.1")}, true, ReasonAllowed},
		{"deny-ip.test", []netip.Addr{ip("10.9.9.9")}, false, ReasonDenied},
		{"floor-ip.test", []netip.Addr{ip("93.184.215.99")}, false, ReasonDenied},
		{"none.test", nil, false, ReasonNotAllowed},
	}
	for _, c := range cases {
		v := m.CheckResolved(c.host, c.addrs)
		if v.Allow != c.allow || v.Reason != c.reason {
			t.Errorf("CheckResolved(%s, %v) = %+v, want %v %s", c.host, c.addrs, v, c.allow, c.reason)
		}
	}
}

func TestIsPublic(t *testing.T) {
	nonPub := []string{"0.0.0.0", "10.0.0.1", "100.64.0.1", "100.127.255.255", "127.0.0.1", "127.1.2.3",
		"169.254.169.254", "172.16.0.1", "172.31.255.255", "192.0.0.8", "192.0.2.1", "192.168.0.1",
		"198.18.0.1", "198.51.100.1", "203.0.113.1", "224.0.0.1", "240.0.0.1", "255.255.255.255",
		"::", "::1", "fc00::1", "fd12::1", "fe80::1", "ff02::1", "2001:db8::1", "::ffff:10.0.0.1",
		"::127.0.0.1", "64:ff9b::7f00:1", "2002:7f00:1::1", "2001:0::1", "64:ff9b:1::1"}
	pub := []string{"1.1.1.1", "8.8.8.8", "93.184.215.14", "172.32.0.1", "100.128.0.1", "2606:4700::1111", "64:ff9b::101:101"}
	for _, s := range nonPub {
		if IsPublic(netip.MustParseAddr(s)) {
			t.Errorf("IsPublic(%s) = true", s)
		}
	}
	for _, s := range pub {
		if !IsPublic(netip.MustParseAddr(s)) {
			t.Errorf("IsPublic(%s) = false", s)
		}
	}
}

func TestPatternErrors(t *testing.T) {
	bad := []struct {
		p     Policy
		field string
	}{
		{Policy{Deny: []string{"*"}}, "networkProxy.proxy.domains"},
		{Policy{Allow: []string{"a.*.test"}}, "networkProxy.proxy.domains"},
		{Policy{Allow: []string{"***.test"}}, "networkProxy.proxy.domains"},
		{Policy{Allow: []string{"*.10.0.0.1"}}, "networkProxy.proxy.domains"},
		{Policy{Allow: []string{"http://a.test"}}, "networkProxy.proxy.domains"},
		{Policy{Allow: []string{"a.test:443"}}, "networkProxy.proxy.domains"},
		{Policy{Allow: []string{""}}, "networkProxy.proxy.domains"},
		{Policy{Allow: []string{"a..test"}}, "networkProxy.proxy.domains"},
		{Policy{Allow: []string{"2130706433"}}, "networkProxy.proxy.domains"},
		{Policy{Floor: []string{"*"}}, "floor"},
	}
	for _, c := range bad {
		_, err := Compile(c.p, "networkProxy.proxy.domains")
		var pe *PatternError
		if !errors.As(err, &pe) || !errors.Is(err, ErrPattern) || pe.Field != c.field {
			t.Errorf("Compile(%+v) = %v, want a PatternError on %s", c.p, err, c.field)
		}
	}
	for _, ok := range []string{"a.test", "*.a.test", "**.a.test", "*", "[::1]", "10.0.0.1", "xn--bcher-kva.example", "_dmarc.a.test"} {
		if err := ParsePattern(ok, true); err != nil {
			t.Errorf("ParsePattern(%q) = %v", ok, err)
		}
	}
}

func TestEnvList(t *testing.T) {
	env := Env("10.0.0.1:3128", "10.0.0.1:1080", false)
	got := map[string]string{}
	for _, kv := range env {
		k, v, _ := cut(kv)
		got[k] = v
	}
	want := map[string]string{
		"HTTP_PROXY": "http://10.0.0.1:3128", "https_proxy": "http://10.0.0.1:3128",
		"ALL_PROXY": "socks5h://10.0.0.1:1080", "all_proxy": "socks5h://10.0.0.1:1080",
		"FTP_PROXY": "socks5h://10.0.0.1:1080", "NO_PROXY": "", "no_proxy": "",
		"npm_config_proxy": "http://10.0.0.1:3128", "YARN_HTTPS_PROXY": "http://10.0.0.1:3128",
		"PIP_PROXY": "http://10.0.0.1:3128", "DOCKER_HTTPS_PROXY": "http://10.0.0.1:3128",
		"BUNDLE_HTTP_PROXY": "http://10.0.0.1:3128", "NODE_USE_ENV_PROXY": "1",
		"CODEX_NETWORK_PROXY_ACTIVE": "1", "CODEX_NETWORK_ALLOW_LOCAL_BINDING": "0",
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %q (set %v), want %q", k, g, ok, v)
		}
	}
	if len(got) != len(EnvKeys()) {
		t.Errorf("Env sets %d keys, EnvKeys lists %d", len(got), len(EnvKeys()))
	}
	noSocks := Env("h:1", "", true)
	for _, kv := range noSocks {
		if kv == "ALL_PROXY=http://h:1" {
			merged := MergeEnv([]string{"HTTP_PROXY=http://evil:1", "PATH=/bin"}, noSocks)
			if merged[0] != "PATH=/bin" || len(merged) != len(noSocks)+1 {
				t.Fatalf("MergeEnv kept an inherited proxy variable: %v", merged[:2])
			}
			return
		}
	}
	t.Fatal("without SOCKS5, ALL_PROXY is not the HTTP proxy")
}

func cut(kv string) (string, string, bool) {
	for i := 0; i < len(kv); i++ {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return kv, "", false
}
