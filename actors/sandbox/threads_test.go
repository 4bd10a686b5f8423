package sandbox

import (
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// waitPrepared waits (bounded) until h has a spawning thread prepared.
func waitPrepared(t *testing.T, h *Host) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(h.threads.ready) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no spawning thread was prepared within 5 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// A confined start on a prepared spawning thread (capabilities dropped
// before the start asked for it) confines the command exactly as one on
// a fresh thread: no capability left in its bounding set, no_new_privs,
// the seccomp filter, Landlock (a write outside the grants fails); and
// Close ends the prepared thread, so no confined thread stays in the
// process.
func TestPreparedSpawningThread(t *testing.T) {
	h := probeOrSkip(t)
	if h.threads == nil {
		t.Skip("threads cannot be confined here: every start takes the helper")
	}
	self := threadStates(t)[strconv.Itoa(os.Getpid())]
	p := &Policy{RestrictFS: true, Rules: []Rule{{Path: "/", Access: Read}}}
	if code, err := startAndWait(t, h, Plan{Path: "/bin/true", Argv: []string{"true"}, Policy: p}, "/"); err != nil || code != 0 {
		t.Fatalf("first start: %d %v", code, err)
	}
	waitPrepared(t, h)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	devnull, _ := os.Open(os.DevNull)
	defer devnull.Close()
	proc, err := Start(h, Plan{Path: "/bin/sh", Argv: []string{"sh", "-c", "grep -E '^(CapBnd|NoNewPrivs|Seccomp):' /proc/self/status; echo x > /tmp/runtimed-prepared-$$ && echo wrote"}, Policy: p},
		&os.ProcAttr{Dir: "/", Files: []*os.File{devnull, w, w}, Sys: &syscall.SysProcAttr{Setsid: true}})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(r)
	r.Close()
	_, _ = proc.Wait()
	if n := h.threads.used.Load(); n != 1 {
		t.Fatalf("%d starts used a prepared thread; want 1", n)
	}
	for _, want := range []string{"CapBnd:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the command's status lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "wrote") {
		t.Errorf("the command wrote outside its grants:\n%s", out)
	}
	waitPrepared(t, h) // the next one
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		confined := 0
		for _, s := range threadStates(t) {
			if s != self {
				confined++
			}
		}
		if confined == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d confined threads left after Close", confined)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
