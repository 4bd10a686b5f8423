package sandbox

import (
	"errors"
	"fmt"
	"os"
	goruntime "runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// Start starts plan's command with attr (its stdio, Dir and Sys; Env and
// any descriptors past stdio are Start's) and returns once the command
// has been exec'd. A failed start returns an *ExecError naming the stage,
// an *UnavailableError for what this host cannot enforce, or the error of
// os.StartProcess (the command's own execve failure among them); nothing
// is left running or unreaped.
//
// A plan that carries only a policy is enforced on a spawning thread: a
// goroutine locks itself to a fresh OS thread of this process, confines
// that thread (private mount namespace, capabilities, Landlock, seccomp:
// all of them per-thread kernel state), forks the command from it and
// exits without unlocking, which makes the Go runtime end the thread. The
// command inherits the thread's confinement exactly as it would inherit
// the helper's; no other thread of this process is ever confined. Plans
// that need process-wide state before exec (rlimits, v1 cgroups to join),
// or that ask for a parent-death signal (which would follow the spawning
// thread's exit), go through the helper: this executable re-exec'd in
// helper mode (see helper.go), as do all plans when h.HelperOnly is set
// or the kernel lacks Landlock erratum 2 (a confined thread could not
// signal its siblings, which the Go runtime does to preempt goroutines).
func Start(h *Host, plan Plan, attr *os.ProcAttr) (*os.Process, error) {
	if plan.Policy != nil && len(plan.Rlimits) == 0 && len(plan.JoinCgroups) == 0 && h.confinesThreads() &&
		(attr.Sys == nil || attr.Sys.Pdeathsig == 0) {
		l, err := planFor(h, plan.Policy)
		if err != nil {
			return nil, err
		}
		return startOnThread(h, plan, l, attr)
	}
	return startHelper(h, plan, attr)
}

// planFor checks policy against the host and plans its layers.
func planFor(h *Host, policy *Policy) (layers, error) {
	if h == nil {
		return layers{}, &UnavailableError{What: "a sandbox", Missing: "a probed host", Check: "internal: no sandbox.Host configured"}
	}
	if err := h.Check(&Policy{Network: policy.Network}); err != nil {
		return layers{}, err
	}
	l, err := policy.plan()
	if err != nil {
		return layers{}, err
	}
	if err := h.checkLayers(l); err != nil {
		return layers{}, err
	}
	return l, nil
}

type threadStart struct {
	proc *os.Process
	err  error
}

// startOnThread runs the confined start on a goroutine locked to an OS
// thread that is not the main thread (a goroutine that exits locked to
// the main thread wedges it instead of ending it).
func startOnThread(h *Host, plan Plan, l layers, attr *os.ProcAttr) (*os.Process, error) {
	done := make(chan threadStart, 1)
	go spawnThread(h, plan, l, attr, done)
	r := <-done // bounded: a few syscalls and one fork/exec
	return r.proc, r.err
}

func spawnThread(h *Host, plan Plan, l layers, attr *os.ProcAttr, done chan<- threadStart) {
	goruntime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		// The main thread: hold it (a locked goroutine's thread runs
		// nothing else, even while it waits) so that the start below
		// runs on another thread, then give it back untouched.
		inner := make(chan threadStart, 1)
		go spawnThread(h, plan, l, attr, inner)
		done <- <-inner
		goruntime.UnlockOSThread()
		return
	}
	// From here on this thread's mount namespace, capabilities, Landlock
	// domain and seccomp filter are the child's. It is never unlocked:
	// when this goroutine returns, the runtime ends the thread, and no
	// goroutine ever runs on it again.
	proc, err := confineAndStart(h, plan, l, attr)
	done <- threadStart{proc: proc, err: err}
}

// confineAndStart runs on the locked spawning thread.
func confineAndStart(h *Host, plan Plan, l layers, attr *os.ProcAttr) (*os.Process, error) {
	var ps pins
	defer ps.close()
	if len(l.Overlays) > 0 {
		// CLONE_NEWNS implies CLONE_FS: the thread gets its own root and
		// cwd too; other threads keep the daemon's namespace.
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			return nil, stageError("mounts", fmt.Errorf("unshare(CLONE_NEWNS): %w", err))
		}
	}
	dir := attr.Dir
	if dir == "" {
		dir = "."
	}
	if stage, err := enforce(plan.Policy, l, h.Scratch, dir, &ps); err != nil {
		return nil, stageError(stage, err)
	}
	a := *attr
	a.Env = plan.Env
	return os.StartProcess(plan.Path, plan.Argv, &a)
}

func stageError(stage string, err error) *ExecError {
	var errno syscall.Errno
	errors.As(err, &errno)
	return &ExecError{Stage: stage, Errno: errno, Msg: err.Error()}
}

// startHelper starts plan through the helper: the plan goes on fd 3, the
// status comes back on fd 4, in a new mount namespace when the policy
// needs overlays.
func startHelper(h *Host, plan Plan, attr *os.ProcAttr) (*os.Process, error) {
	l, err := NewLaunch(h, plan)
	if err != nil {
		return nil, err
	}
	a := *attr
	a.Env = l.Env
	a.Files = append(append([]*os.File(nil), attr.Files...), l.Files[0], l.Files[1])
	if l.NewMountNS {
		sys := syscall.SysProcAttr{}
		if attr.Sys != nil {
			sys = *attr.Sys
		}
		sys.Cloneflags |= syscall.CLONE_NEWNS
		a.Sys = &sys
	}
	proc, err := os.StartProcess(l.Exe, l.Argv, &a)
	if err != nil {
		l.Abort()
		return nil, err
	}
	if herr := l.Started(); herr != nil {
		_, _ = proc.Wait() // the helper exits at once; reap it
		return nil, herr
	}
	return proc, nil
}
