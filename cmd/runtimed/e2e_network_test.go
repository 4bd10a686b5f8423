package main_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	"github.com/runtimed/runtimed/wire/wiretest"
)

// netStartReq is process/start with Codex's managed-network fields.
type netStartReq struct {
	startReq
	EnforceManagedNetwork bool `json:"enforceManagedNetwork"`
	NetworkProxy          any  `json:"networkProxy"`
}

// TestManagedNetworkOverTheWire: the real daemon, a Codex workspace-write
// start with networkProxy (section 7.5) on both transports: the command
// runs in its empty network namespace, reaches an allowed host through the
// proxy (200), gets the reference's 403 for one the allowlist does not
// cover, cannot connect directly (TCP, from a grandchild too), and the
// daemon sends network/policyDecision for each decision before
// process/exited.
func TestManagedNetworkOverTheWire(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed")
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "upstream-ok") }))
	t.Cleanup(up.Close) // the transports run in parallel, after this function returned
	port := up.URL[strings.LastIndexByte(up.URL, ':')+1:]
	forEachTransport(t, func(t *testing.T, tr transport) {
		c := session(t, tr)
		ctx := tctx(t, wait)
		caps, info := capabilitiesOf(t, c)
		if !caps["runtimedSandboxNamespaces"] {
			t.Skip("the namespaces level is not enforced here")
		}
		if !caps["networkProxyLaunch"] || !caps["networkProxyReviewDomains"] {
			t.Fatalf("namespaces enforced but the managed network is not advertised: %s", info)
		}
		ws := t.TempDir()
		script := `curl -s -m 10 http://127.0.0.1:` + port + `/; echo
curl -s -m 10 -o /dev/null -D - http://blocked.example.com/ | tr -d '\r' | grep -i '^x-proxy-error'
curl -s -m 10 -o /dev/null -w 'denied=%{http_code}' http://blocked.example.com/; echo
curl -s -m 5 --noproxy '*' -o /dev/null -w 'direct=%{http_code}' http://127.0.0.1:` + port + `/; echo
sh -c "sh -c 'curl -s -m 5 --noproxy \"*\" -o /dev/null -w grandchild=%{http_code} http://10.255.255.1/'"; echo
(exec 3<>/dev/tcp/127.0.0.1/` + port + `) 2>/dev/null && echo bash-tcp-ok || echo bash-tcp-refused
echo "proxy=$HTTP_PROXY active=$CODEX_NETWORK_PROXY_ACTIVE"`
		req := netStartReq{startReq: startReq{StartParams: wiretest.StartParams{ProcessID: "mn", Argv: []string{"/usr/bin/bash", "-c", script},
			Cwd: "file://" + ws, Env: baseEnv()}, Sandbox: codexWorkspaceWrite(ws, "enabled")}, EnforceManagedNetwork: true,
			NetworkProxy: map[string]any{"proxy": map[string]any{"enabled": true, "enableSocks5": true, "enableSocks5Udp": false,
				"allowUpstreamProxy": false, "dangerouslyAllowAllUnixSockets": false, "allowLocalBinding": false, "mode": "full",
				"domains": map[string]string{"127.0.0.1": "allow"}}, "environmentId": "local", "executionId": "e1"}}
		if _, err := call(ctx, c, "process/start", req); err != nil {
			t.Fatalf("start: %v", err)
		}
		out := string(mustCollect(t, c, "mn").Output())
		for _, w := range []string{"upstream-ok\n", "blocked-by-allowlist", "denied=403", "direct=000", "grandchild=000", "bash-tcp-refused",
			"proxy=http://127.0.0.1:", "active=1"} {
			if !strings.Contains(out, w) {
				t.Errorf("want %q in %q", w, out)
			}
		}
		var allow, deny int
		for _, n := range c.Notifications() {
			if n.Method != "network/policyDecision" {
				continue
			}
			var d struct{ ProcessID, Decision, Host string }
			if json.Unmarshal(n.Params, &d) != nil || d.ProcessID != "mn" {
				t.Errorf("decision %s", n.Params)
			}
			switch {
			case d.Decision == "allow" && d.Host == "127.0.0.1":
				allow++
			case d.Decision == "deny" && d.Host == "blocked.example.com":
				deny++
			default:
				t.Errorf("unexpected decision %s", n.Params)
			}
		}
		if allow != 1 || deny != 2 {
			t.Errorf("decisions: %d allowed, %d denied; want 1 and 2", allow, deny)
		}
	})
}

// capabilitiesOf asks environment/info and returns its capabilities and
// the raw answer (for messages).
func capabilitiesOf(t *testing.T, c *wiretest.Client) (map[string]bool, json.RawMessage) {
	t.Helper()
	info, err := call(tctx(t, wait), c, "environment/info", nil)
	if err != nil {
		t.Fatalf("environment/info: %v", err)
	}
	var env struct{ Capabilities map[string]bool }
	if err := json.Unmarshal(info, &env); err != nil {
		t.Fatalf("environment/info: %s: %v", info, err)
	}
	return env.Capabilities, info
}
