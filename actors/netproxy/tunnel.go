package netproxy

import (
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

var bufPools sync.Map // size -> *sync.Pool

func getBuf(size int) *[]byte {
	v, _ := bufPools.LoadOrStore(size, &sync.Pool{New: func() any { b := make([]byte, size); return &b }})
	return v.(*sync.Pool).Get().(*[]byte)
}

func putBuf(size int, b *[]byte) {
	v, _ := bufPools.Load(size)
	v.(*sync.Pool).Put(b)
}

// pipe copies both ways between client and upstream until both ends are
// done, then closes both. The tunnel ends when no byte moved either way
// for IdleTimeout, or when one write could not complete for StallTimeout
// (a peer that stopped reading cannot pin the other side). An EOF is
// passed on as a half-close.
func (p *Proxy) pipe(client, upstream net.Conn) {
	var last atomic.Int64 // unix nanos of the last byte moved either way
	last.Store(time.Now().UnixNano())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.copyDir(upstream, client, &last, &p.up)
	}()
	p.copyDir(client, upstream, &last, &p.down)
	wg.Wait()
	_ = client.Close()
	_ = upstream.Close()
}

func (p *Proxy) copyDir(dst, src net.Conn, last *atomic.Int64, count *atomic.Uint64) {
	buf := getBuf(p.lim.BufferSize)
	defer putBuf(p.lim.BufferSize, buf)
	idle := p.lim.IdleTimeout
	for {
		_ = src.SetReadDeadline(time.Now().Add(idle))
		n, err := src.Read(*buf)
		if n > 0 {
			last.Store(time.Now().UnixNano())
			_ = dst.SetWriteDeadline(time.Now().Add(p.lim.StallTimeout))
			if _, werr := dst.Write((*buf)[:n]); werr != nil {
				// The other side is gone or stalled: end the tunnel.
				_ = src.Close()
				_ = dst.Close()
				return
			}
			count.Add(uint64(n))
			last.Store(time.Now().UnixNano())
		}
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// Idle only if the other direction was idle as well.
			if time.Since(time.Unix(0, last.Load())) < idle {
				continue
			}
			_ = src.Close()
			_ = dst.Close()
			return
		}
		// EOF or error: pass the end on and let the other direction finish.
		if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			return
		}
		_ = dst.Close()
		return
	}
}
