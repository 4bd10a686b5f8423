package wire

import (
	"context"
	"net"
	"sync"
	"time"
)

// Write coalescing of an accepted websocket connection.
//
// coder/websocket flushes its buffer to the network connection after every
// frame, so a batch of n messages costs n write system calls and, on the
// peer, up to n wake-ups. The coalescer holds the small writes made during
// WriteMessage's own frame write (corked: only for that call) in a pooled
// buffer until Flush, and sends them together; a large write goes out at
// once with what is held before it, in one writev, without being copied.
// A write made by anyone else between WriteMessage calls (coder/websocket
// answering a ping, or the peer's close frame just before it closes the
// socket) is not held: it takes what is held with it, in order.
//
// Flush's socket write has no deadline of its own, so it is bounded by the
// context of the batch's last WriteMessage: when that ends, the write is
// cut (a past write deadline) and Flush fails, as a WriteMessage would
// have.
//
// Concurrency: coder/websocket calls write from whichever goroutine writes
// a frame (the connection's writer, the reader answering a request, its
// own reader answering a ping), one at a time under its frame lock; flush
// and stop come from the writer and from CloseWith. mu serializes them and
// is held across the socket write, as net.Conn's own write lock is: it
// orders the bytes of one socket and guards nothing else.
//
// Backpressure: at most coalesceMax bytes are held; a write that would
// exceed it, or one of coalesceDirect bytes or more (the part of a frame
// beyond coder/websocket's 1 KiB buffer is one write), sends what is held.

const (
	// coalesceMax is the most a cork holds before it sends.
	coalesceMax = 64 << 10
	// coalesceDirect: a write at least this large is not copied; it goes
	// out at once, after what is held.
	coalesceDirect = 16 << 10
)

// coalesceBufs holds the buffers of corked batches; a connection holds one
// only between a WriteMessage and the Flush that ends its batch.
var coalesceBufs = sync.Pool{New: func() any { b := make([]byte, 0, coalesceMax); return &b }}

// coalescer is the write side of a progressConn.
type coalescer struct {
	mu      sync.Mutex
	corked  bool            // a WriteMessage's frame write is under way: its writes are held
	stopped bool            // CloseWith ran: never cork again
	held    *[]byte         // from coalesceBufs while something is held; nil otherwise
	ctx     context.Context // of the last WriteMessage whose writes are held: bounds flush
}

// sender is the socket write of a progressConn (one writev) and the write
// deadline that cuts it.
type sender interface {
	send(net.Buffers) (int64, error)
	SetWriteDeadline(time.Time) error
}

// cork holds the writes of the frame WriteMessage is about to write
// (unless stopped); uncork ends that once the frame is written. ctx is
// WriteMessage's.
func (c *coalescer) cork(ctx context.Context) {
	c.mu.Lock()
	c.corked = !c.stopped
	c.ctx = ctx
	c.mu.Unlock()
}

func (c *coalescer) uncork() {
	c.mu.Lock()
	c.corked = false
	c.mu.Unlock()
}

// write holds p while corked, else sends it (after anything held).
func (c *coalescer) write(s sender, p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.corked && len(p) < coalesceDirect && c.heldLen()+len(p) <= coalesceMax {
		if c.held == nil {
			c.held = coalesceBufs.Get().(*[]byte)
		}
		*c.held = append(*c.held, p...)
		return len(p), nil
	}
	if c.held == nil {
		n, err := s.send(net.Buffers{p})
		return int(n), err
	}
	h := len(*c.held)
	n, err := c.sendHeld(s, p)
	return max(int(n)-h, 0), err
}

// flush sends what is held, cut when the batch's context ends.
func (c *coalescer) flush(s sender) error { return c.send(s, true) }

// send sends what is held; bounded by the batch's context if bounded.
func (c *coalescer) send(s sender, bounded bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx := c.ctx
	c.ctx = nil
	if c.held == nil {
		return nil
	}
	if ctx == nil || !bounded {
		_, err := c.sendHeld(s, nil)
		return err
	}
	if err := ctx.Err(); err != nil {
		c.drop()
		return err
	}
	cut := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = s.SetWriteDeadline(time.Unix(1, 0)) // cuts the write below
		close(cut)
	})
	_, err := c.sendHeld(s, nil)
	if !stop() {
		// The context ended during the write or just after it: the past
		// deadline must not outlive this flush (a later write, such as
		// the last flush after the latch, has a bound of its own).
		<-cut
		_ = s.SetWriteDeadline(time.Time{})
	}
	return err
}

// drop forgets what is held (the batch's context ended before it left).
func (c *coalescer) drop() {
	*c.held = (*c.held)[:0]
	coalesceBufs.Put(c.held)
	c.held = nil
}

// stop turns corking off for good and sends what is held (the close
// handshake, whose own deadline bounds it: the batch's context may have
// ended with the connection).
func (c *coalescer) stop(s sender) error {
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	return c.send(s, false)
}

func (c *coalescer) heldLen() int {
	if c.held == nil {
		return 0
	}
	return len(*c.held)
}

// sendHeld sends what is held, then p (if any), in one writev, and gives
// the buffer back to the pool. Called with mu held.
func (c *coalescer) sendHeld(s sender, p []byte) (int64, error) {
	bs := net.Buffers{*c.held}
	if len(p) > 0 {
		bs = append(bs, p)
	}
	n, err := s.send(bs)
	c.drop()
	return n, err
}
