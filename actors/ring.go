package actors

import (
	"sort"

	"github.com/runtimed/runtimed/actors/osproc"
)

// Stream names an output stream of a process (the OS side's, osproc.Stream).
type Stream = osproc.Stream

// The output streams.
const (
	Stdout = osproc.Stdout
	Stderr = osproc.Stderr
	PTY    = osproc.PTY
)

// OutputChunk is one piece of output with its sequence number. Data is
// never modified after the chunk is created, so it may be shared.
type OutputChunk struct {
	Seq    uint64
	Stream Stream
	Data   []byte
}

// Ring retains the most recent output chunks of one process, bounded by
// total bytes and by chunk count. Chunks are appended with increasing seq
// (not necessarily contiguous: exit and close take seqs too). Appending
// evicts the oldest chunks until both bounds hold again; a chunk larger
// than the byte bound is not retained at all.
//
// A Ring is not safe for concurrent use; its owner is the process actor.
type Ring struct {
	maxBytes  int
	maxChunks int
	chunks    []OutputChunk // retained chunks are chunks[head:]
	ends      []int64       // ends[i]: bytes ever appended up to and including chunks[i]
	head      int
	bytes     int
	total     int64 // bytes ever appended
}

// NewRing returns a ring bounded by maxBytes and maxChunks (both > 0).
func NewRing(maxBytes, maxChunks int) *Ring {
	if maxBytes <= 0 {
		maxBytes = 1
	}
	if maxChunks <= 0 {
		maxChunks = 1
	}
	return &Ring{maxBytes: maxBytes, maxChunks: maxChunks}
}

// Append retains c and returns how many chunks were evicted.
func (r *Ring) Append(c OutputChunk) (evicted int) {
	r.chunks = append(r.chunks, c)
	r.total += int64(len(c.Data))
	r.ends = append(r.ends, r.total)
	r.bytes += len(c.Data)
	for r.Len() > 0 && (r.bytes > r.maxBytes || r.Len() > r.maxChunks) {
		r.bytes -= len(r.chunks[r.head].Data)
		r.chunks[r.head] = OutputChunk{}
		r.head++
		evicted++
	}
	if r.head > 64 && r.head*2 > len(r.chunks) {
		n := copy(r.chunks, r.chunks[r.head:])
		copy(r.ends, r.ends[r.head:])
		clear(r.chunks[n:])
		r.chunks = r.chunks[:n]
		r.ends = r.ends[:n]
		r.head = 0
	}
	return evicted
}

// Len returns the number of retained chunks.
func (r *Ring) Len() int { return len(r.chunks) - r.head }

// Bytes returns the number of retained bytes.
func (r *Ring) Bytes() int { return r.bytes }

// MaxBytes returns the byte bound.
func (r *Ring) MaxBytes() int { return r.maxBytes }

// MaxChunks returns the chunk bound.
func (r *Ring) MaxChunks() int { return r.maxChunks }

// FirstSeq returns the seq of the oldest retained chunk, or 0 when empty.
func (r *Ring) FirstSeq() uint64 {
	if r.Len() == 0 {
		return 0
	}
	return r.chunks[r.head].Seq
}

// From returns the bytes and the number of the retained chunks with Seq >=
// from, in O(log n).
func (r *Ring) From(from uint64) (bytes, chunks int) {
	i := r.index(max(from, 1) - 1)
	if i >= len(r.chunks) {
		return 0, 0
	}
	return int(r.total - r.ends[i] + int64(len(r.chunks[i].Data))), len(r.chunks) - i
}

// index returns the position of the first retained chunk with Seq > after.
func (r *Ring) index(after uint64) int {
	live := r.chunks[r.head:]
	return r.head + sort.Search(len(live), func(i int) bool { return live[i].Seq > after })
}

// Get returns the retained chunk with the given seq.
func (r *Ring) Get(seq uint64) (OutputChunk, bool) {
	if seq == 0 {
		return OutputChunk{}, false
	}
	i := r.index(seq - 1)
	if i < len(r.chunks) && r.chunks[i].Seq == seq {
		return r.chunks[i], true
	}
	return OutputChunk{}, false
}

// After appends to dst the retained chunks with Seq > after, in order. With
// maxBytes > 0 it stops before a chunk that would bring the total over
// maxBytes, but always includes the first chunk.
func (r *Ring) After(dst []OutputChunk, after uint64, maxBytes int) []OutputChunk {
	total := 0
	for i := r.index(after); i < len(r.chunks); i++ {
		c := r.chunks[i]
		if maxBytes > 0 && total > 0 && total+len(c.Data) > maxBytes {
			break
		}
		total += len(c.Data)
		dst = append(dst, c)
		if maxBytes > 0 && total >= maxBytes {
			break
		}
	}
	return dst
}
