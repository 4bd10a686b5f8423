package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/runtimed/runtimed/wire/wiretest"
)

// startDetached starts a process through one connection, waits for its
// first output, drops the connection and returns the session id.
func startDetached(t *testing.T, url string, p wiretest.StartParams, first string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	c := dial(t, url, nil)
	sid, err := c.Initialize(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx, p); err != nil {
		t.Fatal(err)
	}
	var seen strings.Builder
	if _, err := c.WaitNotification(ctx, func(method string, params json.RawMessage) bool {
		if method == "process/output" {
			var n struct{ Chunk []byte }
			_ = json.Unmarshal(params, &n)
			seen.Write(n.Chunk)
		}
		return strings.Contains(seen.String(), first)
	}); err != nil {
		t.Fatalf("no %q from the process: %v", first, err)
	}
	c.Close()
	return sid
}

// TestCLIAttachPipes: a process started through one connection, which
// then dropped, is attached by the CLI: the earlier output (retained) and
// the later output (live, after stdin reached it) come once each, and the
// CLI exits with the process's status. Unknown sessions and processes are
// runtimed's failures (125).
func TestCLIAttachPipes(t *testing.T) {
	t.Parallel()
	srv := wiretest.StartWS(t, bin)
	sid := startDetached(t, srv.URL, wiretest.StartParams{ProcessID: "job", Argv: []string{"sh", "-c", `echo early; read x; echo "later $x"; exit 7`}, Cwd: "/", PipeStdin: true}, "early")
	out, errOut, code := runCLI(t, "go\n", "attach", "--connect", srv.URL, sid, "job")
	if out != "early\nlater go\n" || code != 7 {
		t.Fatalf("attach: stdout %q, exit %d (stderr %q); want early and later once each, exit 7", out, code, errOut)
	}
	_, errOut, code = runCLI(t, "", "attach", "--connect", srv.URL, sid, "nope")
	if code != 125 || !strings.Contains(errOut, "has no process nope") {
		t.Errorf("attach to an unknown process: %d %q", code, errOut)
	}
	_, errOut, code = runCLI(t, "", "attach", "--connect", srv.URL, "no-such-session", "job")
	if code != 125 || !strings.Contains(errOut, "unknown session id no-such-session") {
		t.Errorf("attach to an unknown session: %d %q", code, errOut)
	}
	_, _, code = runCLI(t, "", "attach", "--connect", srv.URL, sid)
	if code != 2 {
		t.Errorf("attach without PROCESS: %d, want 2", code)
	}
}

// TestCLIAttachTerminal: a PTY process is attached from a real terminal:
// raw mode, its earlier output, typing reaches it, Ctrl-] detaches and
// leaves it running; a second attach sees its retained output again and
// exits with its status; the local terminal is restored each time.
func TestCLIAttachTerminal(t *testing.T) {
	t.Parallel()
	srv := wiretest.StartWS(t, bin)
	sid := startDetached(t, srv.URL, wiretest.StartParams{ProcessID: "tty", Argv: []string{"sh", "-c", `echo early; while read x; do [ "$x" = quit ] && exit 5; echo "got $x"; done`}, Cwd: "/", TTY: true}, "early")
	master, slave, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	defer slave.Close()
	before, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	tm := readTerminal(master)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	attach := func() (*exec.Cmd, *bytes.Buffer) {
		cmd := exec.CommandContext(ctx, bin, "attach", "--connect", srv.URL, sid, "tty")
		var errb bytes.Buffer
		cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, &errb
		cmd.SysProcAttr = &unix.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, &errb
	}

	cmd, errb := attach()
	tm.waitFor(ctx, t, "early", nil)
	raw, _ := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if raw.Lflag&unix.ECHO != 0 || raw.Lflag&unix.ICANON != 0 {
		t.Errorf("local terminal not in raw mode during attach: lflag %#x", raw.Lflag)
	}
	_, _ = master.Write([]byte("one\r"))
	tm.waitFor(ctx, t, "got one", nil)
	_, _ = master.Write([]byte{0x1d}) // Ctrl-]: detach
	if err := cmd.Wait(); err != nil || !strings.Contains(errb.String(), "detached") {
		t.Fatalf("detach: %v, stderr %q", err, errb.String())
	}
	checkRestored(t, slave, before)
	if n := strings.Count(tm.screen.String(), "early"); n != 1 {
		t.Fatalf("first attach showed early %d times: %q", n, tm.screen.String())
	}

	tm.screen.Reset()
	cmd, errb = attach()
	tm.waitFor(ctx, t, "got one", nil) // the retained history again, once
	_, _ = master.Write([]byte("quit\r"))
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 5 {
		t.Fatalf("second attach: %v (stderr %q); want exit 5", err, errb.String())
	}
	checkRestored(t, slave, before)
	tm.drain()
	if strings.Count(tm.screen.String(), "early") != 1 || strings.Count(tm.screen.String(), "got one") != 1 {
		t.Fatalf("second attach screen %q: want early and got one once each", tm.screen.String())
	}
}
