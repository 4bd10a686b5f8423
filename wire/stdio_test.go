package wire

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestStdioFraming(t *testing.T) {
	in := strings.NewReader("{\"a\":1}\n\n  \r\n{\"b\":2}\r\n" + strings.Repeat("x", 100) + "\n{\"c\":3}")
	var out bytes.Buffer
	tr := NewStdioTransport(in, &out, 50)
	ctx := context.Background()
	for _, want := range []string{`{"a":1}`, `{"b":2}`, "too big", `{"c":3}`} {
		got, err := tr.ReadMessage(ctx)
		if want == "too big" {
			if !errors.Is(err, ErrMessageTooBig) {
				t.Fatalf("oversize line: err = %v, msg %q", err, got)
			}
			continue
		}
		if err != nil || string(got) != want {
			t.Fatalf("ReadMessage = %q, %v; want %q", got, err, want)
		}
	}
	if _, err := tr.ReadMessage(ctx); err != io.EOF {
		t.Fatalf("at end: %v; want EOF", err)
	}
	if err := tr.WriteMessage(ctx, []byte(`{"x":1}`)); err != nil {
		t.Fatal(err)
	}
	if out.Len() != 0 {
		t.Fatalf("wrote before Flush: %q", out.String())
	}
	_ = tr.WriteMessage(ctx, []byte(`{"y":2}`))
	if err := tr.Flush(); err != nil {
		t.Fatal(err)
	}
	if out.String() != "{\"x\":1}\n{\"y\":2}\n" {
		t.Fatalf("output %q", out.String())
	}
}

func TestStdioCloseUnblocksRead(t *testing.T) {
	r, w := io.Pipe()
	defer w.Close()
	tr := NewStdioTransport(r, io.Discard, 0)
	errc := make(chan error, 1)
	go func() { _, err := tr.ReadMessage(context.Background()); errc <- err }()
	tr.Close()
	if err := <-errc; err == nil {
		t.Fatal("read after Close succeeded")
	}
}

// A line buffer grown for a large message is dropped when the reader
// releases it; the message stays valid.
func TestStdioReleasesLargeLineBuffer(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	tr := NewStdioTransport(strings.NewReader(big+"\n{}\n"), io.Discard, 0)
	m, err := tr.ReadMessage(context.Background())
	if err != nil || len(m) != len(big) {
		t.Fatalf("read %d bytes, %v", len(m), err)
	}
	ReleaseReadBuffer(tr)
	if tr.line != nil || string(m) != big {
		t.Errorf("after a release: buffer of %d bytes kept, message intact %v", cap(tr.line), string(m) == big)
	}
	if m, err := tr.ReadMessage(context.Background()); err != nil || string(m) != "{}" {
		t.Fatalf("read %q, %v", m, err)
	}
}
