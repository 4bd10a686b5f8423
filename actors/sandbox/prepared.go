package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Prepared sandboxes. At the namespaces level with the pid namespace
// isolated, what a start costs is mostly what does not depend on the
// command: the helper's exec and Go start-up, the namespaces' creation,
// the mounts of its policy, its signal handling. After each namespaced
// start the pool prepares, in the background, a helper for the next start
// of the same policy: cloned into new mount, IPC and pid namespaces (and a
// network namespace of its own when the network is restricted and the
// caller brings none), its view of the file system built from a namespace
// plan made afresh (buildNS), its signals caught; it then says it is ready
// and waits on a socket for one start. A start whose own plan is exactly
// the plan the sandbox was built from (the same rules, resolved to the
// same files, the same protected paths, the same mount table: prepKey;
// host sockets bound since are covered at the start) takes it: the daemon moves it into the tree's cgroups (v2 and
// v1) and sends what is the start's alone (the command, environment,
// working directory, rlimits, and as SCM_RIGHTS the stdio, the PTY's
// devpts and the caller's network namespace). Its spawning thread was
// confined ahead (capabilities, Landlock, seccomp unless the start brings
// a network namespace, the spawner uid: newSpawnThread); that thread
// itself receives the start, makes the cgroup namespace, enters the
// working directory, forks the command and says so; the helper stays as
// the init, and reports the command's exit on the socket before its own
// (ExitReport). A start whose plan differs (a file
// replaced, a mount made since) does not take it: it starts its own
// helper, and the next one is prepared for its plan.
//
// Concurrency: mu guards ready, preparing and closed; no I/O under it.
// Each preparation runs on a goroutine of its own (at most one per key),
// counted by wg, which close waits for.
type preparedPool struct {
	mu        sync.Mutex
	ready     []*preparedSandbox // the most recently made last; at most maxPrepared
	preparing map[string]bool
	closed    bool
	closing   chan struct{} // closed by close: preparations waiting to begin give up
	wg        sync.WaitGroup
	// watching: the mount watch runs (watchMounts, started with the
	// first preparation); unwatch is the write end of its wake-up pipe,
	// closed by close.
	watching bool
	unwatch  int
	watchWG  sync.WaitGroup

	// Counters, read by Host.PreparedStats (metrics) and tests.
	used     atomic.Uint64 // starts served by a prepared sandbox
	failed   atomic.Uint64 // preparations that failed
	missed   atomic.Uint64 // eligible starts that started a fresh helper: none ready for their plan, or the one taken was gone
	dropped  atomic.Uint64 // waiting sandboxes ended because the mount table changed (tests)
	recycled atomic.Uint64 // sandboxes given back after a start (recycled)
	direct   atomic.Uint64 // starts the daemon forked into a prepared sandbox itself (direct.go)
}

// maxPrepared is how many policies have a sandbox waiting (Codex
// alternates read-only and workspace-write starts): each holds an idle
// helper process (about 15 MB resident, most of it this executable's
// shared pages) until it is used, replaced or the Host closed.
const maxPrepared = 2

// preparedDelay is how long after the start that asks for it a
// preparation begins if its command still runs (or its end is not seen:
// a report nobody waits for); preparedGrace, how long after the
// command's end. An agent's next command comes after it has read the
// last one's output and thought.
const (
	preparedDelay = 10 * time.Millisecond
	preparedGrace = time.Millisecond
)

// preparedNice is the priority a sandbox is prepared at (see
// prepareSandbox); its command runs at the daemon's.
const preparedNice = 10

// preparedTimeout bounds a preparation (the helper's start and mounts).
const preparedTimeout = 10 * time.Second

type preparedSandbox struct {
	sockets map[string]fileID // the host sockets covered in its mount namespace
	epoch   uint32            // the starts it served (the owner's: the pool, or the start that took it)
	// direct is the daemon's thread in its namespaces (direct.go; nil:
	// every start goes through the init). unclean: the last start was
	// direct and the init's "clean" is still to be read (the owner's).
	direct  *directThread
	unclean bool
	// settled, if not nil, is closed once the last direct start's end is
	// written to the init (direct_report.go); the next holder waits for it.
	settled chan struct{}
	key     string
	cheap   string // cheapKey: what a start takes it by, before its plan is made
	proc    *os.Process
	sock    *os.File // the daemon's end of the socket pair
}

// What a prepared sandbox writes on its socket, a line each:
// preparedReady once built; then preparedStarted once the command runs and
// later preparedExit with the command's status once the init reaped it
// (then the init exits: EOF); or, if the start failed, a helperStatus
// (JSON, then EOF).
const (
	preparedReady   = "ready\n"
	preparedStarted = "started\n"
	preparedExit    = "exit "   // then the code
	preparedSignal  = "signal " // then the signal that ended the command
	// preparedClean: after a start the daemon forked itself (direct.go),
	// the init killed what its command left and cleaned up (scrub).
	preparedClean = "clean\n"
)

// What the daemon writes on a prepared sandbox's socket: frames of a
// type byte and their fields (big-endian), each written in one call
// (writeFrame), so frames from different goroutines never interleave.
const (
	// frameStart, a uint64 length, the preparedStart's JSON; the
	// start's descriptors ride with its first bytes (SCM_RIGHTS).
	frameStart = 'S'
	// frameGo lets a held start fork its command: flags (goLast), a
	// uint32 length and the JSON of the socket covers to add.
	frameGo = 'g'
	// frameSignal, an epoch (uint32) and a signal number (byte): signal
	// the command of that start (ignored for any other epoch).
	frameSignal = 'x'
	// frameEnd and an epoch: the daemon has the command's exit and sends
	// no more signals for it; a recycled init then serves the next start.
	frameEnd = 'e'
)

// goLast, in frameGo's flags: the init exits after this start's report
// (it is not recycled).
const goLast = 1

// netMode is how a namespaced start gets its network: "own" (restricted:
// a new empty namespace), "given" (Plan.NetNS, the managed network's) or
// "host" (the policy allows the network).
func netMode(plan Plan) string {
	switch {
	case plan.NetNS != nil:
		return "given"
	case plan.Policy != nil && plan.Policy.Network:
		return "host"
	}
	return "own"
}

// prepKey is what a prepared sandbox was built from: the namespace wire
// plan without what is the start's alone, and the daemon's mount table
// (the sandbox's view is a copy of it: a mount made or removed since the
// preparation must not be missing from, or linger in, the command's).
func prepKey(wp wirePlan, mode string) string {
	k := struct {
		Mode   string  `json:"mode"`
		Policy *Policy `json:"policy"`
		Layers layers  `json:"layers"`
		NS     nsPlan  `json:"ns"`
		Scrtch string  `json:"scratch"`
		Mounts string  `json:"mounts"`
	}{Mode: mode, Policy: wp.Policy, Layers: wp.Layers, NS: *wp.NS, Scrtch: wp.Scratch, Mounts: mountTable()}
	k.NS.Dir, k.NS.Ctty, k.NS.DevPtsFD, k.NS.NetNSFD, k.NS.NetNS, k.NS.GivenNetNS, k.NS.Nice = "", false, 0, 0, false, false, 0
	// Host sockets are not the key's: a start covers those bound since the
	// preparation (startOnPrepared), and one gone takes its cover with it.
	k.NS.Mounts = nil
	for _, m := range wp.NS.Mounts {
		if !m.Socket {
			k.NS.Mounts = append(k.NS.Mounts, m)
		}
	}
	b, _ := json.Marshal(k)
	return string(b)
}

// cheapKey is what a start takes a prepared sandbox by before its plan is
// made: the policy as given and the network mode (the plan, made while
// the sandbox takes the start in, must then match its key exactly).
func cheapKey(p *Policy, mode string) string {
	b, _ := json.Marshal(struct {
		Mode   string  `json:"mode"`
		Policy *Policy `json:"policy"`
	}{mode, p})
	return string(b)
}

// mountTable digests the daemon's mount table (its main thread's mount
// namespace, which sandboxes copy; "" if unreadable, which no table
// digests to). Reading /proc/self/mountinfo costs some 50 µs, so the
// digest is kept and made again only when the kernel says the table
// changed: a poll of an open mountinfo reports POLLPRI once per change
// since the last poll (mounts.watch). A start that sees the change drops
// the kept digest under the lock before it lets any other start look, so
// no start after a change uses a digest from before it.
func mountTable() string {
	m := &mounts
	m.mu.Lock()
	if m.fd == 0 {
		m.fd = -1
		if fd, err := unix.Open("/proc/self/mountinfo", unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
			m.fd = fd
		}
	}
	if m.fd < 0 {
		m.mu.Unlock()
		return digestMountinfo()
	}
	fds := []unix.PollFd{{Fd: int32(m.fd), Events: unix.POLLPRI}}
	if n, err := unix.Poll(fds, 0); err != nil || n > 0 { // a non-blocking look
		m.digest = ""
	}
	d := m.digest
	m.mu.Unlock()
	if d != "" {
		return d
	}
	d = digestMountinfo()
	m.mu.Lock()
	if m.digest == "" {
		m.digest = d
	}
	m.mu.Unlock()
	return d
}

// mounts is mountTable's watch: an open mountinfo (its change events) and
// the digest of the table as of the last change seen. Guarded by mu; the
// only system call under it is a poll that does not wait.
var mounts struct {
	mu     sync.Mutex
	fd     int // 0: not opened yet; -1: cannot be
	digest string
}

func digestMountinfo() string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func (t *preparedSandbox) discard() {
	t.direct.close()
	_ = t.proc.Kill()
	_, _ = t.proc.Wait()
	t.sock.Close()
}

// alive: an idle prepared sandbox writes nothing and keeps its end open;
// anything to read (EOF among it) means it is gone.
func (t *preparedSandbox) alive() bool {
	fds := []unix.PollFd{{Fd: int32(t.sock.Fd()), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n == 0
}

// take returns the most recent sandbox prepared for cheap (a cheapKey),
// if one is ready and alive.
func (pp *preparedPool) take(cheap string) *preparedSandbox {
	t := pp.pick(cheap)
	if t != nil && !t.usable() {
		t.discard()
		return nil
	}
	return t
}

// usable reads the init's "clean" after a direct start, and reports
// whether the sandbox is alive.
func (t *preparedSandbox) usable() bool {
	if t.settled != nil {
		<-t.settled // a socket write, under way
		t.settled = nil
	}
	if t.unclean {
		return t.awaitClean() // it just wrote: alive
	}
	return t.alive()
}

// pick takes the most recent sandbox prepared for cheap out of the pool,
// unchecked (take checks it).
func (pp *preparedPool) pick(cheap string) *preparedSandbox {
	if pp == nil {
		return nil
	}
	pp.mu.Lock()
	var t *preparedSandbox
	for i := len(pp.ready) - 1; i >= 0; i-- {
		if r := pp.ready[i]; r.cheap == cheap {
			t = r
			pp.ready = append(pp.ready[:i:i], pp.ready[i+1:]...)
			break
		}
	}
	pp.mu.Unlock()
	return t
}

// refill prepares, in the background, a sandbox for the next start of
// policy with network mode mode, unless one is ready or being prepared
// for key (the key of the start that asks).
func (pp *preparedPool) refill(h *Host, policy *Policy, mode, key string, exited <-chan struct{}) {
	if pp == nil {
		return
	}
	pp.mu.Lock()
	if pp.closed || pp.preparing[key] {
		pp.mu.Unlock()
		return
	}
	for _, r := range pp.ready {
		if r.key == key {
			pp.mu.Unlock()
			return
		}
	}
	if pp.preparing == nil {
		pp.preparing = map[string]bool{}
		pp.closing = make(chan struct{})
	}
	if !pp.watching {
		pp.startWatch()
	}
	closing := pp.closing
	pp.preparing[key] = true
	pp.wg.Add(1)
	pp.mu.Unlock()
	fresh := *policy // planned afresh: the files as they are now
	fresh.planned, fresh.checkedBy = nil, nil
	go func() {
		defer pp.wg.Done()
		// Not while the start that asked runs its command: a preparation
		// is some 5 ms of CPU (a helper's exec and Go start-up, the
		// namespaces, the mounts) that would compete with that command
		// and the delivery of its output (Round 6 in BENCHMARKS.md: the
		// start's latency rose by half a millisecond). It begins
		// preparedGrace after the command's end (its output is delivered
		// by then), or preparedDelay after the start for a command that
		// runs on (or whose end this start cannot see).
		delay := time.NewTimer(preparedDelay)
		defer delay.Stop()
		select {
		case <-delay.C:
		case <-exited:
			delay.Reset(preparedGrace)
			select {
			case <-delay.C:
			case <-closing:
			}
		case <-closing:
		}
		select {
		case <-closing:
			pp.mu.Lock()
			delete(pp.preparing, key)
			pp.mu.Unlock()
			return
		default:
		}
		t, err := prepareSandbox(h, &fresh, mode)
		var evicted []*preparedSandbox
		pp.mu.Lock()
		delete(pp.preparing, key)
		switch {
		case err != nil:
			pp.failed.Add(1)
		case pp.closed:
			evicted = append(evicted, t)
		default:
			for i, r := range pp.ready {
				if r.key == t.key { // made for the same plan meanwhile
					evicted = append(evicted, r)
					pp.ready = append(pp.ready[:i:i], pp.ready[i+1:]...)
					break
				}
			}
			evicted = append(evicted, pp.addReady(t)...)
		}
		pp.mu.Unlock()
		for _, e := range evicted {
			e.discard()
		}
	}()
}

// addReady appends t to the ready sandboxes (pp.mu held) and returns the
// oldest ones beyond maxPrepared, taken out, for the caller to discard
// once it let go of the lock.
func (pp *preparedPool) addReady(t *preparedSandbox) []*preparedSandbox {
	pp.ready = append(pp.ready, t)
	n := len(pp.ready) - maxPrepared
	if n <= 0 {
		return nil
	}
	evicted := append([]*preparedSandbox(nil), pp.ready[:n]...)
	pp.ready = append([]*preparedSandbox(nil), pp.ready[n:]...)
	return evicted
}

// giveBack puts a recycled sandbox, whose command has ended, back among
// the ready ones (the most recent last: the next start of its plan takes
// it), unless the pool is closed. Its init cleans up after the command
// meanwhile (scrub) and takes the next start in once done; one that fails
// to exits, and the start that takes it finds it gone (errPreparedGone).
func (pp *preparedPool) giveBack(t *preparedSandbox) {
	pp.mu.Lock()
	if pp.closed {
		pp.mu.Unlock()
		t.discard()
		return
	}
	pp.recycled.Add(1)
	evicted := pp.addReady(t)
	pp.mu.Unlock()
	for _, e := range evicted {
		e.discard()
	}
}

// close ends the waiting sandboxes and waits for the preparations under
// way; none is prepared after. Safe on nil and more than once.
func (pp *preparedPool) close() {
	if pp == nil {
		return
	}
	pp.mu.Lock()
	if !pp.closed {
		pp.closed = true
		if pp.closing != nil {
			close(pp.closing)
		}
		if pp.watching {
			unix.Close(pp.unwatch) // ends watchMounts
		}
	}
	ready := pp.ready
	pp.ready = nil
	pp.mu.Unlock()
	for _, t := range ready {
		t.discard()
	}
	pp.wg.Wait()
	pp.watchWG.Wait()
}

// prepareSandbox starts a helper that builds policy's namespaces and waits
// until it is ready.
func prepareSandbox(h *Host, policy *Policy, mode string) (t *preparedSandbox, err error) {
	wp, err := planWire(h, Plan{Policy: policy})
	if err != nil {
		return nil, err
	}
	if wp.NS == nil || !wp.NS.PidNS {
		return nil, errors.New("sandbox: only a namespaced start with its own pid namespace is prepared")
	}
	wp.NS.NetNS, wp.NS.GivenNetNS = mode == "own", mode == "given"
	wp.NS.Nice = threadNice() // the daemon's: this goroutine's thread is not the niced one
	key := prepKey(wp, mode)
	cheap := cheapKey(policy, mode)
	wp.Prepare = true
	raw, err := json.Marshal(wp)
	if err != nil {
		return nil, err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox: socket pair: %w", err)
	}
	// The daemon's end is non-blocking: waiting on it (for the command's
	// exit, which may take hours) holds no thread.
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, err
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "prepared"), os.NewFile(uintptr(fds[1]), "prepared")
	defer theirs.Close()
	defer func() {
		if err != nil {
			mine.Close()
		}
	}()
	planR, planW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer planR.Close()
	defer planW.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer devnull.Close()
	flags := uintptr(unix.CLONE_NEWNS | unix.CLONE_NEWIPC | unix.CLONE_NEWPID)
	if wp.NS.NetNS {
		flags |= unix.CLONE_NEWNET
	}
	// Forked from a thread of lower priority (nice preparedNice, which
	// the helper's threads inherit): a preparation runs while the start
	// that asked for it runs its command, and must not take the CPU from
	// it. The spawning thread takes the start's priority back for the
	// command (preparedStart.Nice). Never above the daemon's priority.
	var proc *os.Process
	onThrowawayThread(func() {
		_ = unix.Setpriority(unix.PRIO_PROCESS, 0, max(preparedNice, threadNice())) // this thread
		proc, err = os.StartProcess(h.exe(), []string{helperArg0}, &os.ProcAttr{
			Env:   []string{helperEnv, "GOMAXPROCS=1", "GOGC=off", raceExitNow},
			Files: []*os.File{devnull, devnull, devnull, planR, theirs},
			Sys:   &syscall.SysProcAttr{Setsid: true, Cloneflags: flags},
		})
	})
	if err != nil {
		return nil, err
	}
	t = &preparedSandbox{key: key, cheap: cheap, proc: proc, sock: mine, sockets: map[string]fileID{}}
	for _, m := range wp.NS.Mounts {
		if m.Socket {
			t.sockets[m.Path] = m.ID
		}
	}
	planR.Close()
	_, werr := planW.Write(raw)
	planW.Close()
	theirs.Close()
	msg, rerr := readReady(mine)
	if werr != nil || rerr != nil || string(msg) != preparedReady {
		_ = proc.Kill()
		_, _ = proc.Wait()
		return nil, fmt.Errorf("sandbox: prepared helper not ready: %q %v %v", msg, werr, rerr)
	}
	if !h.NoDirect {
		t.direct = newDirectThread(t, &wp) // nil if it cannot be made: the init forks every command
	}
	return t, nil
}

func (h *Host) exe() string {
	if h != nil && h.Exe != "" {
		return h.Exe
	}
	return "/proc/self/exe"
}

// readReady reads the prepared helper's first line within
// preparedTimeout.
func readReady(f *os.File) ([]byte, error) {
	if err := f.SetReadDeadline(time.Now().Add(preparedTimeout)); err != nil {
		return nil, err
	}
	defer f.SetReadDeadline(time.Time{})
	buf := make([]byte, len(preparedReady))
	n, err := io.ReadFull(f, buf)
	return buf[:n], err
}

// settle waits until no preparation is under way (tests and benchmarks:
// the next start then finds what was prepared for it). Not concurrently
// with starts.
func (pp *preparedPool) settle() {
	if pp != nil {
		pp.wg.Wait()
	}
}

func (pp *preparedPool) usedCount() uint64 {
	if pp == nil {
		return 0
	}
	return pp.used.Load()
}

// startWatch starts watchMounts (pp.mu held; no I/O but opening a file
// and a pipe). Without either, waiting sandboxes are only dropped when a
// start finds them stale or the Host closes.
func (pp *preparedPool) startWatch() {
	mi, err := unix.Open("/proc/self/mountinfo", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		unix.Close(mi)
		return
	}
	pp.watching, pp.unwatch = true, p[1]
	pp.watchWG.Add(1)
	go pp.watchMounts(mi, p[0])
}

// watchMounts ends the waiting sandboxes whenever the daemon's mount
// table changes, until close: a sandbox's mount namespace is a copy of
// the table it was prepared from, which keeps every file system mounted
// then in use (a disk the operator unmounts stays busy) for as long as it
// waits, and no start would take it any more (its key has the table's
// digest). Its own mountinfo descriptor: the kernel reports each change
// once per open file, and mountTable polls another.
func (pp *preparedPool) watchMounts(mi, wake int) {
	defer pp.watchWG.Done()
	defer unix.Close(mi)
	defer unix.Close(wake)
	fds := []unix.PollFd{{Fd: int32(mi), Events: unix.POLLPRI}, {Fd: int32(wake), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); err != nil && err != unix.EINTR {
			return
		}
		if fds[1].Revents != 0 {
			return // close
		}
		if fds[0].Revents&(unix.POLLPRI|unix.POLLERR) == 0 {
			continue
		}
		pp.mu.Lock()
		stale := pp.ready
		pp.ready = nil
		pp.mu.Unlock()
		for _, t := range stale {
			t.discard()
			pp.dropped.Add(1)
		}
	}
}
