package main_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// codexManagedNetworkCase: codex with features.network_proxy and a permission profile whose network
// is enabled with a domain allowlist sends process/start with networkProxy (PROTOCOL.md 7.5); the
// command reaches an allowed host through runtimed's proxy, a denied one gets the reference's 403, a
// direct connection fails, and runtimed sends network/policyDecision for each decision.
func codexManagedNetworkCase(t *testing.T, h *codexHarness) {
	if !h.cv.executorConfig {
		t.Skipf("codex %s has no executor-side network proxy", h.cv.version)
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "allowed-upstream") }))
	t.Cleanup(up.Close)
	port := up.URL[strings.LastIndexByte(up.URL, ':')+1:]
	h.run([]modelTurn{
		execCommand("net-allowed", map[string]any{"cmd": "curl -s -m 10 http://127.0.0.1:" + port + "/", "yield_time_ms": 15000}),
		execCommand("net-denied", map[string]any{"cmd": "curl -s -m 10 -o /dev/null -D - http://denied.example.com/", "yield_time_ms": 15000}),
		execCommand("net-direct", map[string]any{"cmd": "curl -s -m 5 --noproxy '*' -o /dev/null -w 'direct=%{http_code}' http://127.0.0.1:" + port + "/", "yield_time_ms": 15000}),
		finalMessage("done"),
	}, "-c", "features.network_proxy=true", "-c", `default_permissions="e2enet"`,
		"-c", `permissions.e2enet.filesystem={":root"="read", ":project_roots"="write", ":tmpdir"="write"}`,
		"-c", `permissions.e2enet.network={enabled=true, domains={"127.0.0.1"="allow", "denied.example.com"="deny"}}`,
		"-c", `approval_policy="never"`)
	starts := h.tap.callsOf("process/start")
	if len(starts) == 0 {
		t.Fatalf("codex sent no process/start; net-allowed output:\n%s", h.output("net-allowed"))
	}
	if !strings.Contains(string(starts[0].Params), `"networkProxy":{`) {
		t.Fatalf("process/start without networkProxy: %s", trunc(string(starts[0].Params), 2000))
	}
	wantContains(t, "allowed host through the proxy", h.output("net-allowed"), "allowed-upstream")
	wantContains(t, "denied host", strings.ToLower(h.output("net-denied")), "403", "x-proxy-error: blocked-by-")
	wantContains(t, "direct connection", h.output("net-direct"), "direct=000")
	_, notes := h.tap.snapshot()
	if notes["S->C network/policyDecision"] < 2 {
		t.Errorf("want network/policyDecision notifications; tap saw %v", notes)
	}
}
