package main_test

// End-to-end tests of PROTOCOL.md §7.1 and §7.2 (environmentInfo, environment/info, process/start's
// metadata, managed network and sandboxType) through the real binary over both transports.

import (
	"encoding/json"

	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"testing"

	"github.com/runtimed/runtimed/wire"
	"github.com/runtimed/runtimed/wire/wiretest"
)

// capabilityNames are the names Codex 0.169's own exec-server reports.
var capabilityNames = []string{
	"networkProxyLaunch", "networkProxyReviewDomains", "credentialMasking", "credentialMaskingCustomProviders",
	"capabilityDiscoverySandbox", "fsWatchMissing", "capabilityDiscoveryV2", "environmentConfigRead",
	"httpHeaderEnvVars", "sandboxedFileStreaming", "fileWriteStreaming", "shellSnapshotV2", "windowsMxc",
	"linuxRootWritePreservesDevices", "linuxApprovedRootWritePreservesRestrictions",
}

// builtCapabilities are the capabilities this build provides (true); every other one must be false.
// Add a name here together with the code that makes it work (and runtime.capabilities).
var builtCapabilities = map[string]bool{"fsWatchMissing": true, "fileWriteStreaming": true, "sandboxedFileStreaming": true,
	"environmentConfigRead": true, "capabilityDiscoveryV2": true, "capabilityDiscoverySandbox": true, "httpHeaderEnvVars": true}

// hostCapabilities are Codex names whose value depends on what this host enforces: each must equal
// the runtimed capability named (linuxRootWritePreservesDevices holds wherever sandboxes are enforced,
// TestSandboxRootWritePreservesDevices).
var hostCapabilities = map[string]string{"linuxRootWritePreservesDevices": "runtimedSandbox",
	// The managed network needs the namespaces level (the command's own empty network namespace).
	"networkProxyLaunch": "runtimedSandboxNamespaces", "networkProxyReviewDomains": "runtimedSandboxNamespaces"}

// extCapabilities are runtimed's own names; their values depend on what the
// host can enforce, and TestCapabilitiesAreTruthful checks them against
// what the server then does.
var extCapabilities = []string{"runtimedSandbox", "runtimedSandboxSubpaths", "runtimedSandboxNamespaces", "runtimedTreeContainment", "runtimedLimits", "runtimedOutputAck"}

type envInfo struct {
	Shell struct {
		Name string `json:"name"`
		Path string `json:"path"`
	} `json:"shell"`
	ExecutorVersion      string          `json:"executorVersion"`
	ProviderID           string          `json:"providerId"`
	Cwd                  *string         `json:"cwd"`
	UserHomeDir          string          `json:"userHomeDir"`
	PlatformOS           string          `json:"platformOs"`
	PrependPathDirs      []string        `json:"prependPathDirs"`
	TemporaryDirectories []string        `json:"temporaryDirectories"`
	TempDir              string          `json:"tempDir"`
	Capabilities         map[string]bool `json:"capabilities"`
}

func fileURI(p string) string { return wire.FileURI(p) } // the one encoder (wire/uri.go)

// handshakeEnv runs initialize (as Codex 0.135 sends it: no resumeSessionId) and initialized, and
// returns the raw initialize result.
func handshakeEnv(t *testing.T, c *wiretest.Client) json.RawMessage {
	t.Helper()
	ctx := tctx(t, wait)
	res, err := call(ctx, c, "initialize", map[string]any{"clientName": "codex_exec_server_client"})
	if err != nil {
		t.Fatalf("initialize: %v", err)
	}
	if err := c.Notify(ctx, "initialized", map[string]any{}); err != nil {
		t.Fatal(err)
	}
	return res
}

func checkEnvInfo(t *testing.T, what string, raw json.RawMessage, wantTmp, wantHome string) envInfo {
	t.Helper()
	var info envInfo
	if err := json.Unmarshal(raw, &info); err != nil {
		t.Fatalf("%s: %s: %v", what, raw, err)
	}
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(raw, &fields)
	for _, k := range []string{"shell", "executorVersion", "providerId", "cwd", "userHomeDir", "platformOs", "prependPathDirs", "temporaryDirectories", "tempDir", "capabilities"} {
		if _, ok := fields[k]; !ok {
			t.Errorf("%s: no %q in %s", what, k, raw)
		}
	}
	if st, err := os.Stat(info.Shell.Path); err != nil || st.Mode().Perm()&0o111 == 0 || info.Shell.Name != filepath.Base(info.Shell.Path) {
		t.Errorf("%s: shell %+v is not an executable with its base name", what, info.Shell)
	}
	if !regexp.MustCompile(`^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`).MatchString(info.ExecutorVersion) {
		t.Errorf("%s: executorVersion %q is not semver", what, info.ExecutorVersion)
	}
	if !regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(info.ProviderID) {
		t.Errorf("%s: providerId %q", what, info.ProviderID)
	}
	cwd, _ := os.Getwd() // the server runs in the test's directory
	if info.Cwd == nil || *info.Cwd != fileURI(cwd) {
		t.Errorf("%s: cwd %v, want %s", what, info.Cwd, fileURI(cwd))
	}
	if info.UserHomeDir != fileURI(wantHome) || info.PlatformOS != "linux" {
		t.Errorf("%s: userHomeDir %q platformOs %q, want %s and linux", what, info.UserHomeDir, info.PlatformOS, fileURI(wantHome))
	}
	if info.PrependPathDirs == nil || len(info.PrependPathDirs) != 0 {
		t.Errorf("%s: prependPathDirs %v, want []", what, info.PrependPathDirs)
	}
	if wantTmp == "" {
		if info.TempDir != "file:///tmp" || len(info.TemporaryDirectories) != 0 {
			t.Errorf("%s: no TMPDIR: tempDir %q temporaryDirectories %v", what, info.TempDir, info.TemporaryDirectories)
		}
	} else if info.TempDir != fileURI(wantTmp) || !reflect.DeepEqual(info.TemporaryDirectories, []string{fileURI(wantTmp)}) {
		t.Errorf("%s: TMPDIR=%s: tempDir %q temporaryDirectories %v", what, wantTmp, info.TempDir, info.TemporaryDirectories)
	}
	if len(info.Capabilities) != len(capabilityNames)+len(extCapabilities) {
		t.Errorf("%s: capabilities %v, want exactly %v and %v", what, info.Capabilities, capabilityNames, extCapabilities)
	}
	for _, name := range extCapabilities {
		if _, ok := info.Capabilities[name]; !ok {
			t.Errorf("%s: capability %s missing", what, name)
		}
	}
	for _, name := range capabilityNames {
		v, ok := info.Capabilities[name]
		if ext, host := hostCapabilities[name]; host {
			if !ok || v != info.Capabilities[ext] {
				t.Errorf("%s: capability %s = %v (present %v), want %s's %v", what, name, v, ok, ext, info.Capabilities[ext])
			}
			continue
		}
		if !ok || v != builtCapabilities[name] {
			t.Errorf("%s: capability %s = %v (present %v), want %v", what, name, v, ok, builtCapabilities[name])
		}
	}
	return info
}

func TestEnvironmentInfo(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		var c *wiretest.Client
		wantTmp, wantHome := os.Getenv("TMPDIR"), os.Getenv("HOME")
		if tr.name == "ws" {
			wantTmp, wantHome = t.TempDir(), t.TempDir()
			srv := wiretest.StartWSEnv(t, bin, []string{"TMPDIR=" + wantTmp, "HOME=" + wantHome})
			c = dial(t, srv.URL, nil)
		} else {
			c = tr.connect(t)
		}
		ctx := tctx(t, wait)
		_, err := call(ctx, c, "environment/info", nil)
		wantRPCError(t, "environment/info before initialize", err, -32600, "client must call initialize before using environment info methods")

		init := handshakeEnv(t, c)
		var ir struct {
			SessionID       string          `json:"sessionId"`
			EnvironmentInfo json.RawMessage `json:"environmentInfo"`
		}
		if err := json.Unmarshal(init, &ir); err != nil || !uuidV4.MatchString(ir.SessionID) {
			t.Fatalf("initialize result %s: want a sessionId (what a 0.135 client reads)", init)
		}
		fromInit := checkEnvInfo(t, "initialize", ir.EnvironmentInfo, wantTmp, wantHome)
		for _, params := range []any{nil, map[string]any{}} {
			res, err := call(ctx, c, "environment/info", params)
			if err != nil {
				t.Fatalf("environment/info %v: %v", params, err)
			}
			if got := checkEnvInfo(t, "environment/info", res, wantTmp, wantHome); !reflect.DeepEqual(got, fromInit) {
				t.Errorf("environment/info %+v differs from initialize's %+v", got, fromInit)
			}
		}
		checkCapabilitiesWork(t, c)
		// A 0.135 client goes on as before.
		mustStart(t, c, shProc("p", t.TempDir(), "echo ok"))
		if out := string(mustCollect(t, c, "p").Output()); out != "ok\n" {
			t.Errorf("output %q after the new handshake", out)
		}
	})
}

// providerId identifies the installation: the same binary run twice, over either transport, reports
// the same id.
func TestEnvironmentProviderIDStable(t *testing.T) {
	t.Parallel()
	ids := map[string]bool{}
	for i, connect := range []func(t *testing.T, args ...string) *wiretest.Client{connectWS, connectWS, connectStdio} {
		c := connect(t)
		handshakeEnv(t, c)
		res, err := call(tctx(t, wait), c, "environment/info", nil)
		if err != nil {
			t.Fatal(err)
		}
		var info envInfo
		_ = json.Unmarshal(res, &info)
		if info.ProviderID == "" {
			t.Fatalf("run %d: no providerId in %s", i, res)
		}
		ids[info.ProviderID] = true
	}
	if len(ids) != 1 {
		t.Errorf("three runs of one binary reported providerIds %v, want one", ids)
	}
}

// process/start metadata, sandboxType and managed networks:
// runtime/testdata/transcripts/start_metadata.txt and sandbox.txt.

// checkCapabilitiesWork uses each capability this build claims, so that a flag is never true for a
// method that is missing.
func checkCapabilitiesWork(t *testing.T, c *wiretest.Client) {
	t.Helper()
	ctx := tctx(t, wait)
	dir := t.TempDir()
	// fsWatchMissing: a watch on a missing path, then its end.
	res, err := call(ctx, c, "fs/watchMissing", map[string]any{"watchId": "w", "missing": []string{fileURI(filepath.Join(dir, "nope"))}, "present": nil})
	if err != nil || string(res) != `{"watching":true}` {
		t.Errorf("fsWatchMissing is claimed, fs/watchMissing: %s %v", res, err)
	}
	if res, err = call(ctx, c, "fs/watchMissing", map[string]any{"watchId": "w", "missing": []string{}, "present": nil}); err != nil || string(res) != `{"watching":false}` {
		t.Errorf("fsWatchMissing is claimed, ending the watch: %s %v", res, err)
	}
	// fileWriteStreaming: fs/open "replace", fs/writeBlock, fs/close.
	path := filepath.Join(dir, "streamed")
	steps := []struct {
		method string
		params map[string]any
	}{
		{"fs/open", map[string]any{"handleId": "h", "path": fileURI(path), "mode": "replace"}},
		{"fs/writeBlock", map[string]any{"handleId": "h", "offset": 0, "chunk": "c3RyZWFtZWQ="}},
		{"fs/close", map[string]any{"handleId": "h"}},
	}
	for _, s := range steps {
		if _, err := call(ctx, c, s.method, s.params); err != nil {
			t.Errorf("fileWriteStreaming is claimed, %s: %v", s.method, err)
		}
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "streamed" {
		t.Errorf("fileWriteStreaming is claimed, the file holds %q (%v)", b, err)
	}
	// sandboxedFileStreaming: a replace stream that carries a sandbox is held
	// to it (here read-only: refused before anything is created).
	ro := map[string]any{"permissions": map[string]any{"type": "managed", "network": "restricted", "file_system": map[string]any{
		"type": "restricted", "entries": []any{map[string]any{"path": map[string]any{"type": "special", "value": map[string]any{"kind": "root"}}, "access": "read"}}}}}
	denied := filepath.Join(dir, "denied")
	_, err = call(ctx, c, "fs/open", map[string]any{"handleId": "d", "path": fileURI(denied), "mode": "replace", "sandbox": ro})
	wantRPCErrorContains(t, "sandboxedFileStreaming is claimed, a read-only replace", err, -32600, "permission denied by the request's sandbox")
	if _, err := os.Stat(denied); err == nil {
		t.Errorf("sandboxedFileStreaming is claimed, yet the denied file was created")
	}
	// The runtimed extensions say what this host enforces: a sandboxed start
	// succeeds exactly when runtimedSandbox is true.
	var info envInfo
	raw, err := call(ctx, c, "environment/info", nil)
	if err != nil || json.Unmarshal(raw, &info) != nil {
		t.Fatalf("environment/info: %s %v", raw, err)
	}
	_, err = call(ctx, c, "process/start", map[string]any{"processId": "sbx", "argv": []string{"/bin/true"}, "cwd": dir,
		"env": baseEnv(), "tty": false, "sandbox": ro})
	if info.Capabilities["runtimedSandbox"] != (err == nil) {
		t.Errorf("runtimedSandbox = %v but a sandboxed start answered %v", info.Capabilities["runtimedSandbox"], err)
	}
	if err == nil {
		mustCollect(t, c, "sbx")
	}
	// environmentConfigRead, capabilityDiscoveryV2 (with a sandbox: capabilityDiscoverySandbox):
	// answered, not -32601 (e2e_codexhome_test.go checks what they answer).
	if _, err := call(ctx, c, "environmentConfig/read", map[string]any{"cwd": fileURI(dir), "configPaths": [][]string{{"mcp_servers"}}, "requirementsPaths": [][]string{}}); err != nil {
		t.Errorf("environmentConfigRead is claimed, environmentConfig/read: %v", err)
	}
	if _, err := call(ctx, c, "capabilities/discoverV2", map[string]any{"cwd": fileURI(dir), "sandbox": ro}); err != nil {
		t.Errorf("capabilityDiscoveryV2 is claimed, capabilities/discoverV2: %v", err)
	}
}
