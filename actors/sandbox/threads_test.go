package sandbox

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// threadedHost is a probed Host that prepares spawning threads, or skips
// where threads cannot be confined (every start takes the helper there).
func threadedHost(t *testing.T) *Host {
	t.Helper()
	h := probeOrSkip(t)
	if h.threads == nil {
		t.Skip("threads cannot be confined here: every start takes the helper")
	}
	return h
}

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
	h := threadedHost(t)
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
	noConfinedThreads(t, self)
}

// A thread restricted ahead for one confinement never serves another: a
// start with another policy (or the same paths resolved to other files)
// retires it and takes a fresh thread, and each command gets exactly its
// own policy, in both directions (more and less permissive).
func TestPreparedThreadOnlyForItsConfinement(t *testing.T) {
	h := threadedHost(t)
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

// runOut runs script under p through Start and returns its output (an
// error text instead when it could not run it: callable from any
// goroutine).
func runOut(h *Host, p *Policy, script string) string {
	r, w, err := os.Pipe()
	if err != nil {
		return "error: " + err.Error()
	}
	defer r.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		w.Close()
		return "error: " + err.Error()
	}
	defer devnull.Close()
	proc, err := Start(h, Plan{Path: "/bin/sh", Argv: []string{"sh", "-c", script}, Policy: p},
		&os.ProcAttr{Dir: "/", Files: []*os.File{devnull, w, w}, Sys: &syscall.SysProcAttr{Setsid: true}})
	w.Close()
	if err != nil {
		return "error: " + err.Error()
	}
	_ = r.SetReadDeadline(time.Now().Add(30 * time.Second))
	out, err := io.ReadAll(r)
	_, _ = proc.Wait()
	if err != nil {
		return "error: reading the command's output: " + err.Error()
	}
	return string(out)
}

// The same grants with the network allowed, then cut, then allowed: the
// seccomp filter follows each start's policy, on prepared threads too.
// (From review.)
func TestPreparedThreadFollowsNetwork(t *testing.T) {
	h := threadedHost(t)
	open := &Policy{RestrictFS: true, Network: true, Rules: []Rule{{Path: "/", Access: Read}}}
	cut := &Policy{RestrictFS: true, Rules: []Rule{{Path: "/", Access: Read}}}
	for i, p := range []*Policy{open, open, cut, cut, open, cut, open, open} {
		if i > 0 {
			waitPrepared(t, h)
		}
		out := runOut(h, p, "grep '^Seccomp:' /proc/self/status")
		want := map[bool]string{true: "Seccomp:\t0", false: "Seccomp:\t2"}[p.Network]
		if !strings.Contains(out, want) {
			t.Errorf("start %d (network %v): %q, want %q", i, p.Network, out, want)
		}
	}
	if h.threads.restrictd.Load() == 0 {
		t.Error("no start ran on a thread restricted ahead: the test proves nothing")
	}
}

// Concurrent starts alternating two policies (read-only with the network
// cut; a writable workspace with the network on): each command gets
// exactly its own, whichever thread it lands on. (From review.)
func TestPreparedThreadsConcurrentPolicies(t *testing.T) {
	h := threadedHost(t)
	ws := t.TempDir()
	ro := &Policy{RestrictFS: true, Rules: []Rule{{Path: "/", Access: Read}}}
	rw := &Policy{RestrictFS: true, Network: true, Rules: []Rule{{Path: "/", Access: Read}, {Path: ws, Access: Write}}}
	var wg sync.WaitGroup
	errs := make(chan string, 200)
	for g := range 6 {
		wg.Go(func() {
			for i := range 15 {
				p := ro
				if (g+i)%2 == 0 {
					p = rw
				}
				out := runOut(h, p, fmt.Sprintf("grep '^Seccomp:' /proc/self/status; (echo x > %s/%d-%d) 2>/dev/null && echo wrote", ws, g, i))
				wrote, cut := strings.Contains(out, "wrote"), strings.Contains(out, "Seccomp:\t2")
				if p == ro && (wrote || !cut) || p == rw && (!wrote || cut) {
					errs <- fmt.Sprintf("goroutine %d start %d (writable %v): %q", g, i, p == rw, out)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// While a thread waits prepared (at the daemon's uid, restricted ahead for
// the very confinement of the command), the command reaches no thread of
// this process: Landlock's scoping keeps it out of the waiting thread's
// domain. (From review.)
func TestIdlePreparedThreadOutOfReach(t *testing.T) {
	h := threadedHost(t)
	release := filepath.Join(t.TempDir(), "release")
	script := fmt.Sprintf(`n=0; while [ ! -e %s ] && [ $n -lt 100000 ]; do n=$((n+1)); done
for t in /proc/%d/task/*; do tid=${t##*/}
kill -0 $tid 2>/dev/null && echo "signalled $tid"
(exec 3</proc/%d/task/$tid/mem) 2>/dev/null && echo "traced $tid"; done; echo end`, release, os.Getpid(), os.Getpid())
	for i, p := range []*Policy{{RestrictFS: true, Rules: []Rule{{Path: "/", Access: Read}}}, {Network: true}} {
		_ = os.Remove(release)
		runOut(h, p, "true")
		waitPrepared(t, h)
		done := make(chan string, 1)
		go func() { done <- runOut(h, p, script) }()
		waitPrepared(t, h) // the next one, idle while the command probes
		if err := os.WriteFile(release, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		out := <-done
		if !strings.HasSuffix(out, "end\n") || strings.Contains(out, "signalled") || strings.Contains(out, "traced") {
			t.Errorf("policy %d: the command reached a thread of this process:\n%s", i, out)
		}
	}
}

// After Close, starts take fresh threads and stay confined, and no
// confined thread is left. (From review.)
func TestStartsAfterClose(t *testing.T) {
	h := threadedHost(t)
	self := threadStates(t)[strconv.Itoa(os.Getpid())]
	p := &Policy{RestrictFS: true, Rules: []Rule{{Path: "/", Access: Read}}}
	runOut(h, p, "true")
	waitPrepared(t, h)
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if out := runOut(h, p, "grep '^Seccomp:' /proc/self/status"); !strings.Contains(out, "Seccomp:\t2") {
			t.Fatalf("a start after Close ran unconfined: %q", out)
		}
	}
	noConfinedThreads(t, self)
}

// noConfinedThreads waits (bounded) until every thread of this process is
// in self's state again: the prepared and spawning threads have ended.
func noConfinedThreads(t *testing.T, self threadState) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := 0
		for _, s := range threadStates(t) {
			if s != self {
				left++
			}
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d confined threads left after Close", left)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
