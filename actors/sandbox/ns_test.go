package sandbox

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runtimed/runtimed/actors/sandbox/sandboxtest"
	"golang.org/x/sys/unix"
)

// nsHost is a probed host at the namespaces level, or a skip naming what
// this host lacks.
func nsHost(t *testing.T) *Host {
	t.Helper()
	h := probeOrSkip(t)
	if !h.Namespaces {
		t.Skipf("no namespaces here: %s", h.NamespacesMissing)
	}
	h.Level = LevelNamespaces
	return h
}

// runIn runs a shell script under p in dir and returns its combined
// output and exit code.
func runIn(t *testing.T, h *Host, p *Policy, dir, script string) (string, int) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	proc, err := Start(h, Plan{Path: "/bin/sh", Argv: []string{"sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"}, Policy: p},
		&os.ProcAttr{Dir: dir, Files: []*os.File{devnull, w, w}, Sys: &syscall.SysProcAttr{Setsid: true}})
	w.Close()
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	_ = r.SetReadDeadline(time.Now().Add(30 * time.Second))
	out, rerr := io.ReadAll(r)
	st, werr := proc.Wait()
	if rerr != nil || werr != nil {
		t.Fatalf("read: %v, wait: %v", rerr, werr)
	}
	return string(out), st.ExitCode()
}

// codexWorkspaceWrite is the policy Codex 0.169 sends for workspace-write,
// resolved: / read; the root and /tmp write ($TMPDIR unset);
// .git/.agents/.codex read where they exist (missing_path_behavior skip;
// .aws is not listed).
func codexWorkspaceWrite(ws string) *Policy {
	p := &Policy{RestrictFS: true, Rules: []Rule{{Path: "/", Access: Read}, {Path: ws, Access: Write}, {Path: "/tmp", Access: Write}}}
	for _, sub := range []string{".git", ".agents", ".codex"} {
		if _, err := os.Lstat(filepath.Join(ws, sub)); err == nil {
			p.Rules = append(p.Rules, Rule{Path: filepath.Join(ws, sub), Access: Read})
		}
	}
	return p
}

func codexReadOnly() *Policy {
	return &Policy{RestrictFS: true, Rules: []Rule{{Path: "/", Access: Read}}}
}

func TestNamespaceSmoke(t *testing.T) {
	h := nsHost(t)
	ws := t.TempDir()
	if err := os.Mkdir(filepath.Join(ws, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, code := runIn(t, h, codexWorkspaceWrite(ws), ws, `echo hi > f && cat f; echo x > .git/c || echo DENIED-git; mkdir .codex/x || echo DENIED-codex; ls /dev; ps -e 2>&1 | wc -l; echo $$; cat /proc/self/comm; echo me > /proc/self/comm && cat /proc/self/comm; touch /etc/passwd || echo DENIED-etc; exit 3`)
	t.Logf("code %d out:\n%s", code, out)
	if code != 3 || !strings.Contains(out, "hi\n") {
		t.Fatalf("code %d out %q", code, out)
	}
}

// TestNamespaceAttacks runs every attack of the issue from inside a tree
// started by Start, in read-only and in workspace-write (Codex's shape),
// with pid namespaces isolated and inherited, and checks the host
// afterwards.
func TestNamespaceAttacks(t *testing.T) {
	h := nsHost(t)
	for _, pid := range []PidMode{PidIsolate, PidInherit} {
		for _, mode := range []string{sandboxtest.ReadOnly, sandboxtest.WorkspaceWrite} {
			t.Run(fmt.Sprintf("%s/%s", pid, mode), func(t *testing.T) {
				hh := *h
				hh.PidNamespace = pid
				sc := sandboxtest.NewScene(t)
				p := codexReadOnly()
				if mode == sandboxtest.WorkspaceWrite {
					p = codexWorkspaceWrite(sc.WS)
				}
				out, code := runIn(t, &hh, p, sc.WS, sc.Script(sc.FD))
				if code != 0 {
					t.Errorf("exit %d", code)
				}
				if pid == PidInherit {
					// The host's pids: only the ps check differs.
					out = strings.ReplaceAll(out, "PS-MARKER:1\n", "PS-MARKER:0\n")
					out = strings.ReplaceAll(out, "PS-COUNT:", "PS-COUNT-HOST:")
					out += "PS-COUNT:1\n"
				}
				sc.Check(t, out, mode)
			})
		}
	}
}

// TestNamespaceInitSignalsAndStatus: the daemon signals the tree's init
// (the pid it reports); the init forwards to the command's group, and the
// command's own status comes back, a signal death as 128+N.
func TestNamespaceInitSignalsAndStatus(t *testing.T) {
	h := nsHost(t)
	ws := t.TempDir()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	proc, err := Start(h, Plan{Path: "/bin/sh", Argv: []string{"sh", "-c", `trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.05; done`}, Policy: codexWorkspaceWrite(ws)},
		&os.ProcAttr{Dir: ws, Files: []*os.File{nil, w, w}, Sys: &syscall.SysProcAttr{Setsid: true}})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	_ = r.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := r.Read(buf); err != nil || !strings.Contains(string(buf[:n]), "ready") {
		t.Fatalf("ready: %q %v", buf[:n], err)
	}
	if err := syscall.Kill(-proc.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(r)
	st, err := proc.Wait()
	if err != nil || st.ExitCode() != 7 || !strings.Contains(string(rest), "got-term") {
		t.Fatalf("after SIGTERM: exit %v (%v), output %q; want 7 and got-term", st, err, rest)
	}
	// A death by signal: 128+N, as without a pid namespace.
	if _, code := runIn(t, h, codexWorkspaceWrite(ws), ws, `kill -9 $$`); code != 137 {
		t.Errorf("kill -9 of the command: exit %d, want 137", code)
	}
	// Descendants die with the command (the namespace ends with its init).
	out, code := runIn(t, h, codexWorkspaceWrite(ws), ws, `(sleep 30; echo leaked) & echo started`)
	if code != 0 || strings.Contains(out, "leaked") {
		t.Errorf("orphan: exit %d %q", code, out)
	}
}

// TestNamespacePTY: the command's terminal is its own devpts instance's
// /dev/pts/0, with the size set by the daemon, and other terminals absent.
func TestNamespacePTY(t *testing.T) {
	h := nsHost(t)
	ws := t.TempDir()
	got, code := runPTYScene(t, h, codexWorkspaceWrite(ws), ws, 0)
	if code != 0 || !strings.Contains(got, "/dev/pts/0\n30 100\n0 ptmx \ngo\n40 120\n") {
		t.Errorf("exit %d, output %q", code, got)
	}
}

// runPTYScene runs, on a PTY of 30x100 in a devpts instance of its own, a
// shell that prints its terminal, its size and /dev/pts, waits for a line,
// prints its size again (the terminal resized to 40x120 meanwhile) and
// exits with code. It returns what the terminal showed, without \r, and
// the exit code.
func runPTYScene(t *testing.T, h *Host, p *Policy, ws string, code int) (string, int) {
	t.Helper()
	master, slave, devpts, ok, err := h.OpenPTY(30, 100)
	if err != nil || !ok {
		t.Fatalf("OpenPTY: %v %v", ok, err)
	}
	defer master.Close()
	script := fmt.Sprintf(`tty; stty size; ls /dev/pts | tr '\n' ' '; echo; read x; stty size; exit %d`, code)
	proc, err := Start(h, Plan{Path: "/bin/sh", Argv: []string{"sh", "-c", script}, Policy: p, DevPts: devpts},
		&os.ProcAttr{Dir: ws, Files: []*os.File{slave, slave, slave}, Sys: &syscall.SysProcAttr{Setsid: true, Setctty: true}})
	slave.Close()
	devpts.Close()
	if err != nil {
		t.Fatal(err)
	}
	// Bounded: the command ends (the deadline covers a wedged one).
	_ = master.SetReadDeadline(time.Now().Add(10 * time.Second))
	var out []byte
	buf := make([]byte, 256)
	for !strings.Contains(string(out), "ptmx \r\n") {
		n, err := master.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			_ = proc.Kill()
			_, _ = proc.Wait()
			t.Fatalf("before the resize: %q %v", out, err)
		}
	}
	_ = unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: 120})
	if _, err := master.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	for {
		n, err := master.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			break
		}
	}
	st, _ := proc.Wait()
	return strings.ReplaceAll(string(out), "\r", ""), st.ExitCode()
}

// TestNamespaceCallersNetNS: the managed network's hook. A caller makes
// the network namespace first and listens inside it (the proxy); the
// command, started in it with the network enabled (what a managed network
// allows goes through the proxy), reaches that listener on 127.0.0.1 and
// not the host's loopback, and the host cannot reach the proxy's port.
func TestNamespaceCallersNetNS(t *testing.T) {
	h := nsHost(t)
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("python3 not found: the command's connect needs it")
	}
	n, port, got := callersNetNS(t)
	hostLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostLn.Close()
	if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
		c.Close()
		t.Fatalf("the host reached the listener inside the caller's namespace")
	}
	ws := t.TempDir()
	p := codexWorkspaceWrite(ws)
	p.Network = true
	script := callersNetNSProbe
	r, w, _ := os.Pipe()
	defer r.Close()
	proc, err := Start(h, Plan{Path: "/usr/bin/python3", Argv: []string{"python3", "-c", script, fmt.Sprint(port), fmt.Sprint(hostLn.Addr().(*net.TCPAddr).Port)},
		Policy: p, NetNS: n}, &os.ProcAttr{Dir: ws, Files: []*os.File{nil, w, w}})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(r)
	st, _ := proc.Wait()
	select {
	case s := <-got:
		if s != "hello" || st.ExitCode() != 0 || !strings.Contains(string(out), "host-refused") {
			t.Errorf("the listener got %q; the command exited %d: %s", s, st.ExitCode(), out)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the command did not reach the listener: exit %d, %s", st.ExitCode(), out)
	}
}

// TestNamespacePTYJobControl: job control on the command's own terminal
// works as without namespaces: bash (set -m) puts a job in the foreground
// of the terminal, ^Z from the terminal stops it (SIGTSTP to the
// foreground process group, through the kernel's tty layer), and bash sees
// it stopped.
func TestNamespacePTYJobControl(t *testing.T) {
	h := nsHost(t)
	ws := t.TempDir()
	got := runJobControl(t, h, codexWorkspaceWrite(ws), ws, func() {})
	if !strings.Contains(got, "after 148") || !strings.Contains(got, "Stopped") || !strings.Contains(got, "done-jc") {
		t.Errorf("job control on the sandboxed terminal: %q", got)
	}
}

// runJobControl runs, under p on a PTY of the sandbox's own, a bash that
// puts a sleep in the foreground of its terminal and reports how it ended,
// sends ^Z from the terminal until the command has exited (the first may
// come before the job is the terminal's foreground group; bounded by the
// sleep's 30 s), and returns the terminal's output. started runs once the
// start returned.
func runJobControl(t *testing.T, h *Host, p *Policy, ws string, started func()) string {
	t.Helper()
	master, slave, devpts, ok, err := h.OpenPTY(24, 80)
	if err != nil || !ok {
		t.Fatalf("OpenPTY: %v %v", ok, err)
	}
	defer master.Close()
	proc, err := Start(h, Plan{Path: "/bin/bash", Argv: []string{"bash", "-c", `set -m; echo ready; sleep 30; echo "after $?"; jobs; kill -9 %1; echo done-jc; exit 5`},
		Env: []string{"PATH=/usr/bin:/bin"}, Policy: p, DevPts: devpts},
		&os.ProcAttr{Dir: ws, Files: []*os.File{slave, slave, slave}, Sys: &syscall.SysProcAttr{Setsid: true, Setctty: true}})
	slave.Close()
	devpts.Close()
	if err != nil {
		t.Fatal(err)
	}
	started()
	out := make(chan string, 1)
	go func() {
		var b []byte
		buf := make([]byte, 256)
		for {
			n, err := master.Read(buf)
			b = append(b, buf[:n]...)
			if err != nil {
				out <- string(b)
				return
			}
		}
	}()
	done := make(chan struct{})
	go func() {
		_, _ = proc.Wait()
		close(done)
	}()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-tick.C:
			_, _ = master.Write([]byte{0x1a})
		}
	}
	return strings.ReplaceAll(<-out, "\r", "")
}

// TestNetNSNeedsNamespacesLevel: a Plan.NetNS the start cannot keep the
// command in (no policy, or the landlock level) is refused, never run on
// the host's network.
func TestNetNSNeedsNamespacesLevel(t *testing.T) {
	h := nsHost(t)
	n, err := NewNetNS()
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	attr := &os.ProcAttr{Dir: t.TempDir(), Files: []*os.File{nil, nil, nil}}
	if _, err := Start(h, Plan{Path: "/bin/true", Argv: []string{"true"}, NetNS: n}, attr); !errors.Is(err, ErrNetNSUnsupported) {
		t.Errorf("no policy: %v", err)
	}
	ll := *h
	ll.Level = LevelLandlock
	if _, err := Start(&ll, Plan{Path: "/bin/true", Argv: []string{"true"}, Policy: &Policy{Network: true}, NetNS: n}, attr); !errors.Is(err, ErrNetNSUnsupported) {
		t.Errorf("landlock level: %v", err)
	}
}

// TestNamespaceSetnsRefused: the namespaces level's filter refuses
// setns(2) with EPERM by itself: on a thread that still has
// CAP_SYS_ADMIN (this root test process), where setns into its own
// network namespace succeeds without the filter, it fails with it. (Inside
// a sandbox the dropped capabilities refuse it too; the filter is the
// second wall, so a capability the command regains does not let it out.)
func TestNamespaceSetnsRefused(t *testing.T) {
	nsHost(t)
	try := func(f filterSpec, install bool) error {
		var err error
		onThrowawayThread(func() {
			fd, oerr := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if oerr != nil {
				err = oerr
				return
			}
			defer unix.Close(fd)
			if install {
				if err = installFilter(f); err != nil {
					return
				}
			}
			err = unix.Setns(fd, unix.CLONE_NEWNET)
		})
		return err
	}
	if err := try(filterSpec{}, false); err != nil {
		t.Skipf("setns into its own namespace fails without a filter here: %v", err)
	}
	if err := try(filterSpec{network: true, keyrings: true}, true); err != nil {
		t.Fatalf("a filter without setns refused it: %v", err)
	}
	if err := try(filterSpec{network: true, keyrings: true, setns: true}, true); !errors.Is(err, unix.EPERM) {
		t.Fatalf("setns under the namespaces level's filter: %v, want EPERM", err)
	}
}

// TestNamespaceHostSocketChurn: the host unbinds one of its UNIX sockets
// and rebinds another between the plan (which lists them to cover) and the
// helper's mounts. The start must not fail for it (a busy host binds and
// removes sockets all the time), and the rebound socket stays out of reach.
func TestNamespaceHostSocketChurn(t *testing.T) {
	h := nsHost(t)
	// The window between a helper's plan and its mounts (a prepared
	// sandbox's is TestPreparedStaleSocket's).
	h.NoPrepare = true
	dir := t.TempDir()
	gone, rebound := filepath.Join(dir, "gone.sock"), filepath.Join(dir, "rebound.sock")
	listen := func(path string) *net.UnixListener {
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		l.SetUnlinkOnClose(true)
		t.Cleanup(func() { l.Close() })
		return l
	}
	lg, lr := listen(gone), listen(rebound)
	var lr2 *net.UnixListener
	afterNamespacePlan = func() {
		lg.Close() // unbound: nothing is left at the path
		lr.Close()
		lr2 = listen(rebound) // bound anew: another inode at the same path
	}
	t.Cleanup(func() { afterNamespacePlan = nil })
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3 to connect with")
	}
	out, code := runIn(t, h, codexReadOnly(), "/", fmt.Sprintf(
		`/usr/bin/python3 -c 'import socket,sys
s=socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1]); print("CONNECTED")
except OSError as e:
    print("REFUSED", type(e).__name__)' %s; test -e %s && echo GONE-PRESENT || echo GONE-ABSENT`, rebound, gone))
	afterNamespacePlan = nil
	if lr2 == nil {
		t.Fatal("the hook did not run: the plan was not made where the test expects")
	}
	if code != 0 {
		t.Fatalf("start after host socket churn: exit %d: %s", code, out)
	}
	if !strings.Contains(out, "REFUSED ConnectionRefusedError") && !strings.Contains(out, "REFUSED PermissionError") {
		t.Errorf("the socket bound anew after the plan was not refused as a covered socket is: %q", out)
	}
	_ = lr2.SetDeadline(time.Now())
	if c, err := lr2.Accept(); err == nil {
		c.Close()
		t.Errorf("a sandboxed process connected to the rebound socket")
	}
}

// callersNetNS is a network namespace of the caller's with a TCP listener
// on its loopback: the namespace, the listener's port, and a channel that
// gets what the first connection sends (or why none came).
func callersNetNS(t *testing.T) (*NetNS, int, <-chan string) {
	t.Helper()
	n, err := NewNetNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	var ln net.Listener
	if err := n.Do(func() (err error) { ln, err = net.Listen("tcp", "127.0.0.1:0"); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- err.Error()
			return
		}
		b := make([]byte, 16)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		k, _ := c.Read(b)
		c.Close()
		got <- string(b[:k])
	}()
	return n, ln.Addr().(*net.TCPAddr).Port, got
}

// callersNetNSProbe is a python script that sends "hello" to port
// argv[1] on 127.0.0.1 (the caller's namespace's listener) and prints
// whether port argv[2] (the host's loopback listener) could be reached.
const callersNetNSProbe = `import socket,sys
c=socket.create_connection(("127.0.0.1", int(sys.argv[1]))); c.send(b"hello"); c.close()
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=2); print("HOST-REACHED")
except OSError as e:
    print("host-refused", e)`
