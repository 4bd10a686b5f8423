package actors

import (
	"context"
	"encoding/json"
	"reflect"
	"regexp"
	"testing"
	"time"

	"github.com/runtimed/runtimed/actors/hostenv"
	"github.com/runtimed/runtimed/wire"
)

func TestEnvironmentInfoFromHost(t *testing.T) {
	h := hostenv.Info{
		ShellName: "zsh", ShellPath: "/usr/bin/zsh", Version: "1.2.3", ProviderID: "sha256:ab",
		Cwd: "/srv/my work", Home: "/home/u", OS: "linux",
		TempDirs: []string{"/var/tmp/x"}, TempDir: "/var/tmp/x", PrependPathDirs: []string{"/opt/bin"},
	}
	got := environmentInfo(h, wire.Capabilities{FsWatchMissing: true})
	cwd := "file:///srv/my%20work"
	want := wire.EnvironmentInfo{
		Shell: wire.ShellInfo{Name: "zsh", Path: "/usr/bin/zsh"}, ExecutorVersion: "0.171.0+runtimed.1.2.3", ProviderID: "sha256:ab",
		Cwd: &cwd, UserHomeDir: "file:///home/u", PlatformOS: "linux",
		PrependPathDirs: []string{"file:///opt/bin"}, TemporaryDirectories: []string{"file:///var/tmp/x"}, TempDir: "file:///var/tmp/x",
	}
	caps := got.Capabilities
	got.Capabilities = nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	if len(caps) != len(wire.CapabilityNames()) {
		t.Errorf("capabilities %v: want every known name", caps)
	}
	for name, v := range caps {
		if v != (name == wire.CapFsWatchMissing) {
			t.Errorf("capability %s = %v", name, v)
		}
	}

	// Unknown values: cwd null, home and tempDir absent, lists empty (not null).
	b, _ := json.Marshal(environmentInfo(hostenv.Info{ShellName: "sh", ShellPath: "/bin/sh", OS: "linux"}, wire.Capabilities{}))
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	if v, ok := m["cwd"]; !ok || v != nil {
		t.Errorf("unknown cwd: %s, want \"cwd\":null", b)
	}
	for _, k := range []string{"userHomeDir", "tempDir"} {
		if _, ok := m[k]; ok {
			t.Errorf("unknown %s is present: %s", k, b)
		}
	}
	for _, k := range []string{"prependPathDirs", "temporaryDirectories"} {
		if l, ok := m[k].([]any); !ok || len(l) != 0 {
			t.Errorf("%s: %s, want []", k, b)
		}
	}
}

func TestEnvironmentInfoOnConnection(t *testing.T) {
	host := hostenv.Info{ShellName: "bash", ShellPath: "/bin/bash", Version: "9.9.9", ProviderID: "sha256:00", Cwd: "/", OS: "linux", TempDir: "/tmp"}
	sup := NewSupervisor(Config{
		Proc:         ProcConfig{RetainBytes: 1 << 20, RetainChunks: 100, ClosedRetention: time.Minute, DrainAfterTerminate: 50 * time.Millisecond, ShutdownGrace: time.Second},
		DetachTTL:    time.Second,
		Environment:  host,
		Capabilities: wire.Capabilities{FileWriteStreaming: true},
	})
	t.Cleanup(func() { sup.Kill(); _ = sup.Wait(context.Background()) })
	client, server := memPipe()
	c := serveRaw(t, sup, client, server)

	mustErr(t, c.call("environment/info", nil), -32600, "client must call initialize before using environment info methods")
	init := c.call("initialize", map[string]any{"clientName": "codex", "resumeSessionId": nil})
	mustOK(t, init)
	mustErr(t, c.call("environment/info", nil), -32600, "client must send initialized before using environment info methods")
	c.send(`{"method":"initialized"}`)

	var ir struct {
		SessionID       string          `json:"sessionId"`
		EnvironmentInfo json.RawMessage `json:"environmentInfo"`
	}
	if err := json.Unmarshal(init.Result, &ir); err != nil || ir.SessionID == "" {
		t.Fatalf("initialize result %s", init.Result)
	}
	want, _ := json.Marshal(environmentInfo(host, wire.Capabilities{FileWriteStreaming: true}))
	if !sameJSON(ir.EnvironmentInfo, want) {
		t.Errorf("initialize environmentInfo\n%s\nwant\n%s", ir.EnvironmentInfo, want)
	}
	for _, params := range []any{nil, map[string]any{}} {
		r := c.call("environment/info", params)
		mustOK(t, r)
		if !sameJSON(r.Result, want) {
			t.Errorf("environment/info (params %v)\n%s\nwant\n%s", params, r.Result, want)
		}
	}
	r := c.call("environment/info", []int{1})
	if r.Error == nil || r.Error.Code != -32602 {
		t.Errorf("environment/info with array params: %+v, want -32602", r.Error)
	}
}

func TestStartMetadataSandboxTypeAndManagedNetwork(t *testing.T) {
	c := startConn(t, newTestSupervisor(t, 1<<20, 1000), true)
	dir := t.TempDir()
	start := func(id string, extra map[string]any) rpcReply {
		p := map[string]any{"processId": id, "argv": []string{"true"}, "cwd": dir, "env": map[string]string{}, "tty": false}
		for k, v := range extra {
			p[k] = v
		}
		return c.call("process/start", p)
	}
	r := start("meta", map[string]any{"metadata": map[string]any{"threadId": "0196f5a2-1111-7222-8333-444455556666", "toolCallId": "call_1"}})
	mustOK(t, r)
	if !sameJSON(r.Result, []byte(`{"processId":"meta","sandboxType":"none"}`)) {
		t.Errorf("start result %s", r.Result)
	}
	mustOK(t, start("partial", map[string]any{"metadata": map[string]any{"toolCallId": "call_2"}}))
	mustOK(t, start("plain", map[string]any{"metadata": nil}))
	// Without a sandbox there is nothing to enforce, as in the reference.
	mustOK(t, start("enforced", map[string]any{"enforceManagedNetwork": true}))
	mustOK(t, start("details", map[string]any{"enforceManagedNetwork": false, "managedNetwork": map[string]any{"loopbackPorts": []int{3128}, "allowLocalBinding": true}}))
	mustErr(t, start("proxy", map[string]any{"networkProxy": map[string]any{"proxy": proxyObj(nil)}}), -32602,
		"managed network cannot be provided: this executor cannot launch a network proxy (capability networkProxyLaunch is false: no network namespace confines the command to the proxy on this host)")
	mustErr(t, start("proxy", map[string]any{"networkProxy": map[string]any{}}), -32602, "missing field `networkProxy.proxy`")
	// A sandbox with permissions "disabled" enforces nothing: nothing to
	// route through a proxy either (refusals under an enforced sandbox are
	// in TestManagedNetworkError and the E2E tests, which have a sandbox host).
	mustOK(t, start("disabled", map[string]any{"enforceManagedNetwork": true, "sandbox": map[string]any{"permissions": map[string]any{"type": "disabled"}}}))
	r = start("badports", map[string]any{"managedNetwork": map[string]any{"loopbackPorts": "x"}})
	if r.Error == nil || r.Error.Code != -32602 {
		t.Errorf("managedNetwork with bad ports: %+v, want -32602", r.Error)
	}
	r = start("badmeta", map[string]any{"metadata": map[string]any{"threadId": 7}})
	if r.Error == nil || r.Error.Code != -32602 {
		t.Errorf("metadata with a numeric threadId: %+v, want -32602", r.Error)
	}

	r = c.call("process/list", nil)
	mustOK(t, r)
	var list struct {
		Processes []struct {
			ProcessID string          `json:"processId"`
			Metadata  json.RawMessage `json:"metadata"`
		} `json:"processes"`
	}
	_ = json.Unmarshal(r.Result, &list)
	got := map[string]string{}
	for _, p := range list.Processes {
		got[p.ProcessID] = string(p.Metadata)
	}
	want := map[string]string{
		"meta":     `{"threadId":"0196f5a2-1111-7222-8333-444455556666","toolCallId":"call_1"}`,
		"partial":  `{"toolCallId":"call_2"}`,
		"plain":    `null`,
		"enforced": `null`,
		"details":  `null`,
		"disabled": `null`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("process/list metadata %v\nwant %v", got, want)
	}
}

func sameJSON(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

func TestManagedNetworkError(t *testing.T) {
	ports := &wire.ManagedNetwork{LoopbackPorts: []uint16{3128}}
	cases := []struct {
		p         wire.StartParams
		sandboxed bool
		want      string // "" for no error
	}{
		{wire.StartParams{}, false, ""},
		{wire.StartParams{}, true, ""},
		{wire.StartParams{EnforceManagedNetwork: true}, false, ""},
		{wire.StartParams{EnforceManagedNetwork: true, ManagedNetwork: ports}, false, ""},
		{wire.StartParams{ManagedNetwork: ports}, true, ""},
		{wire.StartParams{NetworkProxy: json.RawMessage(`null`)}, false, ""},
		{wire.StartParams{EnforceManagedNetwork: true}, true, "managed network cannot be provided: enforceManagedNetwork is set without managedNetwork, so the sandbox would have no proxy to allow"},
		{wire.StartParams{EnforceManagedNetwork: true, ManagedNetwork: ports}, true, "managed network cannot be provided: this executor cannot confine a sandboxed process's network to the managed proxy's loopback ports"},
		{wire.StartParams{NetworkProxy: json.RawMessage(proxyRaw(`,"domains":{"pypi.org":"allow"}`))}, false,
			"managed network cannot be provided: this executor cannot launch a network proxy (capability networkProxyLaunch is false: no network namespace confines the command to the proxy on this host)"},
		{wire.StartParams{NetworkProxy: json.RawMessage(`{}`)}, false, "missing field `networkProxy.proxy`"},
		{wire.StartParams{NetworkProxy: json.RawMessage(proxyRaw(`,"mode":"open"`))}, true, "invalid field `networkProxy.proxy.mode`: unknown variant `open`, expected one of `full`, `limited`"},
		{wire.StartParams{NetworkProxy: json.RawMessage(proxyRaw(`,"domains":{"a.*.org":"allow"}`))}, false,
			"invalid field `networkProxy.proxy.domains`: pattern \"a.*.org\": a wildcard is only allowed as a leading *. or **."},
		{wire.StartParams{NetworkProxy: json.RawMessage(proxyRaw(`,"domains":{"*":"deny"}`))}, false,
			"invalid field `networkProxy.proxy.domains`: pattern \"*\": \"*\" is only an allow"},
		{wire.StartParams{NetworkProxy: json.RawMessage(proxyRaw(`,"transparentTcp":true`))}, false,
			"invalid field `networkProxy.proxy.transparentTcp`: not supported by this executor (capability networkProxyTransparentTcp is false)"},
	}
	for i, c := range cases {
		n, e := networkRequest(&c.p)
		if e == nil {
			_, _, e = managedNetwork(n, c.sandboxed, []string{"**.floor.test"}, false)
		}
		switch {
		case c.want == "" && e != nil:
			t.Errorf("case %d: unexpected %v", i, e)
		case c.want != "" && (e == nil || e.Code != wire.CodeInvalidParams || e.Message != c.want):
			t.Errorf("case %d: got %v, want -32602 %q", i, e, c.want)
		}
	}
}

// Codex 0.169 asks capabilities/discoverV2 only of executors of 0.164.0 or later: the reported version
// is the protocol level with runtimed's own version as build metadata, valid semver for every input.
func TestExecutorVersion(t *testing.T) {
	semver := regexp.MustCompile(`^0\.171\.0\+runtimed(\.[0-9A-Za-z-]+)*$`)
	for in, want := range map[string]string{
		"1.4.2":                          "0.171.0+runtimed.1.4.2",
		"0.0.0-devel":                    "0.171.0+runtimed.0.0.0-devel",
		"0.0.0-devel+abcdef123456.dirty": "0.171.0+runtimed.0.0.0-devel.abcdef123456.dirty",
		"":                               "0.171.0+runtimed",
		"1..2/ä":                         "0.171.0+runtimed.1.2",
	} {
		got := ExecutorVersion(in)
		if got != want || !semver.MatchString(got) {
			t.Errorf("ExecutorVersion(%q) = %q, want %q (semver)", in, got, want)
		}
	}
}
