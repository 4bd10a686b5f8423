package sandbox

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func probeOrSkip(t *testing.T) *Host {
	t.Helper()
	h, err := Probe(os.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	// The tests of the landlock level (spawning threads, the helper and
	// its overlays); nsHost switches to the namespaces level.
	h.Level = LevelLandlock
	if !h.Enforces() {
		t.Skipf("this kernel cannot enforce a sandbox: %+v", h)
	}
	return h
}

// startAndWait runs plan through Start with /dev/null as stdio and
// returns its exit code.
func startAndWait(t *testing.T, h *Host, plan Plan, dir string) (int, error) {
	t.Helper()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	proc, err := Start(h, plan, &os.ProcAttr{Dir: dir, Files: []*os.File{devnull, devnull, devnull}, Sys: &syscall.SysProcAttr{Setsid: true}})
	if err != nil {
		return -1, err
	}
	st, err := proc.Wait()
	if err != nil {
		t.Fatal(err)
	}
	return st.ExitCode(), nil
}

// gitWorkspace is a writable root with a .git kept read-only, a policy
// that needs a private mount namespace (an overlay), with the network cut.
func gitWorkspace(t *testing.T, h *Host) (string, *Policy) {
	t.Helper()
	if !h.MountNS {
		t.Skip("no CAP_SYS_ADMIN: overlays are refused here")
	}
	ws := t.TempDir()
	if err := os.Mkdir(filepath.Join(ws, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	return ws, &Policy{RestrictFS: true, Rules: []Rule{{Path: "/", Access: Read}, {Path: ws, Access: Write}, {Path: filepath.Join(ws, ".git"), Access: Read}}}
}

// TestStartOnSpawningThread: a plan with only a policy never execs the
// helper (a host whose helper executable does not exist still starts it,
// confined), while HelperOnly and a plan with rlimits do.
func TestStartOnSpawningThread(t *testing.T) {
	h := probeOrSkip(t)
	if !h.confinesThreads() {
		t.Skip("no Landlock erratum 2 here: every confined start goes through the helper")
	}
	ws, p := gitWorkspace(t, h)
	h.Exe = "/nonexistent/runtimed"
	script := "echo x > " + ws + "/ok && ! (echo x > " + ws + "/.git/no) 2>/dev/null && ! (echo x > /var/tmp/runtimed-escape-$$) 2>/dev/null && exit 3"
	code, err := startAndWait(t, h, Plan{Path: "/bin/sh", Argv: []string{"sh", "-c", script}, Policy: p}, ws)
	if err != nil || code != 3 {
		t.Fatalf("thread start: code %d, err %v (want 3: writes confined to the workspace, .git read-only)", code, err)
	}
	if _, err := os.Stat(filepath.Join(ws, "ok")); err != nil {
		t.Fatal("the command did not run")
	}
	h.HelperOnly = true
	if _, err := startAndWait(t, h, Plan{Path: "/bin/true", Argv: []string{"true"}, Policy: p}, ws); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("HelperOnly: %v, want the helper's ENOENT", err)
	}
	h.HelperOnly = false
	plan := Plan{Path: "/bin/true", Argv: []string{"true"}, Policy: p, Rlimits: []Rlimit{{Resource: syscall.RLIMIT_NOFILE, Cur: 256, Max: 256}}}
	if _, err := startAndWait(t, h, plan, ws); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("rlimits: %v, want the helper's ENOENT", err)
	}
	// A stage failure on the thread is reported like the helper's.
	var ee *ExecError
	hidden := &Policy{RestrictFS: true, Rules: []Rule{{Path: "/usr", Access: Read}}}
	if _, err := startAndWait(t, h, Plan{Path: "/usr/bin/true", Argv: []string{"true"}, Policy: hidden}, ws); !errors.As(err, &ee) || ee.Stage != "cwd" || !errors.Is(err, syscall.EACCES) {
		t.Fatalf("hidden cwd: %v, want stage cwd, EACCES", err)
	}
	if _, err := startAndWait(t, h, Plan{Path: ws + "/missing", Argv: []string{"missing"}, Policy: p}, ws); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("missing command: %v, want ENOENT", err)
	}
}

// threadState is what a confined start must never leave on a thread of
// the calling process.
type threadState struct {
	seccomp, noNewPrivs, capBnd, mntNS string
}

func threadStates(t *testing.T) map[string]threadState {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]threadState{}
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/status")
		if err != nil {
			continue // ended meanwhile
		}
		var s threadState
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(line, ":")
			switch k {
			case "Seccomp":
				s.seccomp = strings.TrimSpace(v)
			case "NoNewPrivs":
				s.noNewPrivs = strings.TrimSpace(v)
			case "CapBnd":
				s.capBnd = strings.TrimSpace(v)
			}
		}
		if s.mntNS, err = os.Readlink("/proc/self/task/" + task.Name() + "/ns/mnt"); err != nil {
			continue
		}
		out[task.Name()] = s
	}
	return out
}

// TestSpawningThreadsEnd: many concurrent confined starts (mount
// namespace, no capabilities, Landlock, seccomp) leave every thread of
// this process as it was: the spawning threads end, none is reused, and
// the process can still write outside the sandboxes and open TCP sockets
// from any goroutine.
func TestSpawningThreadsEnd(t *testing.T) {
	h := probeOrSkip(t)
	ws, p := gitWorkspace(t, h)
	self := threadStates(t)[fmt.Sprint(os.Getpid())]
	if self.seccomp != "0" || self.noNewPrivs != "0" {
		t.Skipf("this test process is confined already: %+v", self)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := 0; i < 40; i++ {
		wg.Go(func() {
			if code, err := startAndWait(t, h, Plan{Path: "/bin/true", Argv: []string{"true"}, Policy: p}, ws); err != nil || code != 0 {
				errs <- fmt.Errorf("start: code %d err %v", code, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// A spawning thread ends once its goroutine returns; give the runtime
	// a bounded moment to finish ending the last ones.
	deadline := time.Now().Add(5 * time.Second)
	for {
		var bad []string
		for tid, s := range threadStates(t) {
			if s != self {
				bad = append(bad, fmt.Sprintf("thread %s: %+v (process: %+v)", tid, s, self))
			}
		}
		if len(bad) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("confined threads left in this process:\n%s", strings.Join(bad, "\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	// And on whatever threads the goroutines below land, nothing is confined.
	outside := t.TempDir()
	var wg2 sync.WaitGroup
	errs = make(chan error, 20)
	for i := 0; i < 20; i++ {
		wg2.Go(func() {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				errs <- err
				return
			}
			ln.Close()
			if err := os.WriteFile(filepath.Join(outside, fmt.Sprint(i)), nil, 0o644); err != nil {
				errs <- err
			}
		})
	}
	wg2.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("the process lost a right after confined starts: %v", err)
	}
}

// TestSpawningThreadOutOfReach: while the spawning thread still lives
// (held after the exec by a test hook), the confined command can neither
// signal nor trace any thread of this process, the spawning thread, which
// shares its Landlock domain, included (a signal to a thread id is a
// signal to the whole daemon).
func TestSpawningThreadOutOfReach(t *testing.T) {
	for _, prepared := range []bool{false, true} {
		t.Run(map[bool]string{false: "fresh thread", true: "prepared thread"}[prepared], func(t *testing.T) {
			spawningThreadOutOfReach(t, prepared)
		})
	}
}

// spawningThreadOutOfReach: prepared, the start runs on a thread of the
// pool restricted ahead (a warm-up start with the same policy prepares it).
func spawningThreadOutOfReach(t *testing.T, prepared bool) {
	h := probeOrSkip(t)
	if !h.confinesThreads() {
		t.Skip("confined starts go through the helper here")
	}
	p := &Policy{RestrictFS: true, Rules: []Rule{{Path: "/", Access: Read}}}
	var restricted uint64
	if prepared {
		if h.threads == nil {
			t.Skip("no prepared threads here")
		}
		if code, err := startAndWait(t, h, Plan{Path: "/bin/true", Argv: []string{"true"}, Policy: p}, "/"); err != nil || code != 0 {
			t.Fatalf("warm-up start: %d %v", code, err)
		}
		waitPrepared(t, h)
		restricted = h.threads.restrictd.Load()
	}
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
	tids, release := make(chan int, 1), make(chan struct{})
	afterStartHook = func(*os.Process) { tids <- unix.Gettid(); <-release }
	defer func() { afterStartHook = nil }()
	script := `for t in /proc/$PPID/task/*; do tid=${t##*/}; echo "tid $tid"
kill -0 $tid 2>/dev/null && echo "signalled $tid"
(exec 3</proc/$PPID/task/$tid/mem) 2>/dev/null && echo "traced $tid"; done; echo end`
	type started struct {
		proc *os.Process
		err  error
	}
	done := make(chan started, 1)
	go func() {
		proc, err := Start(h, Plan{Path: "/bin/bash", Argv: []string{"bash", "-c", script}, Policy: p},
			&os.ProcAttr{Dir: "/", Files: []*os.File{devnull, w, w}, Sys: &syscall.SysProcAttr{Setsid: true}})
		done <- started{proc, err}
	}()
	var tid int
	select {
	case tid = <-tids:
	case s := <-done:
		t.Fatalf("start: %v", s.err)
	case <-time.After(30 * time.Second):
		t.Fatal("no start within 30 s")
	}
	w.Close()
	_ = r.SetReadDeadline(time.Now().Add(30 * time.Second))
	out, err := io.ReadAll(r) // the command's output, to EOF: it has exited
	close(release)
	s := <-done
	if s.err != nil {
		t.Fatal(s.err)
	}
	_, _ = s.proc.Wait()
	if err != nil {
		t.Fatalf("reading the command's output: %v (%q)", err, out)
	}
	if !strings.Contains(string(out), fmt.Sprintf("tid %d\n", tid)) || !strings.HasSuffix(string(out), "end\n") {
		t.Fatalf("the command did not see the spawning thread %d alive: %q", tid, out)
	}
	if strings.Contains(string(out), "signalled") || strings.Contains(string(out), "traced") {
		t.Errorf("the confined command reached a thread of this process (spawning thread %d):\n%s", tid, out)
	}
	if prepared && h.threads.restrictd.Load() != restricted+1 {
		t.Error("the start did not run on the thread prepared for it")
	}
}
