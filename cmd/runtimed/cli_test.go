package main_test

// Tests of the client commands (exec, stdio, ps) run as a user would: the
// real binary, against a real server or the embedded runtime.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/runtimed/runtimed/wire/wiretest"
)

func runCLI(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("%v: %v (stderr %q)", args, err, errb.String())
	}
	return out.String(), errb.String(), code
}

func TestCLIExecPropagatesExitCodeAndStdin(t *testing.T) {
	t.Parallel()
	srv := wiretest.StartWS(t, bin)
	for _, connect := range [][]string{{"--connect", srv.URL}, nil} {
		args := append(append([]string{"exec"}, connect...), "--", "sh", "-c", `cat; echo to-stderr >&2; exit 5`)
		out, errOut, code := runCLI(t, "line one\nline two\n", args...)
		if out != "line one\nline two\n" || !strings.Contains(errOut, "to-stderr") || code != 5 {
			t.Errorf("exec %v: stdout %q stderr %q code %d", connect, out, errOut, code)
		}
	}
	_, errOut, code := runCLI(t, "", "exec", "--connect", srv.URL, "--", "/no/such/binary")
	if code != 127 || !strings.Contains(errOut, "no such file or directory") {
		t.Errorf("missing binary: code %d stderr %q", code, errOut)
	}
	notExec := filepath.Join(t.TempDir(), "not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code = runCLI(t, "", "exec", "--connect", srv.URL, "--", notExec)
	if code != 126 || !strings.Contains(errOut, "permission denied") {
		t.Errorf("file that is not executable: code %d stderr %q, want 126", code, errOut)
	}
	_, errOut, code = runCLI(t, "", "exec", "--connect", "ws://127.0.0.1:1", "--", "true")
	if code != 125 || !strings.Contains(errOut, "runtimed exec:") {
		t.Errorf("unreachable server: code %d stderr %q, want 125", code, errOut)
	}
	_, _, code = runCLI(t, "", "stdio", "--connect", "ws://127.0.0.1:1", "--", "true")
	if code != 125 {
		t.Errorf("stdio, unreachable server: code %d, want 125", code)
	}
}

// TestCLIExecForwardsSIGINT: Ctrl-C reaches the remote command, which
// handles it and exits 42: the CLI exits 42 (not 130); a command that dies
// of it gives 130.
func TestCLIExecForwardsSIGINT(t *testing.T) {
	t.Parallel()
	srv := wiretest.StartWS(t, bin)
	dir := t.TempDir()
	for _, c := range []struct {
		script string
		want   int
	}{
		{`trap 'echo caught; exit 42' INT; touch ` + dir + `/ready-trap; while :; do sleep 0.05; done`, 42},
		{`touch ` + dir + `/ready-die; exec sleep 300`, 130},
	} {
		ready := dir + "/ready-trap"
		if c.want == 130 {
			ready = dir + "/ready-die"
		}
		cmd := exec.Command(bin, "exec", "--connect", srv.URL, "--", "sh", "-c", c.script)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if _, err := os.Stat(ready); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		_ = cmd.Process.Signal(syscall.SIGINT)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			var ee *exec.ExitError
			code := 0
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			}
			if code != c.want {
				t.Errorf("%q after SIGINT: exit %d, want %d", c.script, code, c.want)
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("%q: the CLI did not exit after SIGINT", c.script)
		}
	}
}

func TestCLIStdioRoundTrip(t *testing.T) {
	t.Parallel()
	srv := wiretest.StartWS(t, bin)
	var in, want strings.Builder
	for i := 0; i < 200; i++ {
		line := strings.Repeat("x", i) + "\x01\xff"
		in.WriteString(line + "\n")
		want.WriteString("echo:" + line + "\n")
	}
	out, errOut, code := runCLI(t, in.String(), "stdio", "--connect", srv.URL, "--", "sh", "-c", `while IFS= read -r l; do printf 'echo:%s\n' "$l"; done; echo bye >&2`)
	if out != want.String() || code != 0 || !strings.Contains(errOut, "bye") {
		t.Fatalf("stdio bridge: code %d, %d bytes out (want %d), stderr %q", code, len(out), want.Len(), errOut)
	}
}

// TestCLIPs: ps names what it lists, and exits 125 whenever it cannot
// show it (unreachable, not a runtimed server, unknown session, session
// held by another connection), 2 on a usage error.
func TestCLIPs(t *testing.T) {
	t.Parallel()
	srv := wiretest.StartWS(t, bin)
	_, errOut, code := runCLI(t, "", "ps", "--connect", srv.URL)
	if code != 2 || !strings.Contains(errOut, "--session ID is required") {
		t.Errorf("ps without session: %d %q, want 2 and a message naming --session", code, errOut)
	}
	_, errOut, code = runCLI(t, "", "ps", "--connect", srv.URL, "--session", "nope")
	if code != 125 || !strings.Contains(errOut, "unknown session id nope") {
		t.Errorf("ps unknown session: %d %q, want 125", code, errOut)
	}
	_, errOut, code = runCLI(t, "", "ps", "--connect", "ws://127.0.0.1:1", "--session", "x")
	if code != 125 || !strings.Contains(errOut, "runtimed ps:") {
		t.Errorf("ps, unreachable server: %d %q, want 125", code, errOut)
	}
	notRuntimed := httptest.NewServer(http.NotFoundHandler())
	defer notRuntimed.Close()
	_, errOut, code = runCLI(t, "", "ps", "--connect", "ws://"+strings.TrimPrefix(notRuntimed.URL, "http://"), "--session", "x")
	if code != 125 || !strings.Contains(errOut, "runtimed ps:") {
		t.Errorf("ps, not a runtimed server: %d %q, want 125", code, errOut)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	c := dial(t, srv.URL, nil)
	sid, err := c.Initialize(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx, wiretest.StartParams{ProcessID: "sleeper", Argv: []string{"sleep", "1000"}, Cwd: "/"}); err != nil {
		t.Fatal(err)
	}
	_, errOut, code = runCLI(t, "", "ps", "--connect", srv.URL, "--session", sid)
	if code != 125 || !strings.Contains(errOut, "refused session "+sid) {
		t.Errorf("ps of a session another connection holds: %d %q, want 125", code, errOut)
	}
	c.Close()
	// The server may not have noticed the drop yet; ps reports -32010 then.
	var out string
	deadline := time.Now().Add(wait)
	for {
		out, errOut, code = runCLI(t, "", "ps", "--connect", srv.URL, "--session", sid)
		if code == 0 || time.Now().After(deadline) {
			break
		}
	}
	header, table, _ := strings.Cut(out, "\n")
	if code != 0 || header != "processes of session "+sid+" on "+srv.URL+" (1):" {
		t.Fatalf("ps of a detached session: %d, header %q (stderr %q)", code, header, errOut)
	}
	if !strings.HasPrefix(table, "PROCESS") || !strings.Contains(table, "sleeper") || !strings.Contains(table, "running") || !strings.Contains(table, "sleep 1000") {
		t.Fatalf("ps table: %q", table)
	}
}

// -t under a real terminal: raw mode, window size forwarded, terminal restored.
func TestCLIExecTTY(t *testing.T) {
	t.Parallel()
	srv := wiretest.StartWS(t, bin)
	master, slave, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	defer slave.Close()
	if err := pty.Setsize(master, &pty.Winsize{Rows: 30, Cols: 100}); err != nil {
		t.Fatal(err)
	}
	before, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "exec", "--connect", srv.URL, "-t", "--", "sh", "-c", `stty size; while read x; do [ "$x" = quit ] && exit 9; stty size; done`)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &unix.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tm := readTerminal(master)
	tm.waitFor(ctx, t, "30 100", nil)
	// While raw, the local terminal must not echo or translate.
	raw, _ := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if raw.Lflag&unix.ECHO != 0 || raw.Lflag&unix.ICANON != 0 {
		t.Errorf("local terminal not in raw mode during -t: lflag %#x", raw.Lflag)
	}
	if err := pty.Setsize(master, &pty.Winsize{Rows: 40, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	tm.waitFor(ctx, t, "40 120", func() { _, _ = master.Write([]byte("\r")) })
	_, _ = master.Write([]byte("quit\r"))
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 9 {
		t.Fatalf("exec -t exit: %v; want code 9", err)
	}
	checkRestored(t, slave, before)
}

func TestCLIFs(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	srv := wiretest.StartWS(t, bin, "--fs-root", root)
	payload := strings.Repeat("0123456789abcdef", 200_000) // 3.2 MB: several readBlock calls
	f := root + "/data.txt"
	if _, errOut, code := runCLI(t, payload, "fs", "put", "--connect", srv.URL, f); code != 0 {
		t.Fatalf("fs put: %d %q", code, errOut)
	}
	if out, errOut, code := runCLI(t, "", "fs", "cat", "--connect", srv.URL, f); code != 0 || out != payload {
		t.Fatalf("fs cat: code %d, %d bytes, stderr %q", code, len(out), errOut)
	}
	if out, _, code := runCLI(t, "", "fs", "ls", "--connect", srv.URL, root); code != 0 || out != "data.txt\n" {
		t.Fatalf("fs ls: %d %q", code, out)
	}
	if out, _, code := runCLI(t, "", "fs", "stat", "--connect", srv.URL, f); code != 0 || !strings.Contains(out, "type: file") || !strings.Contains(out, "size: 3200000") {
		t.Fatalf("fs stat: %d %q", code, out)
	}
	if _, errOut, code := runCLI(t, "", "fs", "cat", "--connect", srv.URL, "/etc/hostname"); code != 1 || !strings.Contains(errOut, "outside the allowed roots") {
		t.Fatalf("fs cat outside the root: %d %q", code, errOut)
	}
	if _, errOut, code := runCLI(t, "", "fs", "cat", "--connect", srv.URL, root+"/missing"); code != 1 || !strings.Contains(errOut, "no such file or directory") {
		t.Fatalf("fs cat of a missing file: %d %q", code, errOut)
	}
}

// The managed network's CLI: flag combinations are refused with exit 2
// before anything runs; on a host that cannot confine a command to its
// proxy the start is refused (125), never run with an open network.
func TestCLIExecAllowDomain(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--allow-domain", "pypi.org"}, 2, "--allow-domain needs --sandbox read-only or workspace-write"},
		{[]string{"--sandbox", "read-only", "--network", "--allow-domain", "pypi.org"}, 2, "--allow-domain and --network exclude each other"},
		{[]string{"--sandbox", "read-only", "--deny-domain", "pypi.org"}, 2, "need --allow-domain"},
		{[]string{"--sandbox", "read-only", "--allow-domain", "a.*.org"}, 125, `invalid Spec.Network.Allow[0]: pattern "a.*.org"`},
	} {
		args := append(append([]string{"exec"}, c.args...), "--", "sh", "-c", "echo ran")
		out, errOut, code := runCLI(t, "", args...)
		if code != c.code || !strings.Contains(errOut, c.msg) || out != "" {
			t.Errorf("%v: code %d, stdout %q, stderr %q; want %d and %q", c.args, code, out, errOut, c.code, c.msg)
		}
	}
	// Enforced where the namespaces level is: the allowed host answers
	// through the proxy, another gets the proxy's 403, a direct
	// connection fails.
	if _, err := exec.LookPath("curl"); err != nil {
		return
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "up") }))
	defer up.Close()
	script := `curl -s -m 10 ` + up.URL + `/; echo; curl -s -m 10 -o /dev/null -w '%{http_code}' http://files.example.org/; echo; curl -s -m 5 --noproxy '*' -o /dev/null -w 'direct=%{http_code}' ` + up.URL + `/`
	out, errOut, code := runCLI(t, "", "exec", "--sandbox", "workspace-write", "--allow-domain", "127.0.0.1", "--allow-domain", "pypi.org", "--", "sh", "-c", script)
	if code == 125 && strings.Contains(errOut, "managed network cannot be provided") {
		t.Skipf("no managed network on this host: %s", errOut)
	}
	if code != 7 || out != "up\n403\ndirect=000" { // 7: curl's "failed to connect", of the direct attempt
		t.Errorf("exec --allow-domain: code %d, stdout %q, stderr %q; want up, 403, direct=000 and exit 7", code, out, errOut)
	}
}
