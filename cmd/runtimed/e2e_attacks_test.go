package main_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/runtimed/runtimed/actors/sandbox/sandboxtest"
	"github.com/runtimed/runtimed/wire/wiretest"
)

// codexReadOnly is the sandbox Codex 0.169 sends for `-s read-only`.
func codexReadOnly(root string) map[string]any {
	uri := "file://" + root
	return map[string]any{
		"permissions": map[string]any{"type": "managed", "network": "restricted",
			"file_system": map[string]any{"type": "restricted", "entries": []any{
				map[string]any{"path": map[string]any{"type": "special", "value": map[string]any{"kind": "root"}}, "access": "read"}}}},
		"cwd": uri, "workspaceRoots": []string{uri}, "windowsSandboxLevel": "disabled",
		"windowsSandboxProxySettingsMode": nil, "useLegacyLandlock": false,
	}
}

// TestSandboxAttacksThroughTheDaemon runs the attacks from inside
// trees the real daemon starts, with Codex 0.169's read-only and
// workspace-write shapes, and one unsandboxed tree; the daemon holds a
// writable descriptor it inherited without close-on-exec (its fd 3), which
// no child may write. The host is checked afterwards (sandboxtest.Check).
func TestSandboxAttacksThroughTheDaemon(t *testing.T) {
	sc := sandboxtest.NewScene(t)
	dup, err := unix.Dup(sc.FD)
	if err != nil {
		t.Fatal(err)
	}
	inherited := os.NewFile(uintptr(dup), "inherited")
	defer inherited.Close()
	srv := wiretest.StartWSFiles(t, bin, []*os.File{inherited})
	c := dial(t, srv.URL, nil)
	raw, err := c.Initialize(tctx(t, wait))
	if err != nil {
		t.Fatal(err)
	}
	ctx := tctx(t, 4*wait)
	info, err := call(ctx, c, "environment/info", nil)
	if err != nil {
		t.Fatalf("environment/info: %v (initialize: %s)", err, raw)
	}
	var env struct{ Capabilities map[string]bool }
	if json.Unmarshal(info, &env) != nil || !env.Capabilities["runtimedSandbox"] {
		t.Skipf("this host enforces no sandbox: %s", info)
	}
	if !env.Capabilities["runtimedSandboxNamespaces"] {
		t.Errorf("capabilities do not say the namespaces level is enforced: %s", info)
	}
	if !strings.Contains(srv.Stderr(), `"level": "namespaces"`) {
		t.Errorf("the start-up log does not name the level:\n%s", srv.Stderr())
	}
	// Unsandboxed last: its attacks land (but for the descriptor's).
	for _, mode := range []string{sandboxtest.ReadOnly, sandboxtest.WorkspaceWrite, sandboxtest.Unsandboxed} {
		t.Run(mode, func(t *testing.T) {
			req := startReq{StartParams: wiretest.StartParams{ProcessID: "attack-" + mode, Argv: []string{"/usr/bin/bash", "-c", sc.Script(3)},
				Cwd: "file://" + sc.WS, Env: baseEnv()}}
			switch mode {
			case sandboxtest.ReadOnly:
				req.Sandbox = codexReadOnly(sc.WS)
			case sandboxtest.WorkspaceWrite:
				req.Sandbox = codexWorkspaceWrite(sc.WS, "restricted")
			}
			res, err := call(ctx, c, "process/start", req)
			if err != nil {
				t.Fatalf("start: %v", err)
			}
			if mode != sandboxtest.Unsandboxed && !strings.Contains(string(res), "linuxSeccomp") {
				t.Errorf("start result %s", res)
			}
			out := string(mustCollect(t, c, req.ProcessID).Output())
			sc.Check(t, out, mode)
		})
	}
}

// TestSandboxLevelFlags: --sandbox-level landlock is the operator's
// choice, said in the capabilities and the start-up log; a bad value of
// either flag is refused before serving.
func TestSandboxLevelFlags(t *testing.T) {
	srv := wiretest.StartWS(t, bin, "--sandbox-level", "landlock", "--sandbox-pid-namespace", "inherit")
	c := dial(t, srv.URL, nil)
	if _, err := c.Initialize(tctx(t, wait)); err != nil {
		t.Fatal(err)
	}
	caps, info := capabilitiesOf(t, c)
	if caps["runtimedSandboxNamespaces"] {
		t.Errorf("--sandbox-level landlock: capabilities %s", info)
	}
	if caps["runtimedSandbox"] && !strings.Contains(srv.Stderr(), `"level": "landlock"`) {
		t.Errorf("the start-up log does not name the landlock level:\n%s", srv.Stderr())
	}
	// No network namespace confines a command to its proxies at this
	// level: the managed network is neither advertised nor started.
	if caps["networkProxyLaunch"] || caps["networkProxyReviewDomains"] {
		t.Errorf("--sandbox-level landlock advertises a managed network: %s", info)
	}
	ws := t.TempDir()
	_, err := call(tctx(t, wait), c, "process/start", netStartReq{startReq: startReq{StartParams: shProc("mn", ws, "true"),
		Sandbox: codexWorkspaceWrite(ws, "enabled")}, EnforceManagedNetwork: true,
		NetworkProxy: map[string]any{"proxy": map[string]any{"enabled": true, "enableSocks5": false, "enableSocks5Udp": false,
			"allowUpstreamProxy": false, "dangerouslyAllowAllUnixSockets": false, "allowLocalBinding": false, "mode": "full",
			"domains": map[string]string{"pypi.org": "allow"}}}})
	wantRPCErrorContains(t, "managed network at the landlock level", err, -32602, "networkProxyLaunch is false", "no network namespace")
	for _, args := range [][]string{{"--sandbox-level", "bwrap"}, {"--sandbox-pid-namespace", "share"}} {
		out, err := exec.Command(bin, append([]string{"serve"}, args...)...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), args[1]) {
			t.Errorf("serve %v: %v, %s; want exit 2 naming the value", args, err, out)
		}
	}
}

// TestSandboxFailsClosedWithoutNamespaces: a daemon without CAP_SYS_ADMIN
// (setpriv drops it from the bounding set, as a pod without it would
// have) cannot make the namespaces: a sandboxed start is refused with
// -32602 naming what is missing, how to check, and the operator's way
// out; with --sandbox-level landlock the same start runs (Landlock and
// seccomp only), and the capabilities say so.
func TestSandboxFailsClosedWithoutNamespaces(t *testing.T) {
	setpriv, err := exec.LookPath("setpriv")
	if err != nil || os.Geteuid() != 0 {
		t.Skip("needs root and setpriv(1) to start a daemon without CAP_SYS_ADMIN")
	}
	ws := t.TempDir()
	for _, level := range []string{"namespaces", "landlock"} {
		t.Run(level, func(t *testing.T) {
			srv := wiretest.StartEnv(t, setpriv, nil, "--bounding-set", "-sys_admin", "--", bin, "serve", "--listen", "ws://127.0.0.1:0", "--sandbox-level", level)
			line, err := srv.FirstLine(tctx(t, wait))
			if err != nil {
				t.Fatalf("no URL: %v\n%s", err, srv.Stderr())
			}
			c := dial(t, strings.TrimSpace(line), nil)
			if _, err := c.Initialize(tctx(t, wait)); err != nil {
				t.Fatal(err)
			}
			ctx := tctx(t, wait)
			info, err := call(ctx, c, "environment/info", nil)
			if err != nil {
				t.Fatal(err)
			}
			var env struct{ Capabilities map[string]bool }
			_ = json.Unmarshal(info, &env)
			if env.Capabilities["networkProxyLaunch"] || env.Capabilities["networkProxyReviewDomains"] {
				t.Errorf("a managed network is advertised without the namespaces level: %s", info)
			}
			req := startReq{StartParams: wiretest.StartParams{ProcessID: "ro", Argv: []string{"/usr/bin/bash", "-c", "echo ran"},
				Cwd: "file://" + ws, Env: baseEnv()}, Sandbox: codexReadOnly(ws)}
			_, err = call(ctx, c, "process/start", req)
			if level == "namespaces" {
				if env.Capabilities["runtimedSandbox"] || env.Capabilities["runtimedSandboxNamespaces"] {
					t.Errorf("capabilities claim a sandbox this daemon cannot make: %s", info)
				}
				wantRPCErrorContains(t, "sandboxed start without namespaces", err, -32602, "CAP_SYS_ADMIN", "unshare --mount", "--sandbox-level landlock")
				if !strings.Contains(srv.Stderr(), "UNAVAILABLE") {
					t.Errorf("the start-up log does not say the level is unavailable:\n%s", srv.Stderr())
				}
				return
			}
			if !env.Capabilities["runtimedSandbox"] || env.Capabilities["runtimedSandboxNamespaces"] {
				t.Errorf("--sandbox-level landlock without CAP_SYS_ADMIN: capabilities %s", info)
			}
			if err != nil {
				t.Fatalf("start at the landlock level: %v", err)
			}
			if out := string(mustCollect(t, c, "ro").Output()); !strings.Contains(out, "ran") {
				t.Errorf("output %q", out)
			}
		})
	}
}
