package wire

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/coder/websocket"
)

// refuseGate refuses every message it is asked about, counting them.
type refuseGate struct{ asked int }

var errGateRefused = errors.New("refused by the test's gate")

func (g *refuseGate) AdmitRead(context.Context) error { g.asked++; return errGateRefused }

// A message over LargeReadBytes is put to the gate before the transport
// reads on; a refused one is dropped (its first bytes kept for the id) and
// the transport goes on with the next message. Small ones never ask.
func TestReadGateRefusesLargeMessages(t *testing.T) {
	large := `{"id":"big-7","method":"environment/status","params":{"padding":"` + strings.Repeat("x", 1<<20) + `"}}`
	small := `{"id":1,"method":"environment/status"}`
	check := func(t *testing.T, read func(context.Context) ([]byte, error), g *refuseGate) {
		ctx := context.Background()
		_, err := read(ctx)
		var rr *ReadRefusedError
		if !errors.As(err, &rr) || !errors.Is(err, errGateRefused) {
			t.Fatalf("large message: %v; want a *ReadRefusedError wrapping the gate's error", err)
		}
		if got := string(ScanID(rr.Prefix)); got != `"big-7"` || len(rr.Prefix) > LargeReadBytes || rr.Size != len(large) {
			t.Fatalf("refused: id %s, prefix %d bytes, size %d; want \"big-7\", at most %d, %d", got, len(rr.Prefix), rr.Size, LargeReadBytes, len(large))
		}
		if m, err := read(ctx); err != nil || string(m) != small {
			t.Fatalf("the message after the refused one: %q, %v", m, err)
		}
		if g.asked != 1 {
			t.Fatalf("the gate was asked %d times; want once (the small message never asks)", g.asked)
		}
	}
	t.Run("websocket", func(t *testing.T) {
		c, tr, ctx := acceptedPair(t)
		g := &refuseGate{}
		SetReadGate(tr, g)
		go func() {
			_ = c.Write(ctx, websocket.MessageText, []byte(large))
			_ = c.Write(ctx, websocket.MessageText, []byte(small))
		}()
		check(t, tr.ReadMessage, g)
	})
	t.Run("stdio", func(t *testing.T) {
		r, w := io.Pipe()
		tr := NewStdioTransport(r, io.Discard, 0)
		g := &refuseGate{}
		SetReadGate(tr, g)
		go func() {
			_, _ = io.WriteString(w, large+"\n"+small+"\n")
			_ = w.Close()
		}()
		check(t, tr.ReadMessage, g)
	})
}
