package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// runInit is the helper as the pid namespace's init (a fresh helper's;
// a prepared sandbox's is preparedMain): it starts the command from a
// spawning thread confined like a spawning thread of the daemon
// (capabilities dropped, Landlock, seccomp, a uid of its own: see
// newSpawnThread), which then reaps until the command has exited and exits
// the init with its status (reapLoop), while this goroutine gives up the
// init's copies of the command's stdio and forwards signals. It returns
// only if the command could not be started.
func runInit(p *wirePlan, l layers, ps *pins, sigs chan os.Signal) helperStatus {
	thread, stage, err := newSpawnThread(p, l, ps)
	if err != nil {
		signal.Reset()
		return failStatus(stage, err)
	}
	type spawned struct {
		pid   int
		stage string
		err   error
	}
	out := make(chan spawned, 1)
	thread.jobs <- func(cred *syscall.Credential, filtered bool) {
		pid, stage, err := spawnCommand(p, cred, filtered)
		out <- spawned{pid, stage, err}
		if err == nil {
			reapLoop(pid) // does not return
		}
	}
	r := <-out
	if r.err != nil {
		signal.Reset()
		st := stageError(r.stage, r.err)
		return helperStatus{Stage: st.Stage, Errno: int(st.Errno), Msg: st.Msg}
	}
	ps.close()
	// The command's stdio stays the command's: the init holds none of it,
	// so the daemon sees EOF when the tree closes its outputs.
	if null, oerr := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0); oerr == nil {
		for fd := 0; fd <= 2; fd++ {
			_ = unix.Dup3(null, fd, 0)
		}
		unix.Close(null)
	}
	// The init is never the OOM killer's pick in the tree's cgroup (set
	// after the fork: the command inherits nothing of it).
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("-1000"), 0)
	// The helper runs with GOGC=off; the init may live long, but
	// allocates next to nothing from here (a signal now and then): a
	// memory limit bounds it without a collection now, which would
	// compete with the command for the CPU as it starts.
	debug.SetMemoryLimit(64 << 20)
	forwardSignals(r.pid, sigs)
	return helperStatus{}
}

// spawnCommand forks and execs the command from the spawning thread, once
// confineAtStart is done, and tells the daemon it runs: preparedStarted
// on the status descriptor (the pipe, or a prepared sandbox's socket: EOF
// alone could be a helper that died before the start), which stays open
// for the report of the command's exit. It returns the command's pid. The
// fork is syscall.ForkExec's on the raw descriptors: no *os.File around
// the received stdio, no pidfd or finalizer of an os.Process (the init
// reaps by pid, and runs with the collector off).
func spawnCommand(p *wirePlan, cred *syscall.Credential, filtered bool) (int, string, error) {
	if stage, err := confineAtStart(p, filtered); err != nil {
		return 0, stage, err
	}
	sys := &syscall.SysProcAttr{Setsid: true, Setctty: p.NS.Ctty, Ctty: 0, Credential: cred}
	if p.NS.CgroupFD > 0 {
		// Cloned into the tree's cgroup, and its cgroup namespace made
		// there, by the child before it takes the daemon's uid back.
		sys.UseCgroupFD, sys.CgroupFD, sys.Unshareflags = true, p.NS.CgroupFD, unix.CLONE_NEWCGROUP
	}
	stdio := []uintptr{0, 1, 2}
	if p.Prepare {
		for i, fd := range p.NS.Stdio {
			stdio[i] = uintptr(fd)
		}
		// The sandbox was prepared at a lower priority: the command runs
		// at the start's, the daemon's (this thread's nice is what the
		// fork copies).
		if err := unix.Setpriority(unix.PRIO_PROCESS, 0, p.NS.Nice); err != nil {
			return 0, "credentials", fmt.Errorf("setpriority(%d): %w", p.NS.Nice, err)
		}
	}
	pid, err := syscall.ForkExec(p.Path, p.Argv, &syscall.ProcAttr{Env: p.Env, Files: stdio, Sys: sys})
	if p.Prepare {
		for _, fd := range p.NS.Stdio {
			unix.Close(fd)
		}
	}
	if p.NS.CgroupFD > 0 {
		unix.Close(p.NS.CgroupFD)
	}
	if err != nil {
		return 0, "exec", &os.PathError{Op: "fork/exec", Path: p.Path, Err: err}
	}
	// The init says so (its daemon cannot tell EOF from a helper that died
	// before the start) and keeps the descriptor for the report of the
	// command's exit.
	_, _ = unix.Write(statusFD, []byte(preparedStarted))
	return pid, "", nil
}

// reapLoop reaps the command (reapCommand), kills and reaps what it left
// (endTree), reports its exit on the status descriptor (see ExitReport)
// and exits the init with the command's status as the daemon reports it
// (128+N for a death by signal N).
func reapLoop(cmd int) {
	code, sig := reapCommand(cmd)
	endTree()
	line := preparedExit + strconv.Itoa(code) + "\n"
	if sig != 0 {
		code = 128 + sig
		line = preparedSignal + strconv.Itoa(sig) + "\n"
	}
	// A daemon that closed its end gets nothing.
	_, _ = unix.Write(statusFD, []byte(line))
	os.Exit(code)
}

// reapCommand reaps every child, in a blocking wait4 (the command's exit
// wakes it directly), until the command has exited, and returns its exit
// code, or the signal that ended it.
func reapCommand(cmd int) (code, sig int) {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, int(unix.SIGKILL) // ECHILD: cannot happen while the command is our child
		}
		if pid == cmd && (ws.Exited() || ws.Signaled()) {
			// Only its end: a command that made this thread its tracer
			// (PTRACE_TRACEME) reports its ptrace stops here too
			// (TestInitPathPtraceStop).
			if ws.Signaled() {
				return 0, int(ws.Signal())
			}
			return ws.ExitStatus(), 0
		}
	}
}

// endTreeBound bounds endTree's wait for what it killed: a killed process
// needs the CPU to exit, which a loaded host gives it late; one in an
// uninterruptible sleep dies when it wakes (the namespace's end, at the
// init's exit, waits for it anyway; a recycled init whose namespace is not
// empty by then serves no other start).
const endTreeBound = time.Second

// endTree kills and reaps what the command left in the namespace before
// the init reports the command's exit: when the daemon reports it, none
// of the tree runs (the init's own exit, which ends the namespace, its
// mounts and /dev/shm, follows). kill(-1) from a namespace's init reaches
// every other process in it; with nothing left, it fails at once.
// It reports whether the namespace holds the init alone.
func endTree() bool {
	// All that is left of the namespace is the init's children (orphans
	// are the init's) and their descendants: none, most of the time, and
	// kill(-1) walks every process of the host to find out.
	var ws unix.WaitStatus
	if _, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil); err == unix.ECHILD {
		return true
	}
	if err := unix.Kill(-1, unix.SIGKILL); err == unix.ESRCH {
		return true
	}
	deadline := time.Now().Add(endTreeBound)
	for time.Now().Before(deadline) {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		switch {
		case err == unix.EINTR:
		case err != nil: // ECHILD: all reaped
			return true
		case pid == 0:
			time.Sleep(100 * time.Microsecond)
		}
	}
	return false
}

// forwarded are the signals the init passes on to the command's process
// group: every signal a client can send with process/signal that a
// process can catch, and StopRelay. SIGSTOP and SIGKILL cannot be caught:
// SIGKILL from the daemon ends the init, and with it the namespace; a
// SIGSTOP for the tree is sent to the init as StopRelay (osproc does).
var forwarded = []os.Signal{unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGTERM, unix.SIGUSR1, unix.SIGUSR2,
	unix.SIGALRM, unix.SIGCONT, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU, unix.SIGWINCH, unix.SIGABRT,
	unix.SIGPWR, unix.SIGXCPU, unix.SIGXFSZ, unix.SIGVTALRM, unix.SIGIO, unix.SIGSYS, unix.SIGTRAP, StopRelay}

// StopRelay is what a sandbox's init turns into a SIGSTOP of its
// command's process group: SIGSTOP itself cannot be caught, and sent to
// the init would stop the init alone. A real-time signal no runtime
// (Go's, glibc's 32 and 33) uses; SIGCONT is forwarded as it is.
const StopRelay = syscall.Signal(40)

// forwardSignals passes every signal the init catches to the command's
// process group, until the init exits.
func forwardSignals(cmd int, sigs <-chan os.Signal) {
	for sig := range sigs {
		forwardSignal(cmd, sig)
	}
}

// forwardSignal passes sig to the command's process group (the command
// itself if the group is gone); StopRelay becomes SIGSTOP.
func forwardSignal(cmd int, sig os.Signal) {
	s, ok := sig.(syscall.Signal)
	if !ok || s == unix.SIGURG || s == unix.SIGPIPE {
		return
	}
	if s == StopRelay {
		s = unix.SIGSTOP
	}
	if err := unix.Kill(-cmd, s); err == unix.ESRCH {
		_ = unix.Kill(cmd, s)
	}
}

// spawnThread is the init's spawning thread: a goroutine locked to a
// thread of its own that confined itself as far as it can before the
// start is known (newSpawnThread), then runs the start and ends with its
// thread (the goroutine exits locked).
type spawnThread struct {
	jobs     chan func(*syscall.Credential, bool)
	cred     *syscall.Credential
	filtered bool // the seccomp filter is installed (else confineAtStart installs it)
}

// newSpawnThread confines a new spawning thread ahead of the start:
// capabilities dropped (but the effective ones the start still uses),
// Landlock, the seccomp filter unless the start enters a network
// namespace of the caller (setns, which the filter refuses), the spawner
// uid. What must wait for the start (that network namespace, the cgroup
// namespace, rooted where the daemon moved the tree, the working
// directory's check) is confineAtStart.
func newSpawnThread(p *wirePlan, l layers, ps *pins) (*spawnThread, string, error) {
	t := &spawnThread{jobs: make(chan func(*syscall.Credential, bool)), filtered: !p.NS.GivenNetNS && p.NS.NetNSFD == 0}
	type result struct {
		stage string
		err   error
	}
	res := make(chan result, 1)
	go onThrowawayThread(func() {
		if p.Prepare {
			// Each start on a prepared sandbox gets an IPC namespace of its
			// own (a recycled sandbox's earlier commands may have left
			// System V objects or message queues in the last one).
			if err := unix.Unshare(unix.CLONE_NEWIPC); err != nil {
				res <- result{"namespaces", fmt.Errorf("unshare(CLONE_NEWIPC): %w", err)}
				return
			}
		}
		cred, stage, err := confineSpawner(p.Policy, l, ps, t.filtered)
		if err != nil {
			res <- result{stage, err}
			return
		}
		t.cred = cred
		if p.Prepare {
			// Prepared at a lower priority, this thread waits for its start
			// at the daemon's: the start wakes it as promptly as the daemon
			// would run it (spawnCommand sets the start's own again).
			_ = unix.Setpriority(unix.PRIO_PROCESS, 0, p.NS.Nice)
		}
		res <- result{}
		(<-t.jobs)(t.cred, t.filtered)
	})
	r := <-res
	if r.err != nil {
		return nil, r.stage, r.err
	}
	return t, "", nil
}

// confineSpawner confines the calling (locked) thread as a sandbox's
// spawning thread: capabilities dropped (but the effective ones a start
// still uses), Landlock with l's grants, the seccomp filter if filter,
// then the spawner uid. It returns the credentials the command's fork
// takes back, or the failed stage. The init's spawning thread
// (newSpawnThread) and a direct thread (direct.go) are confined by it.
func confineSpawner(p *Policy, l layers, ps *pins, filter bool) (*syscall.Credential, string, error) {
	if err := dropCapabilities(); err != nil {
		return nil, "capabilities", err
	}
	if err := applyLandlock(p, l, ps); err != nil {
		return nil, "landlock", err
	}
	if filter {
		if err := installFilter(nsFilter(p)); err != nil {
			return nil, "seccomp", err
		}
	}
	cred, err := becomeSpawner()
	if err != nil {
		return nil, "credentials", err
	}
	return cred, "", nil
}

// confineAtStart is the spawning thread's confinement that waits for the
// start: the caller's network namespace (then the seccomp filter), the
// cgroup namespace (unshare(CLONE_NEWCGROUP) moves only the calling
// thread, and the command is forked from this one), the working
// directory's check under Landlock.
func confineAtStart(p *wirePlan, filtered bool) (string, error) {
	if p.NS.NetNSFD > 0 {
		if filtered {
			return "network", errors.New("the spawning thread was prepared without the caller's network namespace")
		}
		if err := enterNetNS(p.NS.NetNSFD); err != nil {
			return "network", err
		}
	}
	if !filtered {
		if err := installFilter(nsFilter(p.Policy)); err != nil {
			return "seccomp", err
		}
	}
	if p.NS.CgroupFD == 0 { // else the command's fork makes it (spawnCommand)
		if err := cgroupNS(); err != nil {
			return "namespaces", err
		}
	}
	return checkCwd(".")
}
