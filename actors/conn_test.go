package actors

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runtimed/runtimed/wire"
	"github.com/runtimed/runtimed/wire/wiretest"
)

// memTransport is one end of the project's in-memory pipe.
type memTransport = wiretest.MemTransport

func memPipe() (*memTransport, *memTransport) { return wiretest.MemPipe(1024) }

// rawClient speaks JSON to a connection actor over a memTransport, on an
// inline client core (wire.Client): each call reads until its own answer
// on the test's goroutine; what comes first is kept (notifications in
// notes, in order). Tests may still read tr directly between calls (the
// core has no reader goroutine).
type rawClient struct {
	t       *testing.T
	tr      *memTransport
	core    *wire.Client
	inbox   []map[string]any // messages read by the core and not taken yet
	notes   []map[string]any
	session string // set by helpers that keep the initialize result
}

func newRawClient(t *testing.T, tr *memTransport) *rawClient {
	c := &rawClient{t: t, tr: tr}
	c.core = wire.NewClient(tr, wire.ClientOptions{Inline: true, Handle: c.handle, Malformed: c.malformed})
	return c
}

// handle keeps a message the core read that is not the answer in progress.
func (c *rawClient) handle(m wire.Message) {
	out := map[string]any{}
	if m.ID != nil {
		var id any
		_ = json.Unmarshal(m.ID, &id)
		out["id"] = id
	}
	if m.Method != "" {
		out["method"] = m.Method
	}
	for k, raw := range map[string]json.RawMessage{"params": m.Params, "result": m.Result, "error": m.Error} {
		if raw != nil {
			var v any
			_ = json.Unmarshal(raw, &v)
			out[k] = v
		}
	}
	c.inbox = append(c.inbox, out)
}

func (c *rawClient) malformed(data []byte, _ *wire.Error) {
	c.t.Errorf("bad JSON %q", data)
	c.inbox = append(c.inbox, map[string]any{"malformed": string(data)})
}

type rpcReply struct {
	Result json.RawMessage
	Error  *wire.Error
}

// serveMem serves a connection on a fresh memPipe until the test ends
// (the cleanup closes the client end and waits, bounded, for the actor);
// done is closed when the actor has ended.
func serveMem(t *testing.T, sup *Supervisor, opts ConnOptions) (c *rawClient, done <-chan struct{}) {
	t.Helper()
	client, server := memPipe()
	ended := make(chan struct{})
	go func() {
		_ = sup.ServeConn(context.Background(), server, opts)
		close(ended)
	}()
	t.Cleanup(func() {
		client.Close()
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
			t.Error("connection actor did not end")
		}
	})
	return newRawClient(t, client), ended
}

func startConn(t *testing.T, sup *Supervisor, resumable bool) *rawClient {
	t.Helper()
	c, _ := serveMem(t, sup, ConnOptions{Resumable: resumable})
	c.call("initialize", map[string]any{"clientName": "test"})
	c.send(`{"method":"initialized"}`)
	return c
}

func (c *rawClient) send(s string) {
	if err := c.core.WriteRaw(context.Background(), []byte(s)); err != nil {
		c.t.Fatal(err)
	}
}

// call sends a request and returns its reply, keeping notifications.
func (c *rawClient) call(method string, params any) rpcReply {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	b, _ := json.Marshal(params)
	p, err := c.core.Go(ctx, method, json.RawMessage(b))
	if err != nil {
		c.t.Fatalf("call %s: %v", method, err)
	}
	resp, err := p.Wait(ctx)
	if err != nil {
		c.t.Fatalf("call %s: %v", method, err)
	}
	for _, m := range c.inbox {
		if m["method"] != nil {
			c.notes = append(c.notes, m)
		}
	}
	c.inbox = nil
	var r rpcReply
	r.Result = resp.Result
	if resp.Error != nil {
		r.Error = &wire.Error{}
		_ = json.Unmarshal(resp.Error, r.Error)
	}
	return r
}

// recv returns the next message (kept or new).
func (c *rawClient) recv() map[string]any {
	c.t.Helper()
	for len(c.inbox) == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		err := c.core.Poll(ctx)
		cancel()
		if err != nil {
			c.t.Fatalf("read: %v", err)
		}
	}
	m := c.inbox[0]
	c.inbox = c.inbox[1:]
	return m
}

// waitNote returns the first notification (kept or new) matching pred.
func (c *rawClient) waitNote(pred func(map[string]any) bool) map[string]any {
	c.t.Helper()
	for i, m := range c.notes {
		if pred(m) {
			c.notes = append(c.notes[:i], c.notes[i+1:]...)
			return m
		}
	}
	for {
		m := c.recv()
		if m["method"] != nil && pred(m) {
			return m
		}
		if m["method"] != nil {
			c.notes = append(c.notes, m)
		}
	}
}

func appExited(handle string) func(map[string]any) bool {
	return func(m map[string]any) bool {
		p, _ := m["params"].(map[string]any)
		return m["method"] == "process/exited" && p["processHandle"] == handle
	}
}

func params(m map[string]any) map[string]any { p, _ := m["params"].(map[string]any); return p }

func mustOK(t *testing.T, r rpcReply) {
	t.Helper()
	if r.Error != nil {
		t.Fatalf("unexpected error %d %s", r.Error.Code, r.Error.Message)
	}
}

func mustErr(t *testing.T, r rpcReply, code int, msg string) {
	t.Helper()
	if r.Error == nil || r.Error.Code != code || r.Error.Message != msg {
		t.Fatalf("got %+v %s; want error %d %q", r.Error, r.Result, code, msg)
	}
}

func spawnParams(handle, script string, extra map[string]any) map[string]any {
	p := map[string]any{"processHandle": handle, "command": []string{"/bin/sh", "-c", script}, "cwd": "/"}
	for k, v := range extra {
		p[k] = v
	}
	return p
}

func TestAppServerBufferedCapsAndExit(t *testing.T) {
	sup := newTestSupervisor(t, 1<<20, 50_000)
	c := startConn(t, sup, true)
	mustOK(t, c.call("process/spawn", spawnParams("h1", `printf 'abcdefghij'; printf 'ABCDEFGHIJ' >&2; exit 4`, map[string]any{"outputBytesCap": 4})))
	ex := params(c.waitNote(appExited("h1")))
	if ex["stdout"] != "abcd" || ex["stderr"] != "ABCD" || ex["stdoutCapReached"] != true || ex["stderrCapReached"] != true || ex["exitCode"] != float64(4) {
		t.Fatalf("capped buffered exit: %v", ex)
	}
	mustOK(t, c.call("process/spawn", spawnParams("h2", `printf out; printf err >&2`, map[string]any{"outputBytesCap": nil})))
	ex = params(c.waitNote(appExited("h2")))
	if ex["stdout"] != "out" || ex["stderr"] != "err" || ex["stdoutCapReached"] != false || ex["exitCode"] != float64(0) {
		t.Fatalf("uncapped buffered exit: %v", ex)
	}
	// The handle is free again once the process has exited.
	mustOK(t, c.call("process/spawn", spawnParams("h1", `exit 0`, nil)))
	c.waitNote(appExited("h1"))
}

func TestAppServerStreamingTimeoutKillAndErrors(t *testing.T) {
	sup := newTestSupervisor(t, 1<<20, 50_000)
	c := startConn(t, sup, true)
	mustOK(t, c.call("process/spawn", spawnParams("s", `printf 0123456789`, map[string]any{"streamStdoutStderr": true, "outputBytesCap": 6})))
	var got []byte
	capSeen := false
	for !capSeen {
		m := c.waitNote(func(m map[string]any) bool { return m["method"] == "process/outputDelta" })
		p := params(m)
		b, _ := base64.StdEncoding.DecodeString(p["deltaBase64"].(string))
		got = append(got, b...)
		capSeen = p["capReached"] == true
	}
	ex := params(c.waitNote(appExited("s")))
	if string(got) != "012345" || ex["stdout"] != "" || ex["stderr"] != "" {
		t.Fatalf("streamed %q, exit %v", got, ex)
	}

	start := time.Now()
	mustOK(t, c.call("process/spawn", spawnParams("t", `sleep 1000`, map[string]any{"timeoutMs": 200})))
	if ex := params(c.waitNote(appExited("t"))); ex["exitCode"] != float64(124) {
		t.Fatalf("timeout exit %v", ex)
	}
	if d := time.Since(start); d < 200*time.Millisecond || d > 5*time.Second {
		t.Fatalf("timeout took %v", d)
	}

	mustOK(t, c.call("process/spawn", spawnParams("k", `sleep 1000`, map[string]any{"timeoutMs": nil})))
	mustErr(t, c.call("process/spawn", spawnParams("k", `true`, nil)), -32600, `duplicate active process handle: "k"`)
	mustErr(t, c.call("process/resizePty", map[string]any{"processHandle": "k", "size": map[string]any{"rows": 5, "cols": 5}}), -32600, "failed to resize PTY: process is not attached to a PTY")
	mustErr(t, c.call("process/writeStdin", map[string]any{"processHandle": "k", "deltaBase64": "aGk="}), -32600, "stdin streaming is not enabled for this process")
	mustErr(t, c.call("process/writeStdin", map[string]any{"processHandle": "k"}), -32602, "process/writeStdin requires deltaBase64 or closeStdin")
	mustOK(t, c.call("process/kill", map[string]any{"processHandle": "k"}))
	if ex := params(c.waitNote(appExited("k"))); ex["exitCode"] != float64(137) {
		t.Fatalf("kill exit %v", ex)
	}
	mustErr(t, c.call("process/kill", map[string]any{"processHandle": "nope"}), -32600, `no active process for process handle "nope"`)
}

func TestAppServerStdinEnvAndPTY(t *testing.T) {
	t.Setenv("RUNTIMED_APP_TEST_UNSET", "present")
	sup := newTestSupervisor(t, 1<<20, 50_000)
	c := startConn(t, sup, true)
	mustOK(t, c.call("process/spawn", spawnParams("cat", `cat; echo "[$RUNTIMED_APP_TEST_UNSET][$EXTRA]"`, map[string]any{
		"streamStdin": true, "env": map[string]any{"RUNTIMED_APP_TEST_UNSET": nil, "EXTRA": "x"},
	})))
	mustOK(t, c.call("process/writeStdin", map[string]any{"processHandle": "cat", "deltaBase64": base64.StdEncoding.EncodeToString([]byte("hello\n"))}))
	mustOK(t, c.call("process/writeStdin", map[string]any{"processHandle": "cat", "closeStdin": true}))
	if ex := params(c.waitNote(appExited("cat"))); ex["stdout"] != "hello\n[][x]\n" || ex["exitCode"] != float64(0) {
		t.Fatalf("stdin/env exit %v", ex)
	}
	mustOK(t, c.call("process/spawn", spawnParams("tty", `stty size; read x; stty size`, map[string]any{"tty": true, "streamStdin": true, "streamStdoutStderr": true, "size": map[string]any{"rows": 11, "cols": 33}})))
	var screen []byte
	waitScreen := func(want string) {
		for !strings.Contains(string(screen), want) {
			m := c.waitNote(func(m map[string]any) bool {
				return m["method"] == "process/outputDelta" && params(m)["processHandle"] == "tty"
			})
			if params(m)["stream"] != "stdout" {
				t.Fatalf("pty output reported as %v; want stdout", params(m)["stream"])
			}
			b, _ := base64.StdEncoding.DecodeString(params(m)["deltaBase64"].(string))
			screen = append(screen, b...)
		}
	}
	waitScreen("11 33")
	mustOK(t, c.call("process/resizePty", map[string]any{"processHandle": "tty", "size": map[string]any{"rows": 12, "cols": 34}}))
	mustOK(t, c.call("process/writeStdin", map[string]any{"processHandle": "tty", "deltaBase64": base64.StdEncoding.EncodeToString([]byte("\n"))}))
	waitScreen("12 34")
	c.waitNote(appExited("tty"))
}

func TestAppServerProcessesDieWithConnection(t *testing.T) {
	sup := newTestSupervisor(t, 1<<20, 50_000)
	client, server := memPipe()
	done := make(chan struct{})
	go func() { _ = sup.ServeConn(context.Background(), server, ConnOptions{Resumable: true}); close(done) }()
	c := newRawClient(t, client)
	c.call("initialize", map[string]any{})
	c.send(`{"method":"initialized"}`)
	pidFile := filepath.Join(t.TempDir(), "pid")
	mustOK(t, c.call("process/spawn", spawnParams("bg", `echo $$ > `+pidFile+`; sleep 1000`, map[string]any{"timeoutMs": nil})))
	pid := waitPidFile(t, pidFile)
	client.Close()
	<-done
	waitGone(t, pid)
}

func TestProcessLimit(t *testing.T) {
	sup := NewSupervisor(Config{
		Proc:         ProcConfig{RetainBytes: 1 << 20, RetainChunks: 100, ClosedRetention: time.Minute, DrainAfterTerminate: 50 * time.Millisecond, ShutdownGrace: time.Second},
		DetachTTL:    time.Second,
		MaxProcesses: 2,
	})
	t.Cleanup(func() { sup.Kill(); _ = sup.Wait(context.Background()) })
	c := startConn(t, sup, true)
	dir := t.TempDir()
	start := func(id string) rpcReply {
		return c.call("process/start", map[string]any{"processId": id, "argv": []string{"sleep", "1000"}, "cwd": dir})
	}
	mustOK(t, start("a"))
	mustOK(t, start("b"))
	limit := wire.ErrProcessLimit(2)
	mustErr(t, start("c"), limit.Code, limit.Message)
	mustOK(t, c.call("process/terminate", map[string]any{"processId": "a"}))
	c.waitNote(func(m map[string]any) bool { return m["method"] == "process/closed" && params(m)["processId"] == "a" })
	mustOK(t, start("c")) // a closed process no longer counts
}

// fs requests run on the connection's fs worker in arrival order: a read
// pipelined right behind a write sees it; the reader meanwhile keeps
// answering other requests.
func TestFsRequestsKeepOrderOffTheReader(t *testing.T) {
	sup := newTestSupervisor(t, 1<<20, 50_000)
	c := startConn(t, sup, true)
	f := filepath.Join(t.TempDir(), "f")
	for i := 0; i < 20; i++ {
		data := base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf("version %d", i)))
		c.send(fmt.Sprintf(`{"id":"w%d","method":"fs/writeFile","params":{"path":%q,"dataBase64":%q}}`, i, f, data))
		c.send(fmt.Sprintf(`{"id":"r%d","method":"fs/readFile","params":{"path":%q}}`, i, f))
	}
	c.send(`{"id":"status","method":"environment/status"}`)
	got := map[string]map[string]any{}
	for len(got) < 41 {
		m := c.recv()
		if id, ok := m["id"].(string); ok {
			got[id] = m
		}
	}
	for i := 0; i < 20; i++ {
		r, _ := got[fmt.Sprintf("r%d", i)]["result"].(map[string]any)
		b, _ := base64.StdEncoding.DecodeString(fmt.Sprint(r["dataBase64"]))
		if string(b) != fmt.Sprintf("version %d", i) {
			t.Fatalf("read %d saw %q: fs requests ran out of order", i, b)
		}
	}
	if got["status"]["result"] == nil {
		t.Fatalf("environment/status: %v", got["status"])
	}
}

// The handle is free by the time its process/exited is sent: a client that
// re-spawns it at once must succeed. The hook holds the adapter right after
// it queued process/exited until that re-spawn was answered, which makes
// the old order (release after the notification) fail every time.
func TestAppServerHandleFreeWhenExitedIsSent(t *testing.T) {
	sup := newTestSupervisor(t, 1<<20, 50_000)
	hold := make(chan struct{})
	var once sync.Once
	defer SetTestHooks(TestHooks{AppExited: func(handle string) {
		if handle == "h" {
			once.Do(func() { <-hold })
		}
	}})()
	release := sync.OnceFunc(func() { close(hold) })
	defer release() // never leave the adapter held
	c := startConn(t, sup, true)
	mustOK(t, c.call("process/spawn", spawnParams("h", `exit 0`, nil)))
	c.waitNote(appExited("h"))
	r := c.call("process/spawn", spawnParams("h", `exit 1`, nil))
	release()
	mustOK(t, r)
	if ex := params(c.waitNote(appExited("h"))); ex["exitCode"] != float64(1) {
		t.Fatalf("second process: %v", ex)
	}
}
