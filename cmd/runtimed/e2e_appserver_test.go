package main_test

// The app-server dialect (PROTOCOL.md section 6) through the real binary,
// on both transports.

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

type appExited struct {
	ProcessHandle    string `json:"processHandle"`
	ExitCode         int    `json:"exitCode"`
	Stdout           string `json:"stdout"`
	StdoutCapReached bool   `json:"stdoutCapReached"`
	Stderr           string `json:"stderr"`
	StderrCapReached bool   `json:"stderrCapReached"`
}

func TestAppServerDialect(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		c := session(t, tr)
		ctx := tctx(t, wait)
		exitedOf := func(handle string) appExited {
			t.Helper()
			n, err := c.WaitNotification(ctx, func(method string, params json.RawMessage) bool {
				return method == "process/exited" && strings.Contains(string(params), `"processHandle":"`+handle+`"`)
			})
			if err != nil {
				t.Fatalf("no process/exited for %s: %v", handle, err)
			}
			var e appExited
			if err := json.Unmarshal(n.Params, &e); err != nil {
				t.Fatal(err)
			}
			return e
		}
		spawn := func(handle, script string, extra map[string]any) {
			t.Helper()
			p := map[string]any{"processHandle": handle, "command": []string{"/bin/sh", "-c", script}, "cwd": "/"}
			for k, v := range extra {
				p[k] = v
			}
			if _, rerr, err := c.Call(ctx, "process/spawn", p); err != nil || rerr != nil {
				t.Fatalf("spawn %s: %v %v", handle, rerr, err)
			}
		}

		// Output caps on both streams, with the exact truncated text.
		spawn("cap", `printf 'abcdefghij'; printf 'ABCDEFGHIJ' >&2; exit 4`, map[string]any{"outputBytesCap": 3})
		if e := exitedOf("cap"); e.Stdout != "abc" || e.Stderr != "ABC" || !e.StdoutCapReached || !e.StderrCapReached || e.ExitCode != 4 {
			t.Fatalf("capped exit %+v", e)
		}
		// Timeout -> 124.
		start := time.Now()
		spawn("slow", `sleep 1000`, map[string]any{"timeoutMs": 300})
		if e := exitedOf("slow"); e.ExitCode != 124 || time.Since(start) < 300*time.Millisecond {
			t.Fatalf("timeout exit %+v after %v", e, time.Since(start))
		}
		// Kill -> 137 for pipes; duplicate handles and resize of a non-PTY refused.
		spawn("k", `sleep 1000`, map[string]any{"timeoutMs": nil})
		if _, rerr, _ := c.Call(ctx, "process/spawn", map[string]any{"processHandle": "k", "command": []string{"true"}, "cwd": "/"}); rerr == nil || rerr.Message != `duplicate active process handle: "k"` {
			t.Fatalf("duplicate handle: %+v", rerr)
		}
		if _, rerr, _ := c.Call(ctx, "process/resizePty", map[string]any{"processHandle": "k", "size": map[string]any{"rows": 10, "cols": 10}}); rerr == nil || rerr.Code != -32600 || rerr.Message != "failed to resize PTY: process is not attached to a PTY" {
			t.Fatalf("resizePty of a pipe process: %+v", rerr)
		}
		if _, rerr, err := c.Call(ctx, "process/kill", map[string]any{"processHandle": "k"}); err != nil || rerr != nil {
			t.Fatalf("kill: %v %v", rerr, err)
		}
		if e := exitedOf("k"); e.ExitCode != 137 {
			t.Fatalf("kill exit %+v", e)
		}
		// writeStdin then closeStdin.
		spawn("cat", `cat`, map[string]any{"streamStdin": true})
		if _, rerr, _ := c.Call(ctx, "process/writeStdin", map[string]any{"processHandle": "cat"}); rerr == nil || rerr.Code != -32602 {
			t.Fatalf("writeStdin without fields: %+v", rerr)
		}
		for _, p := range []map[string]any{
			{"processHandle": "cat", "deltaBase64": base64.StdEncoding.EncodeToString([]byte("one\n"))},
			{"processHandle": "cat", "deltaBase64": base64.StdEncoding.EncodeToString([]byte("two\n")), "closeStdin": true},
		} {
			if _, rerr, err := c.Call(ctx, "process/writeStdin", p); err != nil || rerr != nil {
				t.Fatalf("writeStdin: %v %v", rerr, err)
			}
		}
		if e := exitedOf("cat"); e.Stdout != "one\ntwo\n" || e.ExitCode != 0 {
			t.Fatalf("cat exit %+v", e)
		}
		if _, rerr, _ := c.Call(ctx, "process/kill", map[string]any{"processHandle": "cat"}); rerr == nil || rerr.Message != `no active process for process handle "cat"` {
			t.Fatalf("kill after exit: %+v", rerr)
		}
	})
}
