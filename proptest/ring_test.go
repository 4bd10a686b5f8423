package proptest

import (
	"bytes"
	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/runtimed/runtimed/actors"
)

// retainModel is the plain-slice model of retention: every chunk appended,
// oldest first, minus those evicted so that both bounds hold.
type retainModel struct {
	maxBytes, maxChunks int
	chunks              []actors.OutputChunk
	bytes               int
}

func (m *retainModel) append(c actors.OutputChunk) {
	m.chunks = append(m.chunks, c)
	m.bytes += len(c.Data)
	for len(m.chunks) > 0 && (m.bytes > m.maxBytes || len(m.chunks) > m.maxChunks) {
		m.bytes -= len(m.chunks[0].Data)
		m.chunks = m.chunks[1:]
	}
}

func (m *retainModel) firstSeq() uint64 {
	if len(m.chunks) == 0 {
		return 0
	}
	return m.chunks[0].Seq
}

// after is PROTOCOL.md's read rule: the retained chunks with seq > after, in
// order; with maxBytes > 0, the first is always included and reading stops
// before a chunk that would bring the total over maxBytes.
func (m *retainModel) after(after uint64, maxBytes int) []actors.OutputChunk {
	var out []actors.OutputChunk
	total := 0
	for _, c := range m.chunks {
		if c.Seq <= after {
			continue
		}
		if maxBytes > 0 && len(out) > 0 && total+len(c.Data) > maxBytes {
			break
		}
		out = append(out, c)
		total += len(c.Data)
	}
	return out
}

func (m *retainModel) get(seq uint64) (actors.OutputChunk, bool) {
	for _, c := range m.chunks {
		if c.Seq == seq {
			return c, true
		}
	}
	return actors.OutputChunk{}, false
}

func sameChunks(got, want []actors.OutputChunk) error {
	if len(got) != len(want) {
		return fmt.Errorf("got %d chunks %s, want %d %s", len(got), seqsOf(got), len(want), seqsOf(want))
	}
	for i := range got {
		if got[i].Seq != want[i].Seq || got[i].Stream != want[i].Stream || !bytes.Equal(got[i].Data, want[i].Data) {
			return fmt.Errorf("chunk %d: got seq %d %v %q, want seq %d %v %q", i, got[i].Seq, got[i].Stream, got[i].Data, want[i].Seq, want[i].Stream, want[i].Data)
		}
	}
	return nil
}

func seqsOf(cs []actors.OutputChunk) string {
	s := make([]uint64, len(cs))
	for i, c := range cs {
		s[i] = c.Seq
	}
	return fmt.Sprint(s)
}

// TestRingModel: after any sequence of appends, actors.Ring retains exactly
// the model's suffix (within both bounds), and After, Get and FirstSeq
// answer from that suffix with PROTOCOL.md's maxBytes rule.
func TestRingModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		maxBytes := rapid.IntRange(1, 64).Draw(t, "maxBytes")
		maxChunks := rapid.IntRange(1, 8).Draw(t, "maxChunks")
		ring := actors.NewRing(maxBytes, maxChunks)
		model := &retainModel{maxBytes: maxBytes, maxChunks: maxChunks}
		nextSeq := uint64(1)
		streams := []actors.Stream{actors.Stdout, actors.Stderr, actors.PTY}

		appendOne := func(t *rapid.T, n int) {
			data := make([]byte, n)
			for i := range data {
				data[i] = byte(nextSeq) + byte(i)
			}
			c := actors.OutputChunk{Seq: nextSeq, Stream: rapid.SampledFrom(streams).Draw(t, "stream"), Data: data}
			// exit and close take seqs too: gaps of 1 or 2 between chunks.
			nextSeq += uint64(rapid.IntRange(1, 2).Draw(t, "gap"))
			evicted := ring.Append(c)
			before := len(model.chunks) + 1
			model.append(c)
			if want := before - len(model.chunks); evicted != want {
				t.Fatalf("Append(seq %d, %d bytes) evicted %d, model %d", c.Seq, n, evicted, want)
			}
		}
		t.Repeat(map[string]func(*rapid.T){
			"append": func(t *rapid.T) {
				// Sizes up to twice the byte bound: chunks larger than the
				// bound are not retained at all. Output chunks are never empty.
				appendOne(t, rapid.IntRange(1, 2*maxBytes+1).Draw(t, "size"))
			},
			"burst": func(t *rapid.T) {
				// Many small chunks, so the ring's storage is compacted.
				k := rapid.IntRange(1, 150).Draw(t, "count")
				size := rapid.IntRange(1, 4).Draw(t, "size")
				for range k {
					appendOne(t, size)
				}
			},
			"after": func(t *rapid.T) {
				after := rapid.Uint64Range(0, nextSeq+1).Draw(t, "afterSeq")
				mb := rapid.IntRange(0, 2*maxBytes).Draw(t, "maxBytes") // 0: unlimited
				prefix := []actors.OutputChunk{{Seq: 999999}}
				got := ring.After(prefix, after, mb)
				if len(got) == 0 || got[0].Seq != 999999 {
					t.Fatalf("After dropped dst's prefix")
				}
				if err := sameChunks(got[1:], model.after(after, mb)); err != nil {
					t.Fatalf("After(%d, maxBytes %d): %v", after, mb, err)
				}
			},
			"get": func(t *rapid.T) {
				seq := rapid.Uint64Range(0, nextSeq+1).Draw(t, "seq")
				got, ok := ring.Get(seq)
				want, wok := model.get(seq)
				if ok != wok {
					t.Fatalf("Get(%d) found=%v, model %v", seq, ok, wok)
				}
				if ok {
					if err := sameChunks([]actors.OutputChunk{got}, []actors.OutputChunk{want}); err != nil {
						t.Fatalf("Get(%d): %v", seq, err)
					}
				}
			},
			"": func(t *rapid.T) {
				if ring.Len() > maxChunks || ring.Bytes() > maxBytes {
					t.Fatalf("retention over its bounds: %d chunks (max %d), %d bytes (max %d)", ring.Len(), maxChunks, ring.Bytes(), maxBytes)
				}
				if ring.Len() != len(model.chunks) || ring.Bytes() != model.bytes {
					t.Fatalf("ring holds %d chunks / %d bytes, model %d / %d", ring.Len(), ring.Bytes(), len(model.chunks), model.bytes)
				}
				if ring.FirstSeq() != model.firstSeq() {
					t.Fatalf("FirstSeq %d, model %d", ring.FirstSeq(), model.firstSeq())
				}
				if err := sameChunks(ring.After(nil, 0, 0), model.chunks); err != nil {
					t.Fatalf("retained suffix: %v", err)
				}
			},
		})
	})
}
