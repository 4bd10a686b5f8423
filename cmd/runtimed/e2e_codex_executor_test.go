package main_test

// Issue 27: what Codex (0.169) takes from the executor's own Codex home. An HTTP MCP server configured
// in the executor's config.toml is found with environmentConfig/read and reached through http/request
// (with a secret header kept on the executor by valueEnvVar), and a skill installed in the executor's
// $CODEX_HOME/skills reaches the prompt through capabilities/discoverV2. The executor's Codex home is
// ~/.codex of the server's HOME for runtimed and the reference's CODEX_HOME (h.refHome); codex's own
// CODEX_HOME is elsewhere, so nothing here can come from the client's side.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
)

// serverCodexHome is the Codex home of the exec-server under test (created).
func (h *codexHarness) serverCodexHome() string {
	dir := filepath.Join(h.home, ".codex")
	if h.reference {
		dir = h.refHome
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		h.t.Fatal(err)
	}
	return dir
}

// mcpMock is a minimal streamable-HTTP MCP server (JSON responses, no SSE stream) with one tool that
// answers a marker. With a token, every request must carry "Authorization: Bearer <token>" (401
// otherwise). mu guards calls and auths.
type mcpMock struct {
	srv    *httptest.Server
	token  string
	marker string

	mu    sync.Mutex
	calls []string // JSON-RPC methods received
	auths []string // Authorization headers received
}

const mcpToolName = "lookup_marker"

func newMCPMock(t *testing.T, token, marker string) *mcpMock {
	m := &mcpMock{token: token, marker: marker}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	t.Cleanup(m.srv.Close)
	return m
}

func (m *mcpMock) url() string { return m.srv.URL + "/mcp" }

func (m *mcpMock) serve(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	m.auths = append(m.auths, r.Header.Get("Authorization"))
	m.mu.Unlock()
	if m.token != "" && r.Header.Get("Authorization") != "Bearer "+m.token {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	if r.Method != http.MethodPost {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var req struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if json.Unmarshal(body, &req) != nil {
		http.Error(w, "bad json", http.StatusBadRequest)
		return
	}
	m.mu.Lock()
	m.calls = append(m.calls, req.Method)
	m.mu.Unlock()
	if len(req.ID) == 0 || string(req.ID) == "null" {
		w.WriteHeader(http.StatusAccepted) // a notification
		return
	}
	var result any
	switch req.Method {
	case "initialize":
		var p struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		_ = json.Unmarshal(req.Params, &p)
		result = map[string]any{
			"protocolVersion": p.ProtocolVersion,
			"capabilities":    map[string]any{"tools": map[string]any{"listChanged": false}},
			"serverInfo":      map[string]any{"name": "runtimed-e2e-mcp", "version": "1.0.0"},
		}
	case "tools/list":
		result = map[string]any{"tools": []any{map[string]any{
			"name": mcpToolName, "description": "Returns the runtimed e2e marker.",
			"inputSchema": map[string]any{"type": "object", "properties": map[string]any{}},
		}}}
	case "tools/call":
		result = map[string]any{"content": []any{map[string]any{"type": "text", "text": m.marker}}, "isError": false}
	case "ping", "resources/list", "resources/templates/list", "prompts/list":
		result = map[string]any{}
		switch req.Method {
		case "resources/list":
			result = map[string]any{"resources": []any{}}
		case "resources/templates/list":
			result = map[string]any{"resourceTemplates": []any{}}
		case "prompts/list":
			result = map[string]any{"prompts": []any{}}
		}
	default:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"method not found"}}`, req.ID)
		return
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": result})
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

func (m *mcpMock) seen() (calls, auths []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.calls...), append([]string(nil), m.auths...)
}

// searchedTool finds the mock's tool in the tool_search_output codex sent back for callID: its
// function name and namespace ("" when the search did not find it).
func searchedTool(req *modelRequest, callID, server string) (name, namespace string) {
	for _, it := range req.input() {
		if it["type"] != "tool_search_output" || it["call_id"] != callID {
			continue
		}
		tools, _ := it["tools"].([]any)
		for _, tl := range tools {
			tm, _ := tl.(map[string]any)
			if fn, ok := findTool(tm, "", server); ok {
				return fn[0], fn[1]
			}
		}
	}
	return "", ""
}

// findTool looks for the mock's tool in one tool_search result entry: a function, or a namespace of
// functions.
func findTool(tm map[string]any, ns, server string) ([2]string, bool) {
	name, _ := tm["name"].(string)
	if tm["type"] == "namespace" {
		inner, _ := tm["tools"].([]any)
		for _, x := range inner {
			xm, _ := x.(map[string]any)
			if fn, ok := findTool(xm, name, server); ok {
				return fn, true
			}
		}
		return [2]string{}, false
	}
	if strings.Contains(name, mcpToolName) && (strings.Contains(name, server) || strings.Contains(ns, server)) {
		return [2]string{name, ns}, true
	}
	return [2]string{}, false
}

// codexExecutorMCPCase: an HTTP MCP server in the executor's config.toml (and not in codex's) is
// offered to the model and its tool answers through http/request. With auth, the server requires a
// bearer token that only the executor's environment holds: codex sends the header as valueEnvVar and
// the token never crosses the exec-server connection.
func codexExecutorMCPCase(t *testing.T, h *codexHarness, auth bool) {
	if !h.cv.executorConfig {
		t.Skipf("codex %s does not read the executor's configuration", h.cv.version)
	}
	marker := "MCP-MARKER-" + h.mark
	server, token := "execdocs", ""
	if auth {
		server, token = "execsecret", "tok-"+uuid.NewString()
		h.serverEnv = append(h.serverEnv, "RUNTIMED_E2E_MCP_TOKEN="+token)
	}
	mcp := newMCPMock(t, token, marker)
	cfg := fmt.Sprintf("[mcp_servers.%s]\nurl = %q\n", server, mcp.url())
	if auth {
		cfg += "bearer_token_env_var = \"RUNTIMED_E2E_MCP_TOKEN\"\n"
	}
	if err := os.WriteFile(filepath.Join(h.serverCodexHome(), "config.toml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	var fn, ns string
	// Codex lists an MCP server's tools in the background: on a loaded machine its first
	// tool_search can run before the list arrived. The model searches again (at most
	// mcpSearches times) before it gives up, as a real model would.
	const mcpSearches = 4
	searches, lastSearch := 1, "mcp-search-1"
	search := func(callID string) sseEvent {
		return sseEvent{"type": "response.output_item.done", "item": map[string]any{
			"type": "tool_search_call", "call_id": callID, "execution": "client", "status": "completed",
			"arguments": map[string]any{"query": mcpToolName},
		}}
	}
	afterSearch := func(req *modelRequest) []sseEvent {
		if fn == "" {
			if fn, ns = searchedTool(req, lastSearch, server); fn == "" {
				if searches < mcpSearches {
					searches++
					lastSearch = fmt.Sprintf("mcp-search-%d", searches)
					return []sseEvent{search(lastSearch)}
				}
				return []sseEvent{evMessage("no executor MCP tool found")}
			}
			ev := evFunctionCall("mcp-call", fn, map[string]any{})
			if ns != "" {
				ev["item"].(map[string]any)["namespace"] = ns
			}
			return []sseEvent{ev}
		}
		return []sseEvent{evMessage("done")}
	}
	script := []modelTurn{turnOf(search(lastSearch))}
	for i := 0; i < mcpSearches; i++ {
		script = append(script, afterSearch)
	}
	h.run(append(script, finalMessage("done")), "--dangerously-bypass-approvals-and-sandbox")

	calls, auths := mcp.seen()
	reads := h.tap.callsOf("environmentConfig/read")
	if len(reads) == 0 {
		t.Fatalf("codex never called environmentConfig/read (tools offered: %v)", h.mock.toolNames())
	}
	if e := reads[0].Err; e != nil {
		t.Fatalf("environmentConfig/read answered %d %q", e.Code, e.Message)
	}
	if fn == "" {
		t.Fatalf("tool_search did not find the executor's MCP server %s's tool (MCP server saw %v)", server, calls)
	}
	wantContains(t, "the executor MCP tool's answer", h.output("mcp-call"), marker)
	if !contains(calls, "tools/call") {
		t.Errorf("the MCP server never saw tools/call: %v", calls)
	}
	if len(h.tap.callsOf("http/request")) == 0 {
		t.Errorf("codex reached the MCP server without http/request through the executor")
	}
	if !auth {
		return
	}
	for _, a := range auths {
		if a != "Bearer "+token {
			t.Errorf("the MCP server saw Authorization %q, want the executor's token", a)
		}
	}
	sawEnvVar := false
	for _, c := range h.tap.callsOf("http/request") {
		if strings.Contains(string(c.Params), token) {
			t.Errorf("the token crossed the exec-server connection: %s", trunc(string(c.Params), 400))
		}
		if strings.Contains(string(c.Params), `"valueEnvVar":"RUNTIMED_E2E_MCP_TOKEN"`) {
			sawEnvVar = true
		}
	}
	if !sawEnvVar {
		t.Errorf("no http/request named the header's valueEnvVar")
	}
}

// codexExecutorSkillCase: a skill installed in the executor's $CODEX_HOME/skills reaches the model's
// prompt through capabilities/discoverV2 with codex's executor discovery feature on.
func codexExecutorSkillCase(t *testing.T, h *codexHarness) {
	if !h.cv.executorConfig {
		t.Skipf("codex %s does not discover the executor's skills", h.cv.version)
	}
	marker := "EXEC-SKILL-" + h.mark
	dir := filepath.Join(h.serverCodexHome(), "skills", "okapi-facts")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	skill := "---\nname: okapi-facts\ndescription: Answers questions about okapis (" + marker + ").\n---\n\nUse this skill for okapis.\n"
	if err := os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte(skill), 0o644); err != nil {
		t.Fatal(err)
	}
	h.run([]modelTurn{finalMessage("done")}, "--dangerously-bypass-approvals-and-sandbox",
		"--enable", "executor_capability_discovery", "--enable", "executor_capability_discovery_v2")
	if len(h.tap.callsOf("capabilities/discoverV2")) == 0 {
		t.Errorf("codex never called capabilities/discoverV2")
	}
	if !strings.Contains(h.mock.promptText(), marker) {
		t.Errorf("the executor skill's description (%s) is not in the model's prompt; prompt:\n%s", marker, trunc(h.mock.promptText(), 6000))
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// toolNamesOf lists the tools offered in one model request (function names, and a namespace's
// functions as "namespace.name").
func toolNamesOf(req *modelRequest) []string {
	tools, _ := req.Body["tools"].([]any)
	var names []string
	for _, tl := range tools {
		tm, ok := tl.(map[string]any)
		if !ok {
			continue
		}
		if s, ok := tm["name"].(string); ok {
			names = append(names, s)
		}
	}
	return names
}
