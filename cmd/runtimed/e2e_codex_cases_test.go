package main_test

// The Codex agent cases that need more than one simple command: a command that outlives a dropped
// connection, a repository skill, and the sandbox probes of issue 11. Harness: e2e_codex_test.go.

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// codexReconnectCase: a command is still running when the connection to the exec-server drops; codex
// resumes its session on a new connection and collects the command's whole output and exit.
func codexReconnectCase(t *testing.T, h *codexHarness) {
	if !h.cv.reconnects {
		t.Skipf("codex %s does not reconnect to its exec-server: a dropped connection fails the running tool call", h.cv.version)
	}
	release := filepath.Join(h.tmp, "release-after-drop")
	var dropped atomic.Int32
	h.run([]modelTurn{
		execCommand("drop-1", map[string]any{
			"cmd":           fmt.Sprintf(`echo started; while [ ! -e %s ]; do sleep 0.05; done; echo survived`, shq(release)),
			"yield_time_ms": 250,
		}),
		func(req *modelRequest) []sseEvent {
			out, _ := req.callOutput("drop-1")
			sid, ok := sessionIDIn(out)
			if !ok {
				return []sseEvent{evMessage("no session id in the drop-1 output")}
			}
			// The command waits for the release file, so it is running now: cut the connection under
			// it, then let it finish while codex reconnects.
			dropped.Add(int32(h.tap.drop()))
			if err := os.WriteFile(release, nil, 0o644); err != nil {
				return []sseEvent{evMessage("cannot create the release file: " + err.Error())}
			}
			return []sseEvent{evFunctionCall("drop-2", "write_stdin", map[string]any{
				"session_id": sid, "chars": "", "yield_time_ms": 10000,
			})}
		},
		finalMessage("done"),
	}, "--dangerously-bypass-approvals-and-sandbox")
	if _, ok := sessionIDIn(h.output("drop-1")); !ok {
		t.Fatalf("drop-1: want a running session; got:\n%s", h.output("drop-1"))
	}
	if dropped.Load() < 1 {
		t.Fatalf("the tap had no live connection to drop")
	}
	// Output that reached codex on the old connection but was not yet reported is not repeated
	// (codex resumes reading after the last seq it saw), so only what follows the release is certain.
	out := h.output("drop-2")
	wantContains(t, "output collected after the reconnect", out, "survived\n")
	wantExitCode(t, "command that outlived the connection", out, 0)

	inits := h.tap.callsOf("initialize")
	if len(inits) < 2 {
		t.Fatalf("want a second initialize after the drop, got %d", len(inits))
	}
	var first struct {
		SessionID string `json:"sessionId"`
	}
	if err := json.Unmarshal(inits[0].Result, &first); err != nil || first.SessionID == "" {
		t.Fatalf("first initialize answered %s", inits[0].answer(300))
	}
	resumed := false
	for _, c := range inits[1:] {
		var p struct {
			ResumeSessionID *string `json:"resumeSessionId"`
		}
		var r struct {
			SessionID string `json:"sessionId"`
		}
		_ = json.Unmarshal(c.Params, &p)
		_ = json.Unmarshal(c.Result, &r)
		if p.ResumeSessionID != nil && *p.ResumeSessionID == first.SessionID && c.Err == nil && r.SessionID == first.SessionID {
			resumed = true
		}
	}
	if !resumed {
		t.Errorf("want an initialize resuming session %s answered with the same id", first.SessionID)
	}
	if n := len(h.tap.callsOf("process/start")); n != 1 {
		t.Errorf("want the command started once (resumed, not rerun), got %d process/start", n)
	}
}

// codexSkillCase: a repository skill in .agents/skills; its description must reach the model's prompt.
func codexSkillCase(t *testing.T, h *codexHarness) {
	marker := "ZEBRA-SKILL-" + h.mark
	dir := filepath.Join(h.ws, ".agents", "skills", "zebra-facts")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	skill := "---\nname: zebra-facts\ndescription: Answers questions about zebra stripes (" + marker + ").\n---\n\nUse this skill for zebras.\n"
	if err := os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte(skill), 0o644); err != nil {
		t.Fatal(err)
	}
	h.run([]modelTurn{finalMessage("done")}, "--dangerously-bypass-approvals-and-sandbox")
	prompt := h.mock.promptText()
	if strings.Contains(prompt, marker) {
		return
	}
	if e, ok := h.tap.refused("fs/walk", -32601, ""); ok && !h.reference {
		t.Skipf("runtimed has no fs/walk yet (answered %d %q), so codex %s cannot load repository skills; this case turns on with issue 12's fs/walk", e.Code, e.Message, h.cv.version)
	}
	t.Errorf("the skill description (%s) is not in the model's prompt; prompt:\n%s", marker, trunc(prompt, 6000))
}

// codexSandboxCase runs codex with -s mode (no bypass) and probes the sandbox: a write inside the
// workspace (allowed only in workspace-write), a write outside it, a TCP connection to a loopback
// listener, and an apply_patch outside the workspace. Everything the model is told must match what
// happened on disk and on the listener.
func codexSandboxCase(t *testing.T, h *codexHarness, mode string) {
	outside := sandboxProbeDir(t)
	listener := newCountingListener(t)
	h.run([]modelTurn{
		execCommand("sb-inside", map[string]any{"cmd": "echo in > inside.txt && cat inside.txt", "yield_time_ms": 10000}),
		execCommand("sb-outside", map[string]any{"cmd": "echo out > " + shq(filepath.Join(outside, "shell.txt")), "yield_time_ms": 10000}),
		execCommand("sb-net", map[string]any{"cmd": fmt.Sprintf("echo hi > /dev/tcp/127.0.0.1/%d", listener.port()), "yield_time_ms": 10000}),
		applyPatch("sb-patch", "*** Begin Patch\n*** Add File: "+filepath.Join(outside, "patched.txt")+"\n+x\n*** End Patch\n"),
		applyPatch("sb-patch-inside", "*** Begin Patch\n*** Add File: patched-inside.txt\n+inside\n*** End Patch\n"),
		finalMessage("done"),
	}, "-s", mode)

	if e, ok := h.tap.refused("process/start", -32602, "sandbox intent cannot be enforced"); ok && !h.reference {
		t.Skipf("runtimed refused the sandboxed process/start (%d %q): sandbox enforcement (issue 11) is not in this build; this case turns on once it is", e.Code, e.Message)
	}

	inside := h.output("sb-inside")
	got, readErr := os.ReadFile(filepath.Join(h.ws, "inside.txt"))
	if mode == "workspace-write" {
		wantExitCode(t, "write inside the workspace", inside, 0)
		if readErr != nil || string(got) != "in\n" {
			t.Errorf("inside.txt: %q, %v; want %q", got, readErr, "in\n")
		}
		wantContains(t, "apply_patch inside the workspace", h.output("sb-patch-inside"), "Success", "A patched-inside.txt")
		wantFile(t, filepath.Join(h.ws, "patched-inside.txt"), "inside\n")
	} else {
		wantRanAndFailed(t, "write inside the workspace in read-only mode", inside)
		if readErr == nil {
			t.Errorf("read-only mode: inside.txt was written: %q", got)
		}
		if patch := h.output("sb-patch-inside"); strings.Contains(patch, "Success") {
			t.Errorf("apply_patch in read-only mode: want a refusal, got:\n%s", patch)
		}
		if _, err := os.Stat(filepath.Join(h.ws, "patched-inside.txt")); err == nil {
			t.Errorf("read-only mode: apply_patch wrote patched-inside.txt")
		}
	}
	wantRanAndFailed(t, "write outside the workspace", h.output("sb-outside"))
	wantRanAndFailed(t, "TCP connection to a loopback listener", h.output("sb-net"))
	if n := listener.accepted(); n != 0 {
		t.Errorf("the loopback listener accepted %d connection(s) from the sandboxed command", n)
	}
	if patch := h.output("sb-patch"); strings.Contains(patch, "Success") {
		t.Errorf("apply_patch outside the workspace: want a refusal, got:\n%s", patch)
	}
	for _, name := range []string{"shell.txt", "patched.txt"} {
		if _, err := os.Stat(filepath.Join(outside, name)); err == nil {
			t.Errorf("%s was written outside the workspace", filepath.Join(outside, name))
		}
	}
	if !h.reference {
		for _, c := range h.tap.callsOf("process/start") {
			if c.Err == nil && !strings.Contains(string(c.Result), `"linuxSeccomp"`) && strings.Contains(string(c.Params), `"sandbox":{`) {
				t.Errorf("process/start with a sandbox answered %s; want sandboxType linuxSeccomp", c.answer(200))
			}
		}
	}
}

// wantRanAndFailed: the command ran (an exit code was reported) and failed.
func wantRanAndFailed(t *testing.T, what, out string) {
	t.Helper()
	code, ok := exitCodeIn(out)
	switch {
	case !ok:
		t.Errorf("%s: want the command to run and fail; it did not run to an exit:\n%s", what, out)
	case code == 0:
		t.Errorf("%s: want it refused; it succeeded:\n%s", what, out)
	}
}

// sandboxProbeDir is a directory no sandbox mode makes writable: not under the workspace, /tmp or
// $TMPDIR (workspace-write allows those). It lives in the codex cache directory.
func sandboxProbeDir(t *testing.T) string {
	t.Helper()
	root, err := codexCacheRoot()
	if err != nil {
		t.Skip(err)
	}
	for _, tmp := range []string{"/tmp", os.TempDir()} {
		if root == tmp || strings.HasPrefix(root, strings.TrimSuffix(tmp, "/")+"/") {
			t.Skipf("the cache directory %s is under %s, which workspace-write may write: no place to probe a write outside", root, tmp)
		}
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(root, "sandbox-probe-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// countingListener counts the TCP connections it accepts (and closes them).
type countingListener struct {
	ln net.Listener
	n  atomic.Int32
	wg sync.WaitGroup
}

func newCountingListener(t *testing.T) *countingListener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &countingListener{ln: ln}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.n.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		l.wg.Wait()
	})
	return l
}

func (l *countingListener) port() int     { return l.ln.Addr().(*net.TCPAddr).Port }
func (l *countingListener) accepted() int { return int(l.n.Load()) }
