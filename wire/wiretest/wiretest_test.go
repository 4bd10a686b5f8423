package wiretest

// Self-tests of the harness against fakes, so that the end-to-end suite's checks cannot pass
// vacuously (for example, a mangled id must not match).

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// fakeServer answers: "echo" with its params; "mangle" with a different id; "events" with out-of-order
// process notifications then {}; "garbage" with a non-JSON text frame and a binary frame then {};
// "bye" by closing the connection.
func fakeServer(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer conn.CloseNow()
		ctx := r.Context()
		send := func(s string) { _ = conn.Write(ctx, websocket.MessageText, []byte(s)) }
		for {
			_, b, err := conn.Read(ctx)
			if err != nil {
				return
			}
			var m struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
				Params json.RawMessage `json:"params"`
			}
			if json.Unmarshal(b, &m) != nil {
				send(`{"id":-1,"error":{"code":-32600,"message":"bad"}}`)
				continue
			}
			switch m.Method {
			case "echo":
				send(`{"id":` + string(m.ID) + `,"result":` + string(m.Params) + `}`)
			case "mangle":
				send(`{"id":"mangled-` + strings.Trim(string(m.ID), `"`) + `","result":{}}`)
			case "events":
				send(`{"method":"process/closed","params":{"processId":"p","seq":4}}`)
				send(`{"method":"process/output","params":{"processId":"p","seq":2,"stream":"stderr","chunk":"IQ=="}}`)
				send(`{"method":"process/output","params":{"processId":"other","seq":1,"stream":"stdout","chunk":"eA=="}}`)
				send(`{"method":"process/output","params":{"processId":"p","seq":1,"stream":"stdout","chunk":"aGk="}}`)
				send(`{"method":"process/exited","params":{"processId":"p","seq":3,"exitCode":5}}`)
				send(`{"id":` + string(m.ID) + `,"result":{}}`)
			case "garbage":
				send(`not json`)
				_ = conn.Write(ctx, websocket.MessageBinary, []byte(`{"method":"bin"}`))
				send(`{"id":` + string(m.ID) + `,"result":{}}`)
			case "bye":
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	return "ws://" + strings.TrimPrefix(srv.URL, "http://")
}

func TestClientAgainstFake(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := DialWS(ctx, fakeServer(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	for _, id := range []string{`7`, `"abc"`, `9007199254740993`} {
		res, rpcErr, err := c.CallID(ctx, json.RawMessage(id), "echo", map[string]any{"v": id})
		var got map[string]string
		_ = json.Unmarshal(res, &got)
		if err != nil || rpcErr != nil || got["v"] != id {
			t.Errorf("echo with id %s: %s %v %v", id, res, rpcErr, err)
		}
	}

	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	_, _, err = c.CallID(short, json.RawMessage(`"m1"`), "mangle", nil)
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a response with another id matched: %v", err)
	}
	if u := c.Unclaimed(); len(u) != 1 || string(u[0].ID) != `"mangled-m1"` {
		t.Errorf("unclaimed = %v", u)
	}
	if raw, err := c.RecvRaw(ctx); err != nil || !strings.Contains(string(raw), "mangled-m1") {
		t.Errorf("RecvRaw = %s %v", raw, err)
	}

	if err := c.SendRaw(ctx, []byte(`{oops`)); err != nil {
		t.Fatal(err)
	}
	if m, err := c.WaitResponse(ctx, json.RawMessage(`-1`)); err != nil || m.Error == nil || m.Error.Code != -32600 {
		t.Errorf("WaitResponse(-1) = %+v %v", m, err)
	}

	if _, rpcErr, err := c.Call(ctx, "events", nil); err != nil || rpcErr != nil {
		t.Fatal(rpcErr, err)
	}
	l, err := c.CollectProcess(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.CheckSequence(); err != nil {
		t.Error(err)
	}
	if l.Events[0].Seq != 1 || string(l.Output()) != "hi!" || string(l.Output("stderr")) != "!" || *l.Exited().ExitCode != 5 {
		t.Errorf("collected:\n%s", l.Summary())
	}
	if n := c.Notifications(); len(n) != 1 || n[0].ProcessID != "other" {
		t.Errorf("the other process's notification should stay buffered: %+v", n)
	}
	bad := ProcessLog{ProcessID: "x", Events: []Event{{Method: "process/output", Seq: 1}, {Method: "process/exited", Seq: 3}, {Method: "process/closed", Seq: 4}}}
	if bad.CheckSequence() == nil {
		t.Error("CheckSequence accepted a gap")
	}

	if _, rpcErr, err := c.Call(ctx, "garbage", nil); err != nil || rpcErr != nil {
		t.Fatal(rpcErr, err)
	}
	if g := c.Garbage(); len(g) != 2 || string(g[0]) != "not json" || !strings.HasPrefix(string(g[1]), "[binary frame]") {
		t.Errorf("garbage = %q", g)
	}

	if err := c.Notify(ctx, "bye", nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	case <-ctx.Done():
		t.Fatal("Done not closed after the server closed the connection")
	}
	if _, _, err := c.Call(ctx, "echo", nil); err == nil {
		t.Error("Call succeeded on a closed connection")
	}
}

func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fake")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestStdioFraming(t *testing.T) {
	// A "server" that echoes every line back: each request comes back as a message with a method.
	c := StartStdio(t, script(t, "exec cat"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Notify(ctx, "hello", map[string]int{"a": 1}); err != nil {
		t.Fatal(err)
	}
	n, err := c.WaitNotification(ctx, func(m string, p json.RawMessage) bool { return m == "hello" })
	if err != nil || string(n.Params) != `{"a":1}` {
		t.Fatalf("%+v %v", n, err)
	}
	if err := c.SendRaw(ctx, []byte("a\nb")); err == nil {
		t.Error("SendRaw accepted a newline on stdio")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if code, err := c.Server.Wait(ctx); err != nil || code != 0 {
		t.Errorf("exit %d %v", code, err)
	}
	select {
	case <-c.Done():
	case <-ctx.Done():
		t.Fatal("Done not closed at EOF")
	}
}

func TestServerLifecycle(t *testing.T) {
	s := StartWS(t, script(t, `echo "to stderr" >&2; echo "ws://127.0.0.1:9"; exec sleep 100`))
	if s.URL != "ws://127.0.0.1:9" {
		t.Errorf("URL %q", s.URL)
	}
	if code := s.Stop(); code != 128+15 {
		t.Errorf("Stop = %d, want 143", code)
	}
	if !strings.Contains(s.Stderr(), "to stderr") {
		t.Errorf("stderr %q", s.Stderr())
	}
	f := Start(t, script(t, `echo "boom" >&2; exit 3`))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if code, err := f.Wait(ctx); err != nil || code != 3 {
		t.Errorf("Wait = %d %v", code, err)
	}
	if _, err := f.FirstLine(ctx); err == nil {
		t.Error("FirstLine of a silent exited server succeeded")
	}
}
