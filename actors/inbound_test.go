package actors

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/runtimed/runtimed/wire"
)

const inboundTestMsgLimit = 1 << 20

// inboundSupervisor has inbound budgets of two messages server-wide and
// per connection, and a short wait before a refusal.
func inboundSupervisor(t *testing.T, wait time.Duration) *Supervisor {
	sup := NewSupervisor(Config{
		Proc: ProcConfig{
			RetainBytes: 1 << 20, RetainChunks: 1000, ClosedRetention: time.Minute,
			DrainAfterTerminate: 50 * time.Millisecond, ShutdownGrace: time.Second,
		},
		DetachTTL:       time.Second,
		MaxMessageBytes: inboundTestMsgLimit,
		Budgets:         Budgets{MaxInboundBytes: 2 * inboundTestMsgLimit, ConnInboundBytes: 2 * inboundTestMsgLimit, InboundAdmitWait: wait},
		Logger:          zaptest.NewLogger(t),
	})
	stopAtCleanup(t, sup)
	return sup
}

// stdioConn serves a connection over a real stdio transport (the read
// gate lives in the transports) on pipes, and returns a client on the other
// ends, initialized.
func stdioConn(t *testing.T, sup *Supervisor) *wire.Client {
	t.Helper()
	sr, cw := io.Pipe()
	cr, sw := io.Pipe()
	server := wire.NewStdioTransport(sr, sw, inboundTestMsgLimit)
	client := wire.NewClient(wire.NewStdioTransport(cr, cw, 0), wire.ClientOptions{})
	ended := make(chan struct{})
	go func() {
		_ = sup.ServeConn(context.Background(), server, ConnOptions{})
		close(ended)
	}()
	t.Cleanup(func() {
		client.Close()
		server.Close()
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
			t.Error("connection actor did not end")
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := client.Call(ctx, wire.MethodInitialize, map[string]any{"clientName": "test"}); err != nil {
		t.Fatal(err)
	}
	if err := client.Notify(ctx, wire.MethodInitialized, nil); err != nil {
		t.Fatal(err)
	}
	return client
}

// holdInbound starts a child that never reads its stdin and sends it two
// large writes: they stay unanswered, so the connection holds the whole
// inbound budget (two buffers of up to the message limit).
func holdInbound(t *testing.T, ctx context.Context, sup *Supervisor, c *wire.Client) []*wire.PendingCall {
	t.Helper()
	if _, err := c.Call(ctx, wire.MethodProcessStart, map[string]any{
		"processId": "sink", "argv": []string{"sleep", "60"}, "cwd": t.TempDir(), "env": map[string]string{"PATH": "/usr/bin:/bin"}, "pipeStdin": true,
	}); err != nil {
		t.Fatal(err)
	}
	chunk := base64.StdEncoding.EncodeToString(make([]byte, 700<<10))
	var writes []*wire.PendingCall
	for i := range 2 {
		p, err := c.Go(ctx, wire.MethodProcessWrite, map[string]any{"processId": "sink", "chunk": chunk, "writeId": fmt.Sprint(i)})
		if err != nil {
			t.Fatal(err)
		}
		writes = append(writes, p)
	}
	waitUsage(t, sup, "the two writes to hold the inbound budget", func(u BudgetUsage) bool { return u.InboundBytes > 3*inboundTestMsgLimit/2 })
	return writes
}

func waitUsage(t *testing.T, sup *Supervisor, what string, ok func(BudgetUsage) bool) BudgetUsage {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		u, err := sup.BudgetUsage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if ok(u) {
			return u
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: usage %+v", what, u)
		}
		time.Sleep(5 * time.Millisecond) // polling the budget actor's count, bounded
	}
}

// Past the inbound budget the server stops reading a large message (the
// other connection's request waits in the budget actor's queue, unread)
// and reads it once the requests holding the budget are answered.
func TestInboundBudgetBackpressure(t *testing.T) {
	sup := inboundSupervisor(t, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := stdioConn(t, sup)
	writes := holdInbound(t, ctx, sup, a)

	b := stdioConn(t, sup)
	answered := make(chan error, 1)
	go func() {
		_, err := b.Call(ctx, wire.MethodEnvironmentStatus, map[string]any{"padding": strings.Repeat("x", 512<<10)})
		answered <- err
	}()
	waitUsage(t, sup, "the second connection's large request to wait for the budget", func(u BudgetUsage) bool { return u.InboundWaiting == 1 })
	select {
	case err := <-answered:
		t.Fatalf("a large request was answered while the inbound budget was full: %v", err)
	default:
	}

	// Terminating the child answers the writes (stdin closed), which
	// returns their bytes; the waiting request is read and answered.
	if _, err := a.Call(ctx, wire.MethodProcessTerminate, map[string]any{"processId": "sink"}); err != nil {
		t.Fatal(err)
	}
	for _, w := range writes {
		if _, err := w.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-answered:
		if err != nil {
			t.Fatalf("the large request after the budget was returned: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the waiting large request was never read")
	}
	waitUsage(t, sup, "every inbound byte to return", func(u BudgetUsage) bool { return u.InboundBytes == 0 && u.InboundWaiting == 0 })
}

// A large message that waits past the admission wait is refused with
// -32011 naming the limit, answered under its own id; the rest of it is
// dropped and the connection stays usable.
func TestInboundBudgetRefusal(t *testing.T) {
	sup := inboundSupervisor(t, 200*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := stdioConn(t, sup)
	holdInbound(t, ctx, sup, a)

	b := stdioConn(t, sup)
	p, err := b.GoID(ctx, wire.StringID("big-1"), wire.MethodEnvironmentStatus, map[string]any{"padding": strings.Repeat("x", 512<<10)})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var e wire.Error
	if resp.Error == nil || json.Unmarshal(resp.Error, &e) != nil {
		t.Fatalf("the refused request was answered %s; want an error", resp.Result)
	}
	if e.Code != wire.CodeBudgetExceeded || !strings.Contains(e.Message, "inbound request memory = 2.0 MiB (--max-inbound-bytes)") {
		t.Fatalf("refusal %d %q; want -32011 naming --max-inbound-bytes", e.Code, e.Message)
	}
	if _, err := b.Call(ctx, wire.MethodEnvironmentStatus, nil); err != nil {
		t.Fatalf("the connection after a refused message: %v", err)
	}
	var rpc *wire.Error
	if _, err := b.Call(ctx, wire.MethodEnvironmentStatus, map[string]any{"padding": strings.Repeat("x", 512<<10)}); !errors.As(err, &rpc) || rpc.Code != wire.CodeBudgetExceeded {
		t.Fatalf("a second large message while the budget is held: %v; want -32011", err)
	}
}
