package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestReportAfterTreeEnded: when the init reports the command's exit,
// nothing the command left running runs any more (the init killed and
// reaped it first), on a prepared sandbox and on a fresh one. The
// command's background sleep holds its stdout: right after the report,
// stdout is at EOF (a read that does not wait says so), and the sleep is
// gone from the host's /proc.
func TestReportAfterTreeEnded(t *testing.T) {
	h := preparedHost(t)
	fresh := *h
	fresh.NoPrepare = true
	ws := t.TempDir()
	p := codexWorkspaceWrite(ws)
	for _, c := range []struct {
		name string
		h    *Host
	}{{"fresh", &fresh}, {"prepared", h}} {
		t.Run(c.name, func(t *testing.T) {
			if c.h == h {
				primePrepared(t, h, Plan{Policy: p}, ws)
			}
			marker := fmt.Sprintf("1000.%d", time.Now().UnixNano()%1_000_000)
			devnull, err := os.Open(os.DevNull)
			if err != nil {
				t.Fatal(err)
			}
			defer devnull.Close()
			var fds [2]int
			if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fds[0])
			w := os.NewFile(uintptr(fds[1]), "stdout")
			proc, report, err := StartReported(c.h, shPlan(p, "sleep "+marker+" & echo started; exit 3"),
				&os.ProcAttr{Dir: ws, Files: []*os.File{devnull, w, devnull}, Sys: &syscall.SysProcAttr{Setsid: true}})
			w.Close()
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _, _ = proc.Wait() }()
			defer report.Close()
			status, ok := report.Wait()
			if !ok || status != 3 {
				t.Fatalf("report: %d %v, want 3", status, ok)
			}
			if err := unix.SetNonblock(fds[0], true); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 64)
			var got []byte
			for {
				n, err := unix.Read(fds[0], buf)
				if n > 0 {
					got = append(got, buf[:n]...)
					continue
				}
				if err == unix.EAGAIN {
					t.Errorf("stdout still held by the tree after the report (read so far %q)", got)
				} else if err != nil {
					t.Errorf("read: %v", err)
				}
				break // n == 0: EOF
			}
			if string(got) != "started\n" {
				t.Errorf("stdout %q", got)
			}
			if pids := pidsWithArg(t, marker); len(pids) != 0 {
				t.Errorf("the command's background sleep still runs after the report: %v", pids)
			}
		})
	}
}

// pidsWithArg lists the host's processes with arg in their command line.
func pidsWithArg(t *testing.T, arg string) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), arg) {
			out = append(out, pid)
		}
	}
	return out
}
