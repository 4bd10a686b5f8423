package wire

import (
	"net"
	"sync"
)

// Write coalescing of an accepted websocket connection.
//
// coder/websocket flushes its buffer to the network connection after every
// frame, so a batch of n messages costs n write system calls and, on the
// peer, up to n wake-ups. Between WriteMessage (which corks) and Flush the
// coalescer holds small writes in a pooled buffer and sends them together;
// a large write goes out at once with what is held before it, in one
// writev, without being copied.
//
// Concurrency: coder/websocket calls write from whichever goroutine writes
// a frame (the connection's writer, the reader answering a request, its
// own reader answering a ping), one at a time under its frame lock; flush
// and stop come from the writer and from CloseWith. mu serializes them and
// is held across the socket write, as net.Conn's own write lock is: it
// orders the bytes of one socket and guards nothing else.
//
// Backpressure: at most coalesceMax bytes are held; a write that would
// exceed it, or one of coalesceDirect bytes or more, sends what is held.

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
	corked  bool    // writes are held until flush
	stopped bool    // CloseWith ran: never cork again
	held    *[]byte // from coalesceBufs while something is held; nil otherwise
}

// sender is the socket write of a progressConn (one writev).
type sender interface {
	send(net.Buffers) (int64, error)
}

// cork makes writes wait for flush (unless stopped).
func (c *coalescer) cork() {
	c.mu.Lock()
	c.corked = !c.stopped
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

// flush ends the cork and sends what is held.
func (c *coalescer) flush(s sender) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corked = false
	if c.held == nil {
		return nil
	}
	_, err := c.sendHeld(s, nil)
	return err
}

// stop flushes and turns corking off for good (the close handshake).
func (c *coalescer) stop(s sender) error {
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	return c.flush(s)
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
	*c.held = (*c.held)[:0]
	coalesceBufs.Put(c.held)
	c.held = nil
	return n, err
}
