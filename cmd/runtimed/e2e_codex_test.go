package main_test

// The real Codex CLI agent against runtimed (issue 12 "Real client, in the repo"; the acceptance test of
// issue 11). Each case runs `codex exec` of a pinned npm version with CODEX_EXEC_SERVER_URL pointing at
// a runtimed server (through a recording websocket tap, codextap_test.go) and a scripted model
// (codexmock_test.go), then checks what the agent sent back to the model, the files on disk and the
// exec-server calls it made.
//
// Environment:
//   RUNTIMED_CODEX_E2E=off         skip these tests
//   RUNTIMED_CODEX_E2E_SERVER=reference
//                                  run the same cases against Codex's own exec-server
//                                  (`codex exec-server` of the same version) instead of runtimed
//   RUNTIMED_CODEX_CACHE=DIR       where the npm installs are kept (default ~/.cache/runtimed-test)
// `go test -short` runs only the shell case of each version. The whole set takes about 25 s on an idle
// 2-core machine once the installs are cached (the first install downloads ~100 MB per version).
// With -v, each version logs a table of the exec-server methods codex called and the answers it got.
//
// Guards: a case that needs what runtimed does not have yet skips with the server's own answer, so it
// turns on by itself when the feature lands: the skill case when fs/walk is -32601 (issue 12), the
// 0.169 sandbox cases when process/start with a sandbox is -32602 (issue 11). Against the reference
// every case runs. The reconnect case skips for 0.135, whose client does not resume sessions.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runtimed/runtimed/wire/wiretest"
)

const (
	codexE2EEnv    = "RUNTIMED_CODEX_E2E"
	codexServerEnv = "RUNTIMED_CODEX_E2E_SERVER"
	// codexRunTimeout bounds one `codex exec` run.
	codexRunTimeout = 2 * time.Minute
	// codexModel has metadata built into both versions, so codex offers apply_patch as a tool.
	codexModel = "gpt-5.5"
)

// codexVersion is a Codex CLI release the tests run.
type codexVersion struct {
	version string
	// reconnects: the client resumes its exec-server session after a dropped connection
	// (0.135 fails the running tool call instead).
	reconnects bool
	// executorConfig: the client reads the executor's configuration (environmentConfig/read, MCP
	// servers reached through http/request) and discovers its skills (capabilities/discoverV2).
	executorConfig bool
}

var codexVersions = []codexVersion{
	{version: "0.169.0", reconnects: true, executorConfig: true}, // the reference client (PROTOCOL.md section 7)
	{version: "0.171.0", reconnects: true, executorConfig: true}, // the newest Codex (PROTOCOL.md section 7)
	{version: "0.135.0", reconnects: false},
}

type codexCaseFunc func(t *testing.T, h *codexHarness)

var codexCases = []struct {
	name string
	run  codexCaseFunc
}{
	{"shell", codexShellCase},
	{"apply_patch", codexApplyPatchCase},
	{"pty_write_stdin", codexPTYCase},
	{"reconnect", codexReconnectCase},
	{"skill", codexSkillCase},
	{"stdio_transport", codexStdioCase},
	{"sandbox_workspace_write", func(t *testing.T, h *codexHarness) { codexSandboxCase(t, h, "workspace-write") }},
	{"sandbox_read_only", func(t *testing.T, h *codexHarness) { codexSandboxCase(t, h, "read-only") }},
	{"executor_mcp", func(t *testing.T, h *codexHarness) { codexExecutorMCPCase(t, h, false) }},
	{"executor_mcp_auth", func(t *testing.T, h *codexHarness) { codexExecutorMCPCase(t, h, true) }},
	{"executor_skill", codexExecutorSkillCase},
	{"managed_network", codexManagedNetworkCase},
}

func TestCodexAgent(t *testing.T) {
	if v := os.Getenv(codexE2EEnv); v == "off" || v == "0" || v == "false" {
		t.Skipf("%s=%s", codexE2EEnv, v)
	}
	reference := false
	switch v := os.Getenv(codexServerEnv); v {
	case "", "runtimed":
	case "reference":
		reference = true
	default:
		t.Fatalf("%s=%q: want runtimed or reference", codexServerEnv, v)
	}
	t.Parallel()
	for _, cv := range codexVersions {
		t.Run(cv.version, func(t *testing.T) {
			t.Parallel()
			codex := codexBinary(t, cv.version)
			table := newMethodTable()
			t.Cleanup(func() {
				server := "runtimed"
				if reference {
					server = "codex exec-server " + cv.version
				}
				t.Logf("exec-server methods codex %s called on %s, with the answers:\n%s", cv.version, server, table)
			})
			for _, c := range codexCases {
				t.Run(c.name, func(t *testing.T) {
					if testing.Short() && c.name != "shell" {
						t.Skip("-short runs only the shell case of the codex e2e")
					}
					t.Parallel()
					c.run(t, newCodexHarness(t, cv, codex, reference, table))
				})
			}
		})
	}
}

// ---- harness ----

// codexHarness is one codex run's world: a server (runtimed or the reference) behind a tap, a
// workspace, isolated homes, and, once run is called, the model mock.
type codexHarness struct {
	t         *testing.T
	cv        codexVersion
	codex     string
	reference bool
	tap       *wsTap // nil until run starts a websocket server
	mock      *responsesMock
	home      string // HOME of codex and of the server
	codexHome string // CODEX_HOME: config.toml, sessions, caches
	ws        string // the workspace (codex -C)
	tmp       string // TMPDIR of codex and of the server
	mark      string // a value only the server's environment has
	refHome   string // CODEX_HOME of the reference exec-server
	table     *methodTable
	stdio     bool     // codex starts the server itself (useStdio); no tap
	serverEnv []string // more environment of the exec-server (not of codex)
}

func newCodexHarness(t *testing.T, cv codexVersion, codex string, reference bool, table *methodTable) *codexHarness {
	t.Helper()
	root := t.TempDir()
	h := &codexHarness{
		t: t, cv: cv, codex: codex, reference: reference, table: table,
		home:      filepath.Join(root, "home"),
		codexHome: filepath.Join(root, "codex-home"),
		refHome:   filepath.Join(root, "reference-codex-home"),
		ws:        filepath.Join(root, "ws"),
		tmp:       filepath.Join(root, "tmp"),
		mark:      uuid.NewString(),
	}
	for _, d := range []string{h.home, h.codexHome, h.refHome, h.ws, h.tmp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// serverCommand is the exec-server under test listening at listen: program, arguments, environment.
func (h *codexHarness) serverCommand(listen string) (string, []string, []string) {
	env := []string{"HOME=" + h.home, "TMPDIR=" + h.tmp, "RUNTIMED_E2E_CODEX_MARK=" + h.mark}
	env = append(env, h.serverEnv...)
	if h.reference {
		return h.codex, []string{"exec-server", "--listen", listen}, append(env, "CODEX_HOME="+h.refHome)
	}
	return bin, []string{"serve", "--listen", listen}, env
}

// startWS starts the exec-server on a loopback websocket and puts the tap in front of it.
func (h *codexHarness) startWS() {
	t := h.t
	t.Helper()
	program, args, env := h.serverCommand("ws://127.0.0.1:0")
	srv := wiretest.StartEnv(t, program, env, args...)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	line, err := srv.FirstLine(ctx)
	if err != nil {
		t.Fatalf("%s %q did not print its URL: %v\n%s", program, args, err, srv.Stderr())
	}
	h.tap = newTap(t, strings.TrimSpace(line))
	t.Cleanup(func() {
		h.table.add(h.tap)
		if t.Failed() {
			t.Logf("exec-server calls of this run:\n%s", h.tap.trace())
		}
	})
}

// useStdio makes codex start the exec-server itself and talk to it over stdin/stdout, configured in
// $CODEX_HOME/environments.toml (which takes precedence over CODEX_EXEC_SERVER_URL). No tap sees it.
func (h *codexHarness) useStdio() {
	program, args, env := h.serverCommand("stdio")
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = fmt.Sprintf("%q", a)
	}
	envs := make([]string, len(env))
	for i, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		envs[i] = fmt.Sprintf("%s = %q", k, v)
	}
	toml := fmt.Sprintf("default = \"executor\"\ninclude_local = false\n\n[[environments]]\nid = \"executor\"\nprogram = %q\nargs = [%s]\nenv = { %s }\n",
		program, strings.Join(quoted, ", "), strings.Join(envs, ", "))
	if err := os.WriteFile(filepath.Join(h.codexHome, "environments.toml"), []byte(toml), 0o644); err != nil {
		h.t.Fatal(err)
	}
	h.stdio = true
}

// codexResult is how one `codex exec` ended.
type codexResult struct {
	exit           int
	stdout, stderr string
	took           time.Duration
}

// run writes the config for a mock playing script, runs `codex exec` with extra args, and fails the
// test if codex did not exit 0 or the mock saw a request it did not expect.
func (h *codexHarness) run(script []modelTurn, args ...string) *codexResult {
	t := h.t
	t.Helper()
	if !h.stdio {
		h.startWS()
	}
	h.mock = newResponsesMock(t, script...)
	config := fmt.Sprintf(`model = %q
model_provider = "runtimed_e2e_mock"
check_for_update_on_startup = false

[features]
plugins = false
remote_plugin = false
apps = false

[analytics]
enabled = false

[model_providers.runtimed_e2e_mock]
name = "runtimed e2e mock"
base_url = %q
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
`, codexModel, h.mock.baseURL())
	if err := os.WriteFile(filepath.Join(h.codexHome, "config.toml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	argv := append([]string{"exec", "--skip-git-repo-check", "--ephemeral", "--color", "never", "-C", h.ws}, args...)
	argv = append(argv, "Follow the runtimed e2e script.")
	ctx, cancel := context.WithTimeout(context.Background(), codexRunTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.codex, argv...)
	cmd.Dir = h.ws
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + h.home,
		"CODEX_HOME=" + h.codexHome,
		"TMPDIR=" + h.tmp,
		"LANG=C.UTF-8",
	}
	if h.tap != nil {
		cmd.Env = append(cmd.Env, "CODEX_EXEC_SERVER_URL="+h.tap.url())
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	res := &codexResult{exit: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start)}
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // anything codex left in its group
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("codex %s exec %q: exit %d after %v\nstdout:\n%s\nstderr:\n%s", h.cv.version, args, res.exit, res.took, res.stdout, trunc(res.stderr, 8000))
		}
	})
	if ctx.Err() != nil {
		t.Fatalf("codex exec did not finish within %v", codexRunTimeout)
	}
	if err != nil {
		t.Fatalf("codex exec: %v (exit %d)\nstderr:\n%s", err, res.exit, trunc(res.stderr, 4000))
	}
	_, problems := h.mock.all()
	for _, p := range problems {
		t.Errorf("model mock: %s", p)
	}
	return res
}

// output is what the agent reported to the model for callID; the test fails if it reported nothing.
func (h *codexHarness) output(callID string) string {
	h.t.Helper()
	out, ok := h.mock.output(callID)
	if !ok {
		h.t.Fatalf("codex never sent the model an output for tool call %s (tools offered: %v)", callID, h.mock.toolNames())
	}
	return out
}

var exitCodeRe = regexp.MustCompile(`(?m)^Process exited with code (-?\d+)$`)

// exitCodeIn reads the exit code from an exec_command/write_stdin output, if the process exited.
func exitCodeIn(out string) (int, bool) {
	m := exitCodeRe.FindStringSubmatch(out)
	if m == nil {
		return 0, false
	}
	var code int
	fmt.Sscanf(m[1], "%d", &code)
	return code, true
}

var sessionIDRe = regexp.MustCompile(`Process running with session ID (\d+)`)

// sessionIDIn reads the unified-exec session id from an exec_command output of a process still running.
func sessionIDIn(out string) (int, bool) {
	m := sessionIDRe.FindStringSubmatch(out)
	if m == nil {
		return 0, false
	}
	var id int
	fmt.Sscanf(m[1], "%d", &id)
	return id, true
}

func wantContains(t *testing.T, what, got string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(got, s) {
			t.Errorf("%s: want it to contain %q; got:\n%s", what, s, got)
		}
	}
}

func wantExitCode(t *testing.T, what, out string, want int) {
	t.Helper()
	code, ok := exitCodeIn(out)
	if !ok || code != want {
		t.Errorf("%s: want the process to exit with code %d; the agent reported:\n%s", what, want, out)
	}
}

// startedThroughServer fails unless the server accepted a process/start whose argv mentions substr:
// the command ran through the exec-server, not on codex's side.
func (h *codexHarness) startedThroughServer(substr string) tapCall {
	h.t.Helper()
	for _, c := range h.tap.callsOf("process/start") {
		var p struct {
			Argv []string `json:"argv"`
		}
		_ = json.Unmarshal(c.Params, &p)
		if strings.Contains(strings.Join(p.Argv, " "), substr) && c.Answered && c.Err == nil {
			return c
		}
	}
	h.t.Fatalf("no accepted process/start with %q in its argv", substr)
	return tapCall{}
}

// ---- cases ----

// codexShellCase: one shell command; its output, stderr and exit code reach the model, and the
// command ran on the server (it prints a variable only the server's environment has).
func codexShellCase(t *testing.T, h *codexHarness) {
	h.run([]modelTurn{
		execCommand("shell-1", map[string]any{
			"cmd":           `echo "mark=$RUNTIMED_E2E_CODEX_MARK"; echo "to-stderr" >&2; exit 3`,
			"yield_time_ms": 10000,
		}),
		finalMessage("done"),
	}, "--dangerously-bypass-approvals-and-sandbox")
	out := h.output("shell-1")
	wantContains(t, "shell output", out, "mark="+h.mark, "to-stderr")
	wantExitCode(t, "shell", out, 3)
	h.startedThroughServer("RUNTIMED_E2E_CODEX_MARK")
}

// codexStdioCase: codex starts the exec-server itself (environments.toml `program`) and speaks to it
// over stdio; a command and a patch go through it.
func codexStdioCase(t *testing.T, h *codexHarness) {
	h.useStdio()
	h.run([]modelTurn{
		execCommand("stdio-1", map[string]any{"cmd": `echo "mark=$RUNTIMED_E2E_CODEX_MARK"; exit 4`, "yield_time_ms": 10000}),
		applyPatch("stdio-patch", "*** Begin Patch\n*** Add File: via-stdio.txt\n+over stdio\n*** End Patch\n"),
		finalMessage("done"),
	}, "--dangerously-bypass-approvals-and-sandbox")
	out := h.output("stdio-1")
	wantContains(t, "command over stdio", out, "mark="+h.mark)
	wantExitCode(t, "command over stdio", out, 4)
	wantContains(t, "apply_patch over stdio", h.output("stdio-patch"), "Success", "A via-stdio.txt")
	wantFile(t, filepath.Join(h.ws, "via-stdio.txt"), "over stdio\n")
}

// codexApplyPatchCase: apply_patch adds a file, updates it, adds one in new directories, deletes
// that one and moves the first; the agent reports each step, the files on disk match, and the writes
// went through the exec-server's fs/* methods.
func codexApplyPatchCase(t *testing.T, h *codexHarness) {
	h.run([]modelTurn{
		applyPatch("patch-add", "*** Begin Patch\n*** Add File: notes.txt\n+line one\n+line two\n*** End Patch\n"),
		applyPatch("patch-update", "*** Begin Patch\n*** Update File: notes.txt\n@@\n line one\n-line two\n+line 2\n*** End Patch\n"),
		execCommand("patch-cat", map[string]any{"cmd": "cat notes.txt", "yield_time_ms": 10000}),
		applyPatch("patch-nested", "*** Begin Patch\n*** Add File: deep/er/extra.txt\n+extra\n*** End Patch\n"),
		applyPatch("patch-delete-move", "*** Begin Patch\n*** Delete File: deep/er/extra.txt\n"+
			"*** Update File: notes.txt\n*** Move to: moved/notes.md\n@@\n line one\n-line 2\n+line two again\n*** End Patch\n"),
		finalMessage("done"),
	}, "--dangerously-bypass-approvals-and-sandbox")
	wantContains(t, "apply_patch add", h.output("patch-add"), "Success", "A notes.txt")
	wantContains(t, "apply_patch update", h.output("patch-update"), "Success", "M notes.txt")
	cat := h.output("patch-cat")
	wantContains(t, "cat after the update", cat, "line one\nline 2\n")
	wantExitCode(t, "cat", cat, 0)
	wantContains(t, "apply_patch add in new directories", h.output("patch-nested"), "Success", "A deep/er/extra.txt")
	wantContains(t, "apply_patch delete and move", h.output("patch-delete-move"), "Success", "D deep/er/extra.txt", "M moved/notes.md")

	wantFile(t, filepath.Join(h.ws, "moved", "notes.md"), "line one\nline two again\n")
	for _, gone := range []string{"notes.txt", "deep/er/extra.txt"} {
		if _, err := os.Stat(filepath.Join(h.ws, gone)); err == nil {
			t.Errorf("%s still exists after the patch that removed it", gone)
		}
	}
	writes := 0
	for _, c := range h.tap.callsOf("fs/writeFile") {
		if c.Answered && c.Err == nil {
			writes++
		}
	}
	if writes < 4 {
		t.Errorf("want at least 4 accepted fs/writeFile through the exec-server, got %d", writes)
	}
}

func wantFile(t *testing.T, path, want string) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil || string(got) != want {
		t.Errorf("%s: %q, %v; want %q", path, got, err, want)
	}
}

// codexPTYCase: a command in a PTY waits for input; write_stdin feeds it; the echo, the answer and
// the terminal name reach the model.
func codexPTYCase(t *testing.T, h *codexHarness) {
	h.run([]modelTurn{
		execCommand("pty-1", map[string]any{
			"cmd":           `printf 'name? '; read name; echo "hello-$name"; tty`,
			"tty":           true,
			"yield_time_ms": 500,
		}),
		func(req *modelRequest) []sseEvent {
			out, _ := req.callOutput("pty-1")
			sid, ok := sessionIDIn(out)
			if !ok {
				return []sseEvent{evMessage("no session id in the pty-1 output")}
			}
			return []sseEvent{evFunctionCall("pty-2", "write_stdin", map[string]any{
				"session_id": sid, "chars": "zebra\n", "yield_time_ms": 5000,
			})}
		},
		finalMessage("done"),
	}, "--dangerously-bypass-approvals-and-sandbox")
	first := h.output("pty-1")
	if _, ok := sessionIDIn(first); !ok {
		t.Fatalf("pty-1: want a running session (it waits for input); got:\n%s", first)
	}
	second := h.output("pty-2")
	// The terminal echoes the input (CR LF line ends), the shell answers, tty names a pseudo-terminal.
	wantContains(t, "write_stdin output", second, "zebra\r\n", "hello-zebra", "/dev/pts/")
	wantExitCode(t, "pty command", second, 0)
	start := h.startedThroughServer("hello-$name")
	var p struct {
		TTY bool `json:"tty"`
	}
	if err := json.Unmarshal(start.Params, &p); err != nil || !p.TTY {
		t.Errorf("process/start of the PTY command: want tty true, params %s", start.Params)
	}
	accepted := false
	for _, c := range h.tap.callsOf("process/write") {
		accepted = accepted || (c.Err == nil && strings.Contains(string(c.Result), `"accepted"`))
	}
	if !accepted {
		t.Errorf("want an accepted process/write")
	}
}
