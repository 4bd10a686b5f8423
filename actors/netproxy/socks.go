package netproxy

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// SOCKS5 (RFC 1928), no authentication; CONNECT and, when enabled,
// UDP ASSOCIATE. BIND is refused.
const (
	socksVer       = 5
	cmdConnect     = 1
	cmdUDP         = 3
	atypV4         = 1
	atypName       = 3
	atypV6         = 4
	repOK          = 0
	repFailure     = 1
	repNotAllowed  = 2
	repHostUnreach = 4
	repRefused     = 5
	repCmdUnsupp   = 7
	repAtypUnsupp  = 8
)

// ServeSOCKS5 serves the SOCKS5 proxy on l until Close. It takes
// ownership of l.
func (p *Proxy) ServeSOCKS5(l net.Listener) error {
	if !p.grp.enter() {
		_ = l.Close()
		return ErrClosed
	}
	defer p.grp.leave()
	if !p.grp.add(l) {
		_ = l.Close()
		return ErrClosed
	}
	ll := &limitListener{Listener: l, p: p}
	for {
		c, err := ll.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return ErrClosed
		}
		if !p.grp.enter() {
			_ = c.Close()
			return ErrClosed
		}
		go func() {
			defer p.grp.leave()
			p.serveSOCKSConn(c)
		}()
	}
}

type socksAddr struct {
	host string // name or IP literal
	port int
}

func readSocksAddr(r io.Reader, atyp byte) (socksAddr, error) {
	var host string
	switch atyp {
	case atypV4:
		var b [4]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return socksAddr{}, err
		}
		host = netip.AddrFrom4(b).String()
	case atypV6:
		var b [16]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return socksAddr{}, err
		}
		host = netip.AddrFrom16(b).String()
	case atypName:
		var n [1]byte
		if _, err := io.ReadFull(r, n[:]); err != nil {
			return socksAddr{}, err
		}
		b := make([]byte, n[0])
		if _, err := io.ReadFull(r, b); err != nil {
			return socksAddr{}, err
		}
		host = string(b)
	default:
		return socksAddr{}, errAtyp
	}
	var pb [2]byte
	if _, err := io.ReadFull(r, pb[:]); err != nil {
		return socksAddr{}, err
	}
	return socksAddr{host: host, port: int(binary.BigEndian.Uint16(pb[:]))}, nil
}

var errAtyp = errors.New("netproxy: socks5: address type not supported")

func socksReply(c net.Conn, rep byte, bound netip.AddrPort) error {
	b := []byte{socksVer, rep, 0}
	if !bound.IsValid() {
		bound = netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
	}
	a := bound.Addr().Unmap()
	if a.Is4() {
		b = append(b, atypV4)
		v := a.As4()
		b = append(b, v[:]...)
	} else {
		b = append(b, atypV6)
		v := a.As16()
		b = append(b, v[:]...)
	}
	b = binary.BigEndian.AppendUint16(b, bound.Port())
	_, err := c.Write(b)
	return err
}

func (p *Proxy) serveSOCKSConn(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(p.lim.HeaderTimeout))
	br := bufio.NewReaderSize(c, 512)
	var hdr [2]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil || hdr[0] != socksVer {
		return
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(br, methods); err != nil {
		return
	}
	noAuth := false
	for _, m := range methods {
		noAuth = noAuth || m == 0
	}
	if !noAuth {
		_, _ = c.Write([]byte{socksVer, 0xff})
		return
	}
	if _, err := c.Write([]byte{socksVer, 0}); err != nil {
		return
	}
	var req [4]byte
	if _, err := io.ReadFull(br, req[:]); err != nil || req[0] != socksVer {
		return
	}
	dst, err := readSocksAddr(br, req[3])
	if err != nil {
		if errors.Is(err, errAtyp) {
			_ = socksReply(c, repAtypUnsupp, netip.AddrPort{})
		}
		return
	}
	// The handshake is read; what follows (a decision that may wait for
	// an answer, a dial) has bounds of its own.
	_ = c.SetDeadline(time.Time{})
	switch req[1] {
	case cmdConnect:
		p.socksConnect(c, br, dst)
	case cmdUDP:
		p.socksUDP(c, br)
	default:
		_ = socksReply(c, repCmdUnsupp, netip.AddrPort{})
	}
}

func (p *Proxy) socksConnect(c net.Conn, br *bufio.Reader, dst socksAddr) {
	ctx, cancel := context.WithCancel(p.ctx)
	defer cancel()
	addrs, v, err := p.authorize(ctx, SOCKS5TCP, dst.host, dst.port, "", c.RemoteAddr().String())
	if err != nil {
		_ = socksReply(c, repHostUnreach, netip.AddrPort{})
		return
	}
	if !v.Allow {
		_ = socksReply(c, repNotAllowed, netip.AddrPort{})
		return
	}
	up, err := p.dial(ctx, "tcp", addrs, dst.port)
	if err != nil {
		rep := byte(repHostUnreach)
		if isRefused(err) {
			rep = repRefused
		}
		_ = socksReply(c, rep, netip.AddrPort{})
		return
	}
	if err := socksReply(c, repOK, netip.AddrPort{}); err != nil {
		_ = up.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		_ = up.SetWriteDeadline(time.Now().Add(p.lim.StallTimeout))
		if _, err := up.Write(b); err != nil {
			_ = up.Close()
			return
		}
	}
	p.pipe(c, up)
}

func isRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// socksUDP runs one UDP association: a relay socket for the command, an
// upstream socket for the destinations, both closed when the control
// connection ends. Each distinct destination is decided once (at most
// MaxUDPDests of them); datagrams to refused destinations, fragments and
// datagrams from anyone but the command are dropped and counted; only
// replies from destinations the command sent to are relayed back.
func (p *Proxy) socksUDP(c net.Conn, br *bufio.Reader) {
	if !p.cfg.EnableSOCKS5UDP || p.cfg.Policy.Mode() == Limited {
		_ = socksReply(c, repNotAllowed, netip.AddrPort{})
		return
	}
	listen := p.cfg.ListenPacket
	if listen == nil {
		listen = func(local net.Addr) (net.PacketConn, error) {
			ip := net.IPv4zero
			if ta, ok := local.(*net.TCPAddr); ok {
				ip = ta.IP
			}
			return net.ListenUDP("udp", &net.UDPAddr{IP: ip})
		}
	}
	relay, err := listen(c.LocalAddr())
	if err != nil {
		_ = socksReply(c, repFailure, netip.AddrPort{})
		return
	}
	upstream, err := net.ListenUDP("udp", nil)
	if err != nil {
		_ = relay.Close()
		_ = socksReply(c, repFailure, netip.AddrPort{})
		return
	}
	if !p.grp.add(relay) || !p.grp.add(upstream) {
		_ = relay.Close()
		_ = upstream.Close()
		return
	}
	defer func() {
		_ = relay.Close()
		_ = upstream.Close()
		p.grp.untrack(relay)
		p.grp.untrack(upstream)
	}()
	bound, _ := netip.ParseAddrPort(relay.LocalAddr().String())
	if err := socksReply(c, repOK, bound); err != nil {
		return
	}
	_ = c.SetDeadline(time.Time{})
	clientIP, _ := netip.ParseAddrPort(c.RemoteAddr().String())
	a := &udpAssoc{p: p, ctl: c, relay: relay, upstream: upstream, clientIP: clientIP.Addr().Unmap(),
		client: c.RemoteAddr().String(), dests: map[string]udpDest{}, sent: map[netip.AddrPort]bool{}}
	a.last.Store(time.Now().UnixNano())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); a.fromCommand() }()
	go func() { defer wg.Done(); a.fromUpstream() }()
	// The association lives as long as its control connection.
	_, _ = io.Copy(io.Discard, br)
	_ = relay.Close()
	_ = upstream.Close()
	wg.Wait()
}

type udpDest struct {
	allow bool
	addr  netip.AddrPort
}

// udpAssoc is one association. dests and sent are guarded by mu (the
// command reader writes, the upstream reader reads).
type udpAssoc struct {
	p               *Proxy
	ctl             net.Conn     // the control connection: the association ends with it
	last            atomic.Int64 // unix nanos of the last datagram either way
	relay, upstream net.PacketConn
	clientIP        netip.Addr
	client          string
	mu              sync.Mutex
	cmdAddr         net.Addr // the command's relay peer, fixed by its first datagram
	dests           map[string]udpDest
	sent            map[netip.AddrPort]bool
}

func (a *udpAssoc) fromCommand() {
	buf := make([]byte, 64<<10)
	for {
		_ = a.relay.SetReadDeadline(time.Now().Add(a.p.lim.IdleTimeout))
		n, from, err := a.relay.ReadFrom(buf)
		if err != nil {
			if a.stillActive(err) {
				continue
			}
			// Closed, or no datagram either way for IdleTimeout: the
			// association ends.
			_ = a.upstream.Close()
			_ = a.ctl.Close()
			return
		}
		a.last.Store(time.Now().UnixNano())
		fa, _ := netip.ParseAddrPort(from.String())
		if fa.Addr().Unmap() != a.clientIP {
			a.p.udpDropped.Add(1)
			continue
		}
		a.mu.Lock()
		if a.cmdAddr == nil {
			a.cmdAddr = from
		}
		same := a.cmdAddr.String() == from.String()
		a.mu.Unlock()
		if !same || n < 4 || buf[2] != 0 { // RSV RSV FRAG: fragments unsupported
			a.p.udpDropped.Add(1)
			continue
		}
		r := &byteReader{b: buf[4:n]}
		dst, err := readSocksAddr(r, buf[3])
		if err != nil {
			a.p.udpDropped.Add(1)
			continue
		}
		d, ok := a.decide(dst)
		if !ok || !d.allow {
			a.p.udpDropped.Add(1)
			continue
		}
		if _, err := a.upstream.WriteTo(r.b, net.UDPAddrFromAddrPort(d.addr)); err != nil {
			a.p.udpDropped.Add(1)
		}
	}
}

func (a *udpAssoc) decide(dst socksAddr) (udpDest, bool) {
	key := net.JoinHostPort(dst.host, strconv.Itoa(dst.port))
	a.mu.Lock()
	d, seen := a.dests[key]
	full := len(a.dests) >= a.p.lim.MaxUDPDests
	a.mu.Unlock()
	if seen {
		return d, true
	}
	if full {
		return udpDest{}, false
	}
	addrs, v, err := a.p.authorize(a.p.ctx, SOCKS5UDP, dst.host, dst.port, "", a.client)
	d = udpDest{allow: err == nil && v.Allow && len(addrs) > 0}
	if d.allow {
		d.addr = netip.AddrPortFrom(addrs[0].Unmap(), uint16(dst.port))
	}
	a.mu.Lock()
	a.dests[key] = d
	if d.allow {
		a.sent[d.addr] = true
	}
	a.mu.Unlock()
	return d, true
}

func (a *udpAssoc) fromUpstream() {
	buf := make([]byte, 64<<10)
	out := make([]byte, 0, 64<<10+22)
	for {
		_ = a.upstream.SetReadDeadline(time.Now().Add(a.p.lim.IdleTimeout))
		n, from, err := a.upstream.ReadFrom(buf)
		if err != nil {
			if a.stillActive(err) {
				continue
			}
			_ = a.relay.Close()
			_ = a.ctl.Close()
			return
		}
		a.last.Store(time.Now().UnixNano())
		fa, _ := netip.ParseAddrPort(from.String())
		fa = netip.AddrPortFrom(fa.Addr().Unmap(), fa.Port())
		a.mu.Lock()
		ok := a.sent[fa]
		to := a.cmdAddr
		a.mu.Unlock()
		if !ok || to == nil {
			a.p.udpDropped.Add(1)
			continue
		}
		out = append(out[:0], 0, 0, 0)
		if fa.Addr().Is4() {
			v := fa.Addr().As4()
			out = append(append(out, atypV4), v[:]...)
		} else {
			v := fa.Addr().As16()
			out = append(append(out, atypV6), v[:]...)
		}
		out = binary.BigEndian.AppendUint16(out, fa.Port())
		out = append(out, buf[:n]...)
		_, _ = a.relay.WriteTo(out, to)
	}
}

// stillActive: err is a read deadline while the other direction moved a
// datagram within IdleTimeout.
func (a *udpAssoc) stillActive(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded) && time.Since(time.Unix(0, a.last.Load())) < a.p.lim.IdleTimeout
}

type byteReader struct{ b []byte }

func (r *byteReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}
