package netproxy

import (
	"context"
	"io"
	"net"
	"sync"
	"time"
)

// group tracks a proxy's open connections and running goroutines so
// Close can end them all and wait. Its fields are guarded by mu, which
// is held for map and counter updates only, never across I/O.
type group struct {
	mu     sync.Mutex
	closed bool                   // set once by shut
	n      int                    // goroutines inside enter/leave
	conns  map[io.Closer]struct{} // open connections (client and upstream)
	idle   chan struct{}          // closed when closed && n == 0
	once   sync.Once              // closes idle
}

func (g *group) init() {
	g.conns = make(map[io.Closer]struct{})
	g.idle = make(chan struct{})
}

// enter registers a goroutine; false after shut (the goroutine must not run).
func (g *group) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.n++
	return true
}

func (g *group) leave() {
	g.mu.Lock()
	g.n--
	done := g.closed && g.n == 0
	g.mu.Unlock()
	if done {
		g.once.Do(func() { close(g.idle) })
	}
}

// track wraps c so Close ends it; nil (and c closed) after shut.
func (g *group) track(c net.Conn, onClose func()) net.Conn {
	tc := &trackedConn{Conn: c, g: g, onClose: onClose}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		_ = c.Close()
		return nil
	}
	g.conns[tc] = struct{}{}
	g.mu.Unlock()
	return tc
}

func (g *group) untrack(c io.Closer) {
	g.mu.Lock()
	delete(g.conns, c)
	g.mu.Unlock()
}

// shut marks the group closed and returns what must be closed (by the
// caller, outside the lock).
func (g *group) shut() []io.Closer {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	out := make([]io.Closer, 0, len(g.conns))
	for c := range g.conns {
		out = append(out, c)
	}
	if g.n == 0 {
		g.once.Do(func() { close(g.idle) })
	}
	return out
}

func (g *group) add(c io.Closer) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.conns[c] = struct{}{}
	return true
}

func (g *group) wait(ctx context.Context) error {
	select {
	case <-g.idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// trackedConn removes itself from the group when closed.
type trackedConn struct {
	net.Conn
	g       *group
	once    sync.Once
	onClose func() // set before the conn is shared
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.g.untrack(c)
		if c.onClose != nil {
			c.onClose()
		}
	})
	return err
}

// CloseWrite half-closes when the underlying conn can.
func (c *trackedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// limitListener admits at most p.lim.MaxConns client connections at a
// time; one over the limit is answered with refusal (when non-nil) and
// closed at once, so the command sees a clear error instead of a hang.
type limitListener struct {
	net.Listener
	p       *Proxy
	refusal []byte
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.p.active.Add(1) > int64(l.p.lim.MaxConns) {
			l.p.active.Add(-1)
			l.p.rejected.Add(1)
			if l.refusal != nil {
				_ = c.SetWriteDeadline(time.Now().Add(time.Second))
				_, _ = c.Write(l.refusal)
			}
			_ = c.Close()
			continue
		}
		tc := l.p.grp.track(c, func() { l.p.active.Add(-1) })
		if tc == nil {
			l.p.active.Add(-1)
			return nil, ErrClosed
		}
		return tc, nil
	}
}
