package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// The helper's side of a prepared sandbox (prepared.go; the daemon's side
// is prepared_start.go): it builds the namespaces, says it is ready, and
// serves starts, one at a time, as their init, until a start says it is
// the last, the daemon drops it, or cleaning up after a command fails.

// preparedMain is the helper of a prepared sandbox. It returns only on a
// failed start (the daemon reads its status); a daemon that closes the
// socket instead of sending a start (it was replaced, or the Host closed)
// ends it quietly.
func preparedMain(p *wirePlan) helperStatus {
	sigs, notified := initSignals(true)
	ps := new(pins)
	if stage, err := buildNS(p.NS, p.Scratch, ps); err != nil {
		ps.close()
		return failStatus(stage, err)
	}
	l, err := preparedLayers(p)
	if err != nil {
		return failStatus("mounts", err)
	}
	// The spawning thread, confined as far as it can be before the start.
	thread, stage, err := newSpawnThread(p, l, ps)
	if err != nil {
		return failStatus(stage, err)
	}
	made, err := recordMade()
	if err != nil {
		return failStatus("mounts", err)
	}
	if made.limits, err = recordRlimits(); err != nil {
		return failStatus("rlimit", err)
	}
	made.ownNet = p.NS.NetNS && !p.NS.GivenNetNS
	<-notified
	if _, err := unix.Write(statusFD, []byte(preparedReady)); err != nil {
		os.Exit(0)
	}
	// The init allocates little per start; the helper runs with GOGC=off:
	// a memory limit bounds it without collections between starts.
	debug.SetMemoryLimit(64 << 20)
	fr := &frames{fd: statusFD}
	go func() {
		// The signals the init catches go to the command of the start it
		// serves; between starts, nowhere.
		for sig := range sigs {
			// Under forwardMu: a command's pid is reused by the next (the
			// pid counter is set back), and supervise clears current
			// under it: no signal for one command reaches the next.
			forwardMu.Lock()
			if cmd := current.Load(); cmd != 0 {
				forwardSignal(int(cmd), sig)
			}
			forwardMu.Unlock()
		}
	}()
	sp := newSpawner(p, fr)
	sp.made = made
	// The orphans of a command the daemon forked here itself (direct.go)
	// are this init's children: reaped as they exit.
	signal.Notify(sp.chld, unix.SIGCHLD)
	// The pid counter as the first command finds it: every command finds
	// it so (scrub), or it would count the forks of those before it. Nil
	// if unavailable: the init then serves one start.
	sp.lastPid, sp.firstPid = openLastPid()
	// Whether the init may lower its oom_score_adj (a daemon without
	// CAP_SYS_RESOURCE may not): tried once, and put back for the command.
	if os.WriteFile("/proc/self/oom_score_adj", []byte("-1000"), 0) == nil {
		sp.oom = os.WriteFile("/proc/self/oom_score_adj", []byte("0"), 0) == nil
		if !sp.oom {
			return failStatus("oom_score_adj", errors.New("cannot put the init's oom_score_adj back to 0"))
		}
	}
	if b, err := os.ReadFile("/proc/self/oom_score_adj"); err == nil {
		sp.made.oomScoreAdj = strings.TrimSpace(string(b))
	}
	for epoch := uint32(1); ; {
		sp.serve(thread, ps, epoch)
		r := sp.await()
		if r.err != nil {
			s := stageError(r.stage, r.err)
			return helperStatus{Stage: s.Stage, Errno: int(s.Errno), Msg: s.Msg}
		}
		// The thread served epoch r.epoch and entered that start's network
		// namespace (its seccomp filter, installed there, refuses setns): a
		// new one for the next start.
		ps = new(pins)
		if thread, _, err = newSpawnThread(p, l, ps); err != nil {
			os.Exit(0) // the daemon sees EOF and starts a fresh helper
		}
		epoch = r.epoch + 1
	}
}

// preparedLayers are the Landlock grants of a prepared sandbox's spawning
// thread: the policy's, and the namespace's own /dev and /proc.
func preparedLayers(p *wirePlan) (layers, error) {
	extra, err := nsExtraGrants(p.Policy)
	if err != nil {
		return layers{}, err
	}
	return layers{Grants: append(nsGrants(p.Layers), extra...)}, nil
}

// current is the command a prepared sandbox's init serves (0: none): the
// signals the init catches go there. forwardMu is held while one is
// forwarded and while current is cleared.
var (
	current   atomic.Int64
	forwardMu sync.Mutex
)

// spawner runs the starts of a prepared sandbox on its spawning thread,
// one after the other: the thread itself takes each start in, forks the
// command, relays the daemon's signals for it, reaps it and reports its
// exit (no hand-over between threads on a start's path: on a VM, waking
// another thread costs tens of microseconds), then has the sandbox cleaned
// up and waits for the next. Its confinement is the policy's, the same for
// every start. What it may not do confined (the PTY's devpts, socket
// covers, the clean-up's mounts) it hands to the init's main thread
// (mainJobs), which otherwise waits for the thread's end (out).
type spawner struct {
	p        *wirePlan
	fr       *frames
	out      chan spawned // thread -> main: how the thread ended
	mainJobs chan func()
	// oom: the init may lower its oom_score_adj (CAP_SYS_RESOURCE): it
	// does while each command runs. Set before the first start.
	oom bool
	// made is what scrub puts back; lastPid the pid namespace's
	// ns_last_pid (nil: unavailable, no start is recycled), set back to
	// firstPid after each command. Set before the first start.
	made     madeAttrs
	lastPid  *os.File
	firstPid []byte
	// chld is notified of SIGCHLD: the main thread then reaps the
	// namespace's orphans (reapOrphans), unless a command the init forked
	// runs (forked, under reapMu), whose status the spawning thread reaps.
	chld   chan os.Signal
	reapMu sync.Mutex
	forked bool
}

// spawned is how a spawning thread ended: a start that failed (err), or a
// thread that entered a start's network namespace after serving epoch
// (the init makes a new one). The thread exits the init itself otherwise.
type spawned struct {
	epoch uint32
	stage string
	err   error
}

func newSpawner(p *wirePlan, fr *frames) *spawner {
	return &spawner{p: p, fr: fr, out: make(chan spawned, 1), mainJobs: make(chan func()), chld: make(chan os.Signal, 1)}
}

// onMain runs f on the init's main thread (which waits in await).
func (s *spawner) onMain(f func() error) error {
	errc := make(chan error, 1)
	s.mainJobs <- func() { errc <- f() }
	return <-errc
}

// await returns how the spawning thread ended, running what it hands over
// meanwhile.
func (s *spawner) await() spawned {
	for {
		select {
		case f := <-s.mainJobs:
			f()
		case <-s.chld:
			s.reapOrphans()
		case r := <-s.out:
			return r
		}
	}
}

// serve gives thread (confined with ps's pins) its job: the starts from
// epoch on.
func (s *spawner) serve(thread *spawnThread, ps *pins, epoch uint32) {
	thread.jobs <- func(cred *syscall.Credential, filtered bool) {
		s.out <- s.run(epoch, ps, cred, filtered)
	}
}

// run serves starts until one fails (returned), is the sandbox's last,
// the daemon goes, or clean-up fails (the init exits: the daemon sees EOF
// and starts a fresh helper for its next start), or the thread entered a
// start's network namespace (returned).
func (s *spawner) run(epoch uint32, ps *pins, cred *syscall.Credential, filtered bool) spawned {
	for ; ; epoch++ {
		cmd, last, devpts, direct, stage, err := s.one(epoch, cred, filtered)
		if err != nil {
			return spawned{stage: stage, err: err}
		}
		ps.close() // the thread is confined: the pins have served
		if direct {
			// The daemon ran this start itself and has reaped its command
			// (direct.go): what the command left is killed and the sandbox
			// cleaned as after one of the init's own, on the main thread
			// (this thread's Landlock domain may not signal the daemon's).
			if err := s.onMain(func() error {
				if !endTree() {
					return errors.New("the namespace is not empty")
				}
				return scrub(false, s.made, s.lastPid, s.firstPid)
			}); err != nil {
				os.Exit(0)
			}
			if _, err := unix.Write(statusFD, []byte(preparedClean)); err != nil {
				os.Exit(0)
			}
			continue
		}
		code, reusable := s.supervise(cmd, epoch)
		s.reapMu.Lock()
		s.forked = false
		s.reapMu.Unlock()
		if last || !reusable {
			os.Exit(code)
		}
		// Recycled: back to what a fresh preparation would be, while the
		// daemon reads the report and ends the epoch's signals.
		if err := s.onMain(func() error { return scrub(devpts, s.made, s.lastPid, s.firstPid) }); err != nil {
			os.Exit(0)
		}
		if !s.fr.awaitEnd(epoch) {
			os.Exit(0) // the daemon is gone
		}
		if !filtered {
			return spawned{epoch: epoch}
		}
		// The next command's IPC namespace: the one just ended goes with
		// its tree, and whatever the tree left there.
		if err := unix.Unshare(unix.CLONE_NEWIPC); err != nil {
			os.Exit(0)
		}
	}
}

// one takes the start of epoch in, waits for the daemon's word and forks
// the command; it returns the command's pid and what the start said.
//
// A start the daemon forks itself (direct.go) never reaches the init: its
// epoch's end (frameEnd while that start is awaited) says it ran and its
// command is reaped (direct true); a SIGKILL for it meanwhile kills every
// process of the namespace but the init.
func (s *spawner) one(epoch uint32, cred *syscall.Credential, filtered bool) (cmd int, last, devpts, direct bool, stage string, err error) {
	start, fds, direct, err := s.fr.readStart(epoch, func() {
		_ = s.onMain(func() error { return unix.Kill(-1, unix.SIGKILL) })
	})
	if err == io.EOF {
		os.Exit(0) // the daemon dropped it unused
	}
	if err != nil {
		return 0, false, false, false, "plan", err
	}
	if direct {
		return 0, false, false, true, "", nil
	}
	if start.Epoch != epoch {
		return 0, false, false, false, "plan", fmt.Errorf("start of epoch %d, want %d", start.Epoch, epoch)
	}
	if stage, err := applyStart(s.p, start, fds, s.onMain); err != nil {
		return 0, false, false, false, stage, err
	}
	// The daemon checks the plan while this start came in: it runs only
	// on its word; anything else (the plan changed, the daemon is gone)
	// ends the helper with nothing run. The word carries the host sockets
	// bound since they were last covered, covered here as the preparation
	// covered the others.
	covers, flags, ok := s.fr.readGo()
	if !ok {
		os.Exit(0)
	}
	if len(covers) > 0 {
		if err := s.onMain(func() error { return coverSockets(covers, s.p.Scratch) }); err != nil {
			return 0, false, false, false, "mounts", err
		}
	}
	// From the fork until the tree has ended, the spawning thread reaps.
	s.reapMu.Lock()
	s.forked = true
	s.reapMu.Unlock()
	// spawnCommand holds no pidfd of the command (an os.Process would, one
	// per start, the helper running with GOGC off: no finalizer closes it);
	// supervise opens its own.
	pid, stage, err := spawnCommand(s.p, cred, filtered)
	if err != nil {
		return 0, false, false, false, stage, err
	}
	return pid, flags&goLast != 0, start.DevPts, false, "", nil
}

// reapOrphans reaps the namespace's processes that have exited, on the
// main thread, unless the spawning thread's command runs (it reaps then).
// Non-blocking: WNOHANG.
func (s *spawner) reapOrphans() {
	s.reapMu.Lock()
	defer s.reapMu.Unlock()
	for !s.forked {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
	}
}

// supervise is the init while the command (cmd) of epoch runs: it relays
// the daemon's signals for the command and reaps what the namespace's
// processes leave until the command has exited, then kills and reaps
// what the command left (endTree) and reports the exit. It returns the
// command's status as the init would exit with it and whether the report
// was written and the namespace emptied (the sandbox may serve another
// start).
func (s *spawner) supervise(cmd int, epoch uint32) (code int, reported bool) {
	// The init is never the OOM killer's pick in the tree's cgroup (set
	// after the fork: the command inherits nothing of it; scrub takes it
	// back before the next fork).
	if s.oom {
		_ = s.onMain(func() error { return os.WriteFile("/proc/self/oom_score_adj", []byte("-1000"), 0) })
	}
	current.Store(int64(cmd))
	c, sig := s.relayAndReap(cmd, epoch)
	forwardMu.Lock()
	current.Store(0)
	forwardMu.Unlock()
	emptied := endTree()
	line := fmt.Sprintf("%s%d\n", preparedExit, c)
	code = c
	if sig != 0 {
		line = fmt.Sprintf("%s%d\n", preparedSignal, sig)
		code = 128 + sig
	}
	_, err := unix.Write(statusFD, []byte(line))
	// A namespace still holding some of the tree after endTree's bound
	// (a process that does not die) serves no other start.
	return code, err == nil && emptied
}

// orphanReap bounds how long a process of the namespace that exited after
// its parent (the init's child then) stays a zombie while the command runs.
const orphanReap = 100 // milliseconds

// relayAndReap waits for the command's exit (its pidfd), passing on the
// daemon's signals for epoch as they come (SIGKILL: to every process of the
// namespace but the init) and reaping the namespace's orphans, and returns
// the command's exit code or the signal that ended it.
func (s *spawner) relayAndReap(cmd int, epoch uint32) (code, sig int) {
	pidfd, err := unix.PidfdOpen(cmd, 0)
	if err != nil {
		return reapCommand(cmd) // no pidfd: no relay (signals by pid still reach the init)
	}
	defer unix.Close(pidfd)
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}, {Fd: int32(s.fr.fd), Events: unix.POLLIN}}
	for {
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if err == unix.EINTR {
				continue
			}
			if err != nil || pid <= 0 {
				break
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
		if _, err := unix.Poll(fds, orphanReap); err != nil && err != unix.EINTR {
			return reapCommand(cmd)
		}
		if len(fds) > 1 && fds[1].Revents != 0 && !s.fr.relayOne(epoch, cmd) {
			// The daemon closed its end (a caller without the report, or
			// gone): the command runs on; the init exits after it.
			fds = fds[:1]
		}
	}
}

// applyStart makes the start's own part of a prepared sandbox's plan (the
// daemon moved it into the tree's cgroups): the command, its rlimits, stdio, the PTY's devpts, the
// caller's network namespace and the working directory. onMain runs what
// the confined spawning thread may not do on the helper's main thread.
func applyStart(p *wirePlan, st preparedStart, fds []int, onMain func(func() error) error) (string, error) {
	np := p.NS
	want := 3
	if st.DevPts {
		want++
	}
	if st.NetNS {
		want++
	}
	if st.Cgroup {
		want++
	}
	if len(fds) != want {
		return "plan", fmt.Errorf("%d descriptors with the start, want %d", len(fds), want)
	}
	// A recycled sandbox's plan still holds the last start's own fields.
	np.NetNSFD, np.CgroupFD = 0, 0
	p.Path, p.Argv, p.Env = st.Path, st.Argv, st.Env
	np.Dir, np.Ctty, np.Nice = st.Dir, st.Ctty, st.Nice
	for _, r := range st.Rlimits {
		lim := unix.Rlimit{Cur: r.Cur, Max: r.Max}
		if err := unix.Setrlimit(r.Resource, &lim); err != nil {
			return "rlimit", fmt.Errorf("setrlimit(%d): %w", r.Resource, err)
		}
	}
	// The command's stdio as received: the fork puts them at 0-2 in the
	// command, and the init closes its copies right after (it must hold
	// none of them: the daemon sees EOF when the tree closes its outputs).
	np.Stdio = [3]int{fds[0], fds[1], fds[2]}
	next := 3
	if st.DevPts {
		// The PTY's own instance, over the one the sandbox was built with.
		fd := fds[next]
		err := onMain(func() error {
			return unix.MoveMount(fd, "", unix.AT_FDCWD, "/dev/pts", unix.MOVE_MOUNT_F_EMPTY_PATH)
		})
		unix.Close(fd)
		if err != nil {
			return "mounts", fmt.Errorf("/dev: attach the PTY's devpts: %w", err)
		}
		next++
	}
	if st.NetNS {
		np.NetNSFD = fds[next]
		next++
	}
	if st.Cgroup {
		np.CgroupFD = fds[next]
	}
	if err := unix.Chdir(np.Dir); err != nil {
		return "cwd", err
	}
	return "", nil
}
