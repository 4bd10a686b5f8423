package wire

import (
	"encoding/json"
	"testing"
)

// BenchmarkEncodeOutput measures the server's hot path: one process/output
// notification of a full 256 KiB chunk, encoded into a reused buffer.
func BenchmarkEncodeOutput(b *testing.B) {
	chunk := make([]byte, 256<<10)
	var buf []byte
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendOutputNotification(buf[:0], "proc-1", 12345, StreamStdout, chunk)
	}
}

// BenchmarkEncodeOutputSmall is the same for a 100-byte chunk (per-message overhead).
func BenchmarkEncodeOutputSmall(b *testing.B) {
	chunk := make([]byte, 100)
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendOutputNotification(buf[:0], "proc-1", 12345, StreamStdout, chunk)
	}
}

// BenchmarkDecodeOutput measures a client decoding the same notification
// with encoding/json (what runtime.Client does).
func BenchmarkDecodeOutput(b *testing.B) {
	msg := AppendOutputNotification(nil, "proc-1", 12345, StreamStdout, make([]byte, 256<<10))
	b.SetBytes(256 << 10)
	b.ReportAllocs()
	for b.Loop() {
		m, err := Decode(msg)
		if err != nil {
			b.Fatal(err)
		}
		var n OutputNotification
		if err := json.Unmarshal(m.Params, &n); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeRequest measures decoding a small request and its params.
func BenchmarkDecodeRequest(b *testing.B) {
	msg := []byte(`{"id":42,"method":"process/read","params":{"processId":"proc-1","afterSeq":10,"maxBytes":65536,"waitMs":0}}`)
	b.ReportAllocs()
	for b.Loop() {
		m, err := Decode(msg)
		if err != nil {
			b.Fatal(err)
		}
		var p ReadParams
		if e := DecodeParams(m.Params, &p); e != nil {
			b.Fatal(e)
		}
	}
}

// BenchmarkParseOutput is the client's fast path for the same message.
func BenchmarkParseOutput(b *testing.B) {
	msg := AppendOutputNotification(nil, "proc-1", 12345, StreamStdout, make([]byte, 256<<10))
	b.SetBytes(256 << 10)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := ParseOutputNotification(msg); !ok {
			b.Fatal("not parsed")
		}
	}
}

// BenchmarkEncodeOutput64K is BenchmarkEncodeOutput for the largest chunk
// the server now sends (64 KiB): the per-message share of the cost.
func BenchmarkEncodeOutput64K(b *testing.B) {
	chunk := make([]byte, 64<<10)
	var buf []byte
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendOutputNotification(buf[:0], "proc-1", 12345, StreamStdout, chunk)
	}
}

// BenchmarkParseOutput64K is BenchmarkParseOutput for a 64 KiB chunk.
func BenchmarkParseOutput64K(b *testing.B) {
	msg := AppendOutputNotification(nil, "proc-1", 12345, StreamStdout, make([]byte, 64<<10))
	b.SetBytes(64 << 10)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := ParseOutputNotification(msg); !ok {
			b.Fatal("not parsed")
		}
	}
}
