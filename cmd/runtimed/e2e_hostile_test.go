package main_test

// Hostile and careless clients (issue 14) against the real binary, over loopback: bad input, close
// frames, budgets and their refusals, slow consumers. The memory figures are in e2e_soak_test.go.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/runtimed/runtimed/wire/wiretest"
)

// A request with id null is answered with id null (JSON-RPC 2.0) and the connection lives.
func TestHostileIDNull(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		c := session(t, tr)
		ctx := tctx(t, wait)
		for _, raw := range []string{
			`{"id":null,"method":"environment/status"}`,
			`{"id":null,"method":"process/start","params":{"processId":"p","argv":["true"],"cwd":"/"}}`,
			`{"jsonrpc":"2.0","id":null,"method":"initialized"}`,
		} {
			if err := c.SendRaw(ctx, []byte(raw)); err != nil {
				t.Fatal(err)
			}
			m, err := c.WaitResponse(ctx, json.RawMessage(`null`))
			if err != nil {
				t.Fatalf("after %s: %v", raw, err)
			}
			if m.Error == nil || m.Error.Code != -32600 || !strings.Contains(m.Error.Message, "not null") {
				t.Errorf("after %s: got %s; want {\"id\":null,\"error\":{\"code\":-32600,...}}", raw, m.Raw)
			}
			res, err := call(ctx, c, "environment/status", nil)
			wantStatusReady(t, "environment/status after "+raw, res, err)
		}
		if _, err := call(ctx, c, "process/list", nil); err != nil {
			t.Errorf("process/list: %v (the id-null start must not have started anything)", err)
		}
	})
}

// Ids are echoed byte for byte, or refused: a string id with invalid UTF-8 cannot reach the client
// unaltered, so it gets the id -1 answer; escapes are echoed as sent.
func TestHostileIDBytes(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		c := session(t, tr)
		ctx := tctx(t, wait)
		if err := c.SendRaw(ctx, []byte("{\"id\":\"bad-\xff\xfe\",\"method\":\"environment/status\"}")); err != nil {
			t.Fatal(err)
		}
		m, err := c.WaitResponse(ctx, json.RawMessage(`-1`))
		if err != nil {
			t.Fatal(err)
		}
		if m.Error == nil || m.Error.Code != -32600 || !strings.Contains(m.Error.Message, "valid UTF-8") {
			t.Errorf("invalid UTF-8 id: got %s", m.Raw)
		}
		for _, id := range []string{`"\u00e9t\u00e9"`, `"\ud83d\ude00"`, `"a\/b"`, `-0`, `"été"`} {
			if err := c.SendRaw(ctx, []byte(`{"id":`+id+`,"method":"environment/status"}`)); err != nil {
				t.Fatal(err)
			}
			m, err := c.RecvRaw(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(string(m), `{"id":`+id+`,"result":`) {
				t.Errorf("id %s echoed as %s", id, m)
			}
		}
		res, err := call(ctx, c, "environment/status", nil)
		wantStatusReady(t, "environment/status at the end", res, err)
	})
}

// Every protocol violation that closes a websocket connection sends a close frame 1002 with a reason
// first (the stdio equivalent, closing stdout, is TestConnectionClosingMessages).
func TestHostileCloseFrames(t *testing.T) {
	t.Parallel()
	srv := wiretest.StartWS(t, bin)
	cases := []struct {
		name, reason string
		handshake    bool
		raw          string
	}{
		{"initialized before initialize", "initialized before initialize", false, `{"method":"initialized","params":{}}`},
		{"unknown notification", `unknown notification "nope/notification"`, true, `{"method":"nope/notification","params":{}}`},
		{"response from the client", "a client may not send responses", true, `{"id":77,"result":{}}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := dial(t, srv.URL, nil)
			ctx := tctx(t, wait)
			if tc.handshake {
				if _, err := c.Initialize(ctx); err != nil {
					t.Fatal(err)
				}
			}
			// An error answered first is delivered before the close frame.
			if err := c.SendRaw(ctx, []byte(`{not json`)); err != nil {
				t.Fatal(err)
			}
			if err := c.SendRaw(ctx, []byte(tc.raw)); err != nil {
				t.Fatal(err)
			}
			select {
			case <-c.Done():
			case <-ctx.Done():
				t.Fatalf("connection still open after %s", tc.name)
			}
			var ce websocket.CloseError
			if !errors.As(c.Err(), &ce) || ce.Code != websocket.StatusProtocolError || ce.Reason != "protocol violation: "+tc.reason {
				t.Errorf("connection ended with %v; want a close frame 1002 %q", c.Err(), "protocol violation: "+tc.reason)
			}
			if m, err := c.WaitResponse(ctx, json.RawMessage(`-1`)); err != nil || m.Error == nil {
				t.Errorf("the malformed message's answer did not arrive before the close: %v", err)
			}
		})
	}
}

// Environment variable names that a child's environment cannot carry are -32602 in process/start env,
// envPolicy.set and the app-server dialect's process/spawn env.
func TestHostileEnvNames(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		c := session(t, tr)
		ctx := tctx(t, wait)
		dir := t.TempDir()
		for _, name := range []string{"", "A=B", "=", "A\x00B"} {
			quoted := fmt.Sprintf("%q", name)
			p := shProc("p", dir, "exit 0")
			p.Env = map[string]string{"PATH": "/usr/bin:/bin", name: "x"}
			_, err := call(ctx, c, "process/start", p)
			wantRPCError(t, "process/start env "+quoted, err, -32602, fmt.Sprintf("invalid environment variable name %s in `env`: a name must not be empty or contain '=' or NUL", quoted))

			p = shProc("p", dir, "exit 0")
			p.EnvPolicy = map[string]any{"inherit": "none", "set": map[string]string{name: "x"}}
			_, err = call(ctx, c, "process/start", p)
			wantRPCError(t, "process/start envPolicy.set "+quoted, err, -32602, fmt.Sprintf("invalid environment variable name %s in `envPolicy.set`: a name must not be empty or contain '=' or NUL", quoted))

			_, err = call(ctx, c, "process/spawn", map[string]any{"processHandle": "h", "command": []string{"true"}, "cwd": dir, "env": map[string]any{name: "x"}})
			wantRPCError(t, "process/spawn env "+quoted, err, -32602, fmt.Sprintf("invalid environment variable name %s in `env`: a name must not be empty or contain '=' or NUL", quoted))
		}
		// Nothing was started, and a good start still works.
		mustStart(t, c, shProc("ok", dir, "exit 0"))
		if l := mustCollect(t, c, "ok"); exitCodeOf(t, l) != 0 {
			t.Errorf("exit code %d", exitCodeOf(t, l))
		}
	})
}

// The Authorization scheme is case-insensitive (RFC 9110 section 11.1).
func TestHostileAuthScheme(t *testing.T) {
	t.Parallel()
	srv := wiretest.StartWSEnv(t, bin, []string{"RUNTIMED_AUTH_TOKEN=s3cret"})
	for _, h := range []string{"Bearer s3cret", "bearer s3cret", "BEARER s3cret", "bEaReR  s3cret"} {
		c := dial(t, srv.URL, map[string]string{"Authorization": h})
		if _, err := c.Initialize(tctx(t, wait)); err != nil {
			t.Errorf("Authorization %q: %v", h, err)
		}
	}
	for _, h := range []string{"Bearer wrong", "bearer", "Basic s3cret", "Bearers3cret", ""} {
		ctx := tctx(t, wait)
		_, err := wiretest.DialWS(ctx, srv.URL, http.Header{"Authorization": {h}})
		var he *wiretest.HandshakeError
		if !errors.As(err, &he) || he.StatusCode != http.StatusUnauthorized {
			t.Errorf("Authorization %q: %v; want 401", h, err)
		}
	}
}

// ---- budgets ----

// The per-session process limit names itself, its value and its flag.
func TestHostileSessionProcessLimit(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		c := session(t, tr, "--max-processes", "2")
		ctx := tctx(t, wait)
		dir := t.TempDir()
		mustStart(t, c, shProc("a", dir, "sleep 1000"))
		mustStart(t, c, shProc("b", dir, "sleep 1000"))
		_, err := call(ctx, c, "process/start", shProc("c", dir, "sleep 1000"))
		wantRPCError(t, "third start", err, -32011, "limit reached: processes per session = 2 (--max-processes): this session already has 2 active processes")
		for _, id := range []string{"a", "b"} {
			if _, err := c.Terminate(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// The server-wide process budget refuses a greedy session while a new connection's first starts still
// work (the reserve); its refusal costs the others nothing.
func TestHostileServerProcessBudget(t *testing.T) {
	t.Parallel()
	srv := wiretest.StartWS(t, bin, "--max-processes-total", "6")
	ctx := tctx(t, wait)
	dir := t.TempDir()
	greedy := dial(t, srv.URL, nil)
	if _, err := greedy.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	started := 0
	var refusal error
	for i := 0; i < 10; i++ {
		if _, err := call(ctx, greedy, "process/start", shProc(fmt.Sprint("g", i), dir, "sleep 1000")); err != nil {
			refusal = err
			break
		}
		started++
	}
	// 6 slots, 3 of them kept for first starts (at most half): the greedy session gets 3.
	if started != 3 {
		t.Fatalf("greedy session started %d processes; want 3", started)
	}
	wantRPCError(t, "greedy start", refusal, -32011, "limit reached: processes = 6 (--max-processes-total): 3 processes are active on this server; 3 more process slots are kept for new connections and sessions' first starts")
	for i := 0; i < 3; i++ {
		fresh := dial(t, srv.URL, nil)
		if _, err := fresh.Initialize(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := call(ctx, fresh, "process/start", shProc("first", dir, "sleep 1000")); err != nil {
			t.Fatalf("a new connection's first start (%d) while a greedy session is refused: %v", i, err)
		}
	}
	late := dial(t, srv.URL, nil)
	if _, err := late.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := call(ctx, late, "process/start", shProc("late", dir, "sleep 1000"))
	wantRPCErrorContains(t, "a start beyond the budget itself", err, -32011, "limit reached: processes = 6")
	res, err := call(ctx, greedy, "environment/status", nil)
	wantStatusReady(t, "greedy connection after its refusals", res, err)
	// A closed process returns its slot.
	if _, err := greedy.Terminate(ctx, "g0"); err != nil {
		t.Fatal(err)
	}
	if !pollUntil(wait, func() bool {
		_, err := call(ctx, late, "process/start", shProc("late", dir, "exit 0"))
		return err == nil
	}) {
		t.Fatal("a terminated process did not return its slot")
	}
}

// A connection over the connection budget gets an error with id null and a close frame 1008; the
// open ones are unaffected and the slot returns when one closes.
func TestHostileConnectionBudget(t *testing.T) {
	t.Parallel()
	srv := wiretest.StartWS(t, bin, "--max-connections", "2")
	ctx := tctx(t, wait)
	a, b := dial(t, srv.URL, nil), dial(t, srv.URL, nil)
	for _, c := range []*wiretest.Client{a, b} {
		if _, err := c.Initialize(ctx); err != nil {
			t.Fatal(err)
		}
	}
	conn, _, err := websocket.Dial(ctx, srv.URL, rawDialOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	_, msg, err := conn.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"id":null,"error":{"code":-32011,"message":"limit reached: connections = 2 (--max-connections): 2 connections are open"}}`
	if string(msg) != want {
		t.Errorf("refused connection got %s; want %s", msg, want)
	}
	_, _, err = conn.Read(ctx)
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.StatusPolicyViolation || !strings.HasPrefix(ce.Reason, "limit reached: connections = 2 (--max-connections)") {
		t.Errorf("refused connection ended with %v; want a close frame 1008", err)
	}
	res, err := call(ctx, a, "environment/status", nil)
	wantStatusReady(t, "an open connection after the refusal", res, err)
	b.Close()
	if !pollUntil(wait, func() bool {
		c, err := wiretest.DialWS(ctx, srv.URL, nil)
		if err != nil {
			return false
		}
		defer c.Close()
		_, err = c.Initialize(ctx)
		return err == nil
	}) {
		t.Fatal("the slot of a closed connection never came back")
	}
}

// startUlimitWS runs the server with a small descriptor limit (sh's ulimit, then exec) and returns it
// and its URL.
func startUlimitWS(t *testing.T, nofile int, args ...string) (*wiretest.Server, string) {
	t.Helper()
	script := fmt.Sprintf("ulimit -n %d && exec %s serve --listen ws://127.0.0.1:0 %s", nofile, shq(bin), strings.Join(args, " "))
	srv := wiretest.StartEnv(t, "/bin/sh", nil, "-c", script)
	line, err := srv.FirstLine(tctx(t, wait))
	if err != nil {
		t.Fatalf("server under ulimit -n %d: %v\n%s", nofile, err, srv.Stderr())
	}
	return srv, strings.TrimSpace(line)
}

// When the kernel refuses descriptors anyway (the budgets turned off), a start fails with the
// open-files error naming RLIMIT_NOFILE, not an internal error; other requests keep working.
func TestHostileDescriptorExhaustion(t *testing.T) {
	t.Parallel()
	_, url := startUlimitWS(t, 64, "--max-open-files", "-1", "--max-processes-total", "-1")
	c := dial(t, url, nil)
	ctx := tctx(t, wait)
	if _, err := c.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var refusal error
	for i := 0; i < 64 && refusal == nil; i++ {
		_, refusal = call(ctx, c, "process/start", shProc(fmt.Sprint("p", i), dir, "sleep 1000"))
	}
	wantRPCErrorContains(t, "start without descriptors", refusal, -32011, "limit reached: open files = 64 (RLIMIT_NOFILE", "no descriptor left")
	res, err := call(ctx, c, "environment/status", nil)
	wantStatusReady(t, "after running out of descriptors", res, err)
}

// A connection whose outbound queue makes no progress for the slow-consumer timeout is closed, and its
// session is detached as for any dropped connection: another connection resumes it with its process.
// A well-behaved client is served meanwhile.
func TestHostileSlowConsumer(t *testing.T) {
	t.Parallel()
	srv := wiretest.StartWS(t, bin, "--slow-consumer-timeout", "2s", "--detach-ttl", "60s")
	ctx := tctx(t, 60*time.Second)
	good := dial(t, srv.URL, nil)
	if _, err := good.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	// The slow client: a raw websocket that reads the answers it needs, then nothing.
	slow, _, err := websocket.Dial(ctx, srv.URL, rawDialOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer slow.CloseNow()
	// The flood's output notifications may come before the start's answer
	// (PROTOCOL section 4), each up to a 64 KiB chunk in base64.
	slow.SetReadLimit(wiretest.ReadLimit)
	rawCall := func(id int, method string, params any) json.RawMessage {
		b, _ := json.Marshal(map[string]any{"id": id, "method": method, "params": params})
		if err := slow.Write(ctx, websocket.MessageText, b); err != nil {
			t.Fatal(err)
		}
		for {
			_, m, err := slow.Read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(string(m), fmt.Sprintf(`{"id":%d,`, id)) {
				return m
			}
		}
	}
	var init struct {
		Result struct {
			SessionID string `json:"sessionId"`
		} `json:"result"`
	}
	_ = json.Unmarshal(rawCall(1, "initialize", map[string]any{"clientName": "slow"}), &init)
	if err := slow.Write(ctx, websocket.MessageText, []byte(`{"method":"initialized"}`)); err != nil {
		t.Fatal(err)
	}
	rawCall(2, "process/start", map[string]any{"processId": "flood", "argv": []string{"cat", "/dev/zero"}, "cwd": "/", "env": baseEnv()})
	stopped := time.Now()
	// Until the server gives up on it, the session is attached elsewhere (-32010).
	var resumed *wiretest.Client
	for resumed == nil {
		res, err := call(ctx, good, "environment/status", nil)
		wantStatusReady(t, "well-behaved client while another does not read", res, err)
		c := dial(t, srv.URL, nil)
		_, err = c.Resume(ctx, init.Result.SessionID)
		var rpcErr *wiretest.RPCError
		switch {
		case err == nil:
			resumed = c
		case errors.As(err, &rpcErr) && rpcErr.Code == -32010:
			c.Close()
			if ctx.Err() != nil {
				t.Fatal("the slow consumer was never closed")
			}
			time.Sleep(100 * time.Millisecond)
		default:
			t.Fatalf("resume: %v", err)
		}
	}
	if d := time.Since(stopped); d < 1900*time.Millisecond || d > 20*time.Second {
		t.Errorf("the slow consumer was closed %v after it stopped reading; the timeout is 2s", d)
	}
	// The flood is attached to the resumed connection now: stop it first.
	running, err := resumed.Terminate(ctx, "flood")
	if err != nil || !running {
		t.Fatalf("terminate the resumed session's process: running=%v %v; want it still running", running, err)
	}
}

// rawDialOptions dials without keep-alive connections (no goroutine outlives the test).
func rawDialOptions() *websocket.DialOptions {
	return &websocket.DialOptions{HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}}
}
