package contain

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// What the subreaper reads of /proc. Every pid read here may be reused
// by the time it is used; the reaper binds a pid to one process with a
// pidfd and acts only through pidfds (see reaper.go).

// procStat is the part of /proc/<pid>/stat the reaper uses.
type procStat struct {
	state   byte // R, S, D, T, t, Z, X, ...
	ppid    int
	pgrp    int
	session int
	start   uint64 // start time, in clock ticks after boot
}

// stopped reports whether the process can no longer fork: stopped,
// traced-stopped, zombie or dead.
func (s procStat) stopped() bool {
	return s.state == 'T' || s.state == 't' || s.state == 'Z' || s.state == 'X'
}

func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	i := bytes.LastIndexByte(b, ')') // comm may hold spaces and parentheses
	if i < 0 || i+2 >= len(b) {
		return procStat{}, false
	}
	f := strings.Fields(string(b[i+2:]))
	// f[0] is field 3 (state); starttime is field 22.
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, false
	}
	st := procStat{state: f[0][0]}
	st.ppid, _ = strconv.Atoi(f[1])
	st.pgrp, _ = strconv.Atoi(f[2])
	st.session, _ = strconv.Atoi(f[3])
	st.start, _ = strconv.ParseUint(f[19], 10, 64)
	return st, true
}

// childrenOf lists the children of every thread of pid ("self" for this
// process), from /proc/<pid>/task/<tid>/children.
func childrenOf(pid string) []int {
	tasks, err := os.ReadDir("/proc/" + pid + "/task")
	if err != nil {
		return nil
	}
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/" + pid + "/task/" + t.Name() + "/children")
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// heldPidfds returns the pids that pidfds open in this process refer to,
// ignoring the descriptors in skip (the reaper's own). Go's os.StartProcess
// holds a pidfd on every child from the clone until Wait (or Release), so
// a child of this process that nobody else holds a pidfd on is not
// waited for by anyone. ok is false when the table could not be read
// whole (out of descriptors, say): the caller must then reap nothing.
func heldPidfds(skip map[int]bool) (held map[int]bool, ok bool) {
	out := map[int]bool{}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, false
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || skip[fd] {
			continue
		}
		link, err := os.Readlink("/proc/self/fd/" + e.Name())
		if errors.Is(err, fs.ErrNotExist) {
			continue // closed meanwhile
		}
		if err != nil {
			return nil, false
		}
		if link != "anon_inode:[pidfd]" && !strings.HasPrefix(link, "pidfd:") {
			continue
		}
		b, err := os.ReadFile("/proc/self/fdinfo/" + e.Name())
		if errors.Is(err, fs.ErrNotExist) {
			continue // closed meanwhile
		}
		if err != nil {
			return nil, false
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Pid:"); ok {
				if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n > 0 {
					out[n] = true
				}
				break
			}
		}
	}
	return out, true
}

// pidfdOpen returns a pidfd on pid (close-on-exec), or -1.
func pidfdOpen(pid int) int {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return -1
	}
	return fd
}

// pidfdAlive reports whether the process of fd has not been reaped yet
// (a zombie counts as alive here).
func pidfdAlive(fd int) bool { return unix.PidfdSendSignal(fd, 0, nil, 0) == nil }

// pidfdSignal sends sig to the process of fd; a reaped process is ignored.
func pidfdSignal(fd int, sig unix.Signal) { _ = unix.PidfdSendSignal(fd, sig, nil, 0) }

// pidfdReap reaps the process of fd if it is an exited child of this
// process; it never touches any other process. It reports whether it did.
func pidfdReap(fd int) bool {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PIDFD, fd, &info, unix.WEXITED|unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false // ECHILD: not our child, or already reaped
		}
		// si_pid is 0 when the child has not exited yet (WNOHANG).
		return *(*int32)(unsafe.Add(unsafe.Pointer(&info), 16)) != 0
	}
}
