package contain

import (
	"bytes"
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Trees of a daemon that died. A daemon killed with SIGKILL (or an
// embedding program that crashed) leaves its children running, reparented
// to pid 1: a cgroup per tree (ModeCgroup2, ModeCgroup1) still holds every
// process of it, and in the other modes the state directory holds a record
// per tree of its process group (Manager.record). CleanUpDead, run by
// every NewManager before it makes its own directories, finds what managers
// of processes that no longer run left behind and kills it.

// Reclaimed is what CleanUpDead did about one tree of a dead manager.
type Reclaimed struct {
	Daemon int    // the pid of the process whose manager left it
	Where  string // the cgroup directory or the state file that recorded it
	Killed []int  // the processes it killed (listed just before the kill)
	Err    error  // what went wrong, if anything (the tree may survive)
}

func (r Reclaimed) String() string {
	s := fmt.Sprintf("daemon %d: %s: killed %d processes %v", r.Daemon, r.Where, len(r.Killed), r.Killed)
	if r.Err != nil {
		s += ": " + r.Err.Error()
	}
	return s
}

// StateDirEnv names the environment variable that overrides DefaultStateDir.
const StateDirEnv = "RUNTIMED_STATE_DIR"

// DefaultStateDir is where managers record their trees' process groups:
// $RUNTIMED_STATE_DIR, else $XDG_RUNTIME_DIR/runtimed, else
// <os.TempDir()>/runtimed-<uid>.
func DefaultStateDir() string {
	if d := os.Getenv(StateDirEnv); d != "" {
		return d
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "runtimed")
	}
	return filepath.Join(os.TempDir(), "runtimed-"+strconv.Itoa(os.Geteuid()))
}

// staleKillWait bounds the wait for a killed tree to be gone before its
// cgroup is removed.
const staleKillWait = 2 * time.Second

// CleanUpDead kills the trees that managers of processes no longer running
// left: every process in their cgroups (this process's own cgroup
// hierarchies, v2 and v1) and every process group they recorded in
// stateDir ("" for none). It removes what it emptied and reports each tree
// it found. Managers of live processes (another daemon, another embedded
// runtime) are never touched.
func CleanUpDead(stateDir string) []Reclaimed {
	var out []Reclaimed
	mounts, own := cgroupMounts(), ownCgroups()
	if mnt, ok := mounts[""]; ok {
		out = append(out, cleanStaleCgroups(filepath.Join(mnt, own[""]), "")...)
	}
	for _, c := range []string{"freezer", "pids", "memory"} {
		if mnt, ok := mounts[c]; ok {
			out = append(out, cleanStaleCgroups(filepath.Join(mnt, own[c]), c)...)
		}
	}
	if stateDir != "" {
		out = append(out, cleanStaleRecords(stateDir)...)
	}
	return out
}

// managerPid parses a manager directory name (runtimed-<pid> or
// runtimed-<pid>.<seq>); false for another name or this process's own.
func managerPid(name string) (int, bool) {
	pidStr, ok := strings.CutPrefix(name, "runtimed-")
	if !ok {
		return 0, false
	}
	pidStr, _, _ = strings.Cut(pidStr, ".")
	pid, err := strconv.Atoi(pidStr)
	if err != nil || pid <= 0 || pid == os.Getpid() {
		return 0, false
	}
	return pid, true
}

// deadManagers yields the manager directories in base (runtimed-<pid>,
// runtimed-<pid>.<seq>; never this process's) whose process alive says is
// gone, with its pid.
func deadManagers(base string, alive func(dir string, pid int) bool) iter.Seq2[string, int] {
	return func(yield func(string, int) bool) {
		ents, _ := os.ReadDir(base)
		for _, e := range ents {
			pid, ok := managerPid(e.Name())
			dir := filepath.Join(base, e.Name())
			if !e.IsDir() || !ok || alive(dir, pid) {
				continue
			}
			if !yield(dir, pid) {
				return
			}
		}
	}
}

// cleanStaleCgroups kills and removes the per-tree cgroups under each
// dead manager's directory in base; controller is "" for the unified
// hierarchy.
func cleanStaleCgroups(base, controller string) []Reclaimed {
	var out []Reclaimed
	for dir, pid := range deadManagers(base, func(_ string, pid int) bool { return syscall.Kill(pid, 0) == nil }) {
		subs, _ := os.ReadDir(dir)
		for _, s := range subs {
			if !s.IsDir() {
				continue
			}
			cg := filepath.Join(dir, s.Name())
			if procs := pids(cg); len(procs) > 0 {
				r := Reclaimed{Daemon: pid, Where: cg, Killed: procs}
				r.Err = killCgroup(cg, controller)
				out = append(out, r)
			}
			_ = syscall.Rmdir(cg)
		}
		_ = syscall.Rmdir(dir)
	}
	return out
}

// killCgroup kills every process of a cgroup and waits (bounded) for it to
// be empty: cgroup.kill in v2, a frozen listing in a v1 freezer, else
// listing and killing until empty.
func killCgroup(cg, controller string) error {
	if controller == "" {
		if err := os.WriteFile(filepath.Join(cg, "cgroup.kill"), []byte("1"), 0); err != nil {
			return fmt.Errorf("cgroup.kill: %w", err)
		}
	} else {
		frozen := controller == "freezer" && os.WriteFile(filepath.Join(cg, "freezer.state"), []byte("FROZEN"), 0) == nil
		for _, p := range pids(cg) {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		if frozen {
			_ = os.WriteFile(filepath.Join(cg, "freezer.state"), []byte("THAWED"), 0)
		}
	}
	deadline := time.Now().Add(staleKillWait)
	for len(pids(cg)) > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d processes still there %v after the kill", len(pids(cg)), staleKillWait)
		}
		if controller != "" && controller != "freezer" {
			for _, p := range pids(cg) { // forked between the listing and the kill
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
		}
		time.Sleep(5 * time.Millisecond) // polling the cgroup's emptiness, bounded
	}
	return nil
}

// The state directory: one directory per manager that records (named as
// its cgroup directories, runtimed-<pid>[.<seq>]) with an "owner" file
// ("<pid> <start time>") and one file per tree, named after its process
// group, holding the group leader's start time.

// ownerFile names a manager's owner record in its state directory.
const ownerFile = "owner"

// openStateDir checks that dir is this user's and writable by nobody else
// (a record in it makes a later daemon kill a process group); with create
// it makes dir (0700) first if its parent exists (never the parents: in an
// empty root, say, nothing is recorded rather than /tmp made).
func openStateDir(dir string, create bool) error {
	if create {
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("state directory %s is not a directory of uid %d writable by it alone", dir, os.Geteuid())
	}
	return nil
}

// cleanStaleRecords kills the process groups recorded by dead managers.
func cleanStaleRecords(stateDir string) []Reclaimed {
	if openStateDir(stateDir, false) != nil {
		return nil
	}
	var out []Reclaimed
	for dir, pid := range deadManagers(stateDir, ownerAlive) {
		recs, _ := os.ReadDir(dir)
		for _, r := range recs {
			if r.Name() == ownerFile {
				continue
			}
			path := filepath.Join(dir, r.Name())
			if rec, found := killRecordedGroup(path); found {
				rec.Daemon = pid
				out = append(out, rec)
			}
			_ = os.Remove(path)
		}
		_ = os.Remove(filepath.Join(dir, ownerFile))
		_ = syscall.Rmdir(dir)
	}
	return out
}

// ownerAlive reports whether the manager's process still runs (its pid
// names a process started when it was recorded): its pid may have been
// reused, which kill(pid, 0) alone cannot tell. Without an owner file (a
// manager between making its directory and writing it) kill(pid, 0) says.
func ownerAlive(dir string, pid int) bool {
	b, err := os.ReadFile(filepath.Join(dir, ownerFile))
	if err != nil {
		return syscall.Kill(pid, 0) == nil
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return false
	}
	owner, _ := strconv.Atoi(f[0])
	start, _ := strconv.ParseUint(f[1], 10, 64)
	st, ok := readStat(owner)
	return ok && st.start == start
}

// killRecordedGroup kills the process group a record names, unless its
// number now names another group: while any process of a group is left
// the kernel does not reuse its number, so a live process with that pid
// but another start time means the recorded group is gone.
func killRecordedGroup(path string) (Reclaimed, bool) {
	r := Reclaimed{Where: path}
	pgid, err := strconv.Atoi(filepath.Base(path))
	if err != nil || pgid <= 1 {
		return r, false
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return r, false
	}
	start, err := strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil {
		return r, false
	}
	if st, ok := readStat(pgid); ok && st.start != start {
		return r, false // the leader's pid now names another process: the group is gone
	}
	r.Killed = groupMembers(pgid)
	if len(r.Killed) == 0 {
		return r, false
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		r.Err = fmt.Errorf("kill process group %d: %w", pgid, err)
	}
	return r, true
}

// groupMembers lists the processes of process group pgid.
func groupMembers(pgid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readStat(pid); ok && st.pgrp == pgid && st.state != 'Z' {
			out = append(out, pid)
		}
	}
	return out
}

// openRecords makes this manager's record directory in stateDir with its
// owner file; "" when it cannot (recording is then off, and said so by
// the error).
func openRecords(stateDir, name string) (string, error) {
	if err := openStateDir(stateDir, true); err != nil {
		return "", err
	}
	st, ok := readStat(os.Getpid())
	if !ok {
		return "", errors.New("/proc/self/stat unreadable")
	}
	dir := filepath.Join(stateDir, name)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	owner := fmt.Sprintf("%d %d", os.Getpid(), st.start)
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(owner), 0o600); err != nil {
		return "", err
	}
	return dir, nil
}

// record writes the record of a tree whose root (its process group
// leader) is pid; it returns the record's path ("" if it could not).
func record(dir string, pid int) string {
	st, ok := readStat(pid)
	if !ok {
		return ""
	}
	path := filepath.Join(dir, strconv.Itoa(pid))
	if os.WriteFile(path, []byte(strconv.FormatUint(st.start, 10)), 0o600) != nil {
		return ""
	}
	return path
}
