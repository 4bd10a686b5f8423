package sandbox

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

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
// prepKey) takes it: the daemon moves it into the tree's cgroup and sends
// what is the start's alone (the command, environment, working directory,
// rlimits, v1 cgroups, and as SCM_RIGHTS the stdio, the PTY's devpts and
// the caller's network namespace); the helper finishes exactly as a helper
// started for it would (runNS: the cgroup namespace, the working
// directory, capabilities, Landlock, seccomp, the spawner uid, the fork of
// the command, and stays as its init). A start whose plan differs (a file
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
	wg        sync.WaitGroup

	used   atomic.Uint64 // starts served by a prepared sandbox (tests)
	failed atomic.Uint64 // preparations that failed (tests)
}

// maxPrepared is how many policies have a sandbox waiting (Codex
// alternates read-only and workspace-write starts): each holds an idle
// helper process (about 15 MB resident, most of it this executable's
// shared pages) until it is used, replaced or the Host closed.
const maxPrepared = 2

// preparedTimeout bounds a preparation (the helper's start and mounts).
const preparedTimeout = 10_000 // ms

type preparedSandbox struct {
	key  string
	proc *os.Process
	sock *os.File // the daemon's end of the socket pair
}

// What a prepared sandbox writes on its socket: preparedReady once built,
// preparedStarted once the command runs (then EOF), or a helperStatus.
const (
	preparedReady   = "ready"
	preparedStarted = "started"
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
// plan without what is the start's alone.
func prepKey(wp wirePlan, mode string) string {
	k := struct {
		Mode   string  `json:"mode"`
		Policy *Policy `json:"policy"`
		Layers layers  `json:"layers"`
		NS     nsPlan  `json:"ns"`
		Scrtch string  `json:"scratch"`
	}{Mode: mode, Policy: wp.Policy, Layers: wp.Layers, NS: *wp.NS, Scrtch: wp.Scratch}
	k.NS.Dir, k.NS.Ctty, k.NS.DevPtsFD, k.NS.NetNSFD, k.NS.NetNS = "", false, 0, 0, false
	b, _ := json.Marshal(k)
	return string(b)
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

// take returns the sandbox prepared for key, if one is ready and alive.
func (pp *preparedPool) take(key string) *preparedSandbox {
	if pp == nil {
		return nil
	}
	pp.mu.Lock()
	var t *preparedSandbox
	for i, r := range pp.ready {
		if r.key == key {
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
func (pp *preparedPool) refill(h *Host, policy *Policy, mode, key string) {
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
	}
	pp.preparing[key] = true
	pp.wg.Add(1)
	pp.mu.Unlock()
	fresh := *policy // planned afresh: the files as they are now
	fresh.planned, fresh.checkedBy = nil, nil
	go func() {
		defer pp.wg.Done()
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
	pp.closed = true
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
	wp.NS.NetNS = mode == "own"
	key := prepKey(wp, mode)
	wp.Prepare = true
	raw, err := json.Marshal(wp)
	if err != nil {
		return nil, err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox: socket pair: %w", err)
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
	proc, err := os.StartProcess(h.exe(), []string{helperArg0}, &os.ProcAttr{
		Env:   []string{helperEnv, "GOMAXPROCS=1", "GOGC=off"},
		Files: []*os.File{devnull, devnull, devnull, planR, theirs},
		Sys:   &syscall.SysProcAttr{Setsid: true, Cloneflags: flags},
	})
	if err != nil {
		return nil, err
	}
	t = &preparedSandbox{key: key, proc: proc, sock: mine}
	planR.Close()
	_, werr := planW.Write(raw)
	planW.Close()
	theirs.Close()
	msg, rerr := readMessage(int(mine.Fd()), len(preparedReady), preparedTimeout)
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

// readMessage reads up to n bytes (one write of the peer's) within
// timeout milliseconds.
func readMessage(fd, n, timeout int) ([]byte, error) {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		k, err := unix.Poll(fds, timeout)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if k == 0 {
			return nil, errors.New("timed out")
		}
		break
	}
	buf := make([]byte, n)
	k, err := unix.Read(fd, buf)
	if err != nil {
		return nil, err
	}
	return buf[:k], nil
}

// preparedStart is what a start sends its prepared sandbox; the
// descriptors (stdin, stdout, stderr, then the devpts and the network
// namespace when the flags say so) travel with the length that precedes
// it.
type preparedStart struct {
	Path        string   `json:"path"`
	Argv        []string `json:"argv"`
	Env         []string `json:"env"`
	Dir         string   `json:"dir"`
	Ctty        bool     `json:"ctty,omitempty"`
	Rlimits     []Rlimit `json:"rlimits,omitempty"`
	JoinCgroups []string `json:"joinCgroups,omitempty"`
	DevPts      bool     `json:"devpts,omitempty"`
	NetNS       bool     `json:"netns,omitempty"`
}

// errPreparedGone: the prepared sandbox could not take the start (it was
// gone before the start reached it); the caller starts a helper instead.
var errPreparedGone = errors.New("sandbox: the prepared sandbox is gone")

// startOnPrepared runs the start of wp on t (taken by the caller, who
// reaps nothing: t's process is returned, or reaped here on failure).
func startOnPrepared(t *preparedSandbox, wp wirePlan, attr *os.ProcAttr) (*os.Process, error) {
	defer t.sock.Close()
	msg := preparedStart{Path: wp.Path, Argv: wp.Argv, Env: wp.Env, Dir: wp.NS.Dir, Ctty: wp.NS.Ctty,
		Rlimits: wp.Rlimits, JoinCgroups: wp.JoinCgroups, DevPts: wp.Plan.DevPts != nil, NetNS: wp.Plan.NetNS != nil}
	body, err := json.Marshal(msg)
	if err != nil {
		t.discard()
		return nil, fmt.Errorf("sandbox: encode start: %w", err)
	}
	files := make([]int, 0, 5)
	for i := 0; i < 3; i++ {
		if i < len(attr.Files) && attr.Files[i] != nil {
			files = append(files, int(attr.Files[i].Fd()))
			continue
		}
		devnull, err := os.Open(os.DevNull)
		if err != nil {
			t.discard()
			return nil, err
		}
		defer devnull.Close()
		files = append(files, int(devnull.Fd()))
	}
	if wp.Plan.DevPts != nil {
		files = append(files, int(wp.Plan.DevPts.Fd()))
	}
	if wp.Plan.NetNS != nil {
		files = append(files, int(wp.Plan.NetNS.f.Fd()))
	}
	// Into the tree's cgroup before anything of the start: its cgroup
	// namespace is made where it is when it reads the start.
	if attr.Sys != nil && attr.Sys.UseCgroupFD {
		fd, err := unix.Openat(attr.Sys.CgroupFD, "cgroup.procs", unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			_, err = unix.Write(fd, []byte(strconv.Itoa(t.proc.Pid)))
			unix.Close(fd)
		}
		if err != nil {
			t.discard()
			return nil, fmt.Errorf("sandbox: move the prepared sandbox into the tree's cgroup: %w", err)
		}
	}
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], uint64(len(body)))
	fd := int(t.sock.Fd())
	if err := unix.Sendmsg(fd, hdr[:], unix.UnixRights(files...), nil, 0); err != nil {
		t.discard()
		return nil, errPreparedGone // it never received the start
	}
	_, werr := t.sock.Write(body)
	out, rerr := io.ReadAll(t.sock)
	if string(out) == preparedStarted {
		return t.proc, nil
	}
	_, _ = t.proc.Wait() // it exits (or has exited) without the command
	if len(out) > 0 {
		var st helperStatus
		if err := json.Unmarshal(out, &st); err != nil {
			return nil, &ExecError{Stage: "helper", Msg: fmt.Sprintf("unreadable status %q", out)}
		}
		return nil, &ExecError{Stage: st.Stage, Errno: syscall.Errno(st.Errno), Msg: st.Msg}
	}
	return nil, &ExecError{Stage: "helper", Msg: fmt.Sprintf("the prepared sandbox ended during the start (%v, %v)", werr, rerr)}
}

// preparedMain is the helper of a prepared sandbox: build the namespaces,
// say so, wait for the start, then finish it as nsMain would. It returns
// only on failure; a daemon that closes the socket instead of sending a
// start (it was replaced, or the Host closed) ends it quietly.
func preparedMain(p *wirePlan) helperStatus {
	np := p.NS
	sigs, notified := initSignals(true)
	var ps pins
	if stage, err := buildNS(np, p.Scratch, &ps); err != nil {
		return failStatus(stage, err)
	}
	ps.close()
	ps = nil
	<-notified
	if _, err := unix.Write(statusFD, []byte(preparedReady)); err != nil {
		os.Exit(0)
	}
	st, fds, err := readStart(statusFD)
	if err == io.EOF {
		os.Exit(0)
	}
	if err != nil {
		return failStatus("plan", err)
	}
	want := 3
	if st.DevPts {
		want++
	}
	if st.NetNS {
		want++
	}
	if len(fds) != want {
		return failStatus("plan", fmt.Errorf("%d descriptors with the start, want %d", len(fds), want))
	}
	p.Path, p.Argv, p.Env = st.Path, st.Argv, st.Env
	np.Dir, np.Ctty = st.Dir, st.Ctty
	for _, procs := range st.JoinCgroups {
		if err := os.WriteFile(procs, []byte("0"), 0); err != nil {
			return failStatus("cgroup", err)
		}
	}
	for _, r := range st.Rlimits {
		lim := unix.Rlimit{Cur: r.Cur, Max: r.Max}
		if err := unix.Setrlimit(r.Resource, &lim); err != nil {
			return failStatus("rlimit", fmt.Errorf("setrlimit(%d): %w", r.Resource, err))
		}
	}
	for i := 0; i < 3; i++ {
		if err := unix.Dup3(fds[i], i, 0); err != nil {
			return failStatus("plan", fmt.Errorf("stdio: %w", err))
		}
		unix.Close(fds[i]) // the init holds none of the command's stdio
	}
	next := 3
	if st.DevPts {
		// The PTY's own instance, over the one the sandbox was built with.
		err := unix.MoveMount(fds[next], "", unix.AT_FDCWD, "/dev/pts", unix.MOVE_MOUNT_F_EMPTY_PATH)
		unix.Close(fds[next])
		if err != nil {
			return failStatus("mounts", fmt.Errorf("/dev: attach the PTY's devpts: %w", err))
		}
		next++
	}
	if st.NetNS {
		np.NetNSFD = fds[next]
	}
	if err := cgroupNS(); err != nil {
		return failStatus("namespaces", err)
	}
	defer ps.close()
	return runNS(p, &ps, sigs, notified)
}

// readStart reads one preparedStart and its descriptors (close-on-exec).
func readStart(fd int) (preparedStart, []int, error) {
	var st preparedStart
	var hdr [8]byte
	oob := make([]byte, unix.CmsgSpace(5*4))
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
