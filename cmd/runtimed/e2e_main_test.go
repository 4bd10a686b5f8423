package main_test

// End-to-end tests of the runtimed binary against docs/PROTOCOL.md §1-4, through the raw protocol
// client in wire/wiretest. Every test starts its own server; every wait is bounded.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runtimed/runtimed/wire/wiretest"
)

// bin is the runtimed binary built once by TestMain.
var bin string

// Values the server inherits from the test process, for envPolicy tests.
const (
	plainVarName  = "RUNTIMED_E2E_PLAIN"
	plainVarValue = "plain-value"
	keyVarName    = "RUNTIMED_E2E_API_KEY"
	keyVarValue   = "key-value"
)

// wait bounds a single protocol step (generous: the suite may run under -race on a small machine).
const wait = 20 * time.Second

func TestMain(m *testing.M) {
	flag.Parse()
	// The tests mostly wait on child processes, so run more of them at once than there are CPUs,
	// unless the caller chose a value.
	parallelSet := false
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "test.parallel" {
			parallelSet = true
		}
	})
	if !parallelSet {
		_ = flag.Set("test.parallel", "8")
	}
	os.Setenv(plainVarName, plainVarValue)
	os.Setenv(keyVarName, keyVarValue)

	dir, err := os.MkdirTemp("", "runtimed-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin, err = wiretest.BuildBinary(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}

// ---- connections ----

type transport struct {
	name    string
	connect func(t *testing.T, serverArgs ...string) *wiretest.Client
}

var transports = []transport{
	{"ws", connectWS},
	{"stdio", connectStdio},
}

// forEachTransport runs f as a parallel subtest per transport.
func forEachTransport(t *testing.T, f func(t *testing.T, tr transport)) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			f(t, tr)
		})
	}
}

func connectWS(t *testing.T, serverArgs ...string) *wiretest.Client {
	t.Helper()
	srv := wiretest.StartWS(t, bin, serverArgs...)
	return dial(t, srv.URL, nil)
}

func connectStdio(t *testing.T, serverArgs ...string) *wiretest.Client {
	t.Helper()
	// Debug logging maximises the chance that a stray log line on stdout shows up as garbage.
	c := wiretest.StartStdio(t, bin, append([]string{"--log-level", "debug"}, serverArgs...)...)
	t.Cleanup(func() { checkNoGarbage(t, c) })
	return c
}

// dial opens a websocket connection that is closed (abruptly) when the test ends.
func dial(t *testing.T, url string, header map[string]string) *wiretest.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	h := map[string][]string{}
	for k, v := range header {
		h[k] = []string{v}
	}
	c, err := wiretest.DialWS(ctx, url, h)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	t.Cleanup(func() {
		c.Close()
		checkNoGarbage(t, c)
	})
	return c
}

func checkNoGarbage(t *testing.T, c *wiretest.Client) {
	t.Helper()
	for _, g := range c.Garbage() {
		t.Errorf("server sent a message that is not a JSON-RPC envelope: %q", trunc(string(g), 300))
	}
	for _, m := range c.Unclaimed() {
		t.Errorf("server sent a response nobody asked for: %s", trunc(string(m.Raw), 300))
	}
}

// session connects and completes the handshake.
func session(t *testing.T, tr transport, serverArgs ...string) *wiretest.Client {
	t.Helper()
	c := tr.connect(t, serverArgs...)
	if _, err := c.Initialize(tctx(t, wait)); err != nil {
		t.Fatalf("initialize: %v", err)
	}
	return c
}

// tctx returns a context bounded by d and by the end of the test.
func tctx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// ---- processes ----

// gateFn is a shell function: `gate FILE` waits until FILE exists (a release file created by the test).
const gateFn = `gate() { while [ ! -e "$1" ]; do sleep 0.01; done; }; `

func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func baseEnv() map[string]string {
	return map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C"}
}

// shProc runs script with /bin/sh -c (the gate function is available) in cwd.
func shProc(id, cwd, script string) wiretest.StartParams {
	return wiretest.StartParams{
		ProcessID: id,
		Argv:      []string{"/bin/sh", "-c", gateFn + script},
		Cwd:       cwd,
		Env:       baseEnv(),
	}
}

func mustStart(t *testing.T, c *wiretest.Client, p wiretest.StartParams) {
	t.Helper()
	if err := c.Start(tctx(t, wait), p); err != nil {
		t.Fatalf("process/start %s %q: %v", p.ProcessID, p.Argv, err)
	}
}

func mustCollect(t *testing.T, c *wiretest.Client, id string) *wiretest.ProcessLog {
	t.Helper()
	l, err := c.CollectProcess(tctx(t, wait), id)
	if err != nil {
		t.Fatalf("collect %s: %v", id, err)
	}
	if err := l.CheckSequence(); err != nil {
		t.Errorf("sequence: %v", err)
	}
	return l
}

func exitCodeOf(t *testing.T, l *wiretest.ProcessLog) int {
	t.Helper()
	e := l.Exited()
	if e == nil || e.ExitCode == nil {
		t.Fatalf("process %s: no exit code\n%s", l.ProcessID, l.Summary())
	}
	return *e.ExitCode
}

// release creates a release file that a gated child waits for.
func release(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// pollUntil polls cond every 10 ms until it is true or d elapses.
func pollUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// readPidFile waits (bounded) for a file holding a pid followed by a newline. The pid is killed when
// the test ends if it is still alive and still runs a command containing killHint.
func readPidFile(t *testing.T, path, killHint string) int {
	t.Helper()
	var pid int
	ok := pollUntil(wait, func() bool {
		b, err := os.ReadFile(path)
		if err != nil || !bytes.HasSuffix(b, []byte("\n")) {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	if !ok {
		t.Fatalf("no pid in %s", path)
	}
	t.Cleanup(func() {
		if pidGone(pid) {
			return
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if bytes.Contains(cmdline, []byte(killHint)) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return pid
}

// pidGone reports whether pid no longer names a live process: kill(pid, 0) fails with ESRCH, or the
// process is a zombie (dead, waiting to be reaped by an init that may never reap it).
func pidGone(pid int) bool { return wiretest.PidGone(pid) }

func waitPidGone(t *testing.T, what string, pid int, d time.Duration) {
	t.Helper()
	if !pollUntil(d, func() bool { return pidGone(pid) }) {
		t.Errorf("%s (pid %d) still alive after %v", what, pid, d)
	}
}

// ---- errors ----

func wantRPCError(t *testing.T, what string, err error, code int, message string) {
	t.Helper()
	var rpcErr *wiretest.RPCError
	if !errors.As(err, &rpcErr) {
		t.Errorf("%s: want rpc error %d %q, got %v", what, code, message, err)
		return
	}
	if rpcErr.Code != code || rpcErr.Message != message {
		t.Errorf("%s: want rpc error %d %q, got %d %q", what, code, message, rpcErr.Code, rpcErr.Message)
	}
}

func wantRPCErrorContains(t *testing.T, what string, err error, code int, substrs ...string) {
	t.Helper()
	var rpcErr *wiretest.RPCError
	if !errors.As(err, &rpcErr) {
		t.Errorf("%s: want rpc error %d containing %q, got %v", what, code, substrs, err)
		return
	}
	if rpcErr.Code != code {
		t.Errorf("%s: want code %d, got %d %q", what, code, rpcErr.Code, rpcErr.Message)
	}
	for _, s := range substrs {
		if !strings.Contains(strings.ToLower(rpcErr.Message), strings.ToLower(s)) {
			t.Errorf("%s: message %q does not contain %q", what, rpcErr.Message, s)
		}
	}
}

// call returns the result of method, or the *RPCError / transport error.
func call(ctx context.Context, c *wiretest.Client, method string, params any) (json.RawMessage, error) {
	res, rpcErr, err := c.Call(ctx, method, params)
	if err != nil {
		return nil, err
	}
	if rpcErr != nil {
		return nil, rpcErr
	}
	return res, nil
}

func wantStatusReady(t *testing.T, what string, res json.RawMessage, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return
	}
	var st struct {
		Status string `json:"status"`
	}
	if jerr := json.Unmarshal(res, &st); jerr != nil || st.Status != "ready" {
		t.Errorf("%s: want {\"status\":\"ready\"}, got %s", what, res)
	}
}

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func trunc(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// envLines parses `env` output into a map.
func envLines(out []byte) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if line == "" {
			continue
		}
		k, v, _ := strings.Cut(line, "=")
		m[k] = v
	}
	return m
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
