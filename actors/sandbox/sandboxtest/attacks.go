// Package sandboxtest is the attack kit the sandbox tests share: one
// scene on the host (a victim file and a root-owned binary outside the
// workspace, another terminal, a descriptor inherited without
// close-on-exec, a UNIX socket outside, a key in the host's user keyring,
// a marked host process, a workspace without .git/.codex/.agents and with
// an unlisted .aws) and one script that attacks each from inside a
// sandboxed tree. Check asserts both the refusal the script reports and
// the host's state afterwards. Tests of package sandbox (Start), runtime
// (Local) and cmd/runtimed (the daemon) run the same attacks.
package sandboxtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// Scene is the host side of the attacks.
type Scene struct {
	Base, WS, Outside string
	Victim, Suid      string
	FD                int // a writable descriptor this process holds without close-on-exec
	fdFile            string
	ptyMaster, ptyTTY *os.File
	PTYName           string
	Sock              string
	sockLn            *net.UnixListener
	Abstract          string
	absLn             *net.UnixListener
	KeyDesc           string
	Key               int // serial of the host key (0: no keyrings here)
	Marker            string
	marker            *os.Process
	ipcKey, ipcID     int // a System V shared memory segment of the host
	victimSt          unix.Stat_t
	suidSt            unix.Stat_t
	python            bool
}

// NewScene lays out the scene under a fresh directory outside /tmp (Codex's
// workspace-write opens /tmp) and registers its cleanup.
func NewScene(t *testing.T) *Scene {
	t.Helper()
	base, err := os.MkdirTemp("/var/tmp", "runtimed-attack-")
	if err != nil {
		t.Skipf("no directory outside /tmp: %v", err)
	}
	s := &Scene{Base: base, WS: filepath.Join(base, "ws"), Outside: filepath.Join(base, "outside")}
	t.Cleanup(func() { s.close(); os.RemoveAll(base) })
	for _, d := range []string{s.WS, s.Outside, filepath.Join(s.WS, ".aws")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s.Victim, s.Suid = filepath.Join(s.Outside, "victim"), filepath.Join(s.Outside, "suid")
	must(t, os.WriteFile(s.Victim, []byte("original\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(s.WS, ".aws", "credentials"), []byte("[default]\n"), 0o600))
	bin, err := os.ReadFile("/bin/true")
	must(t, err)
	must(t, os.WriteFile(s.Suid, bin, 0o755))
	must(t, unix.Stat(s.Victim, &s.victimSt))
	must(t, unix.Stat(s.Suid, &s.suidSt))
	// A descriptor inherited without close-on-exec (as a daemon started
	// by a careless parent would hold one).
	s.fdFile = filepath.Join(s.Outside, "inherited")
	s.FD, err = unix.Open(s.fdFile, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC, 0o644) // no O_CLOEXEC, on purpose
	must(t, err)
	// Another session's terminal.
	s.ptyMaster, s.ptyTTY, err = pty.Open()
	must(t, err)
	s.PTYName = s.ptyTTY.Name()
	// A UNIX socket outside the workspace, and an abstract name.
	s.Sock = filepath.Join(s.Outside, "agent.sock")
	s.sockLn, err = net.ListenUnix("unix", &net.UnixAddr{Name: s.Sock, Net: "unix"})
	must(t, err)
	s.Abstract = fmt.Sprintf("runtimed-attack-%d", time.Now().UnixNano())
	s.absLn, err = net.ListenUnix("unix", &net.UnixAddr{Name: "@" + s.Abstract, Net: "unix"})
	must(t, err)
	// A key in this uid's user keyring.
	s.KeyDesc = fmt.Sprintf("runtimed-attack-%d", time.Now().UnixNano())
	if k, err := unix.AddKey("user", s.KeyDesc, []byte("host-secret"), unix.KEY_SPEC_USER_KEYRING); err == nil {
		s.Key = k
	}
	// A System V IPC object of the host.
	s.ipcKey = int(time.Now().UnixNano()&0x3fffffff) | 0x40000000
	if id, err := unix.SysvShmGet(s.ipcKey, 4096, unix.IPC_CREAT|0o666); err == nil {
		s.ipcID = id
	} else {
		s.ipcID = -1
	}
	// A host process the tree must not see.
	s.Marker = fmt.Sprintf("runtimed-marker-%d", time.Now().UnixNano())
	s.marker, err = os.StartProcess("/bin/sleep", []string{s.Marker, "60"}, &os.ProcAttr{Files: []*os.File{nil, nil, nil}})
	must(t, err)
	_, err = exec.LookPath("python3")
	s.python = err == nil
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		s.python = true
	}
	return s
}

func (s *Scene) close() {
	if s.marker != nil {
		_ = s.marker.Kill()
		_, _ = s.marker.Wait()
	}
	for _, c := range []interface{ Close() error }{s.ptyMaster, s.ptyTTY, s.sockLn, s.absLn} {
		if c != nil && !isNil(c) {
			_ = c.Close()
		}
	}
	if s.FD > 0 {
		unix.Close(s.FD)
	}
	if s.ipcID >= 0 {
		_, _ = unix.SysvShmCtl(s.ipcID, unix.IPC_RMID, nil)
	}
	if s.Key > 0 {
		_, _ = unix.KeyctlInt(unix.KEYCTL_UNLINK, s.Key, unix.KEY_SPEC_USER_KEYRING, 0, 0)
	}
	// What an unsandboxed run of the script added.
	if k, err := unix.KeyctlSearch(unix.KEY_SPEC_USER_KEYRING, "user", "runtimed-pwn", 0); err == nil {
		_, _ = unix.KeyctlInt(unix.KEYCTL_UNLINK, k, unix.KEY_SPEC_USER_KEYRING, 0, 0)
	}
}

func isNil(c any) bool {
	switch v := c.(type) {
	case *os.File:
		return v == nil
	case *net.UnixListener:
		return v == nil
	}
	return false
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Script is the attack, for /usr/bin/bash -c with the workspace as cwd and
// PATH=/usr/bin:/bin. Each line prints NAME:OK when the attempt succeeded
// and NAME:DENIED when it was refused; fd is the descriptor number to try
// (the scene's own, or the one a daemon under test inherited).
func (s *Scene) Script(fd int) string {
	py := "/usr/bin/python3"
	q := strconv.Quote
	lines := []string{
		`o() { a=$1; shift; if "$@" >/dev/null 2>&1; then echo "$a:OK"; else echo "$a:DENIED"; fi; }`,
		`o chmod chmod 0777 ` + q(s.Victim),
		`o chown chown 65534 ` + q(s.Victim),
		`o utimes touch -d 2001-01-01 ` + q(s.Victim),
		`o write sh -c 'echo pwned >> "$1"' _ ` + q(s.Victim),
		`o setuid chmod u+s ` + q(s.Suid),
		fmt.Sprintf(`o fd sh -c 'echo pwned >&%d'`, fd),
		`o pty-write sh -c 'echo pwned > "$1"' _ ` + q(s.PTYName),
		`o pty-read timeout 1 head -c1 ` + q(s.PTYName),
		`o plant-git sh -c 'mkdir -p .git && printf "[core]\n\tfsmonitor = /tmp/pwn\n" > .git/config'`,
		`o plant-codex sh -c 'mkdir -p .codex && echo x > .codex/config.toml'`,
		`o plant-agents sh -c 'mkdir -p .agents && echo x > .agents/x'`,
		`o aws sh -c 'echo stolen >> .aws/credentials'`,
		`echo "PS-COUNT:$(ps -e -o pid= | wc -l)"`,
		fmt.Sprintf(`echo "IPC-SEEN:$(ipcs -m 2>/dev/null | grep -ci 0x%08x)"`, s.ipcKey),
		// This scene's own marker: scenes of other tests (other packages run at
		// the same time) start markers of their own.
		fmt.Sprintf(`echo "PS-MARKER:$(ps -e -o args= | grep -c '[r]%s')"`, s.Marker[1:]),
		`o comm sh -c 'echo renamed > /proc/self/comm'`,
		`o oom sh -c 'echo 500 > /proc/self/oom_score_adj'`,
	}
	if s.python {
		lines = append(lines,
			`o xattr `+py+` -c 'import os,sys; os.setxattr(sys.argv[1], "user.pwn", b"1")' `+q(s.Victim),
			`o pty-sti `+py+` -c 'import os,sys,fcntl,termios; os.setsid(); fd=os.open(sys.argv[1], os.O_RDWR); fcntl.ioctl(fd, termios.TIOCSCTTY, 0); fcntl.ioctl(fd, termios.TIOCSTI, b"X")' `+q(s.PTYName),
			`o unix-path `+py+` -c 'import socket,sys; c=socket.socket(socket.AF_UNIX); c.connect(sys.argv[1])' `+q(s.Sock),
			`o unix-abstract `+py+` -c 'import socket,sys; c=socket.socket(socket.AF_UNIX); c.connect("\0"+sys.argv[1])' `+q(s.Abstract),
			fmt.Sprintf(`o keyring-add %s -c 'import ctypes; l=ctypes.CDLL(None, use_errno=True); import sys; sys.exit(0 if l.syscall(%d, b"user", b"runtimed-pwn", b"x", 1, -4) > 0 else 1)'`, py, unix.SYS_ADD_KEY),
			fmt.Sprintf(`o keyring-read %s -c 'import ctypes,sys; l=ctypes.CDLL(None, use_errno=True); b=ctypes.create_string_buffer(64); sys.exit(0 if l.syscall(%d, 11, %d, b, 64) > 0 else 1)'`, py, unix.SYS_KEYCTL, s.Key),
			`o unix-socketpair `+py+` -c 'import socket; a,b=socket.socketpair(); a.send(b"x"); assert b.recv(1)==b"x"'`,
			`o unix-own `+py+` -c 'import socket,os; p=os.path.abspath("own.sock"); s=socket.socket(socket.AF_UNIX); s.bind(p); s.listen(1); c=socket.socket(socket.AF_UNIX); c.connect(p); os.unlink(p)'`,
			`o shm `+py+` -c 'import multiprocessing as m; from multiprocessing import shared_memory as s; l=m.Lock(); l.acquire(); l.release(); x=s.SharedMemory(create=True, size=4096); x.buf[0]=1; x.close(); x.unlink()'`,
		)
	}
	return strings.Join(lines, "\n") + "\n"
}

// Refused are the attacks every sandboxed start must refuse.
var Refused = []string{"chmod", "chown", "utimes", "write", "setuid", "fd", "pty-write", "pty-read", "plant-git", "plant-codex", "plant-agents", "aws"}

// RefusedPython need python3 on the host.
var RefusedPython = []string{"xattr", "pty-sti", "unix-path", "unix-abstract", "keyring-add", "keyring-read"}

// Usable must work inside a sandbox (as in the reference).
var Usable = []string{"comm", "oom"}

// Modes of Check.
const (
	Unsandboxed    = "none"
	ReadOnly       = "read-only"
	WorkspaceWrite = "workspace-write"
)

// Check asserts the refusals in out (the script's output) and the host's
// state afterwards. Unsandboxed checks only what every child must be
// refused (the inherited descriptor) and the host's descriptor file.
func (s *Scene) Check(t *testing.T, out string, mode string) {
	sandboxed := mode != Unsandboxed
	t.Helper()
	want := func(name, verdict string) {
		t.Helper()
		if !strings.Contains(out, name+":"+verdict+"\n") {
			t.Errorf("%s: want %s in the attack's output:\n%s", name, verdict, out)
		}
	}
	want("fd", "DENIED")
	if b, _ := os.ReadFile(s.fdFile); len(b) != 0 {
		t.Errorf("the inherited descriptor was written: %q", b)
	}
	if !sandboxed {
		return
	}
	for _, a := range Refused {
		want(a, "DENIED")
	}
	for _, a := range Usable {
		want(a, "OK")
	}
	if s.python {
		for _, a := range RefusedPython {
			if a == "keyring-read" && s.Key == 0 {
				continue
			}
			want(a, "DENIED")
		}
		want("shm", "OK")
		want("unix-socketpair", "OK")
		if mode == WorkspaceWrite {
			want("unix-own", "OK") // a socket the tree binds in its writable root
		}
	} else {
		t.Logf("python3 not found: xattr, TIOCSTI, UNIX socket, keyring and POSIX shm cases skipped")
	}
	if n := field(out, "PS-MARKER"); n != 0 {
		t.Errorf("ps -e shows the host's marker process (%d lines):\n%s", n, out)
	}
	if n := field(out, "IPC-SEEN"); n != 0 && s.ipcID >= 0 {
		t.Errorf("the host's System V shared memory is visible inside (%d)", n)
	}
	if n := field(out, "PS-COUNT"); n < 1 || n > 12 {
		t.Errorf("ps -e lists %d processes, want only the command's own tree", n)
	}
	// The host afterwards.
	var st unix.Stat_t
	must(t, unix.Stat(s.Victim, &st))
	if st.Mode != s.victimSt.Mode || st.Uid != s.victimSt.Uid || st.Mtim != s.victimSt.Mtim || st.Size != s.victimSt.Size {
		t.Errorf("victim changed: mode %o uid %d mtime %v size %d (was %o %d %v %d)", st.Mode, st.Uid, st.Mtim, st.Size,
			s.victimSt.Mode, s.victimSt.Uid, s.victimSt.Mtim, s.victimSt.Size)
	}
	if sz, _ := unix.Getxattr(s.Victim, "user.pwn", nil); sz > 0 {
		t.Errorf("victim got an xattr")
	}
	must(t, unix.Stat(s.Suid, &st))
	if st.Mode&unix.S_ISUID != 0 || st.Mode != s.suidSt.Mode {
		t.Errorf("setuid bit set on the root-owned binary: mode %o", st.Mode)
	}
	for _, name := range []string{".git", ".codex", ".agents"} {
		p := filepath.Join(s.WS, name)
		ents, err := os.ReadDir(p)
		if err == nil && len(ents) > 0 {
			t.Errorf("%s planted on the host: %v", p, ents)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(s.WS, ".aws", "credentials")); string(b) != "[default]\n" {
		t.Errorf(".aws/credentials changed: %q", b)
	}
	// The victim terminal: nothing written to it, nothing injected.
	if n, _ := unix.IoctlGetInt(int(s.ptyMaster.Fd()), unix.TIOCINQ); n > 0 {
		t.Errorf("the victim terminal got output (%d bytes)", n)
	}
	if n, _ := unix.IoctlGetInt(int(s.ptyTTY.Fd()), unix.TIOCINQ); n > 0 {
		t.Errorf("input was injected into the victim terminal (%d bytes)", n)
	}
	// Nobody connected to the host's sockets.
	for _, ln := range []*net.UnixListener{s.sockLn, s.absLn} {
		_ = ln.SetDeadline(time.Now().Add(10 * time.Millisecond))
		if c, err := ln.Accept(); err == nil {
			c.Close()
			t.Errorf("a sandboxed process connected to %s", ln.Addr())
		}
	}
	// The host keyring: the key intact, nothing added.
	if s.Key > 0 {
		if v, err := unix.KeyctlBuffer(unix.KEYCTL_READ, s.Key, nil, 0); err == nil {
			buf := make([]byte, v)
			if n, err := unix.KeyctlBuffer(unix.KEYCTL_READ, s.Key, buf, 0); err != nil || string(buf[:n]) != "host-secret" {
				t.Errorf("host key changed: %q %v", buf, err)
			}
		}
		if k, err := unix.KeyctlSearch(unix.KEY_SPEC_USER_KEYRING, "user", "runtimed-pwn", 0); err == nil {
			t.Errorf("a key was added to the host's user keyring (serial %d)", k)
			_, _ = unix.KeyctlInt(unix.KEYCTL_UNLINK, k, unix.KEY_SPEC_USER_KEYRING, 0, 0)
		}
	}
}

func field(out, name string) int {
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, name+":"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err == nil {
				return n
			}
		}
	}
	return -1
}
