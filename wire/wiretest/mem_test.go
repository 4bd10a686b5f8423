package wiretest

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/runtimed/runtimed/wire"
)

// Close is orderly (the peer reads what was written first, then io.EOF);
// Cut is abrupt (unread messages are lost, both ends fail with its error).
func TestMemPipeCloseAndCut(t *testing.T) {
	ctx := context.Background()
	c, s := MemPipe(4)
	_ = c.WriteMessage(ctx, []byte("a"))
	_ = c.WriteMessage(ctx, []byte("b"))
	c.Close()
	for _, want := range []string{"a", "b"} {
		if m, err := s.ReadMessage(ctx); err != nil || string(m) != want {
			t.Fatalf("after close: %q %v; want %q", m, err, want)
		}
	}
	if _, err := s.ReadMessage(ctx); err != io.EOF {
		t.Fatalf("after the last message: %v; want io.EOF", err)
	}
	if err := c.WriteMessage(ctx, []byte("x")); !errors.Is(err, wire.ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}

	c, s = MemPipe(4)
	_ = s.WriteMessage(ctx, []byte("lost"))
	cut := errors.New("cut")
	s.Cut(cut)
	if _, err := c.ReadMessage(ctx); err != cut {
		t.Fatalf("read after cut: %v; want the cut's error (the message is lost)", err)
	}
	if err := s.WriteMessage(ctx, []byte("y")); err != cut || s.Flush() != cut {
		t.Fatalf("write after cut: %v", err)
	}
}

// A peer that closes because it saw the cut (as wire.Client does when its
// reader fails) must not turn the cut into io.EOF or wire.ErrClosed on the
// other end, whatever moment of the other end's call the two land in.
func TestMemPipeCutThenPeerCloseReportsTheCut(t *testing.T) {
	ctx := context.Background()
	cut := errors.New("cut")
	for i := range 50000 {
		c, s := MemPipe(0)
		readErr, writeErr := make(chan error, 1), make(chan error, 1)
		go func() { _, err := s.ReadMessage(ctx); readErr <- err }()
		go func() { writeErr <- s.WriteMessage(ctx, []byte("x")) }()
		c.Cut(cut)
		c.Close()
		if err := <-readErr; err != cut {
			t.Fatalf("round %d: read ended with %v; want the cut's error", i, err)
		}
		if err := <-writeErr; err != cut {
			t.Fatalf("round %d: write ended with %v; want the cut's error", i, err)
		}
	}
}
