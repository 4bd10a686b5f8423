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
// all of them per-thread kernel state), takes a uid of its own so that
// the command cannot signal or trace it (see spawnerUID), forks the
// command from it (set back to the daemon's uid before its exec) and
// exits without unlocking, which makes the Go runtime end the thread. The
// command inherits the thread's confinement exactly as it would inherit
// the helper's; no other thread of this process is ever confined. Plans
// that need process-wide state before exec (rlimits, v1 cgroups to join),
// or that ask for a parent-death signal (which would follow the spawning
// thread's exit), go through the helper: this executable re-exec'd in
// helper mode (see helper.go), as do all plans when h.HelperOnly is set,
// the daemon lacks CAP_SETUID, or the kernel lacks Landlock erratum 2 (a
// confined thread could not signal its siblings, which the Go runtime does
// to preempt goroutines).
func Start(h *Host, plan Plan, attr *os.ProcAttr) (*os.Process, error) {
	proc, report, err := StartReported(h, plan, attr)
	report.Close()
	return proc, err
}

// StartReported is Start, and for a command whose init reports the
// command's exit (a namespaced start with a pid namespace, whose helper
// stays as the command's init: see ExitReport) that
// report; nil otherwise. The caller that takes the report learns the
// command's status as soon as the init reaped it, before the init (and
// with it the namespaces) has gone: see ExitReport.
func StartReported(h *Host, plan Plan, attr *os.ProcAttr) (*os.Process, *ExitReport, error) {
	SealDescriptors()
	if plan.NetNS != nil && (plan.Policy == nil || !h.namespaces()) {
		// Only the namespaces level places a command in a given network
		// namespace; anything else would run it on the host's network.
		return nil, nil, ErrNetNSUnsupported
	}
	if plan.Policy != nil && h.namespaces() {
		return startHelper(h, plan, attr)
	}
	if plan.Policy != nil && len(plan.Rlimits) == 0 && len(plan.JoinCgroups) == 0 && h.confinesThreads() &&
		(attr.Sys == nil || attr.Sys.Pdeathsig == 0) {
		l, err := planFor(h, plan.Policy)
		if err != nil {
			return nil, nil, err
		}
		proc, err := startOnThread(h, plan, l, attr)
		return proc, nil, err
	}
	return startHelper(h, plan, attr)
}

// planFor checks policy against the host and plans its layers, unless
// the caller's h.Check did (see Host.checked).
func planFor(h *Host, policy *Policy) (layers, error) { return h.checked(policy) }

type threadStart struct {
	proc *os.Process
	err  error
}

// startOnThread runs the confined start on a spawning thread.
func startOnThread(h *Host, plan Plan, l layers, attr *os.ProcAttr) (*os.Process, error) {
	var r threadStart
	if len(l.Overlays) == 0 && h.threads.run(confinementOf(plan.Policy, l), func(restricted bool) {
		r.proc, r.err = confineAndStart(h, plan, l, attr, threadPrepared{caps: true, restricted: restricted})
	}) {
		return r.proc, r.err
	}
	onThrowawayThread(func() { r.proc, r.err = confineAndStart(h, plan, l, attr, threadPrepared{}) })
	return r.proc, r.err
}

// onThrowawayThread runs fn on a goroutine locked to an OS thread that is
// not the main thread (a goroutine that exits locked to the main thread
// wedges it instead of ending it) and returns when fn has. The thread is
// never unlocked: whatever fn did to it (namespaces, credentials,
// Landlock, seccomp) ends with it, and no goroutine ever runs on it again.
func onThrowawayThread(fn func()) {
	done := make(chan struct{})
	go throwawayThread(fn, done)
	<-done // bounded by fn
}

func throwawayThread(fn func(), done chan<- struct{}) {
	goruntime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		// The main thread: hold it (a locked goroutine's thread runs
		// nothing else, even while it waits) so that fn runs on another
		// thread, then give it back untouched.
		inner := make(chan struct{})
		go throwawayThread(fn, inner)
		<-inner
		goruntime.UnlockOSThread()
		close(done)
		return
	}
	fn()
	close(done)
}

// threadPrepared is what a spawning thread of the pool did before its start
// (see threadPool): dropped its capabilities (caps; it then has no
// overlays to mount, which need CAP_SYS_ADMIN), and applied this start's
// very Landlock grants and network filter (restricted).
type threadPrepared struct{ caps, restricted bool }

// confineAndStart runs on the locked spawning thread.
func confineAndStart(h *Host, plan Plan, l layers, attr *os.ProcAttr, prepared threadPrepared) (*os.Process, error) {
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
	var stage string
	var err error
	switch {
	case prepared.restricted:
		stage, err = checkCwd(dir)
	case prepared.caps:
		stage, err = confine(plan.Policy, l, dir, &ps)
	default:
		stage, err = enforce(plan.Policy, l, h.Scratch, dir, &ps)
	}
	if err != nil {
		return nil, stageError(stage, err)
	}
	cred, err := becomeSpawner()
	if err != nil {
		return nil, stageError("credentials", err)
	}
	a := *attr
	a.Env = plan.Env
	sys := syscall.SysProcAttr{}
	if attr.Sys != nil {
		sys = *attr.Sys
	}
	sys.Credential = cred
	a.Sys = &sys
	proc, err := os.StartProcess(plan.Path, plan.Argv, &a)
	if err == nil && afterStartHook != nil {
		afterStartHook(proc)
	}
	return proc, err
}

// afterStartHook, if set (tests only), runs on the spawning thread once
// the command has been exec'd, before the thread ends.
var afterStartHook func(*os.Process)

// spawnerUID is the uid a spawning thread takes for the rest of its life.
// The thread shares the command's Landlock domain, and Landlock lets a
// process signal and trace members of its own domain; a signal to one
// thread is a signal to the whole daemon (kill(2) with a thread id), and
// the thread's memory is the daemon's. With a uid of its own, the command
// (back at the daemon's uid, holding no capability) may neither signal
// nor trace it: kill and ptrace need a matching uid or CAP_KILL /
// CAP_SYS_PTRACE. No process runs as this uid.
const spawnerUID = 0x7ffffff0

// becomeSpawner moves the calling (spawning) thread to spawnerUID,
// keeping its capabilities for the fork child, which sets itself back to
// the returned credentials (the daemon's uid and gid) before it execs.
// setresuid(2) is per-thread in the kernel (syscall.Setresuid would
// change every thread of the process: the raw call is used).
func becomeSpawner() (*syscall.Credential, error) {
	cred := &syscall.Credential{Uid: uint32(unix.Getuid()), Gid: uint32(unix.Getgid()), NoSetGroups: true}
	if err := unix.Prctl(unix.PR_SET_KEEPCAPS, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("prctl(PR_SET_KEEPCAPS): %w", err)
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESUID, spawnerUID, spawnerUID, spawnerUID); errno != 0 {
		return nil, fmt.Errorf("setresuid(%d): %w", spawnerUID, errno)
	}
	// KEEPCAPS kept the permitted set and cleared the effective one; the
	// fork child needs CAP_SETUID and CAP_SETGID effective to go back.
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return nil, fmt.Errorf("capget: %w", err)
	}
	for i := range data {
		data[i].Effective = data[i].Permitted
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return nil, fmt.Errorf("capset: %w", err)
	}
	return cred, nil
}

// probeSpawner reports whether a thread of this process can become a
// spawner (CAP_SETUID, and spawnerUID valid in this user namespace), on a
// throwaway thread.
func probeSpawner() bool {
	ok := false
	onThrowawayThread(func() {
		_, err := becomeSpawner()
		ok = err == nil
	})
	return ok
}

func stageError(stage string, err error) *ExecError {
	var errno syscall.Errno
	errors.As(err, &errno)
	return &ExecError{Stage: stage, Errno: errno, Msg: err.Error()}
}

// startHelper starts plan through the helper: the plan goes on fd 3, the
// status comes back on fd 4, in a new mount namespace when the policy
// needs overlays.
func startHelper(h *Host, plan Plan, attr *os.ProcAttr) (proc *os.Process, report *ExitReport, err error) {
	plan.Dir = attr.Dir
	plan.Ctty = attr.Sys != nil && attr.Sys.Setctty
	var (
		wp      wirePlan
		planned bool
		refill  bool // prepare the next sandbox of wp's plan (after this start)
	)
	pp, mode := h.preparedFor(plan, attr), netMode(plan)
	defer func() {
		if refill {
			// The next start of this plan finds its sandbox prepared: made
			// once this start's command has ended (or a while after it
			// began, see refill), so as not to compete with it.
			pp.refill(h, plan.Policy, mode, prepKey(wp, mode), report.exitedChan())
		}
	}()
	if t := pp.pick(cheapKey(plan.Policy, mode)); t != nil && (directOK(h, t, plan, attr) || t.usable() || discarded(t)) {
		// A sandbox prepared for this policy: the start goes to it at once
		// and runs there if the plan, made meanwhile, is the one it was
		// built from. A direct start checks the sandbox (usable) once its
		// thread has the start.
		if directOK(h, t, plan, attr) {
			proc, report, wp, planned, err = startDirect(h, pp, t, plan, attr, mode)
		} else {
			proc, report, wp, planned, err = startOnPrepared(h, pp, t, plan, attr, mode, nil)
		}
		if err == nil {
			pp.used.Add(1)
		}
		// A recycled sandbox comes back itself once its command has ended.
		refill = planned && !report.Recycled()
		if err != errPreparedGone {
			return proc, report, err
		}
	}
	if pp != nil {
		// None ready for this policy, it was gone, or the plan made
		// meanwhile is not the one it was built from: a fresh helper.
		pp.missed.Add(1)
	}
	if !planned {
		if wp, err = planWire(h, plan); err != nil {
			return nil, nil, err
		}
		if wp.NS != nil && afterNamespacePlan != nil {
			afterNamespacePlan()
		}
		refill = pp != nil
	}
	if wp.NS != nil && wp.NS.NetNS {
		// An empty network namespace made ahead, if one is ready; the next
		// is made in the background once this start returned.
		defer h.nets.refill()
		if n := h.nets.take(); n != nil {
			defer n.Close()
			wp.Plan.NetNS = n
			plan.NetNS = n
		}
	}
	l, err := newLaunch(h, wp)
	if err != nil {
		return nil, nil, err
	}
	a := *attr
	a.Env = l.Env
	a.Files = append(append([]*os.File(nil), attr.Files...), l.Files[0], l.Files[1])
	if l.Cloneflags != 0 {
		if (plan.DevPts != nil || plan.NetNS != nil) && len(attr.Files) != 3 {
			l.Abort()
			return nil, nil, fmt.Errorf("sandbox: a start with its own devpts or network namespace takes exactly 3 stdio files, got %d", len(attr.Files))
		}
		if plan.DevPts != nil {
			a.Files = append(a.Files, plan.DevPts)
		}
		if plan.NetNS != nil {
			a.Files = append(a.Files, plan.NetNS.f)
		}
	}
	if l.NewMountNS || l.Cloneflags != 0 {
		sys := syscall.SysProcAttr{}
		if attr.Sys != nil {
			sys = *attr.Sys
		}
		if l.NewMountNS {
			sys.Cloneflags |= syscall.CLONE_NEWNS
		}
		sys.Cloneflags |= l.Cloneflags
		if l.InitCtty {
			sys.Setctty = false // the command takes the terminal, not its init
		}
		a.Sys = &sys
	}
	proc, err = os.StartProcess(l.Exe, l.Argv, &a)
	if err != nil {
		l.Abort()
		return nil, nil, err
	}
	report, herr := l.started()
	if herr != nil {
		_, _ = proc.Wait() // the helper exits at once; reap it
		return nil, nil, herr
	}
	return proc, report, nil
}

// discarded discards t and says false (a sandbox take found unusable).
func discarded(t *preparedSandbox) bool {
	t.discard()
	return false
}

// preparedAttr reports whether a prepared sandbox can honour attr: it was
// started ahead in a session of its own, by another thread, so a start
// that asks for a parent-death signal, a process group, a foreground
// terminal, credentials or namespaces of its own starts its own helper.
func preparedAttr(attr *os.ProcAttr) bool {
	s := attr.Sys
	return s == nil || (s.Pdeathsig == 0 && !s.Setpgid && !s.Foreground && !s.Noctty && s.Credential == nil &&
		s.Cloneflags == 0 && s.Unshareflags == 0 && s.Chroot == "" && len(s.AmbientCaps) == 0)
}
