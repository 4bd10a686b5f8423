package actors

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/runtimed/runtimed/wire"
)

// startRawConn serves a connection and completes the handshake, returning
// the client, its session id and a channel closed when the actor ends.
func startRawConn(t *testing.T, sup *Supervisor, resume string) (*rawClient, string, <-chan struct{}) {
	t.Helper()
	c, done := serveMem(t, sup, ConnOptions{Resumable: true})
	p := map[string]any{"clientName": "test"}
	if resume != "" {
		p["resumeSessionId"] = resume
	}
	r := c.call("initialize", p)
	mustOK(t, r)
	var res struct {
		SessionID string `json:"sessionId"`
	}
	_ = json.Unmarshal(r.Result, &res)
	c.send(`{"method":"initialized"}`)
	return c, res.SessionID, done
}

// waitConnEnd reads until the connection's transport ends (bounded).
func waitConnEnd(t *testing.T, c *rawClient, done <-chan struct{}) {
	t.Helper()
	end := make(chan struct{})
	go func() {
		for {
			if _, err := c.tr.ReadMessage(context.Background()); err != nil {
				close(end)
				return
			}
		}
	}()
	select {
	case <-end:
	case <-time.After(10 * time.Second):
		t.Fatal("connection not closed after a panic in one of its goroutines")
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("connection actor did not end")
	}
}

func wantInternal(t *testing.T, r rpcReply, substr string) {
	t.Helper()
	if r.Error == nil || r.Error.Code != wire.CodeInternal || !strings.Contains(r.Error.Message, substr) {
		t.Fatalf("got %+v %s; want -32603 containing %q", r.Error, r.Result, substr)
	}
}

// A panic while handling a request answers it -32603 and fails that one
// connection; its session is detached as for any dropped websocket (and
// resumable), and every other connection is served.
func TestConnectionPanicIsIsolated(t *testing.T) {
	sup := newTestSupervisor(t, 1<<20, 50_000)
	defer SetTestHooks(TestHooks{ConnRequest: func(method string) {
		if method == wire.MethodProcessList {
			panic("injected connection fault")
		}
	}})()
	a, sid, aDone := startRawConn(t, sup, "")
	b, _, _ := startRawConn(t, sup, "")
	dir := t.TempDir()
	mustOK(t, a.call("process/start", map[string]any{"processId": "p", "argv": []string{"sleep", "1000"}, "cwd": dir}))
	wantInternal(t, a.call("process/list", map[string]any{}), "internal error: injected connection fault")
	waitConnEnd(t, a, aDone)

	mustOK(t, b.call("environment/status", nil))
	mustOK(t, b.call("process/start", map[string]any{"processId": "q", "argv": []string{"sh", "-c", "echo ok"}, "cwd": dir}))
	b.waitNote(func(m map[string]any) bool { return m["method"] == "process/closed" && params(m)["processId"] == "q" })

	// The failed connection's session survives for a resume.
	var c *rawClient
	deadline := time.Now().Add(10 * time.Second)
	for {
		client, server := memPipe()
		go func() { _ = sup.ServeConn(context.Background(), server, ConnOptions{Resumable: true}) }()
		c = newRawClient(t, client)
		t.Cleanup(func() { client.Close() })
		r := c.call("initialize", map[string]any{"resumeSessionId": sid})
		if r.Error == nil {
			break
		}
		if r.Error.Code != wire.CodeSessionAttached || time.Now().After(deadline) {
			t.Fatalf("resume after the panic: %+v", r.Error)
		}
	}
	c.send(`{"method":"initialized"}`)
	r := c.call("process/read", map[string]any{"processId": "p"})
	mustOK(t, r)
	mustOK(t, c.call("process/terminate", map[string]any{"processId": "p"}))
}

// A panic in the fs worker answers the request -32603 and fails that
// connection (its open handles may be in any state); others go on.
func TestFsWorkerPanicIsIsolated(t *testing.T) {
	sup := newTestSupervisor(t, 1<<20, 50_000)
	defer SetTestHooks(TestHooks{FsRequest: func(method string) {
		if method == "fs/getMetadata" {
			panic("injected fs fault")
		}
	}})()
	a, _, aDone := startRawConn(t, sup, "")
	b, _, _ := startRawConn(t, sup, "")
	dir := t.TempDir()
	mustOK(t, a.call("fs/readDirectory", map[string]any{"path": dir}))
	wantInternal(t, a.call("fs/getMetadata", map[string]any{"path": dir}), "internal error: injected fs fault")
	waitConnEnd(t, a, aDone)
	mustOK(t, b.call("fs/readDirectory", map[string]any{"path": dir}))
	mustOK(t, b.call("environment/status", nil))
}

// A panic in a process actor fails that process on the wire: the
// subscriber gets process/closed with a "failure", every request about it
// answers -32603 with the failure, and the connection and its other
// processes go on.
func TestProcessPanicOverTheWire(t *testing.T) {
	sup := newTestSupervisor(t, 1<<20, 50_000)
	defer SetTestHooks(TestHooks{ProcessRequest: func(id string) {
		if id == "bad" {
			panic("injected process fault")
		}
	}})()
	c, _, _ := startRawConn(t, sup, "")
	dir := t.TempDir()
	mustOK(t, c.call("process/start", map[string]any{"processId": "bad", "argv": []string{"sleep", "1000"}, "cwd": dir}))
	mustOK(t, c.call("process/start", map[string]any{"processId": "good", "argv": []string{"sh", "-c", "echo fine"}, "cwd": dir}))
	// A read that reaches the actor (a long poll: an idle read with waitMs 0
	// is answered from the actor's published view and handles nothing).
	wantInternal(t, c.call("process/read", map[string]any{"processId": "bad", "waitMs": 10}), "process bad failed: internal error: injected process fault")
	closed := params(c.waitNote(func(m map[string]any) bool {
		return m["method"] == "process/closed" && params(m)["processId"] == "bad"
	}))
	if f, _ := closed["failure"].(string); !strings.Contains(f, "injected process fault") || closed["seq"] != float64(1) {
		t.Fatalf("closed notification of the failed process: %v", closed)
	}
	wantInternal(t, c.call("process/read", map[string]any{"processId": "bad"}), "process bad failed")
	wantInternal(t, c.call("process/terminate", map[string]any{"processId": "bad"}), "process bad failed")
	wantInternal(t, c.call("process/closeStdin", map[string]any{"processId": "bad"}), "process bad failed")
	mustErr(t, c.call("process/start", map[string]any{"processId": "bad", "argv": []string{"true"}, "cwd": dir}), wire.CodeInvalidRequest, "process bad already exists")
	c.waitNote(func(m map[string]any) bool {
		return m["method"] == "process/closed" && params(m)["processId"] == "good"
	})
	r := c.call("process/read", map[string]any{"processId": "good"})
	mustOK(t, r)
	if !strings.Contains(string(r.Result), `"closed":true`) {
		t.Fatalf("read of the other process: %s", r.Result)
	}
	mustOK(t, c.call("environment/status", nil))
}
