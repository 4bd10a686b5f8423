package wire

import (
	"bytes"
	"encoding/base64"
	"math/rand/v2"
	"testing"
)

func TestAppendBase64MatchesStdlib(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 300; n++ {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(r.Uint32())
		}
		want := base64.StdEncoding.EncodeToString(src)
		if got := AppendBase64(nil, src); string(got) != want {
			t.Fatalf("len %d: got %q want %q", n, got, want)
		}
		prefix := []byte("xy")
		if got := AppendBase64(prefix, src); string(got) != "xy"+want {
			t.Fatalf("len %d with prefix: got %q", n, got)
		}
	}
	big := bytes.Repeat([]byte{0xff, 0, 0x7f, 0x80, 1}, 100_003)
	if string(AppendBase64(make([]byte, 0, 10), big)) != base64.StdEncoding.EncodeToString(big) {
		t.Fatal("large input differs")
	}
}

func BenchmarkAppendBase64(b *testing.B) {
	src := make([]byte, 256<<10)
	dst := make([]byte, 0, base64.StdEncoding.EncodedLen(len(src)))
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		dst = AppendBase64(dst[:0], src)
	}
}

func BenchmarkStdlibBase64(b *testing.B) {
	src := make([]byte, 256<<10)
	dst := make([]byte, base64.StdEncoding.EncodedLen(len(src)))
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		base64.StdEncoding.Encode(dst, src)
	}
}
