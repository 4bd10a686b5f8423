package sandbox

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

func needPython(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3 to connect with")
	}
}

// TestPreparedPTY: a PTY start on a prepared sandbox (built with a devpts
// instance of its own, the PTY's attached over it at the start): the
// terminal is /dev/pts/0 of the PTY's instance, with the daemon's size
// and resizes, and job control works on it.
func TestPreparedPTY(t *testing.T) {
	h := preparedHost(t)
	ws := t.TempDir()
	p := codexWorkspaceWrite(ws)
	t.Run("tty", func(t *testing.T) {
		used := primePrepared(t, h, Plan{Policy: p}, ws)
		got, code := runPTYScene(t, h, p, ws, 5)
		wantUsed(t, h, used, 1, "the PTY start")
		if code != 5 || !strings.Contains(got, "/dev/pts/0\n30 100\n0 ptmx \ngo\n40 120\n") {
			t.Errorf("exit %d, output %q", code, got)
		}
	})
	t.Run("job-control", func(t *testing.T) {
		used := primePrepared(t, h, Plan{Policy: p}, ws)
		got := runJobControl(t, h, p, ws, func() { wantUsed(t, h, used, 1, "the job-control start") })
		if !strings.Contains(got, "after 148") || !strings.Contains(got, "Stopped") || !strings.Contains(got, "done-jc") {
			t.Errorf("job control on the prepared sandbox's terminal: %q", got)
		}
	})
}

// TestPreparedNetwork: the caller's network namespace (the managed
// network's) is entered by a prepared sandbox's command: it reaches the
// listener inside and not the host's loopback. With the network
// restricted, the prepared sandbox's own namespace has only loopback, and
// the host's loopback listener is out of reach.
//
// callers-netns failed at 3f7a9a3 (prep2), in the priming: prepareSandbox
// set nsPlan.GivenNetNS before it computed the key, a start's plan never
// has it, and prepKey did not clear it: a sandbox prepared for a start
// with a caller's network namespace was never taken (each such start
// prepared one in vain). Fixed: prepKey clears GivenNetNS too (the mode
// says it).
func TestPreparedNetwork(t *testing.T) {
	h := preparedHost(t)
	needPython(t)
	hostLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostLn.Close()
	hostPort := hostLn.Addr().(*net.TCPAddr).Port
	ws := t.TempDir()
	t.Run("callers-netns", func(t *testing.T) {
		n, port, got := callersNetNS(t)
		p := codexWorkspaceWrite(ws)
		p.Network = true
		used := primePrepared(t, h, Plan{Policy: p, NetNS: n}, ws)
		script := callersNetNSProbe + "\nsys.exit(5)"
		out, code, err := runPlan(h, Plan{Path: "/usr/bin/python3", Argv: []string{"python3", "-c", script, fmt.Sprint(port), fmt.Sprint(hostPort)},
			Policy: p, NetNS: n}, ws)
		if err != nil {
			t.Fatal(err)
		}
		wantUsed(t, h, used, 1, "the start in the caller's namespace")
		select {
		case s := <-got:
			if s != "hello" || code != 5 || !strings.Contains(out, "host-refused") {
				t.Errorf("the listener got %q; the command exited %d: %s", s, code, out)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the command did not reach the listener: exit %d, %s", code, out)
		}
	})
	t.Run("host-network", func(t *testing.T) {
		p := codexWorkspaceWrite(ws)
		p.Network = true
		used := primePrepared(t, h, Plan{Policy: p}, ws)
		accepted := make(chan error, 1)
		go func() {
			c, err := hostLn.Accept()
			if err == nil {
				c.Close()
			}
			accepted <- err
		}()
		out, code, err := runPlan(h, shPlan(p, fmt.Sprintf(`/usr/bin/python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5); print("reached")' %d; exit 5`, hostPort)), ws)
		if err != nil {
			t.Fatal(err)
		}
		wantUsed(t, h, used, 1, "the start with the network allowed")
		if code != 5 || out != "reached\n" {
			t.Errorf("exit %d %q", code, out)
		}
		select {
		case err := <-accepted:
			if err != nil {
				t.Errorf("accept: %v", err)
			}
		case <-time.After(10 * time.Second):
			_ = hostLn.(*net.TCPListener).SetDeadline(time.Now())
			<-accepted
			t.Errorf("the host's listener got no connection")
		}
	})
	t.Run("restricted", func(t *testing.T) {
		p := codexWorkspaceWrite(ws)
		used := primePrepared(t, h, Plan{Policy: p}, ws)
		out, code, err := runPlan(h, shPlan(p, fmt.Sprintf(`awk 'NR>2{print $1}' /proc/net/dev
/usr/bin/python3 -c 'import socket,sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2); print("HOST-REACHED")
except OSError as e:
    print("refused", type(e).__name__)' %d
curl -s -m 2 http://127.0.0.1:%d/ >/dev/null 2>&1 && echo CURL-REACHED || echo curl-refused; exit 5`, hostPort, hostPort)), ws)
		if err != nil {
			t.Fatal(err)
		}
		wantUsed(t, h, used, 1, "the restricted start")
		if code != 5 || !strings.HasPrefix(out, "lo:\nrefused ") || !strings.Contains(out, "curl-refused") || strings.Contains(out, "REACHED") {
			t.Errorf("exit %d, output %q", code, out)
		}
		_ = hostLn.(*net.TCPListener).SetDeadline(time.Now())
		if c, err := hostLn.Accept(); err == nil {
			c.Close()
			t.Errorf("the restricted command connected to the host's loopback listener")
		}
	})
}
