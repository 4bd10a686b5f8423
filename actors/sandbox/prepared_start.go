package sandbox

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// A start on a prepared sandbox (see prepared.go): the daemon's side hands
// the start over (startOnPrepared) and reads the init's report of the
// command's exit (ExitReport); the helper's side waits for the start and
// applies it (preparedMain, readStart, applyStart).

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
	// The host sockets bound since the preparation (its key leaves them
	// out: sockets come and go on a busy host) are covered by the helper
	// before the fork; those gone since, it need not uncover (unlinking a
	// mount point detaches its mounts in every namespace).
	var covers []mountOp
	for _, m := range wp.NS.Mounts {
		if m.Socket && t.sockets[m.Path] != m.ID {
			covers = append(covers, m)
		}
	}
	word := []byte{preparedGo, 0, 0, 0, 0}
	if len(covers) > 0 {
		b, err := json.Marshal(covers)
		if err != nil {
			return fail(fmt.Errorf("sandbox: encode socket covers: %w", err))
		}
		binary.BigEndian.PutUint32(word[1:], uint32(len(b)))
		word = append(word, b...)
	}
	goSent := false
	if werr == nil {
		_, werr = t.sock.Write(word)
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
		if st.Hold {
			// The daemon checks the plan while this start came in: it runs
			// only on its word; anything else (the plan changed, the daemon
			// is gone) ends the helper with nothing run. The word carries
			// the host sockets bound since the preparation, covered here
			// as the preparation covered the others.
			covers, ok := readGo(statusFD)
			if !ok {
				os.Exit(0)
			}
			if len(covers) > 0 {
				if err := onMain(func() error { return coverSockets(covers, p.Scratch) }); err != nil {
					return nil, "mounts", err
				}
			}
		}
		return spawnCommand(p, cred, filtered)
	})
}

// readGo reads the daemon's word to go on (preparedGo, then the length
// and the JSON of the socket covers to add); false for anything else.
func readGo(fd int) ([]mountOp, bool) {
	var hdr [5]byte
	if !readFull(fd, hdr[:]) || hdr[0] != preparedGo {
		return nil, false
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n == 0 {
		return nil, true
	}
	if n > 16<<20 {
		return nil, false
	}
	body := make([]byte, n)
	if !readFull(fd, body) {
		return nil, false
	}
	var covers []mountOp
	if err := json.Unmarshal(body, &covers); err != nil {
		return nil, false
	}
	return covers, true
}

func readFull(fd int, b []byte) bool {
	for got := 0; got < len(b); {
		k, err := unix.Read(fd, b[got:])
		if err == unix.EINTR {
			continue
		}
		if err != nil || k == 0 {
			return false
		}
		got += k
	}
	return true
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
