package wiretest

import (
	"bytes"
	"context"
	"io"
	"sync"

	"github.com/runtimed/runtimed/wire"
)

// MemPipe returns the two ends of an in-memory connection, each a
// wire.Transport: what one end writes the other reads, in order. capacity
// is how many messages may wait in each direction (0: unbuffered, so a
// completed write means the peer has taken the message).
//
// Close is orderly, like a socket's: the peer still reads what was written
// before it, then io.EOF; the closing end's own calls fail with
// wire.ErrClosed. Cut is a disconnect at a moment the test chooses: from
// then on every call on either end fails with the cut's error and messages
// not yet read are lost, as on a dropped TCP connection.
//
// It is the one in-memory transport of the project's tests (actors,
// runtime and proptest use it).
func MemPipe(capacity int) (client, server *MemTransport) {
	return MemPipeSized(capacity, capacity)
}

// MemPipeSized is MemPipe with its own capacity in each direction (a small
// server-to-client queue makes a client that stops reading stop the
// server's writer at once).
func MemPipeSized(toServer, toClient int) (client, server *MemTransport) {
	link := &memLink{cut: make(chan struct{})}
	c2s, s2c := make(chan []byte, toServer), make(chan []byte, toClient)
	cc, sc := make(chan struct{}), make(chan struct{})
	client = &MemTransport{in: s2c, out: c2s, closed: cc, peerClosed: sc, link: link}
	server = &MemTransport{in: c2s, out: s2c, closed: sc, peerClosed: cc, link: link}
	return client, server
}

// memLink is what both ends of a pipe share: the cut.
type memLink struct {
	cut  chan struct{}
	err  error // set before cut is closed
	once sync.Once
}

// MemTransport is one end of a MemPipe. Its methods are safe for
// concurrent use (one reader and any number of writers, as wire.Transport
// requires).
type MemTransport struct {
	in         <-chan []byte
	out        chan<- []byte
	closed     chan struct{}
	peerClosed <-chan struct{}
	closeOnce  sync.Once
	link       *memLink
}

var _ wire.Transport = (*MemTransport)(nil)

// Cut disconnects both ends: every later call on either fails with err
// (io.ErrUnexpectedEOF if nil), and unread messages are lost.
func (t *MemTransport) Cut(err error) {
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	t.link.once.Do(func() { t.link.err = err; close(t.link.cut) })
}

// Closed is closed when this end was closed.
func (t *MemTransport) Closed() <-chan struct{} { return t.closed }

// PeerClosed is closed when the other end was closed.
func (t *MemTransport) PeerClosed() <-chan struct{} { return t.peerClosed }

func (t *MemTransport) cutErr() error {
	select {
	case <-t.link.cut:
		return t.link.err
	default:
		return nil
	}
}

// ReadMessage returns the next message, what the peer wrote before it
// closed first.
func (t *MemTransport) ReadMessage(ctx context.Context) ([]byte, error) {
	if err := t.cutErr(); err != nil {
		return nil, err
	}
	select {
	case m := <-t.in:
		return m, nil
	default:
	}
	select {
	case m := <-t.in:
		return m, nil
	case <-t.link.cut:
		return nil, t.link.err
	case <-t.closed:
		return nil, wire.ErrClosed
	case <-t.peerClosed:
		// A peer that closed because it saw the cut (a client latching
		// its read error) must not turn the cut into an orderly EOF here:
		// the cut happened before that close, so it is visible now.
		if err := t.cutErr(); err != nil {
			return nil, err
		}
		select {
		case m := <-t.in:
			return m, nil
		default:
			return nil, io.EOF
		}
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// WriteMessage sends a copy of msg (the caller may reuse its buffer).
func (t *MemTransport) WriteMessage(ctx context.Context, msg []byte) error {
	if err := t.cutErr(); err != nil {
		return err
	}
	select {
	case <-t.closed:
		return wire.ErrClosed
	case <-t.peerClosed:
		if err := t.cutErr(); err != nil {
			return err // the peer closed after the cut (see ReadMessage)
		}
		return wire.ErrClosed
	default:
	}
	select {
	case t.out <- bytes.Clone(msg):
		return nil
	case <-t.link.cut:
		return t.link.err
	case <-t.closed:
		return wire.ErrClosed
	case <-t.peerClosed:
		if err := t.cutErr(); err != nil {
			return err // the peer closed after the cut (see ReadMessage)
		}
		return wire.ErrClosed
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Flush reports a cut; writes are not buffered.
func (t *MemTransport) Flush() error { return t.cutErr() }

// Close closes this end (idempotent).
func (t *MemTransport) Close() error { t.closeOnce.Do(func() { close(t.closed) }); return nil }
