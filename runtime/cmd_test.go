package runtime

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/runtimed/runtimed/wire"
)

func shCmd(t *testing.T, b Backend, script string) *Cmd {
	c := Command(b, "/bin/sh", "-c", script)
	c.Dir, c.Env = t.TempDir(), map[string]string{"PATH": "/usr/bin:/bin"}
	return c
}

func TestCmdOutputRunAndErrors(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		out, err := shCmd(t, b, `echo hi; echo oops >&2; exit 0`).Output()
		if err != nil || string(out) != "hi\n" {
			t.Fatalf("Output = %q, %v", out, err)
		}
		// A failed command: *ExitError with its status and the captured stderr.
		out, err = shCmd(t, b, `echo partial; echo why >&2; exit 3`).Output()
		var ee *ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 3 || string(ee.Stderr) != "why\n" || string(out) != "partial\n" || err.Error() != "exit status 3" {
			t.Fatalf("Output of exit 3 = %q, %v", out, err)
		}
		// Stdin is copied and closed at EOF; stdout and stderr may share a writer.
		var both bytes.Buffer
		c := shCmd(t, b, `cat; echo done >&2`)
		c.Stdin, c.Stdout, c.Stderr = strings.NewReader("line 1\nline 2\n"), &both, &both
		// (Two pipes have no order between them: the child's stderr line
		// may be read before its stdout.)
		if err := c.Run(); err != nil || (both.String() != "line 1\nline 2\ndone\n" && both.String() != "done\nline 1\nline 2\n") || c.ProcessState == nil || !c.ProcessState.Success() {
			t.Fatalf("Run with stdin: %q %v %v", both.String(), err, c.ProcessState)
		}
		combined, err := shCmd(t, b, `echo out; echo err >&2`).CombinedOutput()
		if err != nil || !strings.Contains(string(combined), "out\n") || !strings.Contains(string(combined), "err\n") {
			t.Fatalf("CombinedOutput = %q, %v", combined, err)
		}
		// A signal death.
		err = shCmd(t, b, `kill -9 $$`).Run()
		if !errors.As(err, &ee) || !ee.Signaled() || ee.Signal() != syscall.SIGKILL || err.Error() != "signal: killed" {
			t.Fatalf("Run of a killed shell = %v", err)
		}
		// Bad options and commands that cannot start.
		if err := Command(b).Run(); !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), "Cmd.Args") {
			t.Errorf("no args: %v", err)
		}
		if err := Command(nil, "true").Run(); !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), "Cmd.Backend") {
			t.Errorf("no backend: %v", err)
		}
		var re *RPCError
		if err := Command(b, "/no/such/program").Run(); !errors.As(err, &re) || re.Code != wire.CodeInternal || !strings.Contains(re.Message, "no such file") {
			t.Errorf("missing program: %v", err)
		}
		c = shCmd(t, b, "true")
		if err := c.Wait(); err == nil {
			t.Error("Wait before Start succeeded")
		}
		if err := c.Run(); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(); err == nil {
			t.Error("a second Start succeeded")
		}
		if err := c.Wait(); err == nil {
			t.Error("a second Wait succeeded")
		}
	})
}

// Empty Dir is the backend's own working directory; TTY gets its size.
func TestCmdDirAndTTY(t *testing.T) {
	cwd, _ := os.Getwd()
	forEachBackend(t, func(t *testing.T, b Backend) {
		out, err := Command(b, "pwd").Output()
		if err != nil || strings.TrimSpace(string(out)) != cwd {
			t.Fatalf("pwd = %q, %v; want %s", out, err, cwd)
		}
		c := shCmd(t, b, `stty size`)
		c.TTY, c.Size = true, Size{Rows: 30, Cols: 100}
		out, err = c.Output()
		if err != nil || string(out) != "30 100\r\n" {
			t.Fatalf("stty size on a TTY = %q, %v", out, err)
		}
	})
}

// Output written before anyone could attach is never lost, even by a
// process that is gone (and forgotten by the backend) before the copy
// starts: Start subscribes from seq 0.
func TestCmdOutputNotLostBetweenStartAndAttach(t *testing.T) {
	cfg := Config{ClosedRetention: -1, Logger: zaptest.NewLogger(t)}
	for name, b := range map[string]func(t *testing.T) Backend{
		"local":     func(t *testing.T) Backend { l := NewLocal(cfg); t.Cleanup(func() { _ = l.Close() }); return l },
		"websocket": func(t *testing.T) Backend { c, _ := newWSBackend(t, cfg, nil); return c },
	} {
		t.Run(name, func(t *testing.T) {
			b := b(t)
			for i := 0; i < 20; i++ {
				out, err := shCmd(t, b, `seq 1 2000; echo end`).Output()
				var want strings.Builder
				for n := 1; n <= 2000; n++ {
					want.WriteString(strconv.Itoa(n) + "\n")
				}
				want.WriteString("end\n")
				if err != nil || string(out) != want.String() {
					t.Fatalf("run %d: %d bytes, %v; want %d bytes", i, len(out), err, want.Len())
				}
			}
		})
	}
}

// CommandContext kills the process when its ctx ends.
func TestCmdContextKills(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		ctx, cancel := context.WithCancel(ctxT(t))
		defer cancel()
		ready := make(chan struct{})
		c := CommandContext(ctx, b, "/bin/sh", "-c", `echo ready; exec sleep 1000`)
		c.Dir = "/"
		c.Stdout = writerFunc(func(p []byte) (int, error) {
			if bytes.Contains(p, []byte("ready")) {
				close(ready)
			}
			return len(p), nil
		})
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ready:
		case <-time.After(20 * time.Second):
			t.Fatal("no output from the command")
		}
		cancel()
		var ee *ExitError
		if err := c.Wait(); !errors.As(err, &ee) || ee.Signal() != syscall.SIGKILL {
			t.Fatalf("Wait after the ctx ended = %v; want signal: killed", err)
		}
		if err := CommandContext(ctx, b, "true").Run(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Run with an ended ctx = %v", err)
		}
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
