package netproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// publicIP is what the fake resolver answers for test names: a public
// address, so only the policy (not the local-range guard) decides; the
// test dialer then redirects every checked dial to the test upstream.
var publicIP = netip.MustParseAddr("93.184.215.14")

type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	if strings.HasSuffix(host, ".test") {
		return []netip.Addr{publicIP}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

type harness struct {
	t         *testing.T
	p         *Proxy
	httpAddr  string
	socksAddr string
	mu        sync.Mutex
	events    []Event
	dialed    []string // checked targets the proxy dialed
}

// start runs a proxy whose dials of publicIP go to upstream (host:port)
// and whose other dials go where they say.
func start(t *testing.T, pol Policy, upstream string, mod func(*Config)) *harness {
	t.Helper()
	h := &harness{t: t}
	cfg := Config{
		Policy:   mustCompile(t, pol),
		Resolver: fakeResolver{"rebind.test": {netip.MustParseAddr("127.0.0.1")}, "lan.test": {netip.MustParseAddr("192.168.1.10")}},
		OnDecision: func(e Event) {
			h.mu.Lock()
			h.events = append(h.events, e)
			h.mu.Unlock()
		},
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			h.mu.Lock()
			h.dialed = append(h.dialed, addr)
			h.mu.Unlock()
			ap := netip.MustParseAddrPort(addr)
			if ap.Addr() == publicIP && upstream != "" {
				addr = upstream
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
		Limits: Limits{HeaderTimeout: 2 * time.Second, IdleTimeout: 5 * time.Second, StallTimeout: 2 * time.Second},
	}
	if mod != nil {
		mod(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.p = p
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.httpAddr, h.socksAddr = hl.Addr().String(), sl.Addr().String()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = p.ServeHTTP(hl) }()
	go func() { defer wg.Done(); _ = p.ServeSOCKS5(sl) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		wg.Wait()
		if n := p.Stats().ActiveConns; n != 0 {
			t.Errorf("%d connections still counted after Close", n)
		}
	})
	return h
}

func (h *harness) client() *http.Client {
	u, _ := url.Parse("http://" + h.httpAddr)
	tr := &http.Transport{Proxy: http.ProxyURL(u), TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}
	h.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func (h *harness) lastEvent() Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.events) == 0 {
		h.t.Fatal("no decision reported")
	}
	return h.events[len(h.events)-1]
}

func (h *harness) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.events)
}

func (h *harness) dials() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.dialed)
}

func upstreamServer(t *testing.T) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "host=%s method=%s", r.Host, r.Method)
	}))
	t.Cleanup(s.Close)
	return s
}

func hostOf(s *httptest.Server) string {
	return strings.TrimPrefix(strings.TrimPrefix(s.URL, "http://"), "https://")
}

func TestHTTPPatternKinds(t *testing.T) {
	up := upstreamServer(t)
	h := start(t, Policy{
		Allow: []string{"exact.test", "*.sub.test", "**.apex.test"},
		Deny:  []string{"bad.apex.test"},
		Floor: []string{"floor.apex.test"},
	}, hostOf(up), nil)
	c := h.client()
	cases := []struct {
		host   string
		status int
		xerr   string
		reason string
	}{
		{"exact.test", 200, "", ReasonAllowed},
		{"www.exact.test", 403, "blocked-by-allowlist", ReasonNotAllowed},
		{"a.sub.test", 200, "", ReasonAllowed},
		{"sub.test", 403, "blocked-by-allowlist", ReasonNotAllowed},
		{"apex.test", 200, "", ReasonAllowed},
		{"x.y.apex.test", 200, "", ReasonAllowed},
		{"bad.apex.test", 403, "blocked-by-denylist", ReasonDenied},
		{"floor.apex.test", 403, "blocked-by-denylist", ReasonDenied},
		{"other.test", 403, "blocked-by-allowlist", ReasonNotAllowed},
	}
	for _, tc := range cases {
		before := h.dials()
		resp, err := c.Get("http://" + tc.host + ":8080/path")
		if err != nil {
			t.Fatalf("%s: %v", tc.host, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || resp.Header.Get("x-proxy-error") != tc.xerr {
			t.Errorf("%s: %d %q %s, want %d %q", tc.host, resp.StatusCode, resp.Header.Get("x-proxy-error"), body, tc.status, tc.xerr)
		}
		if tc.status == 200 && string(body) != "host="+tc.host+":8080 method=GET" {
			t.Errorf("%s: upstream saw %q", tc.host, body)
		}
		if tc.status == 403 && h.dials() != before {
			t.Errorf("%s: refused but dialed", tc.host)
		}
		if tc.status == 403 {
			var jb map[string]any
			if err := json.Unmarshal(body, &jb); err != nil || jb["status"] != "blocked" || jb["host"] != tc.host || jb["reason"] != tc.reason ||
				jb["decision"] != "deny" || jb["protocol"] != "http" || jb["port"] != float64(8080) || jb["source"] != "baseline_policy" || jb["message"] == "" {
				t.Errorf("%s: refusal body %s", tc.host, body)
			}
		}
		e := h.lastEvent()
		if e.Host != tc.host || e.Port != 8080 || e.Protocol != HTTP || e.Method != "GET" || e.Reason != tc.reason || e.Allow != (tc.status == 200) || e.Client == "" {
			t.Errorf("%s: event %+v", tc.host, e)
		}
	}
}

func TestPrivateDestinations(t *testing.T) {
	up := upstreamServer(t)
	_, upPort, _ := net.SplitHostPort(hostOf(up))
	h := start(t, Policy{Allow: []string{"*"}}, hostOf(up), nil)
	c := h.client()
	for _, target := range []string{
		"127.0.0.1:" + upPort, "[::1]:" + upPort, "169.254.169.254", "10.0.0.1", "[::ffff:127.0.0.1]:" + upPort,
		"rebind.test:" + upPort, "lan.test", "localhost:" + upPort,
	} {
		resp, err := c.Get("http://" + target + "/")
		if err != nil {
			t.Fatalf("%s: %v", target, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 403 || resp.Header.Get("x-proxy-error") != "blocked-by-allowlist" {
			t.Errorf("%s: %d %q, want 403 blocked-by-allowlist", target, resp.StatusCode, resp.Header.Get("x-proxy-error"))
		}
		if e := h.lastEvent(); e.Reason != ReasonNotAllowedLocal {
			t.Errorf("%s: reason %s", target, e.Reason)
		}
	}
	// Spellings some resolvers read as 127.0.0.1 are not host names.
	for _, target := range []string{"127.1", "2130706433", "0x7f.0.0.1", "0177.0.0.1", "[fe80::1%25lo]"} {
		resp, err := c.Get("http://" + target + "/")
		if err != nil {
			if strings.Contains(target, "%") {
				continue // the client itself refuses a zone it cannot send
			}
			t.Fatalf("%s: %v", target, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 403 || resp.Header.Get("x-proxy-error") != "blocked-by-allowlist" {
			t.Errorf("%s: %d %q, want 403 blocked-by-allowlist", target, resp.StatusCode, resp.Header.Get("x-proxy-error"))
		}
	}
	if n := h.dials(); n != 0 {
		t.Fatalf("refused private destinations were dialed %d times", n)
	}
	// An explicit allow of the literal reaches it.
	h2 := start(t, Policy{Allow: []string{"127.0.0.1"}}, "", nil)
	resp, err := h2.client().Get(up.URL + "/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("explicitly allowed loopback: %d", resp.StatusCode)
	}
}

func TestLimitedMode(t *testing.T) {
	up := upstreamServer(t)
	h := start(t, Policy{Allow: []string{"ok.test"}, Mode: Limited}, hostOf(up), nil)
	c := h.client()
	for _, m := range []string{"GET", "HEAD", "OPTIONS", "POST", "PUT", "DELETE"} {
		req, _ := http.NewRequest(m, "http://ok.test/", strings.NewReader(""))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := 200
		if m != "GET" && m != "HEAD" && m != "OPTIONS" {
			want = 403
		}
		if resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", m, resp.StatusCode, want)
		}
		if want == 403 && resp.Header.Get("x-proxy-error") != "blocked-by-method-policy" {
			t.Errorf("%s: x-proxy-error %q", m, resp.Header.Get("x-proxy-error"))
		}
		// As the reference: the domain's decision, then (refused) the mode
		// guard's, scope non_domain.
		h.mu.Lock()
		evs := append([]Event(nil), h.events...)
		h.mu.Unlock()
		if want == 403 {
			d, g := evs[len(evs)-2], evs[len(evs)-1]
			if d.Scope != ScopeDomain || !d.Allow || d.Method != m || g.Scope != ScopeNonDomain || g.Allow || g.Source != SourceMode || g.Reason != ReasonMethod {
				t.Errorf("%s: events %+v then %+v", m, d, g)
			}
		} else if e := evs[len(evs)-1]; e.Scope != ScopeDomain || !e.Allow {
			t.Errorf("%s: event %+v", m, e)
		}
	}
	if code, _ := rawConnect(t, h.httpAddr, "ok.test:443"); code != 403 {
		t.Errorf("CONNECT in limited mode: %d", code)
	}
	if e := h.lastEvent(); e.Scope != ScopeNonDomain || e.Reason != ReasonMITMRequired || e.Protocol != HTTPSConnect {
		t.Errorf("CONNECT in limited mode: event %+v", e)
	}
	n := h.count()
	if rep := socksConnect(t, h.socksAddr, "ok.test", 443); rep != repNotAllowed {
		t.Errorf("SOCKS5 in limited mode: reply %d", rep)
	}
	// SOCKS5: the mode guard alone, before any domain decision.
	if e := h.lastEvent(); h.count() != n+1 || e.Scope != ScopeNonDomain || e.Reason != ReasonMethod || e.Protocol != SOCKS5TCP {
		t.Errorf("SOCKS5 in limited mode: %d new events, last %+v", h.count()-n, e)
	}
}

// rawConnect sends a CONNECT and returns the status and the conn.
func rawConnect(t *testing.T, proxy, target string) (int, net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, bufConn{c, br}
}

// bufConn reads what the response reader already buffered first.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (b bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }

func TestConnectTLS(t *testing.T) {
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "secret") }))
	defer up.Close()
	h := start(t, Policy{Allow: []string{"**.good.test"}, Deny: []string{"ssh.good.test"}}, hostOf(up), nil)
	resp, err := h.client().Get("https://api.good.test/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "secret" {
		t.Fatalf("tunnel body %q", b)
	}
	if e := h.lastEvent(); e.Protocol != HTTPSConnect || e.Method != "CONNECT" || !e.Allow || e.Port != 443 {
		t.Fatalf("event %+v", e)
	}
	for _, target := range []string{"ssh.good.test:22", "127.0.0.1:22", "10.0.0.1:443", "evil.test:443", "good.test", "[::1]:22"} {
		if code, _ := rawConnect(t, h.httpAddr, target); code != 403 && code != 400 {
			t.Errorf("CONNECT %s: %d", target, code)
		}
	}
}

func TestForgedHostHeader(t *testing.T) {
	up := upstreamServer(t)
	h := start(t, Policy{Allow: []string{"good.test"}}, hostOf(up), nil)
	send := func(uri, host string) (int, string) {
		c, err := net.Dial("tcp", h.httpAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", uri, host)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// The URI names a denied host; a Host header naming an allowed one changes nothing.
	if code, _ := send("http://evil.test/", "good.test"); code != 403 {
		t.Errorf("denied URI with allowed Host: %d", code)
	}
	// The URI names the allowed host; the upstream sees that host, not the forged one.
	code, body := send("http://good.test/", "evil.test")
	if code != 200 || body != "host=good.test method=GET" {
		t.Errorf("allowed URI with forged Host: %d %q", code, body)
	}
	// Origin-form (no absolute URI): the Host header alone never routes.
	if code, _ := send("/", "good.test"); code != 400 {
		t.Errorf("origin-form request: %d", code)
	}
}

func TestHugeHeaderAndSlowClient(t *testing.T) {
	up := upstreamServer(t)
	h := start(t, Policy{Allow: []string{"good.test"}}, hostOf(up), func(c *Config) {
		c.Limits.HeaderTimeout = 300 * time.Millisecond
	})
	c, err := net.Dial("tcp", h.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET http://good.test/ HTTP/1.1\r\nHost: good.test\r\nX-Big: %s\r\n\r\n", strings.Repeat("a", 100<<10))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("huge header: %d", resp.StatusCode)
	}
	// A client that sends half a request line is cut after HeaderTimeout.
	slow, err := net.Dial("tcp", h.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	io.WriteString(slow, "GET http://good.test/ HT")
	_ = slow.SetReadDeadline(time.Now().Add(5 * time.Second))
	begin := time.Now()
	_, err = io.ReadAll(slow)
	if err != nil {
		t.Fatalf("slow client not cut by the proxy: %v", err)
	}
	if d := time.Since(begin); d > 4*time.Second {
		t.Fatalf("slow client cut after %v", d)
	}
}

func TestTunnelStallAndUpstreamClose(t *testing.T) {
	// An upstream that writes without end; the client never reads: the
	// stall bound ends the tunnel and the upstream sees its conn closed.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	upErr := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			upErr <- err
			return
		}
		defer c.Close()
		buf := make([]byte, 64<<10)
		_ = c.SetWriteDeadline(time.Now().Add(20 * time.Second))
		for {
			if _, err := c.Write(buf); err != nil {
				upErr <- err
				return
			}
		}
	}()
	h := start(t, Policy{Allow: []string{"flood.test", "close.test"}}, ln.Addr().String(), func(c *Config) {
		c.Limits.StallTimeout = 300 * time.Millisecond
	})
	code, _ := rawConnect(t, h.httpAddr, "flood.test:443")
	if code != 200 {
		t.Fatalf("CONNECT: %d", code)
	}
	select {
	case err := <-upErr:
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("upstream write timed out: the proxy never gave up on the stalled client")
		}
	case <-time.After(15 * time.Second):
		t.Fatal("tunnel with a stalled client still open")
	}

	// An upstream that closes: the client sees EOF, the proxy keeps serving.
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln2.Close()
	go func() {
		c, err := ln2.Accept()
		if err == nil {
			io.WriteString(c, "bye")
			c.Close()
		}
	}()
	h2 := start(t, Policy{Allow: []string{"close.test"}}, ln2.Addr().String(), nil)
	code, c := rawConnect(t, h2.httpAddr, "close.test:443")
	if code != 200 {
		t.Fatalf("CONNECT: %d", code)
	}
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "bye" {
		t.Fatalf("after upstream close: %q %v", b, err)
	}
	// An upstream that refuses: 502.
	ln2.Close()
	code, _ = rawConnect(t, h2.httpAddr, "close.test:443")
	if code != 502 {
		t.Fatalf("refused upstream: %d", code)
	}
}

func TestConnectionLimit(t *testing.T) {
	up := upstreamServer(t)
	h := start(t, Policy{Allow: []string{"good.test"}}, hostOf(up), func(c *Config) { c.Limits.MaxConns = 2 })
	var held []net.Conn
	for i := 0; i < 2; i++ {
		code, c := rawConnect(t, h.httpAddr, "good.test:80")
		if code != 200 {
			t.Fatalf("CONNECT %d: %d", i, code)
		}
		held = append(held, c)
	}
	c, err := net.Dial("tcp", h.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 503 || resp.Header.Get("x-proxy-error") != "too-many-connections" {
		t.Fatalf("over the limit: %d", resp.StatusCode)
	}
	if h.p.Stats().ConnsRejected != 1 {
		t.Fatalf("rejected %d", h.p.Stats().ConnsRejected)
	}
	for _, c := range held {
		c.Close()
	}
}

func TestAsk(t *testing.T) {
	up := upstreamServer(t)
	answers := map[string]func(ctx context.Context) (bool, string, error){
		"yes.test": func(context.Context) (bool, string, error) { return true, "", nil },
		"no.test":  func(context.Context) (bool, string, error) { return false, "user said no", nil },
		"mute.test": func(ctx context.Context) (bool, string, error) {
			<-ctx.Done()
			return false, "", ctx.Err()
		},
	}
	var asked sync.Map
	h := start(t, Policy{Allow: []string{"known.test"}, Deny: []string{"denied.test"}}, hostOf(up), func(c *Config) {
		c.AskTimeout = 200 * time.Millisecond
		c.Ask = func(ctx context.Context, r AskRequest) (bool, string, error) {
			asked.Store(r.Host, r)
			if f, ok := answers[r.Host]; ok {
				return f(ctx)
			}
			return false, "", errors.New("unexpected")
		}
	})
	c := h.client()
	for _, tc := range []struct {
		host     string
		status   int
		source   string
		reason   string
		asked    bool
		override bool
	}{
		{"yes.test", 200, SourceDecider, ReasonAllowed, true, true},
		{"no.test", 403, SourceDecider, "user said no", true, true},
		{"mute.test", 403, SourceDecider, ReasonNotAllowed, true, false},
		{"known.test", 200, SourceBaseline, ReasonAllowed, false, false},
		{"denied.test", 403, SourceBaseline, ReasonDenied, false, false},
		{"127.0.0.1", 403, SourceBaseline, ReasonNotAllowedLocal, false, false},
		// An uncovered name that resolves to loopback, or not at all, is
		// refused without bothering the reviewer.
		{"rebind.test", 403, SourceBaseline, ReasonNotAllowedLocal, false, false},
		{"nx.invalid", 403, SourceBaseline, ReasonNotAllowed, false, false},
	} {
		resp, err := c.Get("http://" + tc.host + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		_, wasAsked := asked.Load(tc.host)
		e := h.lastEvent()
		if resp.StatusCode != tc.status || wasAsked != tc.asked || e.Source != tc.source || e.Reason != tc.reason || e.Override != tc.override {
			t.Errorf("%s: %d asked=%v event=%+v", tc.host, resp.StatusCode, wasAsked, e)
		}
	}
	if r, _ := asked.Load("yes.test"); r.(AskRequest).Protocol != HTTP || r.(AskRequest).Port != 80 {
		t.Errorf("ask request %+v", r)
	}
}

func TestCloseEndsEverything(t *testing.T) {
	up := upstreamServer(t)
	h := start(t, Policy{Allow: []string{"good.test"}}, hostOf(up), nil)
	_, tun := rawConnect(t, h.httpAddr, "good.test:80")
	_, sc := socksDial(t, h.socksAddr, "good.test", 80)
	idle, err := net.Dial("tcp", h.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []net.Conn{tun, sc, idle} {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatal("a connection survived Close")
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("a connection still open after Close")
		}
	}
	if _, err := net.DialTimeout("tcp", h.httpAddr, time.Second); err == nil {
		t.Fatal("HTTP listener still accepting after Close")
	}
}

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}

// Every kind of exchange, allowed and refused, then Close: the process
// (proxy, the test's clients and the in-process upstream) is back to the
// descriptors it held before.
func TestNoDescriptorLeak(t *testing.T) {
	up := upstreamServer(t)
	before := openFDs(t)
	h := start(t, Policy{Allow: []string{"good.test"}}, hostOf(up), nil)
	c := h.client()
	for i := 0; i < 20; i++ {
		for _, u := range []string{"http://good.test/", "http://bad.test/", "http://127.0.0.1/"} {
			resp, err := c.Get(u)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		_, tc := rawConnect(t, h.httpAddr, "good.test:80")
		tc.Close()
		_, dc := rawConnect(t, h.httpAddr, "bad.test:443")
		dc.Close()
		_, sc := socksDial(t, h.socksAddr, "good.test", 80)
		sc.Close()
		rep, bc := socksDial(t, h.socksAddr, "bad.test", 80)
		bc.Close()
		if rep != repNotAllowed {
			t.Fatalf("SOCKS5 to a denied host: %d", rep)
		}
	}
	c.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Everything must be gone now (the upstream's side closes on its own
	// goroutines: bounded wait).
	want := before
	deadline := time.Now().Add(10 * time.Second)
	for n := openFDs(t); n > want; n = openFDs(t) {
		if time.Now().After(deadline) {
			t.Fatalf("descriptors: %d before, %d after Close ", before, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
