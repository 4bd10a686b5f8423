package actors

import (
	"bytes"
	"testing"
)

func chunk(seq uint64, n int) OutputChunk {
	return OutputChunk{Seq: seq, Stream: Stdout, Data: bytes.Repeat([]byte{byte(seq)}, n)}
}

func seqs(cs []OutputChunk) []uint64 {
	out := make([]uint64, len(cs))
	for i, c := range cs {
		out[i] = c.Seq
	}
	return out
}

func equalSeqs(a []uint64, b ...uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestRingEvictsByBytes(t *testing.T) {
	r := NewRing(10, 100)
	r.Append(chunk(1, 4))
	r.Append(chunk(2, 4))
	if ev := r.Append(chunk(4, 4)); ev != 1 { // seq 3 was an exit: gaps are allowed
		t.Fatalf("evicted %d; want 1", ev)
	}
	if r.Bytes() != 8 || r.Len() != 2 || r.FirstSeq() != 2 {
		t.Fatalf("bytes %d len %d first %d", r.Bytes(), r.Len(), r.FirstSeq())
	}
	if _, ok := r.Get(1); ok {
		t.Fatal("evicted chunk still readable")
	}
	if _, ok := r.Get(3); ok {
		t.Fatal("Get(3) found a chunk that never existed")
	}
	if c, ok := r.Get(4); !ok || c.Seq != 4 {
		t.Fatal("Get(4) missing")
	}
}

func TestRingEvictsByCountAndOversize(t *testing.T) {
	r := NewRing(1000, 3)
	for s := uint64(1); s <= 5; s++ {
		r.Append(chunk(s, 1))
	}
	if !equalSeqs(seqs(r.After(nil, 0, 0)), 3, 4, 5) {
		t.Fatalf("retained %v; want 3 4 5", seqs(r.After(nil, 0, 0)))
	}
	r.Append(chunk(6, 2000)) // larger than the byte bound: not retained, evicts all
	if r.Len() != 0 || r.Bytes() != 0 || r.FirstSeq() != 0 {
		t.Fatalf("after oversize append: len %d bytes %d", r.Len(), r.Bytes())
	}
}

func TestRingAfterMaxBytes(t *testing.T) {
	r := NewRing(1<<20, 100)
	r.Append(chunk(1, 5))
	r.Append(chunk(2, 5))
	r.Append(chunk(4, 5))
	cases := []struct {
		after    uint64
		maxBytes int
		want     []uint64
	}{
		{0, 0, []uint64{1, 2, 4}},
		{1, 0, []uint64{2, 4}},
		{2, 0, []uint64{4}},
		{3, 0, []uint64{4}},
		{4, 0, nil},
		{0, 1, []uint64{1}},     // the first chunk always comes, even over maxBytes
		{0, 10, []uint64{1, 2}}, // exactly fits
		{0, 14, []uint64{1, 2}}, // the third would exceed
		{0, 15, []uint64{1, 2, 4}},
	}
	for _, c := range cases {
		if got := seqs(r.After(nil, c.after, c.maxBytes)); !equalSeqs(got, c.want...) {
			t.Errorf("After(%d, %d) = %v; want %v", c.after, c.maxBytes, got, c.want)
		}
	}
}

func TestRingCompactsHead(t *testing.T) {
	r := NewRing(1<<20, 10)
	for s := uint64(1); s <= 10_000; s++ {
		r.Append(chunk(s, 1))
	}
	if r.Len() != 10 || r.FirstSeq() != 9991 || cap(r.chunks) > 1024 {
		t.Fatalf("len %d first %d cap %d", r.Len(), r.FirstSeq(), cap(r.chunks))
	}
}

// From agrees with counting the retained chunks by hand, across appends,
// evictions, seq gaps and compactions.
func TestRingFromCountsRetainedSuffix(t *testing.T) {
	r := NewRing(5000, 300)
	rng := uint64(1)
	seq := uint64(0)
	for step := 0; step < 5000; step++ {
		rng = rng*6364136223846793005 + 1442695040888963407
		seq += 1 + (rng>>60)%2 // sometimes skip a seq (an exit)
		r.Append(chunk(seq, int(rng>>33)%100))
		for _, from := range []uint64{0, 1, r.FirstSeq(), r.FirstSeq() + 3, seq - 7, seq, seq + 1} {
			wantBytes, wantChunks := 0, 0
			for _, c := range r.After(nil, 0, 0) {
				if c.Seq >= from {
					wantBytes += len(c.Data)
					wantChunks++
				}
			}
			if b, n := r.From(from); b != wantBytes || n != wantChunks {
				t.Fatalf("step %d From(%d) = %d bytes %d chunks; want %d, %d", step, from, b, n, wantBytes, wantChunks)
			}
		}
	}
}
