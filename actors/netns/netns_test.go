//go:build linux

package netns

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newNS(t *testing.T) *NS {
	t.Helper()
	ns, err := New()
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("no network namespaces here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	return ns
}

// A listener inside and one on the host share 127.0.0.1:port: two
// namespaces; the host reaches its own, the namespace its own.
func TestListenInsideIsNotTheHost(t *testing.T) {
	ns := newNS(t)
	in, err := ns.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	port := in.Addr().(*net.TCPAddr).Port
	host, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatalf("the namespace's port is taken on the host too: %v", err)
	}
	defer host.Close()
	serve := func(l net.Listener, name string) {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				io.WriteString(c, name)
				c.Close()
			}
		}()
	}
	serve(in, "inside")
	serve(host, "host")
	read := func(c net.Conn) string { b, _ := io.ReadAll(c); c.Close(); return string(b) }
	c, err := net.Dial("tcp", in.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if got := read(c); got != "host" {
		t.Fatalf("from the host: %q", got)
	}
	var got string
	if err := ns.Do(func() error {
		c, err := net.Dial("tcp", in.Addr().String())
		if err != nil {
			return err
		}
		got = read(c)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got != "inside" {
		t.Fatalf("from inside: %q", got)
	}
}

// Inside, nothing but loopback: the host's loopback services and any
// outside address are unreachable, for TCP and UDP.
func TestNothingElseReachable(t *testing.T) {
	ns := newNS(t)
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer up.Close()
	err := ns.Do(func() error {
		d := net.Dialer{Timeout: 2 * time.Second}
		for _, a := range []string{up.Listener.Addr().String(), "1.1.1.1:443", "[2606:4700::1111]:443", "10.0.0.1:80"} {
			c, err := d.Dial("tcp", a)
			if err == nil {
				c.Close()
				return fmt.Errorf("%s reachable from inside", a)
			}
			if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.ENETUNREACH) {
				return fmt.Errorf("%s: %v", a, err)
			}
		}
		// A raw socket (root may open one) has no route out either.
		if fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_ICMP); err == nil {
			echo := []byte{8, 0, 0xf7, 0xff, 0, 0, 0, 0} // ICMP echo request, checksum set
			serr := syscall.Sendto(fd, echo, 0, &syscall.SockaddrInet4{Addr: [4]byte{1, 1, 1, 1}})
			syscall.Close(fd)
			if !errors.Is(serr, syscall.ENETUNREACH) {
				return fmt.Errorf("raw ICMP out: %v", serr)
			}
		}
		u, err := net.Dial("udp", "1.1.1.1:53")
		if err == nil {
			_, err = u.Write([]byte("x"))
			u.Close()
		}
		if err == nil || !errors.Is(err, syscall.ENETUNREACH) {
			return fmt.Errorf("UDP out: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A child started inside (and its own child) reaches what was placed in
// the namespace (here a plain forwarder to a host server) and nothing
// else: the direct connection to the same server fails.
func TestChildInherits(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed")
	}
	ns := newNS(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "via-forwarder") }))
	defer up.Close()
	in, err := ns.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	done := make(chan struct{})
	go func() { // the forwarder: accepted inside, dialed on the host
		defer close(done)
		for {
			c, err := in.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", up.Listener.Addr().String())
			if err != nil {
				c.Close()
				continue
			}
			go func() { io.Copy(u, c); u.(*net.TCPConn).CloseWrite() }()
			io.Copy(c, u)
			c.Close()
			u.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	script := `echo "fwd $(curl -s -m 5 http://` + in.Addr().String() + `/)"; sh -c 'echo "direct $(curl -s -m 5 -o /dev/null -w %{http_code} http://` + up.Listener.Addr().String() + `/)"'`
	cmd := exec.CommandContext(ctx, "sh", "-c", script)
	var out strings.Builder
	cmd.Stdout = &out
	if err := ns.Do(cmd.Start); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	in.Close()
	<-done
	if got := out.String(); got != "fwd via-forwarder\ndirect 000\n" {
		t.Fatalf("the child saw %q", got)
	}
	// The calling thread is back: the host server is reachable here.
	c, err := net.Dial("tcp", up.Listener.Addr().String())
	if err != nil {
		t.Fatalf("after Do: %v", err)
	}
	c.Close()
}

func TestClosed(t *testing.T) {
	ns := newNS(t)
	ns.Close()
	if _, err := ns.Listen("tcp", "127.0.0.1:0"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Listen after Close: %v", err)
	}
	if _, err := ns.Fd(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Fd after Close: %v", err)
	}
}
