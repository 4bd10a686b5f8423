package sandbox

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
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
	// Epoch numbers the starts a sandbox serves (1, 2, ...: see
	// recycling in prepared.go); the signals for a start carry it.
	Epoch uint32 `json:"epoch"`
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
//
// pre, if not nil, is the start's plan, made already (startDirect's,
// which found that the start needs the init).
func startOnPrepared(h *Host, pp *preparedPool, t *preparedSandbox, plan Plan, attr *os.ProcAttr, mode string, pre *wirePlan) (proc *os.Process, report *ExitReport, wp wirePlan, planned bool, err error) {
	fail := func(err error) (*os.Process, *ExitReport, wirePlan, bool, error) {
		t.discard()
		return nil, nil, wp, planned, err
	}
	dir := plan.Dir
	if dir == "" {
		dir, _ = os.Getwd()
	}
	t.epoch++
	msg := preparedStart{Path: plan.Path, Argv: plan.Argv, Env: plan.Env, Dir: dir, Ctty: plan.Ctty,
		Rlimits: plan.Rlimits, DevPts: plan.DevPts != nil, NetNS: plan.NetNS != nil, Hold: true, Nice: threadNice(),
		Epoch: t.epoch}
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
	frame := make([]byte, 9, 9+len(body))
	frame[0] = frameStart
	binary.BigEndian.PutUint64(frame[1:], uint64(len(body)))
	if err := writeFrame(t.sock, append(frame, body...), files); err != nil {
		return fail(errPreparedGone) // it never received the whole start: it runs nothing
	}
	// The plan, while the helper takes the start in.
	if pre != nil {
		wp, planned = *pre, true
	} else {
		wp, err = planWire(h, plan)
		if err != nil {
			return fail(err)
		}
		planned = true
		if afterNamespacePlan != nil {
			afterNamespacePlan()
		}
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
	// The init serves the next start of its plan after this one (it is
	// recycled) if the caller waits through the report alone, the init
	// joined no v1 cgroup of this tree (it would stay in it) and set no
	// rlimits (process-wide: it could not raise them again).
	recycle := plan.Recycle && len(wp.JoinCgroups) == 0 && len(plan.Rlimits) == 0
	word := []byte{frameGo, 0, 0, 0, 0, 0}
	if !recycle {
		word[1] |= goLast
	}
	if len(covers) > 0 {
		b, err := json.Marshal(covers)
		if err != nil {
			return fail(fmt.Errorf("sandbox: encode socket covers: %w", err))
		}
		binary.BigEndian.PutUint32(word[2:], uint32(len(b)))
		word = append(word, b...)
	}
	_, werr := t.sock.Write(word)
	goSent := werr == nil
	// The socket now carries the start's status, then the command's exit.
	r := bufio.NewReaderSize(t.sock, 512)
	line, rerr := r.ReadString('\n')
	if line == preparedStarted {
		for _, m := range covers {
			t.sockets[m.Path] = m.ID // covered in its mount namespace from now on
		}
		if recycle {
			// The caller's handle is a process handle of its own: the
			// sandbox's stays the pool's (the caller releases its handle;
			// the pool kills and reaps the init when it drops it).
			p, err := os.FindProcess(t.proc.Pid)
			if err != nil {
				t.discard()
				return nil, nil, wp, planned, err
			}
			return p, newRecycledReport(pp, t, r), wp, planned, nil
		}
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
// pid namespace, prepared or not): the status the init would exit with,
// sent as soon as it reaped the command, before it exits itself (and the
// kernel tears its namespaces down, about half a millisecond for the
// helper's Go runtime alone), or before it serves the next start (a
// recycled sandbox: Recycled). For a report that is not Recycled, the
// caller still reaps the init, which exits at once after.
//
// A Recycled report is the caller's only handle on the command: Wait for
// its end, Signal to signal it, Abandon to kill it (and its sandbox) before
// its end; the process Start returned is the init, which outlives the
// command and must be neither signalled nor reaped by the caller.
type ExitReport struct {
	f      *os.File
	r      *bufio.Reader
	exited chan struct{} // closed once Wait has returned
	sig    int           // set by Wait: the signal that ended the command (0: it exited)

	// A recycled sandbox (nil otherwise): the report holds t until the
	// command's exit is in, then gives it back to pool (or drops it).
	pool    *preparedPool
	t       *preparedSandbox
	epoch   uint32
	dropped sync.Once
	// direct: the daemon forked the command itself (direct.go).
	direct *directReport
}

func newExitReport(f *os.File, r *bufio.Reader) *ExitReport {
	return &ExitReport{f: f, r: r, exited: make(chan struct{})}
}

func newRecycledReport(pool *preparedPool, t *preparedSandbox, r *bufio.Reader) *ExitReport {
	return &ExitReport{f: t.sock, r: r, exited: make(chan struct{}), pool: pool, t: t, epoch: t.epoch}
}

// Recycled reports whether the command's init serves further starts
// after this one (see ExitReport): the caller must not signal or reap the
// process Start returned. False for nil.
func (e *ExitReport) Recycled() bool { return e != nil && e.t != nil }

// Direct reports whether the daemon forked the command itself (direct.go):
// the process Start returned is then the command, the daemon's child, not
// its init. False for nil.
func (e *ExitReport) Direct() bool { return e != nil && e.direct != nil }

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
// code, or 128+N for a death by signal N: ExitSignal then says N). ok is
// false if the init ended without a report (it was killed): its own wait
// status then says it; a Recycled report's init is reaped here then. A
// Recycled report gives its sandbox back for the next start as soon as
// the status is in. Called once.
func (e *ExitReport) Wait() (status int, ok bool) {
	if e == nil {
		return 0, false
	}
	defer close(e.exited)
	if e.direct != nil {
		return e.waitDirect()
	}
	status, ok = e.read()
	if e.t == nil {
		return status, ok
	}
	if !ok {
		e.Abandon()
		return status, false
	}
	// The end of this start's signals: what the caller sends after it
	// carries this epoch, and the init ignores it.
	end := []byte{frameEnd, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(end[1:], e.epoch)
	if _, err := e.t.sock.Write(end); err != nil {
		e.Abandon()
		return status, true
	}
	e.dropped.Do(func() { e.pool.giveBack(e.t) })
	return status, true
}

func (e *ExitReport) read() (int, bool) {
	line, err := e.r.ReadString('\n')
	if err != nil {
		return 0, false
	}
	word, num, _ := strings.Cut(strings.TrimSpace(line), " ")
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 {
		return 0, false
	}
	switch word + " " {
	case preparedExit:
		return n, true
	case preparedSignal:
		e.sig = n
		return 128 + n, true
	}
	return 0, false
}

// ExitSignal is the signal that ended the command (0 if it exited on its
// own), once Wait has returned ok.
func (e *ExitReport) ExitSignal() int {
	if e == nil {
		return 0
	}
	return e.sig
}

// Signal sends sig to the command of a Recycled report: to its process
// group (SIGKILL: every process of its pid namespace), by its init. A
// signal sent after the command's end is ignored (not another command's).
// Safe concurrently with Wait.
func (e *ExitReport) Signal(sig syscall.Signal) error {
	if e == nil || e.t == nil {
		return errors.New("sandbox: not a recycled sandbox's report")
	}
	if sig <= 0 || sig > 255 {
		return fmt.Errorf("sandbox: signal %d out of range", int(sig))
	}
	if e.direct != nil {
		// The daemon's own child: signalled by its process group. A
		// SIGKILL also goes to the init, which kills every process of
		// the namespace (those that left the group too).
		if sig == unix.SIGKILL {
			msg := []byte{frameSignal, 0, 0, 0, 0, byte(sig)}
			binary.BigEndian.PutUint32(msg[1:], e.epoch)
			_, _ = e.t.sock.Write(msg)
		}
		e.direct.signal(sig)
		return nil
	}
	msg := []byte{frameSignal, 0, 0, 0, 0, byte(sig)}
	binary.BigEndian.PutUint32(msg[1:], e.epoch)
	// A failed write: the init is gone (and its namespace with it), or
	// the sandbox went back to the pool and was dropped: nothing of the
	// command runs, and there is nothing to signal.
	_, _ = e.t.sock.Write(msg)
	return nil
}

// Abandon kills a Recycled report's init, and with it its namespaces and
// whatever runs there, and reaps it; the sandbox serves no other start.
// Safe concurrently with Wait, and more than once. No-op otherwise.
func (e *ExitReport) Abandon() {
	if e != nil && e.t != nil {
		if e.direct != nil {
			// The daemon's own child: killed and reaped first, or the
			// init, ending, would wait for it (Wait then reports the kill).
			e.direct.kill()
		}
		e.dropped.Do(e.t.discard)
	}
}

// Close releases the report (safe on nil, and more than once). A
// Recycled report's socket is its sandbox's: Wait gave it back, or
// Abandon dropped it.
func (e *ExitReport) Close() {
	if e != nil && e.t == nil {
		e.f.Close()
	}
}

// writeFrame writes b whole on f, with files as SCM_RIGHTS with its first
// bytes: one call, so the frames other goroutines write on f (Signal,
// Wait) never fall inside it.
func writeFrame(f *os.File, b []byte, files []int) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var werr error
	off := 0
	if err := rc.Write(func(fd uintptr) bool {
		for off < len(b) {
			var n int
			if off == 0 {
				n, werr = unix.SendmsgN(int(fd), b, unix.UnixRights(files...), nil, 0)
			} else {
				n, werr = unix.Write(int(fd), b[off:])
			}
			if werr == unix.EAGAIN {
				return false
			}
			if werr == unix.EINTR {
				continue
			}
			if werr != nil {
				return true
			}
			off += n
		}
		return true
	}); err != nil {
		return err
	}
	return werr
}
