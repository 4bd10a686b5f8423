package netproxy

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"testing"
	"time"
)

// socksConnect does a SOCKS5 CONNECT to host:port by name and returns the reply code.
func socksConnect(t *testing.T, proxy, host string, port int) byte {
	rep, _ := socksDial(t, proxy, host, port)
	return rep
}

func socksDial(t *testing.T, proxy, host string, port int) (byte, net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write([]byte{5, 1, 0})
	var m [2]byte
	if _, err := io.ReadFull(c, m[:]); err != nil || m != [2]byte{5, 0} {
		t.Fatalf("greeting: %v %v", m, err)
	}
	req := []byte{5, 1, 0}
	if a, err := netip.ParseAddr(host); err == nil && a.Is4() {
		v := a.As4()
		req = append(append(req, 1), v[:]...)
	} else {
		req = append(append(req, 3, byte(len(host))), host...)
	}
	req = binary.BigEndian.AppendUint16(req, uint16(port))
	c.Write(req)
	var r [10]byte
	if _, err := io.ReadFull(c, r[:]); err != nil {
		t.Fatalf("reply: %v", err)
	}
	return r[1], c
}

func TestSOCKS5Connect(t *testing.T) {
	up := upstreamServer(t)
	h := start(t, Policy{Allow: []string{"**.good.test"}, Deny: []string{"no.good.test"}}, hostOf(up), nil)
	rep, c := socksDial(t, h.socksAddr, "www.good.test", 80)
	if rep != repOK {
		t.Fatalf("allowed: reply %d", rep)
	}
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: www.good.test\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if string(b) != "host=www.good.test method=GET" {
		t.Fatalf("through SOCKS5: %q", b)
	}
	if e := h.lastEvent(); e.Protocol != SOCKS5TCP || !e.Allow || e.Host != "www.good.test" {
		t.Fatalf("event %+v", e)
	}
	for _, tc := range []struct {
		host string
		port int
	}{{"no.good.test", 80}, {"evil.test", 443}, {"127.0.0.1", 22}, {"rebind.test", 80}} {
		if rep := socksConnect(t, h.socksAddr, tc.host, tc.port); rep != repNotAllowed {
			t.Errorf("%s:%d: reply %d, want not allowed", tc.host, tc.port, rep)
		}
	}
	// BIND is refused.
	if _, r, err := socksRequest(t, h.socksAddr, []byte{5, 1, 0, 5, 2, 0, 1, 1, 2, 3, 4, 0, 80}); err != nil || r[3] != repCmdUnsupp {
		t.Fatalf("BIND: %v %v", r, err)
	}
}

// socksRequest opens a SOCKS5 connection (no authentication), sends
// greetingAndRequest and reads the 12 bytes of the method choice and an
// IPv4 reply; the connection stays open until the test ends.
func socksRequest(t *testing.T, addr string, greetingAndRequest []byte) (net.Conn, [12]byte, error) {
	t.Helper()
	var r [12]byte
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(greetingAndRequest); err != nil {
		return c, r, err
	}
	_, err = io.ReadFull(c, r[:])
	return c, r, err
}

func TestSOCKS5UDP(t *testing.T) {
	echo, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := echo.ReadFrom(buf)
			if err != nil {
				return
			}
			echo.WriteTo(append([]byte("echo:"), buf[:n]...), from)
		}
	}()
	echoPort := echo.LocalAddr().(*net.UDPAddr).Port
	h := start(t, Policy{Allow: []string{"127.0.0.1"}}, "", func(c *Config) { c.EnableSOCKS5UDP = true })

	ctl, r, err := socksRequest(t, h.socksAddr, []byte{5, 1, 0, 5, 3, 0, 1, 0, 0, 0, 0, 0, 0})
	if err != nil || r[3] != repOK {
		t.Fatalf("UDP ASSOCIATE: %v %v", r, err)
	}
	relay := &net.UDPAddr{IP: net.IP(r[6:10]), Port: int(binary.BigEndian.Uint16(r[10:12]))}
	uc, err := net.DialUDP("udp", nil, relay)
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	dgram := func(ip [4]byte, port int, payload string) []byte {
		b := []byte{0, 0, 0, 1}
		b = append(b, ip[:]...)
		b = binary.BigEndian.AppendUint16(b, uint16(port))
		return append(b, payload...)
	}
	uc.Write(dgram([4]byte{127, 0, 0, 1}, echoPort, "hi"))
	_ = uc.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 2048)
	n, err := uc.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if n < 10 || string(buf[10:n]) != "echo:hi" || int(binary.BigEndian.Uint16(buf[8:10])) != echoPort {
		t.Fatalf("UDP reply %q", buf[:n])
	}
	if e := h.lastEvent(); e.Protocol != SOCKS5UDP || !e.Allow {
		t.Fatalf("event %+v", e)
	}
	// A datagram to a denied destination is dropped, counted and reported.
	before := h.p.Stats().UDPDropped
	uc.Write(dgram([4]byte{127, 0, 0, 2}, echoPort, "no"))
	deadline := time.Now().Add(10 * time.Second)
	for h.p.Stats().UDPDropped == before {
		if time.Now().After(deadline) {
			t.Fatal("denied datagram not dropped")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if e := h.lastEvent(); e.Allow || e.Host != "127.0.0.2" || e.Reason != ReasonNotAllowedLocal {
		t.Fatalf("event %+v", e)
	}
	// Closing the control connection ends the association.
	ctl.Close()
	deadline = time.Now().Add(10 * time.Second)
	for {
		uc.Write(dgram([4]byte{127, 0, 0, 1}, echoPort, "late"))
		_ = uc.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := uc.Read(buf); err != nil {
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				break // ICMP port unreachable: the relay is gone
			}
			if time.Now().After(deadline) {
				break
			}
			continue
		}
		if time.Now().After(deadline) {
			t.Fatal("relay still answers after the control connection closed")
		}
	}
}

// A decision that waits for an answer longer than the handshake bound
// still gets its reply to the command.
func TestSOCKS5SlowAsk(t *testing.T) {
	up := upstreamServer(t)
	h := start(t, Policy{}, hostOf(up), func(c *Config) {
		c.Limits.HeaderTimeout = 200 * time.Millisecond
		c.Ask = func(ctx context.Context, r AskRequest) (bool, string, error) {
			select {
			case <-time.After(500 * time.Millisecond):
				return true, "", nil
			case <-ctx.Done():
				return false, "", ctx.Err()
			}
		}
	})
	if rep := socksConnect(t, h.socksAddr, "slow.test", 80); rep != repOK {
		t.Fatalf("after a slow allow: reply %d", rep)
	}
}

// An association whose command stops sending (and gets nothing) ends
// after IdleTimeout, control connection included.
func TestSOCKS5UDPIdle(t *testing.T) {
	h := start(t, Policy{Allow: []string{"127.0.0.1"}}, "", func(c *Config) {
		c.EnableSOCKS5UDP = true
		c.Limits.IdleTimeout = 300 * time.Millisecond
	})
	ctl, r, err := socksRequest(t, h.socksAddr, []byte{5, 1, 0, 5, 3, 0, 1, 0, 0, 0, 0, 0, 0})
	if err != nil || r[3] != repOK {
		t.Fatalf("UDP ASSOCIATE: %v %v", r, err)
	}
	begin := time.Now()
	if _, err := ctl.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("control connection after idle: %v", err)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Fatalf("ended after %v", d)
	}
}
