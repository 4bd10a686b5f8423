package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Direct starts. A start on a prepared sandbox through its init costs
// three hand-overs between two processes (the start, the word to go, the
// report of the exit: 30-45 µs each on a VM whose idle vCPUs halt) and a
// fork and exec that run slower from the init than from the daemon. A
// direct start has none of them: the daemon forks the command into the
// sandbox itself, from a thread of its own that joined the sandbox's
// namespaces when the sandbox was made.
//
// That thread (directThread) unshared its file-system state (CLONE_FS:
// a thread sharing it may not join a mount namespace) and entered the
// init's mount, pid (for its children) and network namespaces with one
// setns(2) on the init's pidfd, made an IPC namespace of its own, then
// confined itself with the init's spawning thread's own code
// (confineSpawner: capabilities, Landlock with the namespace's own /dev
// and /proc, the seccomp filter, the spawner uid). For each start it takes
// the start's priority, enters the working directory (its own: the
// daemon's other threads keep theirs) and checks it under Landlock, and
// forks the command into the tree's cgroup, where the command makes its
// cgroup namespace. The command is the daemon's child: the daemon reaps it
// on its pidfd, its exit status is its own, and a signal reaches it (its
// process group) without the init. The init stays the namespace's pid 1:
// it reaps the orphans (on SIGCHLD) and, once the daemon ends the start's
// epoch (frameEnd), kills what the command left, cleans up as after one
// of its own (scrub) and says "clean"; the thread makes the next
// command's IPC namespace meanwhile.
//
// Only a start the thread can honour goes direct: pipes (a PTY's devpts
// is mounted by the init), the sandbox's own or the host's network (the
// managed network's namespace is entered by the init's thread at the
// start), no rlimits (process-wide: the thread's would be the daemon's),
// the tree's v2 cgroup given (its cgroup.events says whether the tree
// outlived the command), no v1 cgroup to join and no host socket to cover
// since the preparation (the init's main thread covers them); any other
// goes through the init as before.
//
// Concurrency: a directThread belongs to its sandbox, and only the
// sandbox's holder (the pool, the start that took it, then its report)
// sends it jobs; close may come from anyone (discard).

// directThread is a daemon thread in a prepared sandbox's namespaces. It
// sleeps in poll(2) on its eventfd (and the init's pidfd), outside the Go
// scheduler: a job wakes
// it directly, as the job is handed over (a goroutine locked to its thread
// is woken through the scheduler instead: two thread wake-ups, ~80 µs
// here, and only once the sender blocks).
type directThread struct {
	// efd is the eventfd the thread sleeps on, closed by the thread as it
	// ends: an *os.File, so that a wake after that (close's, the report's
	// settling goroutine's) fails instead of writing to whatever has the
	// descriptor's number by then.
	efd       *os.File
	job       atomic.Pointer[directStart] // the next start (one at a time: the holder's)
	renewing  atomic.Bool                 // make the next command's IPC namespace first
	quitting  atomic.Bool                 // set by close
	quit      chan struct{}               // closed by close: the thread ends, or has
	closeOnce sync.Once
	// broken and cred are the thread's own (written and read by it alone):
	// broken, it failed to make a new IPC namespace after a command and
	// refuses every start from then on; cred, what its forks take back.
	broken bool
	cred   *syscall.Credential
}

// directStart is a start for the thread. The thread prepares it (priority, working
// directory) as soon as it has it, while the holder plans the start; it
// forks only on the holder's word (word 1; 2: do not), which it spins
// for a while (it is awake, and a sleeping thread's wake-up costs tens of
// microseconds on a VM), then waits for on wordC.
//
// Its fields up to nice are set by the holder before send and only read
// after; word and wordC are the holder's to set (say), the thread's to
// read (await); reply is the thread's to send on, once.
type directStart struct {
	path  string
	argv  []string
	env   []string
	dir   string
	files []*os.File
	cgfd  int
	nice  int

	word  atomic.Int32
	wordC chan struct{}     // capacity 1: a send after word is set
	reply chan directResult // capacity 1
}

const (
	wordGo    = 1
	wordAbort = 2
)

// wordSpin bounds the thread's spinning for the word: about a start's
// plan.
const wordSpin = 200 * time.Microsecond

// say gives the thread its word (once).
func (s *directStart) say(w int32) {
	s.word.Store(w)
	s.wordC <- struct{}{}
}

func (d *directThread) await(s *directStart) int32 {
	deadline := time.Now().Add(wordSpin)
	for i := 0; ; i++ {
		if w := s.word.Load(); w != 0 {
			return w
		}
		if d.quitting.Load() {
			return wordAbort
		}
		if i%64 == 63 && time.Now().After(deadline) {
			select {
			case <-s.wordC:
				return s.word.Load()
			case <-d.quit:
				return wordAbort
			}
		}
	}
}

type directResult struct {
	proc  *os.Process
	stage string
	err   error
}

// errAborted: the holder's word was not to fork.
var errAborted = errors.New("sandbox: direct start aborted")

// newDirectThread makes t's direct thread (nil if it cannot be made: the
// init then forks every command).
func newDirectThread(t *preparedSandbox, wp *wirePlan) *directThread {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		return nil
	}
	d := &directThread{efd: os.NewFile(uintptr(efd), "eventfd"), quit: make(chan struct{})}
	ready := make(chan error, 1)
	go throwawayThread(func() { d.run(t.proc.Pid, efd, wp, ready) }, make(chan struct{}, 1))
	if err := <-ready; err != nil {
		return nil
	}
	return d
}

// run is the thread: it joins the init's namespaces, confines itself and
// serves jobs until close.
func (d *directThread) run(initPid, efd int, wp *wirePlan, ready chan<- error) {
	_ = unix.Setpriority(unix.PRIO_PROCESS, 0, max(preparedNice, threadNice()))
	defer d.efd.Close()
	pidfd, err := unix.PidfdOpen(initPid, 0)
	if err != nil {
		ready <- err
		return
	}
	defer unix.Close(pidfd)
	if err := d.enter(pidfd, wp); err != nil {
		ready <- err
		return
	}
	ready <- nil
	// A thread that ends on its own (its init ended: a command can make
	// it, lowering its hard limits so that it cannot clean up) is closed
	// too, or the holder that sent it a start would wait for its answer
	// forever (TestDirectAttackInitLimits).
	defer d.close()
	// It sleeps until a job, close, or the init's end (however the
	// sandbox ends: discarded, or its init exited after a last start).
	fds := []unix.PollFd{{Fd: int32(efd), Events: unix.POLLIN}, {Fd: int32(pidfd), Events: unix.POLLIN}}
	var buf [8]byte
	cmd := 0 // the command that runs (the thread's child), 0: none
	for {
		// While a command runs, its siblings' ends are reaped every
		// orphanReap ms, as the init reaps its orphans.
		timeout := -1
		if cmd != 0 {
			timeout = orphanReap
		}
		n, err := unix.Poll(fds, timeout)
		if err != nil && err != unix.EINTR {
			d.broken = true
			return
		}
		if n == 0 {
			reapSiblingsBut(cmd)
			continue
		}
		if d.quitting.Load() {
			// Discarded (after the last command's reap): the command's
			// siblings die with the init, which waits for their reaping.
			reapSiblings(true)
			return
		}
		if fds[1].Revents != 0 {
			return // the init has ended: its namespace is empty
		}
		if fds[0].Revents == 0 {
			continue
		}
		if _, err := unix.Read(efd, buf[:]); err != nil && err != unix.EINTR {
			d.broken = true
			return
		}
		if d.renewing.Swap(false) {
			cmd = 0 // its report reaped it
			reapSiblings(false)
			// The next command's IPC namespace: the last one's goes
			// with whatever its tree left there.
			if err := unix.Unshare(unix.CLONE_NEWIPC); err != nil {
				d.broken = true
			}
		}
		if j := d.job.Swap(nil); j != nil {
			stage, err := d.prepare(j)
			if d.await(j) != wordGo {
				d.answer(j, directResult{err: errAborted})
				continue
			}
			if err != nil {
				d.answer(j, directResult{stage: stage, err: err})
				continue
			}
			r := d.fork(j)
			if r.proc != nil {
				cmd = r.proc.Pid
			}
			d.answer(j, r)
			// Idle, and the next IPC namespace's making, at the priority
			// the sandbox was prepared at (the next start sets its own):
			// the daemon's goroutines come first while the command runs
			// and ends.
			_ = unix.Setpriority(unix.PRIO_PROCESS, 0, max(preparedNice, j.nice))
		}
	}
}

// reapSiblings reaps the calling direct thread's children (__WNOTHREAD:
// not the daemon's other children), block: until it has none. A command
// is the thread's child, and so is whatever it clones with CLONE_PARENT:
// siblings that neither its report (it reaps the command alone) nor the
// init (they are not its children) would reap, and that, as zombies,
// would hold the daemon's pids and the init's exit (the end of a pid
// namespace waits for every process in it to be reaped)
// (TestDirectAttackCloneParent). Called only where the thread has no
// command unreaped: at a renew (the last command's report reaped it and
// gave the sandbox back) and as the thread is discarded (after the
// command's report, or its Abandon, reaped it); the init's clean-up, or
// its end, has killed the siblings by then, or will.
func reapSiblings(block bool) {
	flags := unix.WALL | unix.WNOTHREAD
	if !block {
		flags |= unix.WNOHANG
	}
	for {
		pid, err := unix.Wait4(-1, nil, flags, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
	}
}

// reapSiblingsBut reaps the calling direct thread's children that have
// exited, but cmd, the command (its report reaps it), without waiting: a
// command's CLONE_PARENT siblings that end while it runs do not stay
// zombies of the daemon until its end (TestDirectReapsSiblingsWhileRuns).
func reapSiblingsBut(cmd int) {
	for {
		var info unix.Siginfo
		if err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT|unix.WALL|unix.WNOTHREAD, nil); err != nil {
			return
		}
		pid := int(*(*int32)(unsafe.Add(unsafe.Pointer(&info), siPidOff)))
		code := *(*int32)(unsafe.Add(unsafe.Pointer(&info), siCodeOff))
		if pid == 0 || pid == cmd || code < cldExited || code > cldDumped {
			return // none, the command's own end, or a stop
		}
		if _, err := unix.Wait4(pid, nil, unix.WNOHANG|unix.WALL|unix.WNOTHREAD, nil); err != nil {
			return
		}
	}
}

// wake wakes the thread (an eventfd write does not block: the count
// would have to reach 2^64-1).
func (d *directThread) wake() {
	one := [8]byte{1}
	_, _ = d.efd.Write(one[:])
}

func (d *directThread) enter(pidfd int, wp *wirePlan) error {
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare(CLONE_FS): %w", err)
	}
	if err := unix.Setns(pidfd, unix.CLONE_NEWNS|unix.CLONE_NEWPID|unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("setns: %w", err)
	}
	if err := unix.Unshare(unix.CLONE_NEWIPC); err != nil {
		return fmt.Errorf("unshare(CLONE_NEWIPC): %w", err)
	}
	if err := joinOwnKeyring(); err != nil {
		return err
	}
	l, err := preparedLayers(wp)
	if err != nil {
		return err
	}
	var ps pins
	defer ps.close()
	d.cred, _, err = confineSpawner(wp.Policy, l, &ps, true)
	return err
}

// prepare is a start's work before its word: the start's priority, its
// working directory (the thread's own) checked under Landlock.
func (d *directThread) prepare(s *directStart) (string, error) {
	if d.broken {
		return "namespaces", errPreparedGone
	}
	if err := unix.Setpriority(unix.PRIO_PROCESS, 0, s.nice); err != nil {
		return "credentials", fmt.Errorf("setpriority(%d): %w", s.nice, err)
	}
	if err := unix.Chdir(s.dir); err != nil {
		return "cwd", err
	}
	return checkCwd(".")
}

func (d *directThread) fork(s *directStart) directResult {
	// StartReported sealed the daemon's descriptors (close_range: the
	// thread shares the descriptor table): only its stdio reaches the
	// command.
	sys := &syscall.SysProcAttr{Setsid: true, Credential: d.cred,
		UseCgroupFD: true, CgroupFD: s.cgfd, Unshareflags: unix.CLONE_NEWCGROUP}
	proc, err := os.StartProcess(s.path, s.argv, &os.ProcAttr{Env: s.env, Files: s.files, Sys: sys})
	if err != nil {
		return directResult{stage: "exec", err: err}
	}
	return directResult{proc: proc}
}

// send hands j to the thread; false if the thread has ended.
func (d *directThread) send(j *directStart) bool {
	if d.quitting.Load() {
		return false
	}
	d.job.Store(j)
	d.wake()
	return true
}

// answer is the thread's reply to j.
func (d *directThread) answer(j *directStart, r directResult) {
	j.reply <- r
}

// result waits for the thread's answer to j (which it gives once it took
// j: only the holder ends a thread while it holds its sandbox).
func (d *directThread) result(j *directStart) (directResult, bool) {
	select {
	case r := <-j.reply:
		return r, true
	case <-d.quit:
		return directResult{}, false
	}
}

// renew has the thread make the next command's IPC namespace when it
// next wakes (wake, or at the latest before its next job); false if the
// thread has ended. A thread that fails to refuses that job.
func (d *directThread) renew() bool {
	if d.quitting.Load() {
		return false
	}
	d.renewing.Store(true)
	return true
}

// close ends the thread (safe on nil, more than once, from any goroutine).
func (d *directThread) close() {
	if d != nil {
		d.closeOnce.Do(func() {
			d.quitting.Store(true)
			close(d.quit)
			d.wake()
		})
	}
}

// directOK reports whether the start (before its plan) can go direct on t.
func directOK(h *Host, t *preparedSandbox, plan Plan, attr *os.ProcAttr) bool {
	return t.direct != nil && !h.NoDirect && plan.Recycle && plan.DevPts == nil && plan.NetNS == nil &&
		len(plan.Rlimits) == 0 && !plan.Ctty && len(attr.Files) == 3 && attr.Sys != nil && attr.Sys.UseCgroupFD
}

// startDirect runs the start of plan on t's direct thread (directOK said
// it may): it hands the start to the thread, plans it meanwhile, and lets
// the thread fork if the plan is exactly the one t was built from. A plan
// that needs the init (host sockets to cover, v1 cgroups to join) goes to
// startOnPrepared with it.
func startDirect(h *Host, pp *preparedPool, t *preparedSandbox, plan Plan, attr *os.ProcAttr, mode string) (proc *os.Process, report *ExitReport, wp wirePlan, planned bool, err error) {
	// The working directory as os/exec would take it: relative to the
	// daemon's (the thread's own is the last start's).
	dir := plan.Dir
	if !filepath.IsAbs(dir) {
		wd, err := os.Getwd()
		if err != nil {
			pp.giveBack(t) // it ran nothing
			return nil, nil, wp, false, fmt.Errorf("sandbox: working directory: %w", err)
		}
		dir = filepath.Join(wd, dir)
	}
	j := &directStart{path: plan.Path, argv: plan.Argv, env: plan.Env, dir: dir, files: attr.Files,
		cgfd: attr.Sys.CgroupFD, nice: threadNice(), wordC: make(chan struct{}, 1), reply: make(chan directResult, 1)}
	if !t.direct.send(j) {
		t.discard()
		return nil, nil, wp, false, errPreparedGone
	}
	// abort takes the start back from the thread (it forks nothing).
	abort := func() bool {
		j.say(wordAbort)
		_, ok := t.direct.result(j)
		return ok
	}
	wp, err = planWire(h, plan)
	if err != nil {
		if abort() {
			pp.giveBack(t) // it ran nothing
		} else {
			t.discard()
		}
		return nil, nil, wp, false, err
	}
	planned = true
	if afterNamespacePlan != nil {
		afterNamespacePlan()
	}
	// The init's "clean" after the last command, if it was direct (it
	// cleaned up while this start was planned), and whether the sandbox
	// is alive.
	if !t.usable() {
		abort()
		t.discard()
		return nil, nil, wp, planned, errPreparedGone
	}
	needsInit := len(wp.JoinCgroups) > 0
	for _, m := range wp.NS.Mounts {
		if m.Socket && t.sockets[m.Path] != m.ID {
			needsInit = true
		}
	}
	if prepKey(wp, mode) != t.key || needsInit {
		if !abort() {
			t.discard()
			return nil, nil, wp, planned, errPreparedGone
		}
		if needsInit && prepKey(wp, mode) == t.key {
			return startOnPrepared(h, pp, t, plan, attr, mode, &wp)
		}
		t.discard() // built for another plan
		return nil, nil, wp, planned, errPreparedGone
	}
	j.say(wordGo)
	r, ok := t.direct.result(j)
	if !ok || r.err == errPreparedGone || (r.err != nil && !t.alive()) {
		// The sandbox is gone (its init was killed: its pid namespace
		// takes no process), or its thread, or the thread has no IPC
		// namespace for the command: nothing ran.
		t.discard()
		return nil, nil, wp, planned, errPreparedGone
	}
	if r.err != nil {
		pp.giveBack(t) // nothing ran: the sandbox is as it was
		return nil, nil, wp, planned, stageError(r.stage, r.err)
	}
	t.epoch++
	pp.direct.Add(1)
	report, err = newDirectReport(pp, t, r.proc.Pid, attr.Sys.CgroupFD)
	if err != nil {
		// No pidfd for the command: it is killed and reaped here, and
		// the sandbox goes with what it may have left.
		_ = r.proc.Kill()
		_, _ = r.proc.Wait()
		t.discard()
		return nil, nil, wp, planned, err
	}
	return r.proc, report, wp, planned, nil
}
