package actors

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// loopbackPlacer opens a command's proxy listeners on the host's
// loopback. It confines nothing (the command could go around the proxy):
// it stands in for the sandbox's network namespace so that these tests
// prove the plumbing (environment, decisions, asks, lifecycle), and is
// never used outside tests.
func loopbackPlacer(socks bool) (*NetListeners, error) {
	h, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ls := &NetListeners{HTTP: h, HTTPAddr: h.Addr().String()}
	if socks {
		s, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			h.Close()
			return nil, err
		}
		ls.SOCKS, ls.SOCKSAddr = s, s.Addr().String()
	}
	return ls, nil
}

// exampleResolver answers a public address for *.example and nothing
// else, so the decisions do not depend on this machine's DNS (what a dial
// there gives does: the tests only require that it was let through).
type exampleResolver struct{}

func (exampleResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if strings.HasSuffix(host, ".example") {
		return []netip.Addr{netip.MustParseAddr("93.184.215.14")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func netSupervisor(t *testing.T, place NetPlacer) *Supervisor {
	sup := NewSupervisor(Config{
		Proc:        ProcConfig{RetainBytes: 1 << 20, RetainChunks: 100, ClosedRetention: time.Minute, DrainAfterTerminate: 50 * time.Millisecond, ShutdownGrace: time.Second},
		DetachTTL:   time.Second,
		NetPlacer:   place,
		NetworkDeny: []string{"**.floor.test"},
		netResolver: exampleResolver{},
	})
	t.Cleanup(func() { sup.Kill(); _ = sup.Wait(context.Background()) })
	return sup
}

func needCurl(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed")
	}
}

func decisionsOf(c *rawClient, n int) []map[string]any {
	var out []map[string]any
	for len(out) < n {
		out = append(out, params(c.waitNote(func(m map[string]any) bool { return m["method"] == "network/policyDecision" })))
	}
	return out
}

func TestManagedNetworkStart(t *testing.T) {
	needCurl(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") }))
	defer up.Close()
	port := up.URL[strings.LastIndexByte(up.URL, ':')+1:]
	sup := netSupervisor(t, loopbackPlacer)
	c := startConn(t, sup, false)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	script := `exec >` + out + ` 2>&1
echo "env $HTTP_PROXY|$https_proxy|$ALL_PROXY|$FTP_PROXY|$NO_PROXY|$no_proxy|$CODEX_NETWORK_PROXY_ACTIVE|$CODEX_NETWORK_ALLOW_LOCAL_BINDING|$NODE_USE_ENV_PROXY|$npm_config_proxy|$PIP_PROXY"
echo "ok $(curl -s -m 10 http://127.0.0.1:` + port + `/)"
echo "lan $(curl -s -m 10 -o /dev/null -w '%{http_code} %header{x-proxy-error}' http://127.0.0.2:` + port + `/)"
echo "floor $(curl -s -m 10 -o /dev/null -w '%{http_code} %header{x-proxy-error}' http://a.floor.test/)"
echo "socks $(curl -s -m 10 -x "$ALL_PROXY" http://127.0.0.1:` + port + `/)"
`
	r := c.call("process/start", map[string]any{"processId": "p1", "argv": []string{"sh", "-c", script}, "cwd": dir,
		"env": map[string]string{"PATH": os.Getenv("PATH"), "HTTP_PROXY": "http://inherited.example:1"}, "enforceManagedNetwork": true, "managedNetwork": nil,
		"networkProxy": map[string]any{"proxy": proxyObj(map[string]any{"enableSocks5": true,
			"domains": map[string]string{"127.0.0.1": "allow", "a.floor.test": "allow"}}), "executionId": "e1"}})
	mustOK(t, r)
	c.waitNote(func(m map[string]any) bool { return m["method"] == "process/exited" && params(m)["processId"] == "p1" })
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		k, v, _ := strings.Cut(l, " ")
		lines[k] = v
	}
	env := strings.Split(lines["env"], "|")
	if len(env) != 11 || !strings.HasPrefix(env[0], "http://127.0.0.1:") || env[1] != env[0] || !strings.HasPrefix(env[2], "socks5h://127.0.0.1:") ||
		env[3] != env[2] || env[4] != "" || env[5] != "" || env[6] != "1" || env[7] != "0" || env[8] != "1" || env[9] != env[0] || env[10] != env[0] {
		t.Fatalf("proxy environment %q", lines["env"])
	}
	if lines["ok"] != "hello" || lines["lan"] != "403 blocked-by-allowlist" || lines["floor"] != "403 blocked-by-denylist" || lines["socks"] != "hello" {
		t.Fatalf("through the proxies: %q", b)
	}
	ds := decisionsOf(c, 4)
	type dec struct{ decision, reason, protocol, host string }
	want := []dec{{"allow", "allow", "http", "127.0.0.1"}, {"deny", "not_allowed_local", "http", "127.0.0.2"}, {"deny", "denied", "http", "a.floor.test"}, {"allow", "allow", "socks5_tcp", "127.0.0.1"}}
	for i, d := range ds {
		got := dec{d["decision"].(string), d["reason"].(string), d["protocol"].(string), d["host"].(string)}
		if got != want[i] || d["processId"] != "p1" || d["scope"] != "domain" || d["source"] != "baseline_policy" || !validStamp(d["timestamp"]) || d["policyOverride"] != false {
			t.Errorf("decision %d: %v, want %v", i, d, want[i])
		}
	}
	// The proxies ended with the command.
	proxyAddr := strings.TrimPrefix(env[0], "http://")
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", proxyAddr, time.Second)
		if err != nil {
			break
		}
		conn.Close()
		if time.Now().After(deadline) {
			t.Fatal("the HTTP proxy still accepts after the command exited")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestManagedNetworkAsk(t *testing.T) {
	needCurl(t)
	sup := netSupervisor(t, loopbackPlacer)
	c := startConn(t, sup, false)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	script := `exec >` + out + ` 2>&1
for h in yes no mute; do echo "$h $(curl -s -m 20 -o /dev/null -w '%{http_code}' http://$h.example/)"; done
`
	mustOK(t, c.call("process/start", map[string]any{"processId": "p2", "argv": []string{"sh", "-c", script}, "cwd": dir,
		"env": map[string]string{"PATH": os.Getenv("PATH")}, "policyDecisionTimeoutMs": 300,
		"networkProxy": map[string]any{"proxy": proxyObj(map[string]any{"domains": map[string]string{"known.example": "allow"}})}}))
	for _, host := range []string{"yes.example", "no.example", "mute.example"} {
		m := c.waitNote(func(m map[string]any) bool { return m["method"] == "network/policyRequest" })
		p := params(m)
		req, _ := p["request"].(map[string]any)
		if p["processId"] != "p2" || req["host"] != host || req["protocol"] != "http" || req["port"] != float64(80) || m["id"] == nil {
			t.Fatalf("policy request %v", m)
		}
		id, _ := json.Marshal(m["id"])
		switch host {
		case "yes.example":
			c.send(`{"id":` + string(id) + `,"result":{"decision":{"type":"allow"}}}`)
		case "no.example":
			c.send(`{"id":` + string(id) + `,"result":{"decision":{"type":"deny","reason":"reviewer said no"}}}`)
		}
	}
	c.waitNote(func(m map[string]any) bool { return m["method"] == "process/exited" && params(m)["processId"] == "p2" })
	ds := decisionsOf(c, 3)
	type dec struct {
		decision, source, reason string
		override                 bool
	}
	want := []dec{{"allow", "decider", "allow", true}, {"deny", "decider", "reviewer said no", true}, {"deny", "decider", "not_allowed", false}}
	for i, d := range ds {
		got := dec{d["decision"].(string), d["source"].(string), d["reason"].(string), d["policyOverride"].(bool)}
		if got != want[i] {
			t.Errorf("decision %d: %v, want %v", i, d, want[i])
		}
	}
	b, _ := os.ReadFile(out)
	// yes: let through (what the address answers, if anything, is this
	// machine's business: anything but the proxy's 403); no and mute: 403.
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "yes ") || lines[0] == "yes 403" || lines[1] != "no 403" || lines[2] != "mute 403" {
		t.Fatalf("curl saw %q", b)
	}
	// A late answer to the timed-out request is ignored, not a protocol error.
	mustOK(t, c.call("process/list", map[string]any{}))
}

func TestManagedNetworkRefusedWithoutPlacer(t *testing.T) {
	sup := netSupervisor(t, nil)
	c := startConn(t, sup, false)
	r := c.call("process/start", map[string]any{"processId": "p", "argv": []string{"true"}, "cwd": t.TempDir(),
		"networkProxy": map[string]any{"proxy": proxyObj(map[string]any{"domains": map[string]string{"pypi.org": "allow"}})}})
	if r.Error == nil || r.Error.Code != -32602 || !strings.Contains(r.Error.Message, "networkProxyLaunch is false") {
		t.Fatalf("start without a placer: %+v", r.Error)
	}
	// A placer that fails fails the start with -32603, never an open network.
	sup2 := netSupervisor(t, func(bool) (*NetListeners, error) { return nil, fmt.Errorf("no namespace today") })
	c2 := startConn(t, sup2, false)
	r = c2.call("process/start", map[string]any{"processId": "p", "argv": []string{"true"}, "cwd": t.TempDir(),
		"networkProxy": map[string]any{"proxy": proxyObj(nil)}})
	if r.Error == nil || r.Error.Code != -32603 || r.Error.Message != "network proxy could not be started: no namespace today" {
		t.Fatalf("start with a failing placer: %+v", r.Error)
	}
}

// NamespacePlacer's listeners live in a namespace of their own: the
// proxies answer there (a child started inside reaches them and an
// allowed upstream through them), not on the host's loopback.
func TestNamespacePlacer(t *testing.T) {
	needCurl(t)
	ls, err := NamespacePlacer(true)
	if err != nil {
		t.Skipf("no network namespaces here: %v", err)
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "through") }))
	defer up.Close()
	sup := netSupervisor(t, nil)
	mn := &ManagedNetwork{ProcessID: "ns"}
	var werr error
	if mn.Spec, werr = parseSpecT(proxyRaw(`,"enableSocks5":true,"domains":{"127.0.0.1":"allow"}`)); werr != nil {
		t.Fatal(werr)
	}
	run, err := sup.startProxies(mn, ls)
	if err != nil {
		t.Fatal(err)
	}
	defer run.close()
	if c, err := net.DialTimeout("tcp", ls.HTTPAddr, time.Second); err == nil {
		c.Close()
		t.Fatal("the proxy answers on the host's loopback")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", `echo "$(curl -s -m 5 -x http://`+ls.HTTPAddr+` `+up.URL+`/) $(curl -s -m 5 -x socks5h://`+ls.SOCKSAddr+` `+up.URL+`/) $(curl -s -m 5 -o /dev/null -w %{http_code} `+up.URL+`/)"`)
	var out strings.Builder
	cmd.Stdout = &out
	if err := ls.NS.Do(cmd.Start); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if got := strings.TrimSpace(out.String()); got != "through through 000" {
		t.Fatalf("inside the namespace: %q (want the proxies to reach the upstream and the direct request to fail)", got)
	}
}

func parseSpecT(s string) (*NetworkSpec, error) {
	ns, werr := ParseNetworkSpec(json.RawMessage(s), nil, nil)
	if werr != nil {
		return nil, werr
	}
	return ns, nil
}

// validStamp: network/policyDecision's timestamp as the reference sends
// it, RFC 3339 UTC with milliseconds ("2026-11-27T14:32:46.355Z").
func validStamp(v any) bool {
	s, ok := v.(string)
	if !ok {
		return false
	}
	t, err := time.Parse("2006-01-02T15:04:05.000Z", s)
	return err == nil && time.Since(t) < time.Minute && time.Since(t) > -time.Minute
}

// proxyFields are networkProxy.proxy's required fields (all off, mode full).
const proxyFields = `"enabled":true,"enableSocks5":false,"enableSocks5Udp":false,"allowUpstreamProxy":false,` +
	`"dangerouslyAllowAllUnixSockets":false,"allowLocalBinding":false,"mode":"full"`

// proxyRaw is a networkProxy object with the required fields and extra
// (",key":value...; a repeated key wins over the default).
func proxyRaw(extra string) string { return `{"proxy":{` + proxyFields + extra + `}}` }

// proxyObj is networkProxy.proxy as a map: the required fields, then over.
func proxyObj(over map[string]any) map[string]any {
	m := map[string]any{"enabled": true, "enableSocks5": false, "enableSocks5Udp": false, "allowUpstreamProxy": false,
		"dangerouslyAllowAllUnixSockets": false, "allowLocalBinding": false, "mode": "full"}
	for k, v := range over {
		m[k] = v
	}
	return m
}
