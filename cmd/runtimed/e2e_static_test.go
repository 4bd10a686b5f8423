package main_test

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runtimed/runtimed/wire/wiretest"
)

// TestStaticBinaryInEmptyRoot builds runtimed as the Dockerfile does
// (scripts/build-static.sh, CGO_ENABLED=0) and runs it alone in an empty
// root (no libc, no /etc, no /proc, no /dev) in new mount and pid
// namespaces; a client outside starts the binary itself as a process
// through it and gets its output and exit code.
func TestStaticBinaryInEmptyRoot(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("chroot and new namespaces need root")
	}
	root, err := wiretest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	build := exec.Command(filepath.Join(root, "scripts", "build-static.sh"), filepath.Join(empty, "runtimed"))
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build-static.sh: %v\n%s", err, out)
	}
	if out, err := exec.Command("file", filepath.Join(empty, "runtimed")).Output(); err == nil && !strings.Contains(string(out), "statically linked") {
		t.Fatalf("not a static binary: %s", out)
	}
	entries, _ := os.ReadDir(empty)
	if len(entries) != 1 {
		t.Fatalf("the root holds more than the binary: %v", entries)
	}
	// chroot(2) into the root, in new mount and pid namespaces (what
	// unshare --mount --pid --fork chroot DIR does; done here by the Go
	// runtime so that SIGTERM reaches the server itself).
	srv := exec.Command("/runtimed", "serve", "--listen", "ws://127.0.0.1:0")
	srv.SysProcAttr = &syscall.SysProcAttr{Chroot: empty, Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID}
	stdout, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	srv.Stderr = &stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- srv.Wait() }()
	t.Cleanup(func() {
		_ = srv.Process.Kill()
		<-exited
	})
	lineCh := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		lineCh <- line
		_, _ = io.Copy(io.Discard, stdout)
	}()
	var line string
	select {
	case line = <-lineCh:
	case <-time.After(wait):
		t.Fatalf("the static server printed no URL\n%s", stderr.String())
	}
	url := strings.TrimSpace(line)
	if !strings.HasPrefix(url, "ws://127.0.0.1:") {
		t.Fatalf("first line %q\n%s", line, stderr.String())
	}
	out, errOut, code := runCLI(t, "", "exec", "--connect", url, "--cwd", "/", "--", "/runtimed", "version")
	if code != 0 || !strings.HasPrefix(out, "runtimed ") || !strings.Contains(out, "CGO_ENABLED: 0") {
		t.Fatalf("runtimed version run inside the empty root: code %d, stdout %q, stderr %q\nserver:\n%s", code, out, errOut, stderr.String())
	}
	out, _, code = runCLI(t, "", "fs", "ls", "--connect", url, "/")
	if code != 0 || out != "runtimed\n" {
		t.Fatalf("fs ls / of the empty root: %d %q", code, out)
	}
	// SIGTERM: a clean shutdown, exit code 0.
	if err := srv.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if err != nil {
			t.Fatalf("server after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(wait):
		t.Fatalf("server did not exit after SIGTERM\n%s", stderr.String())
	}
}
