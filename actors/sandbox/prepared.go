package sandbox

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
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
// same files, the same protected paths, the same host sockets covered:
// prepKey) takes it: the daemon moves it into the tree's cgroups (v2 and
// v1) and sends what is the start's alone (the command, environment,
// working directory, rlimits, and as SCM_RIGHTS the stdio, the PTY's
// devpts and the caller's network namespace). Its spawning thread was
// confined ahead (capabilities, Landlock, seccomp unless the start brings
// a network namespace, the spawner uid: newSpawnThread); that thread
// itself receives the start, makes the cgroup namespace, enters the
// working directory, forks the command and says so; the helper stays as
// the init, and reports the command's exit on the socket before its own
// (ExitReport). A start whose plan differs (a file
// replaced, a socket bound since) does not take it: it starts its own
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

	// Counters, read by Host.PreparedStats (metrics) and tests.
	used   atomic.Uint64 // starts served by a prepared sandbox
	failed atomic.Uint64 // preparations that failed
	missed atomic.Uint64 // eligible starts that started a fresh helper: none ready for their plan, or the one taken was gone
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
	key   string
	cheap string // cheapKey: what a start takes it by, before its plan is made
	proc  *os.Process
	sock  *os.File // the daemon's end of the socket pair
}

// What a prepared sandbox writes on its socket, a line each:
// preparedReady once built; then preparedStarted once the command runs and
// later preparedExit with the command's status once the init reaped it
// (then the init exits: EOF); or, if the start failed, a helperStatus
// (JSON, then EOF).
const (
	preparedReady   = "ready\n"
	preparedStarted = "started\n"
	preparedExit    = "exit "
	// preparedGo, from the daemon, lets a held start fork its command.
	preparedGo = 'g'
)

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
	if t != nil && !t.alive() {
		t.discard()
		return nil
	}
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
			pp.ready = append(pp.ready, t)
			if n := len(pp.ready) - maxPrepared; n > 0 {
				evicted = append(evicted, pp.ready[:n]...)
				pp.ready = append([]*preparedSandbox(nil), pp.ready[n:]...)
			}
		}
		pp.mu.Unlock()
		for _, e := range evicted {
			e.discard()
		}
	}()
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
	}
	ready := pp.ready
	pp.ready = nil
	pp.mu.Unlock()
	for _, t := range ready {
		t.discard()
	}
	pp.wg.Wait()
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
	t = &preparedSandbox{key: key, cheap: cheap, proc: proc, sock: mine}
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

// preparedStart is what a start sends its prepared sandbox; the
// descriptors (stdin, stdout, stderr, then the devpts and the network
// namespace when the flags say so) travel with the length that precedes
// it.
type preparedStart struct {
	Path    string   `json:"path"`
	Argv    []string `json:"argv"`
	Env     []string `json:"env"`
	Dir     string   `json:"dir"`
	Ctty    bool     `json:"ctty,omitempty"`
	Rlimits []Rlimit `json:"rlimits,omitempty"`
	DevPts  bool     `json:"devpts,omitempty"`
	Cgroup  bool     `json:"cgroup,omitempty"`
	// Hold: wait for preparedGo (the daemon's check of the plan) before
	// the fork; anything else ends the helper without running anything.
	Hold  bool `json:"hold,omitempty"`
	NetNS bool `json:"netns,omitempty"`
	// Nice is the start's priority: the nice value of the daemon's thread
	// that makes it (which a fresh helper, forked from that thread, would
	// inherit); the sandbox itself was prepared at a lower one.
	Nice int `json:"nice"`
}

// threadNice is the calling thread's nice value (0 if unreadable).
func threadNice() int {
	prio, err := unix.Getpriority(unix.PRIO_PROCESS, 0)
	if err != nil {
		return 0
	}
	return 20 - prio // the system call answers 20 - nice
}

// errPreparedGone: the prepared sandbox could not take the start (it was
// gone before the start reached it); the caller starts a helper instead.
var errPreparedGone = errors.New("sandbox: the prepared sandbox is gone")

// startOnPrepared runs the start of plan on t (taken by the caller by the
// plan's policy and network mode: cheapKey). It hands the start over at
// once, and plans it (planWire, the host's files, sockets and mounts as
// they are now) while the helper receives it; only if the plan's key is
// exactly t's does it tell the helper to go on and fork the command
// (preparedGo), else the helper exits without running anything and the
// caller starts its own, with the plan made here (planned). t's process
// is returned with the report of the command's exit, or reaped here.
func startOnPrepared(h *Host, t *preparedSandbox, plan Plan, attr *os.ProcAttr, mode string) (proc *os.Process, report *ExitReport, wp wirePlan, planned bool, err error) {
	fail := func(err error) (*os.Process, *ExitReport, wirePlan, bool, error) {
		t.discard()
		return nil, nil, wp, planned, err
	}
	dir := plan.Dir
	if dir == "" {
		dir, _ = os.Getwd()
	}
	msg := preparedStart{Path: plan.Path, Argv: plan.Argv, Env: plan.Env, Dir: dir, Ctty: plan.Ctty,
		Rlimits: plan.Rlimits, DevPts: plan.DevPts != nil, NetNS: plan.NetNS != nil, Hold: true, Nice: threadNice()}
	files := make([]int, 0, 6)
	for i := 0; i < 3; i++ {
		if i < len(attr.Files) && attr.Files[i] != nil {
			files = append(files, int(attr.Files[i].Fd()))
			continue
		}
		devnull, err := os.Open(os.DevNull)
		if err != nil {
			return fail(err)
		}
		defer devnull.Close()
		files = append(files, int(devnull.Fd()))
	}
	if plan.DevPts != nil {
		files = append(files, int(plan.DevPts.Fd()))
	}
	if plan.NetNS != nil {
		files = append(files, int(plan.NetNS.f.Fd()))
	}
	// The v2 cgroup goes with the start: the init clones the command into
	// it (moving the init there instead would cost an RCU grace period,
	// milliseconds, for the cgroup core's thread-group lock).
	if attr.Sys != nil && attr.Sys.UseCgroupFD {
		files = append(files, attr.Sys.CgroupFD)
		msg.Cgroup = true
	}
	body, err := json.Marshal(msg)
	if err != nil {
		return fail(fmt.Errorf("sandbox: encode start: %w", err))
	}
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], uint64(len(body)))
	rc, err := t.sock.SyscallConn()
	if err != nil {
		return fail(err)
	}
	var serr error
	if err := rc.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), hdr[:], unix.UnixRights(files...), nil, 0)
		return serr != unix.EAGAIN
	}); err != nil || serr != nil {
		return fail(errPreparedGone) // it never received the start
	}
	_, werr := t.sock.Write(body)
	// The plan, while the helper takes the start in.
	wp, err = planWire(h, plan)
	if err != nil {
		return fail(err)
	}
	planned = true
	if afterNamespacePlan != nil {
		afterNamespacePlan()
	}
	if prepKey(wp, mode) != t.key {
		return fail(errPreparedGone) // built for another plan: it ran nothing
	}
	// v1 controllers: joined from here, where the cgroup file systems are
	// writable (in the sandbox's view they are read-only).
	for _, procs := range wp.JoinCgroups {
		if err := os.WriteFile(procs, []byte(strconv.Itoa(t.proc.Pid)), 0); err != nil {
			if errors.Is(err, unix.ESRCH) {
				return fail(errPreparedGone) // it died waiting: it ran nothing
			}
			return fail(fmt.Errorf("sandbox cgroup: %w", err))
		}
	}
	goSent := false
	if werr == nil {
		_, werr = t.sock.Write([]byte{preparedGo})
		goSent = werr == nil
	}
	// The socket now carries the start's status, then the command's exit.
	r := bufio.NewReaderSize(t.sock, 512)
	line, rerr := r.ReadString('\n')
	if line == preparedStarted {
		return t.proc, newExitReport(t.sock, r), wp, planned, nil
	}
	t.sock.Close()
	_, _ = t.proc.Wait() // it exits (or has exited) without the command
	if line == "" && (!goSent || errors.Is(rerr, unix.ECONNRESET)) {
		// It was gone before it had the whole start and the word to go
		// (a write that failed, or a reset: unread data on its side), and
		// it forks nothing before both: the command never ran.
		return nil, nil, wp, planned, errPreparedGone
	}
	if line != "" {
		var st helperStatus
		if err := json.Unmarshal([]byte(line), &st); err != nil {
			return nil, nil, wp, planned, &ExecError{Stage: "helper", Msg: fmt.Sprintf("unreadable status %q", line)}
		}
		return nil, nil, wp, planned, &ExecError{Stage: st.Stage, Errno: syscall.Errno(st.Errno), Msg: st.Msg}
	}
	return nil, nil, wp, planned, &ExecError{Stage: "helper", Msg: fmt.Sprintf("the prepared sandbox ended during the start (%v, %v)", werr, rerr)}
}

// ExitReport is the init's report of its command's exit (a start with a
// pid namespace, prepared or not): the status the init would exit with, sent as soon as
// it reaped the command, before it exits itself (and the kernel tears its
// namespaces down, about half a millisecond for the helper's Go runtime
// alone). The caller still reaps the init, which exits at once after.
type ExitReport struct {
	f      *os.File
	r      *bufio.Reader
	exited chan struct{} // closed once Wait has returned
}

func newExitReport(f *os.File, r *bufio.Reader) *ExitReport {
	return &ExitReport{f: f, r: r, exited: make(chan struct{})}
}

// exitedChan is closed once the command's end is known (Wait returned);
// nil (never) for a nil report.
func (e *ExitReport) exitedChan() <-chan struct{} {
	if e == nil {
		return nil
	}
	return e.exited
}

// Wait blocks (in the runtime poller: no thread) until the command has
// exited and returns its status as the init's exit code would be (the
// code, or 128+N for a death by signal N). ok is false if the init ended
// without a report (it was killed): its own wait status then says it.
// Called once.
func (e *ExitReport) Wait() (status int, ok bool) {
	if e == nil {
		return 0, false
	}
	defer close(e.exited)
	line, err := e.r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, preparedExit) {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, preparedExit)))
	if err != nil {
		return 0, false
	}
	return n, true
}

// Close releases the report (safe on nil, and more than once).
func (e *ExitReport) Close() {
	if e != nil {
		e.f.Close()
	}
}

// preparedMain is the helper of a prepared sandbox: build the namespaces,
// say so, wait for the start, then finish it as nsMain would. It returns
// only on failure; a daemon that closes the socket instead of sending a
// start (it was replaced, or the Host closed) ends it quietly.
func preparedMain(p *wirePlan) helperStatus {
	np := p.NS
	sigs, notified := initSignals(true)
	var ps pins
	defer ps.close()
	if stage, err := buildNS(np, p.Scratch, &ps); err != nil {
		return failStatus(stage, err)
	}
	extra, err := nsExtraGrants(p.Policy)
	if err != nil {
		return failStatus("mounts", err)
	}
	l := layers{Grants: append(nsGrants(p.Layers), extra...)}
	// The spawning thread, confined as far as it can be before the start.
	thread, stage, err := newSpawnThread(p, l, &ps)
	if err != nil {
		return failStatus(stage, err)
	}
	<-notified
	if _, err := unix.Write(statusFD, []byte(preparedReady)); err != nil {
		os.Exit(0)
	}
	// The spawning thread itself waits for the start and forks the
	// command (no hand-over between threads on the start's path); what it
	// may not do confined (the devpts mount) it hands to this one.
	mainJobs := make(chan func())
	onMain := func(f func() error) error {
		errc := make(chan error, 1)
		mainJobs <- func() { errc <- f() }
		return <-errc
	}
	return superviseInit(p, &ps, sigs, thread, mainJobs, func(cred *syscall.Credential, filtered bool) (*os.Process, string, error) {
		st, fds, err := readStart(statusFD)
		if err == io.EOF {
			os.Exit(0) // the daemon dropped it unused
		}
		if err != nil {
			return nil, "plan", err
		}
		if stage, err := applyStart(p, st, fds, onMain); err != nil {
			return nil, stage, err
		}
		return spawnCommand(p, cred, filtered)
	})
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
	p.Path, p.Argv, p.Env = st.Path, st.Argv, st.Env
	np.Dir, np.Ctty, np.Hold, np.Nice = st.Dir, st.Ctty, st.Hold, st.Nice
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

// readStart reads one preparedStart and its descriptors (close-on-exec).
func readStart(fd int) (preparedStart, []int, error) {
	var st preparedStart
	var hdr [8]byte
	oob := make([]byte, unix.CmsgSpace(8*4)) // at most 6 come (stdio, devpts, netns, cgroup)
	n, oobn, _, _, err := unix.Recvmsg(fd, hdr[:], oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return st, nil, err
	}
	if n == 0 {
		return st, nil, io.EOF
	}
	var fds []int
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return st, nil, err
	}
	for _, m := range msgs {
		r, err := unix.ParseUnixRights(&m)
		if err != nil {
			return st, nil, err
		}
		fds = append(fds, r...)
	}
	for n < len(hdr) {
		k, err := unix.Read(fd, hdr[n:])
		if err != nil || k == 0 {
			return st, nil, fmt.Errorf("start header: %d bytes, %v", n, err)
		}
		n += k
	}
	size := binary.BigEndian.Uint64(hdr[:])
	if size > 64<<20 {
		return st, nil, fmt.Errorf("start of %d bytes", size)
	}
	body := make([]byte, size)
	for got := 0; got < len(body); {
		k, err := unix.Read(fd, body[got:])
		if err == unix.EINTR {
			continue
		}
		if err != nil || k == 0 {
			return st, nil, fmt.Errorf("start: %d of %d bytes, %v", got, len(body), err)
		}
		got += k
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return st, nil, fmt.Errorf("start: %w", err)
	}
	return st, fds, nil
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
