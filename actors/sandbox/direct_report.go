package sandbox

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The report of a direct start (direct.go): the daemon waits for its own
// child, then ends the start's epoch and gives the sandbox back.

// directReport is the part of an ExitReport for a direct start.
//
// pid, pidfd, events and cgdir are set at the start and read by the
// report's waiter (Wait); Signal and Abandon, from another goroutine,
// touch only what mu guards.
type directReport struct {
	pid    int
	pidfd  *os.File // non-blocking: waited on in the runtime poller
	events int      // the tree's cgroup.events, opened while the command runs (-1: none)
	cgdir  int      // the tree's cgroup (a duplicate; -1: none), for killLeft
	// mu orders Signal against the reap: reaped is set in the same step
	// as the reap (a waitid that does not block), and no signal goes by
	// pid (the group's id) after it.
	mu     sync.Mutex
	reaped bool
	lost   bool         // reaped by nobody here, or not at all: no status
	info   unix.Siginfo // the reaped command's, with reaped
}

func newDirectReport(pp *preparedPool, t *preparedSandbox, pid, cgroupFD int) (*ExitReport, error) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("sandbox: pidfd of the command: %w", err)
	}
	// The tree's cgroup.events, to tell at the command's end whether the
	// tree outlived it (the caller closes its cgroup's descriptor once
	// Start returns).
	events, err := unix.Openat(cgroupFD, "cgroup.events", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		events = -1
	}
	cgdir, err := unix.FcntlInt(uintptr(cgroupFD), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		cgdir = -1
	}
	e := newRecycledReport(pp, t, nil)
	e.direct = &directReport{pid: pid, pidfd: os.NewFile(uintptr(fd), "pidfd"), events: events, cgdir: cgdir}
	return e, nil
}

// Siginfo's fields as waitid(2) fills them for a child (amd64 and arm64).
const (
	cldExited = 1
	cldDumped = 3 // CLD_KILLED (2) between: the codes of an end
	siCodeOff = 8
	siPidOff  = 16
	siStatOff = 24
)

// reapLocked reaps the command if it has exited (block: waits for it),
// recording its siginfo; it reports whether the command is reaped (or
// cannot be: then info stays zero). d.mu is held.
func (d *directReport) reapLocked(idtype, id int, block bool) bool {
	if d.reaped {
		return true
	}
	flags := unix.WEXITED
	if !block {
		flags |= unix.WNOHANG
	}
	for {
		err := unix.Waitid(idtype, id, &d.info, flags, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			d.reaped, d.lost = true, true // ECHILD: not ours to reap (cannot happen)
			return true
		}
		if *(*int32)(unsafe.Add(unsafe.Pointer(&d.info), siPidOff)) == 0 {
			return false // WNOHANG: it runs
		}
		// A command that made the daemon's direct thread its tracer
		// (ptrace(PTRACE_TRACEME): its parent is that thread, which has
		// CAP_SYS_PTRACE) reports its ptrace stops here, WEXITED or not
		// (CLD_TRAPPED): a stop is not its end (that is CLD_EXITED,
		// CLD_KILLED or CLD_DUMPED), and it is waited for again
		// (TestDirectAttackPtraceStop).
		if code := *(*int32)(unsafe.Add(unsafe.Pointer(&d.info), siCodeOff)); code < cldExited || code > cldDumped {
			d.info = unix.Siginfo{}
			continue
		}
		d.reaped = true
		return true
	}
}

// wait returns how the command ended (its exit code, or the signal that
// killed it), reaping it on its pidfd in the runtime poller (or learning
// it from kill, which reaped it); ok false if it could not tell.
func (d *directReport) wait() (code, sig int, ok bool) {
	defer d.pidfd.Close()
	rc, err := d.pidfd.SyscallConn()
	if err == nil {
		err = rc.Read(func(fd uintptr) bool {
			d.mu.Lock()
			defer d.mu.Unlock()
			return d.reapLocked(unix.P_PIDFD, int(fd), false)
		})
	}
	if err != nil {
		d.kill() // the poller failed it: the command goes
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lost {
		return 0, 0, false
	}
	status := int(*(*int32)(unsafe.Add(unsafe.Pointer(&d.info), siStatOff)))
	if *(*int32)(unsafe.Add(unsafe.Pointer(&d.info), siCodeOff)) == cldExited {
		return status, 0, true
	}
	return 0, status, true
}

// kill kills and reaps the command unless it is reaped (a sandbox's init
// that ends waits until every process of its pid namespace is reaped, this
// one, the daemon's child, too).
func (d *directReport) kill() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.reaped {
		_ = unix.Kill(d.pid, unix.SIGKILL)
		d.reapLocked(unix.P_PID, d.pid, true)
	}
}

// populated reports whether the tree's cgroup still holds a process (true
// if it cannot tell).
func (d *directReport) populated() bool {
	if d.events < 0 {
		return true
	}
	var buf [256]byte
	n, err := unix.Pread(d.events, buf[:], 0)
	if err != nil || n <= 0 {
		return true
	}
	return !bytes.Contains(buf[:n], []byte("populated 0"))
}

// signal signals the command's process group (the command alone if the
// group is gone), not after its end.
func (d *directReport) signal(sig syscall.Signal) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.reaped {
		return
	}
	if sig == StopRelay {
		sig = unix.SIGSTOP
	}
	if err := unix.Kill(-d.pid, sig); err == unix.ESRCH {
		_ = unix.Kill(d.pid, sig)
	}
}

// waitDirect is Wait for a direct start: the command reaped, then the
// epoch ended (the init kills what the command left and cleans up) and
// the sandbox given back. When the tree outlived the command, the report
// waits for the init's clean-up (the tree has ended when the report says
// the command did, as on the init's own starts). Otherwise the status is
// returned at once, the rest is done by a goroutine of its own (off the
// path of the exit's report), and the next start on the sandbox reads the
// init's "clean" first.
func (e *ExitReport) waitDirect() (int, bool) {
	d := e.direct
	code, sig, ok := d.wait()
	outlived := !ok || d.populated()
	if d.events >= 0 {
		defer unix.Close(d.events)
	}
	if d.cgdir >= 0 {
		defer unix.Close(d.cgdir)
	}
	if !ok {
		e.Abandon()
		return 0, false
	}
	e.sig = sig
	if sig != 0 {
		code = 128 + sig
	}
	if outlived {
		e.settleDirect()
		return code, true
	}
	// The tree ended with the command: the sandbox goes back at once (the
	// next start of its plan, however soon, finds it), and the epoch's
	// end is written off the path of the exit's report; the next holder
	// waits for that write (settled), then reads the init's "clean".
	settled := make(chan struct{})
	e.t.unclean, e.t.settled = true, settled
	if !e.t.direct.renew() {
		e.Abandon()
		return code, true
	}
	t, epoch := e.t, e.epoch
	e.dropped.Do(func() { e.pool.giveBack(e.t) })
	go func() {
		defer close(settled)
		// A failed write: the init is gone, and its next holder finds
		// it so (EOF where "clean" is due).
		_ = endEpoch(t, epoch)
		// The thread makes the next IPC namespace now (~50 µs here),
		// not when the next start wakes it.
		t.direct.wake()
	}()
	return code, true
}

// settleDirect ends the epoch of a direct start whose tree outlived its
// command, waits for the init's clean-up (the tree has ended then), has
// the thread make the next command's IPC namespace before its next start,
// and gives the sandbox back.
func (e *ExitReport) settleDirect() {
	// What is left of the tree dies (and what of it is the daemon's
	// child is reaped) before the init cleans up: a command's
	// clone(CLONE_PARENT) makes a sibling of it, the daemon's child, that
	// the init neither reaps nor finds (its kill(-1) is skipped when it
	// has no child of its own: endTree), and that, dead, would hold the
	// namespace (the init's exit waits for its reaping)
	// (TestDirectAttackCloneParent).
	if !e.direct.killLeft() {
		e.Abandon()
		return
	}
	if err := endEpoch(e.t, e.epoch); err != nil {
		e.Abandon()
		return
	}
	if !e.t.awaitClean() {
		e.Abandon()
		return
	}
	if !e.t.direct.renew() {
		e.Abandon()
		return
	}
	e.t.direct.wake()
	e.dropped.Do(func() { e.pool.giveBack(e.t) })
}

// killLeft kills every process left in the tree's cgroup (the tree's,
// nested pid namespaces included; the daemon itself aside, were it there)
// and reaps those that are the daemon's children; it reports whether
// none is left within cleanBound. The rest (the init's children) the
// init reaps.
func (d *directReport) killLeft() bool {
	if d.cgdir < 0 {
		return false
	}
	deadline := time.Now().Add(cleanBound)
	killed := map[int]int{} // pid: its pidfd
	defer func() {
		for _, fd := range killed {
			unix.Close(fd)
		}
	}()
	for {
		pids, err := cgroupPids(d.cgdir)
		if err != nil {
			return false
		}
		var wait []unix.PollFd
		for _, pid := range pids {
			fd, seen := killed[pid]
			if !seen {
				if pid == os.Getpid() {
					continue
				}
				if fd, err = unix.PidfdOpen(pid, 0); err != nil {
					continue // gone
				}
				killed[pid] = fd
				_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
			}
			wait = append(wait, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
		}
		if len(wait) == 0 {
			break
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		// Until one of them has exited (it leaves the cgroup first).
		_, _ = unix.Poll(wait, int(left/time.Millisecond)+1)
	}
	for pid, fd := range killed {
		// Exited (POLLIN) once it is a zombie, or reaped by the init.
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if n, _ := unix.Poll(p, max(int(time.Until(deadline)/time.Millisecond), 0)+1); n != 1 {
			return false
		}
		var info unix.Siginfo
		_ = unix.Waitid(unix.P_PIDFD, fd, &info, unix.WEXITED|unix.WNOHANG, nil) // ECHILD: the init's
		unix.Close(fd)
		delete(killed, pid)
	}
	return true
}

// cgroupPids lists the processes of the cgroup dir (their pids here).
func cgroupPids(dir int) ([]int, error) {
	fd, err := unix.Openat(dir, "cgroup.procs", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "cgroup.procs")
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, l := range bytes.Fields(b) {
		if pid, err := strconv.Atoi(string(l)); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// cleanBound bounds the wait for the init's clean-up after a direct start.
const cleanBound = 5 * time.Second

// awaitClean reads the init's "clean" after a direct start (false: it is
// gone, or said something else, or took longer than cleanBound).
func (t *preparedSandbox) awaitClean() bool {
	var buf [len(preparedClean)]byte
	// Mostly the init said it while the start was planned: one read that
	// does not wait (no deadline to set and clear).
	n := 0
	if rc, err := t.sock.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) {
			if m, err := unix.Read(int(fd), buf[:]); err == nil && m > 0 {
				n = m
			}
		})
	}
	if n < len(buf) {
		_ = t.sock.SetReadDeadline(time.Now().Add(cleanBound))
		_, err := io.ReadFull(t.sock, buf[n:])
		_ = t.sock.SetReadDeadline(time.Time{})
		if err != nil {
			return false
		}
	}
	if string(buf[:]) != preparedClean {
		return false
	}
	t.unclean = false
	return true
}

// endEpoch tells t's init that the direct start of epoch has ended (its
// command is reaped, and no signal for it follows).
func endEpoch(t *preparedSandbox, epoch uint32) error {
	end := []byte{frameEnd, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(end[1:], epoch)
	_, err := t.sock.Write(end)
	return err
}
