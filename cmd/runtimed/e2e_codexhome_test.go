package main_test

// End-to-end tests of PROTOCOL.md section 7.6 through the real binary over a websocket:
// environmentConfig/read, http/request's valueEnvVar and redirectPolicy, capabilities/discoverV2 and
// capabilityRoots/discoverV1. Each server gets its own CODEX_HOME, HOME and --codex-system-dir.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"

	"github.com/runtimed/runtimed/wire/wiretest"
)

// codexHomeWorld is one server's Codex installation on disk.
type codexHomeWorld struct {
	root, sys, codexHome, home string
}

func newCodexHomeWorld(t *testing.T) *codexHomeWorld {
	root := t.TempDir()
	w := &codexHomeWorld{root: root, sys: filepath.Join(root, "etc-codex"), codexHome: filepath.Join(root, "codex-home"), home: filepath.Join(root, "home")}
	for _, d := range []string{w.sys, w.codexHome, w.home} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

func (w *codexHomeWorld) write(t *testing.T, rel, content string) string {
	t.Helper()
	p := filepath.Join(w.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// connect starts a server with this world's homes (and extra environment) and opens a session.
func (w *codexHomeWorld) connect(t *testing.T, env ...string) *wiretest.Client {
	t.Helper()
	env = append([]string{"CODEX_HOME=" + w.codexHome, "HOME=" + w.home}, env...)
	srv := wiretest.StartWSEnv(t, bin, env, "--codex-system-dir", w.sys)
	c := dial(t, srv.URL, nil)
	if _, err := c.Initialize(tctx(t, wait)); err != nil {
		t.Fatalf("initialize: %v", err)
	}
	res, err := call(tctx(t, wait), c, "environment/info", nil)
	var info struct {
		Capabilities map[string]bool `json:"capabilities"`
	}
	if err != nil || json.Unmarshal(res, &info) != nil {
		t.Fatalf("environment/info: %s, %v", res, err)
	}
	for _, name := range []string{"environmentConfigRead", "httpHeaderEnvVars", "capabilityDiscoveryV2", "capabilityDiscoverySandbox"} {
		if !info.Capabilities[name] {
			t.Errorf("capability %s is not advertised: %v", name, info.Capabilities)
		}
	}
	return c
}

func fileURIOf(p string) string { return "file://" + p }

type configLayer struct {
	Source  string `json:"source"`
	BaseDir string `json:"baseDir"`
	TOML    string `json:"toml"`
}

type configStack struct {
	Layers              []configLayer `json:"layers"`
	CloudInsertionIndex int           `json:"cloudInsertionIndex"`
	Errors              []struct {
		Source  string `json:"source"`
		Message string `json:"message"`
	} `json:"errors"`
}

type configRead struct {
	UserHomeDir  *string     `json:"userHomeDir"`
	CodexHomeDir string      `json:"codexHomeDir"`
	Hostname     *string     `json:"hostname"`
	Config       configStack `json:"config"`
	Requirements configStack `json:"requirements"`
}

func readConfig(t *testing.T, c *wiretest.Client, cwd string, cfg, req [][]string) (configRead, error) {
	t.Helper()
	var r configRead
	res, err := call(tctx(t, wait), c, "environmentConfig/read", map[string]any{"cwd": cwd, "configPaths": cfg, "requirementsPaths": req})
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(res, &r); err != nil {
		t.Fatalf("environmentConfig/read result %s: %v", res, err)
	}
	return r, nil
}

func decodeTOML(t *testing.T, s string) map[string]any {
	t.Helper()
	m := map[string]any{}
	if _, err := toml.Decode(s, &m); err != nil {
		t.Fatalf("layer TOML %q does not parse: %v", s, err)
	}
	return m
}

func TestEnvironmentConfigRead(t *testing.T) {
	t.Parallel()
	w := newCodexHomeWorld(t)
	w.write(t, "etc-codex/config.toml", "[mcp_servers.sys]\nurl = \"http://sys.test/mcp\"\n")
	w.write(t, "etc-codex/requirements.toml", "[mcp_servers.sys.identity]\nurl = \"http://sys.test/mcp\"\n")
	user := w.write(t, "codex-home/config.toml", `model = "gpt-5"
[mcp_servers.docs]
url = "http://docs.test/mcp"
bearer_token_env_var = "DOCS_TOKEN"
http_headers = { "X-A" = "b" }
[mcp_servers.local]
command = "npx"
args = ["-y", "thing"]
[profiles.x.y]
z = 1
`)
	c := w.connect(t)
	cwd := fileURIOf(w.root)

	r, err := readConfig(t, c, cwd, [][]string{{"mcp_servers"}}, [][]string{{"mcp_servers"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.CodexHomeDir != fileURIOf(w.codexHome) || r.UserHomeDir == nil || *r.UserHomeDir != fileURIOf(w.home) {
		t.Errorf("codexHomeDir %q userHomeDir %v, want %q and %q", r.CodexHomeDir, r.UserHomeDir, fileURIOf(w.codexHome), fileURIOf(w.home))
	}
	sysFile := filepath.Join(w.sys, "config.toml")
	if got := r.Config.Layers; len(got) != 2 || got[0].Source != "system ("+sysFile+")" || got[0].BaseDir != fileURIOf(w.sys) ||
		got[1].Source != "user ("+user+")" || got[1].BaseDir != fileURIOf(w.codexHome) || r.Config.CloudInsertionIndex != 1 {
		t.Fatalf("config layers %+v (cloudInsertionIndex %d): want system then user, index 1", got, r.Config.CloudInsertionIndex)
	}
	wantUser := map[string]any{"mcp_servers": map[string]any{
		"docs":  map[string]any{"url": "http://docs.test/mcp", "bearer_token_env_var": "DOCS_TOKEN", "http_headers": map[string]any{"X-A": "b"}},
		"local": map[string]any{"command": "npx", "args": []any{"-y", "thing"}},
	}}
	if got := decodeTOML(t, r.Config.Layers[1].TOML); !reflect.DeepEqual(got, wantUser) {
		t.Errorf("user layer projected onto mcp_servers:\n%v\nwant\n%v", got, wantUser)
	}
	if got := r.Requirements.Layers; len(got) != 1 || got[0].Source != filepath.Join(w.sys, "requirements.toml") || r.Requirements.CloudInsertionIndex != 1 ||
		!strings.Contains(got[0].TOML, "http://sys.test/mcp") {
		t.Errorf("requirements %+v: want the system requirements layer", r.Requirements)
	}

	// Deeper paths, a path through a non-table (kept whole), a path that selects nothing.
	r, err = readConfig(t, c, w.root, [][]string{{"mcp_servers", "docs", "url"}, {"model", "x"}, {"nope"}, {"profiles"}, {"profiles", "x"}}, [][]string{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"model": "gpt-5", "mcp_servers": map[string]any{"docs": map[string]any{"url": "http://docs.test/mcp"}},
		"profiles": map[string]any{"x": map[string]any{"y": map[string]any{"z": int64(1)}}}}
	// The system layer has mcp_servers but not docs: an empty mcp_servers table stays (as the
	// reference: only a layer whose top level selects nothing is left out).
	if len(r.Config.Layers) != 2 || r.Config.CloudInsertionIndex != 1 {
		t.Fatalf("layers %+v: want system and user, index 1", r.Config.Layers)
	}
	if got := decodeTOML(t, r.Config.Layers[0].TOML); !reflect.DeepEqual(got, map[string]any{"mcp_servers": map[string]any{}}) {
		t.Errorf("system projection: %v", got)
	}
	if got := decodeTOML(t, r.Config.Layers[1].TOML); !reflect.DeepEqual(got, want) {
		t.Errorf("projection:\n%v\nwant\n%v", got, want)
	}
	r, err = readConfig(t, c, w.root, [][]string{{"model"}}, [][]string{})
	if err != nil || len(r.Config.Layers) != 1 || r.Config.CloudInsertionIndex != 0 || r.Config.Layers[0].TOML != "model = \"gpt-5\"\n" {
		t.Errorf("model only: %+v, %v; want the user layer alone, index 0", r.Config, err)
	}
	if len(r.Requirements.Layers) != 0 {
		t.Errorf("no requirements path: want no requirements layers, got %+v", r.Requirements.Layers)
	}

	// A user layer that does not parse is reported and left out; the system layer still answers.
	w.write(t, "codex-home/config.toml", "model = \"x\"\n[mcp_servers.a\nurl = 1\n")
	r, err = readConfig(t, c, cwd, [][]string{{"mcp_servers"}}, [][]string{})
	if err != nil {
		t.Fatalf("a broken user layer failed the read: %v", err)
	}
	if len(r.Config.Layers) != 1 || !strings.HasPrefix(r.Config.Layers[0].Source, "system (") {
		t.Errorf("layers %+v: want only the system layer", r.Config.Layers)
	}
	if len(r.Config.Errors) != 1 || r.Config.Errors[0].Source != "user ("+user+")" || !regexp.MustCompile(`^`+regexp.QuoteMeta(user)+`:[23]:\d+: .*table`).MatchString(r.Config.Errors[0].Message) {
		t.Errorf("errors %+v: want the user layer with %s:<line>:<col>: <what is wrong with the table>", r.Config.Errors, user)
	}

	for _, tc := range []struct {
		what     string
		params   map[string]any
		code     int
		message  string
		contains bool
	}{
		{"both lists empty", map[string]any{"cwd": cwd, "configPaths": [][]string{}, "requirementsPaths": [][]string{}}, -32602, "at least one config or requirements path is required", false},
		{"an empty path", map[string]any{"cwd": cwd, "configPaths": [][]string{{}}, "requirementsPaths": [][]string{}}, -32602, "TOML paths must contain at least one key segment", false},
		{"too many paths", map[string]any{"cwd": cwd, "configPaths": manyPaths(65), "requirementsPaths": [][]string{}}, -32602, "at most 64 TOML selectors are allowed", false},
		{"too deep a path", map[string]any{"cwd": cwd, "configPaths": [][]string{make([]string, 33)}, "requirementsPaths": [][]string{}}, -32602, "TOML paths may contain at most 32 key segments", false},
		{"no cwd", map[string]any{"configPaths": [][]string{{"a"}}, "requirementsPaths": [][]string{}}, -32602, "missing field `cwd`", false},
		{"no requirementsPaths", map[string]any{"cwd": cwd, "configPaths": [][]string{{"a"}}}, -32602, "missing field `requirementsPaths`", false},
		{"a relative cwd", map[string]any{"cwd": "rel/dir", "configPaths": [][]string{{"a"}}, "requirementsPaths": [][]string{}}, -32602, "absolute", true},
		{"a foreign host", map[string]any{"cwd": "file://elsewhere/tmp", "configPaths": [][]string{{"a"}}, "requirementsPaths": [][]string{}}, -32602, "foreign host", true},
	} {
		_, err := call(tctx(t, wait), c, "environmentConfig/read", tc.params)
		if tc.contains {
			wantRPCErrorContains(t, tc.what, err, tc.code, tc.message)
		} else {
			wantRPCError(t, tc.what, err, tc.code, tc.message)
		}
	}

	// A CODEX_HOME that does not exist is the reference's internal error.
	missing := filepath.Join(w.root, "no-such-home")
	c2 := w.connect(t, "CODEX_HOME="+missing)
	_, err = readConfig(t, c2, cwd, [][]string{{"a"}}, [][]string{})
	wantRPCError(t, "a missing CODEX_HOME", err, -32603, fmt.Sprintf("failed to find Codex home: CODEX_HOME points to %q, but that path does not exist", missing))
}

func manyPaths(n int) [][]string {
	out := make([][]string, n)
	for i := range out {
		out[i] = []string{fmt.Sprint(i)}
	}
	return out
}

// TestHTTPRequestHeaderEnvAndRedirects: valueEnvVar takes a header's secret from the executor's
// environment (never from the wire); protected, unset and empty variables are refused with the
// reference's texts; redirectPolicy "stop" answers the redirect itself.
func TestHTTPRequestHeaderEnvAndRedirects(t *testing.T) {
	t.Parallel()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/redir" {
			w.Header().Set("Location", "/final")
			w.WriteHeader(http.StatusFound)
			fmt.Fprint(w, "moved")
			return
		}
		fmt.Fprintf(w, "%s auth=%s", r.URL.Path, r.Header.Get("Authorization"))
	}))
	t.Cleanup(s.Close)
	w := newCodexHomeWorld(t)
	c := w.connect(t, "RUNTIMED_E2E_SECRET=s3cr3t", "RUNTIMED_E2E_EMPTY=", "OPENAI_API_KEY=must-not-leak")
	get := func(path string, extra map[string]any, headers ...map[string]any) (httpReply, error) {
		p := map[string]any{"method": "GET", "url": s.URL + path, "requestId": "r", "headers": headers}
		for k, v := range extra {
			p[k] = v
		}
		return httpCall(t, c, p)
	}
	body := func(r httpReply) string {
		var b []byte
		_ = json.Unmarshal([]byte(`"`+r.BodyBase64+`"`), &b)
		return string(b)
	}

	r, err := get("/echo", nil, map[string]any{"name": "Authorization", "value": "Bearer ", "valueEnvVar": "RUNTIMED_E2E_SECRET"})
	if err != nil || body(r) != "/echo auth=Bearer s3cr3t" {
		t.Errorf("valueEnvVar: %q, %v; want the value followed by the executor's variable", body(r), err)
	}
	r, err = get("/echo", nil, map[string]any{"name": "Authorization", "value": "plain", "valueEnvVar": nil})
	if err != nil || body(r) != "/echo auth=plain" {
		t.Errorf("valueEnvVar null: %q, %v; want the bare value", body(r), err)
	}
	_, err = get("/echo", nil, map[string]any{"name": "Authorization", "value": "Bearer ", "valueEnvVar": "RUNTIMED_E2E_UNSET"})
	wantRPCError(t, "an unset variable", err, -32602, "http/request header Authorization requires executor environment variable RUNTIMED_E2E_UNSET")
	_, err = get("/echo", nil, map[string]any{"name": "Authorization", "value": "Bearer ", "valueEnvVar": "RUNTIMED_E2E_EMPTY"})
	wantRPCError(t, "an empty variable", err, -32602, "http/request header Authorization requires a non-empty executor environment variable RUNTIMED_E2E_EMPTY")
	for _, name := range []string{"OPENAI_API_KEY", "openai_api_key", "CODEX_API_KEY", "Codex_Access_Token", "CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN",
		"OPENAI_FEDERATION_RULE_ID", "OPENAI_IDENTITY_TOKEN_FILE", "OPENAI_WORKLOAD_IDENTITY_CONTEXT", "CODEX_CONNECTORS_TOKEN",
		"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AZURE_CLIENT_SECRET", "AZURE_FEDERATED_TOKEN_FILE", "GOOGLE_APPLICATION_CREDENTIALS"} {
		_, err = get("/echo", nil, map[string]any{"name": "X-K", "value": "", "valueEnvVar": name})
		wantRPCError(t, "protected "+name, err, -32602, "http/request header X-K cannot use executor environment variable "+name)
	}

	r, err = get("/redir", map[string]any{"redirectPolicy": "stop"})
	if err != nil || r.Status != http.StatusFound || body(r) != "moved" || !hasHeader(r, "location", "/final") {
		t.Errorf("redirectPolicy stop: %d %q %v, %v; want the 302 itself with its Location", r.Status, body(r), r.Headers, err)
	}
	for _, policy := range []any{"follow", nil} {
		extra := map[string]any{"redirectPolicy": policy}
		if policy == nil {
			extra = nil // absent: follow
		}
		r, err = get("/redir", extra)
		if err != nil || r.Status != http.StatusOK || body(r) != "/final auth=" {
			t.Errorf("redirectPolicy %v: %d %q, %v; want the redirect followed", policy, r.Status, body(r), err)
		}
	}
	_, err = get("/redir", map[string]any{"redirectPolicy": "none"})
	wantRPCError(t, "redirectPolicy none", err, -32602, "unknown variant `none`, expected `follow` or `stop`")
	_, err = get("/redir", map[string]any{"redirectPolicy": nil})
	wantRPCError(t, "redirectPolicy null", err, -32602, "invalid type: null, expected string or map")
}

func hasHeader(r httpReply, name, value string) bool {
	for _, h := range r.Headers {
		if h.Name == name && h.Value == value {
			return true
		}
	}
	return false
}

type discoveredSkill struct {
	Name             string  `json:"name"`
	Description      string  `json:"description"`
	ShortDescription *string `json:"shortDescription"`
	Path             string  `json:"path"`
	DiscoveryRoot    *struct {
		ID   string `json:"id"`
		Path string `json:"path"`
	} `json:"discoveryRoot"`
	Dependencies *struct {
		Tools []map[string]any `json:"tools"`
	} `json:"dependencies"`
	Policy *struct {
		AllowImplicitInvocation *bool `json:"allowImplicitInvocation"`
	} `json:"policy"`
}

type textFile struct {
	Path     string `json:"path"`
	Contents string `json:"contents"`
}

type discoverV2 struct {
	Plugins []struct {
		ID          string  `json:"id"`
		DisplayName *string `json:"displayName"`
		Version     string  `json:"version"`
		Root        string  `json:"root"`
		Files       struct {
			Manifest   textFile  `json:"manifest"`
			MCPConfig  *textFile `json:"mcpConfig"`
			AppsConfig *textFile `json:"appsConfig"`
		} `json:"files"`
		Skills []discoveredSkill `json:"skills"`
	} `json:"plugins"`
	Skills   []discoveredSkill `json:"skills"`
	Warnings []string          `json:"warnings"`
}

func skillNames(ss []discoveredSkill) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name)
	}
	return out
}

// denySandbox is a managed sandbox that reads everything but path.
func denySandbox(cwd, path string) map[string]any {
	return map[string]any{
		"permissions": map[string]any{"type": "managed", "network": "restricted", "file_system": map[string]any{
			"type": "restricted", "entries": []any{
				map[string]any{"path": map[string]any{"type": "special", "value": map[string]any{"kind": "root"}}, "access": "read"},
				map[string]any{"path": map[string]any{"type": "path", "path": fileURIOf(path)}, "access": "deny"},
			},
		}},
		"cwd": fileURIOf(cwd), "workspaceRoots": []string{},
	}
}

func TestCapabilityDiscovery(t *testing.T) {
	t.Parallel()
	w := newCodexHomeWorld(t)
	hello := w.write(t, "codex-home/skills/hello/SKILL.md", "---\nname: hello-skill\ndescription: Says hello\nmetadata:\n  short-description: short hello\n---\n# Hello\n")
	meta := w.write(t, "codex-home/skills/hello/agents/openai.yaml", "dependencies:\n  tools:\n    - type: mcp\n      value: docs\n      url: http://x/mcp\npolicy:\n  allow_implicit_invocation: false\n")
	w.write(t, "codex-home/skills/.system/sys/SKILL.md", "---\ndescription: a system skill\n---\n")
	w.write(t, "codex-home/skills/nodesc/SKILL.md", "---\nname: nodesc\n---\n")
	w.write(t, "home/.agents/skills/agent/SKILL.md", "---\nname: agent-skill\ndescription: from ~/.agents\n---\n")
	w.write(t, "etc-codex/skills/admin/SKILL.md", "---\nname: admin-skill\ndescription: from the system directory\n---\n")
	w.write(t, "codex-home/skills/huge/SKILL.md", "---\nname: huge\ndescription: too big\n---\n"+strings.Repeat("x", 300<<10))
	plug := filepath.Join(w.codexHome, "plugins", "cache", "mkt", "myplug", "1.0.0")
	w.write(t, "codex-home/plugins/cache/mkt/myplug/0.9.0/.codex-plugin/plugin.json", `{"name":"myplug","version":"0.9.0"}`)
	manifest := `{"name":"myplug","version":"1.0.0","skills":"./skills/","interface":{"displayName":"My Plug"}}`
	w.write(t, "codex-home/plugins/cache/mkt/myplug/1.0.0/.codex-plugin/plugin.json", manifest)
	w.write(t, "codex-home/plugins/cache/mkt/myplug/1.0.0/.mcp.json", `{"mcpServers":{}}`)
	w.write(t, "codex-home/plugins/cache/mkt/myplug/1.0.0/skills/ps/SKILL.md", "---\nname: plug-skill\ndescription: from the plugin\n---\n")
	c := w.connect(t)

	discover := func(sandbox any) (discoverV2, error) {
		var r discoverV2
		res, err := call(tctx(t, wait), c, "capabilities/discoverV2", map[string]any{"cwd": fileURIOf(w.root), "sandbox": sandbox})
		if err == nil {
			err = json.Unmarshal(res, &r)
		}
		return r, err
	}
	r, err := discover(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := skillNames(r.Skills), []string{"sys", "hello-skill", "agent-skill", "admin-skill"}; !reflect.DeepEqual(got, want) {
		t.Errorf("skills %v, want %v (nodesc has no description, huge is over the size bound)", got, want)
	}
	if len(r.Warnings) != 1 || r.Warnings[0] != "some capability metadata could not be loaded; discovery may be incomplete" {
		t.Errorf("warnings %q: want the one incomplete-discovery warning", r.Warnings)
	}
	for _, s := range r.Skills {
		if s.Name != "hello-skill" {
			continue
		}
		if s.Path != fileURIOf(hello) || s.ShortDescription == nil || *s.ShortDescription != "short hello" || s.DiscoveryRoot == nil ||
			s.DiscoveryRoot.ID != "codex-home-skills" || s.DiscoveryRoot.Path != fileURIOf(filepath.Join(w.codexHome, "skills")) ||
			s.Dependencies == nil || len(s.Dependencies.Tools) != 1 || s.Dependencies.Tools[0]["value"] != "docs" ||
			s.Policy == nil || s.Policy.AllowImplicitInvocation == nil || *s.Policy.AllowImplicitInvocation {
			t.Errorf("hello-skill: %+v", s)
		}
	}
	if len(r.Plugins) != 1 {
		t.Fatalf("plugins %+v: want myplug@mkt (its greatest version)", r.Plugins)
	}
	p := r.Plugins[0]
	if p.ID != "myplug@mkt" || p.Version != "1.0.0" || p.Root != fileURIOf(plug) || p.DisplayName == nil || *p.DisplayName != "My Plug" ||
		p.Files.Manifest.Contents != manifest || p.Files.MCPConfig == nil || p.Files.AppsConfig != nil ||
		!reflect.DeepEqual(skillNames(p.Skills), []string{"myplug:plug-skill"}) || p.Skills[0].DiscoveryRoot != nil {
		t.Errorf("plugin %+v", p)
	}

	// The request's sandbox holds: a denied skill directory is not read.
	r, err = discover(denySandbox(w.root, filepath.Dir(hello)))
	if err != nil {
		t.Fatal(err)
	}
	if got := skillNames(r.Skills); contains(got, "hello-skill") || !contains(got, "agent-skill") {
		t.Errorf("with hello denied by the sandbox: skills %v", got)
	}
	// A symlink inside an allowed directory does not lead the walk into a denied one.
	secret := filepath.Dir(w.write(t, "secret/linked/SKILL.md", "---\nname: linked-skill\ndescription: behind a link\n---\n"))
	if err := os.Symlink(secret, filepath.Join(w.codexHome, "skills", "linked")); err != nil {
		t.Fatal(err)
	}
	if r, err = discover(nil); err != nil || !contains(skillNames(r.Skills), "linked-skill") {
		t.Fatalf("a linked skill without a sandbox: %v, %v", skillNames(r.Skills), err)
	}
	if r, err = discover(denySandbox(w.root, filepath.Dir(secret))); err != nil || contains(skillNames(r.Skills), "linked-skill") {
		t.Errorf("a linked skill whose target the sandbox denies: %v, %v", skillNames(r.Skills), err)
	}
	_, err = discover(map[string]any{"permissions": map[string]any{"type": "bogus"}})
	wantRPCErrorContains(t, "a malformed sandbox", err, -32602, "sandbox.permissions")
	_, err = call(tctx(t, wait), c, "capabilities/discoverV2", map[string]any{})
	wantRPCError(t, "no cwd", err, -32602, "missing field `cwd`")

	// capabilityRoots/discoverV1: files with contents, per-root errors and sandboxes.
	type rootResult struct {
		ID     string `json:"id"`
		Path   string `json:"path"`
		Plugin *struct {
			Manifest textFile `json:"manifest"`
		} `json:"plugin"`
		Skills []struct {
			Instructions textFile  `json:"instructions"`
			Metadata     *textFile `json:"metadata"`
		} `json:"skills"`
		NamespaceManifests []textFile `json:"namespaceManifests"`
		Warnings           []string   `json:"warnings"`
		Error              *string    `json:"error"`
	}
	skills := filepath.Join(w.codexHome, "skills")
	res, err := call(tctx(t, wait), c, "capabilityRoots/discoverV1", map[string]any{"roots": []any{
		map[string]any{"id": "plug", "path": fileURIOf(plug)},
		map[string]any{"id": "hello", "path": fileURIOf(filepath.Dir(hello))},
		map[string]any{"id": "denied", "path": fileURIOf(skills), "sandbox": denySandbox(w.root, filepath.Dir(hello))},
		map[string]any{"id": "missing", "path": fileURIOf(filepath.Join(w.root, "nope"))},
		map[string]any{"id": "file", "path": fileURIOf(hello)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var v1 struct {
		Roots []rootResult `json:"roots"`
	}
	if err := json.Unmarshal(res, &v1); err != nil || len(v1.Roots) != 5 {
		t.Fatalf("discoverV1 %s: %v", res, err)
	}
	pr := v1.Roots[0]
	if pr.Plugin == nil || pr.Plugin.Manifest.Contents != manifest || len(pr.NamespaceManifests) != 1 || len(pr.Skills) != 1 || pr.Error != nil {
		t.Errorf("plugin root: %+v", pr)
	}
	hr := v1.Roots[1]
	helloBody, _ := os.ReadFile(hello)
	metaBody, _ := os.ReadFile(meta)
	if len(hr.Skills) != 1 || hr.Skills[0].Instructions.Contents != string(helloBody) || hr.Skills[0].Metadata == nil ||
		hr.Skills[0].Metadata.Contents != string(metaBody) || hr.Skills[0].Metadata.Path != fileURIOf(meta) {
		t.Errorf("skill root: %+v", hr)
	}
	dr := v1.Roots[2]
	for _, s := range dr.Skills {
		if s.Instructions.Path == fileURIOf(hello) {
			t.Errorf("the sandbox denied %s but discoverV1 read it", hello)
		}
	}
	if want := "failed to scan capability path " + fileURIOf(filepath.Dir(hello)) + ": Permission denied (os error 13)"; !contains(dr.Warnings, want) {
		t.Errorf("denied root warnings %q: want %q", dr.Warnings, want)
	}
	if mr := v1.Roots[3]; mr.Error == nil || *mr.Error != "failed to inspect capability root "+fileURIOf(filepath.Join(w.root, "nope"))+": No such file or directory (os error 2)" {
		t.Errorf("missing root: %+v", mr)
	}
	if fr := v1.Roots[4]; fr.Error == nil || *fr.Error != "capability root "+fileURIOf(hello)+" is not a directory" {
		t.Errorf("file root: %+v", fr)
	}
	_, err = call(tctx(t, wait), c, "capabilityRoots/discoverV1", map[string]any{})
	wantRPCError(t, "no roots", err, -32602, "missing field `roots`")
	many := make([]any, 257)
	for i := range many {
		many[i] = map[string]any{"id": fmt.Sprint(i), "path": fileURIOf(w.root)}
	}
	_, err = call(tctx(t, wait), c, "capabilityRoots/discoverV1", map[string]any{"roots": many})
	wantRPCError(t, "257 roots", err, -32602, "at most 256 capability roots are allowed")
}

// TestFsConfigCLI: `runtimed fs config` shows what the executor reports, locally (this process's
// CODEX_HOME) and through --connect (the server's), including a layer that does not load.
func TestFsConfigCLI(t *testing.T) {
	t.Parallel()
	w := newCodexHomeWorld(t)
	w.write(t, "codex-home/config.toml", "model = \"m\"\n[mcp_servers.docs]\nurl = \"http://docs.test/mcp\"\n")
	w.write(t, "codex-home/skills/hello/SKILL.md", "---\nname: hello-skill\ndescription: Says hello\n---\n")
	w.write(t, "etc-codex/config.toml", "[mcp_servers.broken\n")
	run := func(env []string, args ...string) (string, string, int) {
		cmd := exec.Command(bin, append([]string{"fs", "config"}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), errb.String(), code
	}
	out, errOut, code := run([]string{"CODEX_HOME=" + w.codexHome, "HOME=" + w.home}, w.root)
	if code != 0 || !strings.Contains(out, "user ("+filepath.Join(w.codexHome, "config.toml")+")") || !strings.Contains(out, `url = "http://docs.test/mcp"`) ||
		strings.Contains(out, `model = "m"`) || !strings.Contains(out, "hello-skill [codex-home-skills]: Says hello") {
		t.Errorf("local fs config: exit %d\n%s%s", code, out, errOut)
	}
	srv := wiretest.StartWSEnv(t, bin, []string{"CODEX_HOME=" + w.codexHome, "HOME=" + w.home}, "--codex-system-dir", w.sys)
	out, errOut, code = run([]string{"CODEX_HOME=" + filepath.Join(w.root, "absent")}, "--connect", srv.URL, "--key", "model", "--json", w.root)
	var got struct {
		EnvironmentConfig configRead `json:"environmentConfig"`
		Capabilities      discoverV2 `json:"capabilities"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil {
		t.Fatalf("fs config --connect --json: exit %d\n%s%s", code, out, errOut)
	}
	cfg := got.EnvironmentConfig.Config
	if len(cfg.Layers) != 1 || cfg.Layers[0].TOML != "model = \"m\"\n" || len(cfg.Errors) != 1 || !strings.HasPrefix(cfg.Errors[0].Source, "system (") {
		t.Errorf("--key model through the server: %+v", cfg)
	}
	if names := skillNames(got.Capabilities.Skills); !reflect.DeepEqual(names, []string{"hello-skill"}) {
		t.Errorf("skills through the server: %v", names)
	}
	_, errOut, code = run([]string{"CODEX_HOME=" + filepath.Join(w.root, "absent")}, w.root)
	if code != 1 || !strings.Contains(errOut, "CODEX_HOME points to") {
		t.Errorf("a missing CODEX_HOME: exit %d, stderr %q", code, errOut)
	}
}

// TestCodexHomeMethodsNeedInitialize: like every other family, the section 7.6 methods are refused
// before the handshake, on both transports.
func TestCodexHomeMethodsNeedInitialize(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		c := tr.connect(t)
		for method, family := range map[string]string{
			"environmentConfig/read":     "environment config",
			"capabilities/discoverV2":    "capability discovery",
			"capabilityRoots/discoverV1": "capability discovery",
		} {
			_, err := call(tctx(t, wait), c, method, map[string]any{})
			wantRPCError(t, method+" before initialize", err, -32600, "client must call initialize before using "+family+" methods")
		}
	})
}
