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
	if n, r := h.threads.used.Load(), h.threads.restrictd.Load(); n != 1 || r != 1 {
		t.Fatalf("%d starts used a prepared thread, %d one restricted ahead; want 1 and 1 (the policy repeats)", n, r)
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

// A thread restricted ahead for one confinement never serves another: a
// start with another policy (or the same paths resolved to other files)
// retires it and takes a fresh thread, and each command gets exactly its
// own policy, in both directions (more and less permissive).
func TestPreparedThreadOnlyForItsConfinement(t *testing.T) {
	h := probeOrSkip(t)
	if h.threads == nil {
		t.Skip("threads cannot be confined here: every start takes the helper")
	}
	ws := t.TempDir()
	readOnly := &Policy{RestrictFS: true, Rules: []Rule{{Path: "/", Access: Read}}}
	writable := func() *Policy {
		return &Policy{RestrictFS: true, Rules: []Rule{{Path: "/", Access: Read}, {Path: ws, Access: Write}}}
	}
	write := func(p *Policy, name string) int {
		t.Helper()
		code, err := startAndWait(t, h, Plan{Path: "/bin/sh", Argv: []string{"sh", "-c", "echo x > " + ws + "/" + name}, Policy: p}, "/")
		if err != nil {
			t.Fatal(err)
		}
		return code
	}
	if write(readOnly, "a") == 0 {
		t.Fatal("a read-only command wrote")
	}
	waitPrepared(t, h) // restricted read-only
	if write(writable(), "b") != 0 {
		t.Fatal("a command with a writable workspace could not write (it ran on the read-only thread?)")
	}
	waitPrepared(t, h) // restricted with ws writable
	if write(readOnly, "c") == 0 {
		t.Fatal("a read-only command wrote (it ran on the thread prepared for a writable workspace)")
	}
	waitPrepared(t, h) // read-only again
	if write(readOnly, "d") == 0 {
		t.Fatal("a read-only command wrote")
	}
	if r := h.threads.restrictd.Load(); r != 1 {
		t.Fatalf("%d starts ran on a thread restricted ahead; want 1 (the repeated read-only start)", r)
	}
	// The same policy with its workspace replaced by another directory at
	// the same path: the prepared thread's grant names the old one.
	waitPrepared(t, h)
	if write(writable(), "e") != 0 {
		t.Fatal("a command with a writable workspace could not write")
	}
	waitPrepared(t, h) // restricted for ws's current directory
	if err := os.RemoveAll(ws); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	before := h.threads.restrictd.Load()
	if write(writable(), "f") != 0 {
		t.Fatal("a command could not write in its recreated workspace")
	}
	if h.threads.restrictd.Load() != before {
		t.Fatal("a thread restricted for the replaced directory served the start")
	}
}
