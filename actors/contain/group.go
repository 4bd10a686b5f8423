package contain

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

var groupSeq atomic.Uint64

// Group is the cgroup(s) of one process tree. It is owned by the process
// actor of that process; Kill may also be called by its helpers.
type Group struct {
	v2    string // this tree's cgroup in the unified hierarchy, "" if none
	fd    *os.File
	v1    map[string]string // controller -> this tree's v1 cgroup
	lim   Limits
	oom0  uint64 // oom_kill count at creation
	track string // the v1 cgroup that tracks the tree (ModeCgroup1), "" otherwise
	// ModeSubreaper: the process's reaper and this tree's record there
	// (registered by Started; the record is owned by the reaper's
	// goroutine from then on). Both nil in other modes.
	reap *reaper
	tree *tree
	// pool is the manager whose spares this group's cgroup may join on
	// release (no limits, no v1 cgroup), nil otherwise.
	pool *Manager
	// killed: cgroup.kill was written. Such a cgroup is never reused: a
	// kernel may kill what is later cloned into it (6.18 does: the
	// cgroup's kill sequence no longer matches the new child's).
	killed atomic.Bool
	// records is the manager's record directory (ModeSubreaper,
	// ModePgroup; "" otherwise), recorded this tree's record there (set by
	// Started, removed by free).
	records, recorded string
}

// Rlimit is one per-process resource limit for the helper to set.
type Rlimit struct {
	Resource int
	Cur, Max uint64
}

// NewGroup creates the cgroups for one process tree and applies lim.
// With no cgroups on this host it returns a Group that contains nothing
// (CgroupFD -1) and carries only rlimits; a limit that needs a cgroup and
// has no fallback is refused (ErrLimitUnavailable).
func (m *Manager) NewGroup(lim Limits) (_ *Group, err error) {
	g := &Group{v1: map[string]string{}, lim: lim, reap: m.reap, records: m.records}
	defer func() {
		if err != nil {
			g.Release()
		}
	}()
	name := strconv.FormatUint(groupSeq.Add(1), 10)
	if m.v2 != "" {
		var sp spareCgroup
		if lim.IsZero() && m.track == "" {
			g.pool = m
			select {
			case sp = <-m.spare: // empty since its last tree ended, and open
			default:
			}
		}
		dir := sp.dir
		if dir == "" {
			dir = filepath.Join(m.v2, name)
			if err := os.Mkdir(dir, 0o755); err != nil {
				return nil, fmt.Errorf("contain: create cgroup: %w", err)
			}
		}
		g.v2 = dir
		g.fd = sp.fd
		if g.fd == nil {
			fd, err := os.Open(dir)
			if err != nil {
				return nil, fmt.Errorf("contain: open cgroup: %w", err)
			}
			g.fd = fd
		}
		if lim.MemoryBytes > 0 && m.v2Ctrl["memory"] {
			if err := write(dir, "memory.max", lim.MemoryBytes); err != nil {
				return nil, err
			}
			_ = write(dir, "memory.swap.max", 0)
		}
		if lim.Pids > 0 && m.v2Ctrl["pids"] {
			if err := write(dir, "pids.max", lim.Pids); err != nil {
				return nil, err
			}
		}
	}
	need := map[string]uint64{}
	if m.track != "" {
		need[m.track] = 0 // tracking only, unless a limit below sets it
	}
	if lim.MemoryBytes > 0 && !m.v2Ctrl["memory"] && m.v1["memory"] != "" {
		need["memory"] = lim.MemoryBytes
	}
	if lim.Pids > 0 && !m.v2Ctrl["pids"] {
		if m.v1["pids"] == "" {
			return nil, fmt.Errorf("%w: a pids limit needs a pids cgroup controller (v2 delegated or v1 mounted and writable)", ErrLimitUnavailable)
		}
		need["pids"] = lim.Pids
	}
	for c, v := range need {
		dir := filepath.Join(m.v1[c], name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, fmt.Errorf("contain: create %s cgroup: %w", c, err)
		}
		g.v1[c] = dir
		switch c {
		case "memory":
			if err := write(dir, "memory.limit_in_bytes", v); err != nil {
				return nil, err
			}
			_ = write(dir, "memory.memsw.limit_in_bytes", v)
			g.oom0 = g.oomKills()
		case "pids":
			if v > 0 {
				if err := write(dir, "pids.max", v); err != nil {
					return nil, err
				}
			}
		}
	}
	if m.track != "" {
		g.track = g.v1[m.track]
	}
	return g, nil
}

// Started registers the tree's root, the child just started with pid,
// with the subreaper (ModeSubreaper), and records its process group in the
// state directory (ModeSubreaper, ModePgroup). It must be
// called before anything waits for the child, so that the pid still
// names it.
func (g *Group) Started(pid int) error {
	if g == nil {
		return nil
	}
	if g.records != "" && g.recorded == "" {
		// The child is its process group's leader (Setsid): a daemon
		// started after this one died kills the group (CleanUpDead).
		g.recorded = record(g.records, pid)
	}
	if g.reap == nil || g.tree != nil {
		return nil
	}
	fd := pidfdOpen(pid)
	if fd < 0 {
		return fmt.Errorf("contain: pidfd of %d: not available", pid)
	}
	st, ok := readStat(pid)
	if !ok {
		unix.Close(fd)
		return fmt.Errorf("contain: /proc/%d/stat: unreadable", pid)
	}
	t := &tree{root: pid, rootFD: fd, start: st.start}
	if err := g.reap.call(reqRegister, t); err != nil {
		unix.Close(fd)
		return err
	}
	g.tree = t
	return nil
}

// CgroupFD is the descriptor to clone the child into (CLONE_INTO_CGROUP),
// or -1 when this host has no unified hierarchy for us.
func (g *Group) CgroupFD() int {
	if g == nil || g.fd == nil {
		return -1
	}
	return int(g.fd.Fd())
}

// CloseFD closes the descriptor CgroupFD returned, once the child has been
// cloned into the cgroup: the group holds no descriptor while its tree
// runs (Kill, LimitHit, Empty and Release work by path). Safe to call more
// than once, and on a nil Group.
func (g *Group) CloseFD() {
	if g != nil && g.fd != nil {
		g.fd.Close()
		g.fd = nil
	}
}

// JoinFiles are the v1 cgroup.procs files the child must move itself into
// before it runs anything (the sandbox helper does it).
func (g *Group) JoinFiles() []string {
	if g == nil {
		return nil
	}
	var out []string
	for _, d := range g.v1 {
		out = append(out, filepath.Join(d, "cgroup.procs"))
	}
	return out
}

// Rlimits are the per-process limits to set in the child before exec:
// the ones no cgroup covers here.
func (g *Group) Rlimits() []Rlimit {
	if g == nil {
		return nil
	}
	var out []Rlimit
	if g.lim.MemoryBytes > 0 && g.v1["memory"] == "" && !g.v2Has("memory.max") {
		out = append(out, Rlimit{unix.RLIMIT_AS, g.lim.MemoryBytes, g.lim.MemoryBytes})
	}
	if g.lim.CPUSeconds > 0 {
		// SIGXCPU at the soft limit, SIGKILL one second later.
		out = append(out, Rlimit{unix.RLIMIT_CPU, g.lim.CPUSeconds, g.lim.CPUSeconds + 1})
	}
	if g.lim.OpenFiles > 0 {
		out = append(out, Rlimit{unix.RLIMIT_NOFILE, g.lim.OpenFiles, g.lim.OpenFiles})
	}
	if g.lim.FileSizeBytes > 0 {
		out = append(out, Rlimit{unix.RLIMIT_FSIZE, g.lim.FileSizeBytes, g.lim.FileSizeBytes})
	}
	return out
}

func (g *Group) v2Has(file string) bool { return g.v2 != "" && exists(filepath.Join(g.v2, file)) }

// Contained reports whether every descendant is tracked by a cgroup.
func (g *Group) Contained() bool {
	return g != nil && (g.v2 != "" || g.track != "" || g.tree != nil)
}

// Kill sends SIGKILL to every process of the tree: cgroup.kill where there
// is a v2 cgroup, each pid listed by the v1 cgroups, or (ModeSubreaper)
// every process the reaper attributes to the tree, frozen first.
func (g *Group) Kill() error {
	if g == nil {
		return nil
	}
	if g.tree != nil {
		return g.reap.call(reqKill, g.tree)
	}
	if g.v2 != "" {
		g.killed.Store(true)
		if err := os.WriteFile(filepath.Join(g.v2, "cgroup.kill"), []byte("1"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("contain: cgroup.kill: %w", err)
		}
		return nil
	}
	// v1: a freezer cgroup is frozen first so nothing forks between the
	// listing and the kill; without one, list and kill until empty.
	frozen := false
	if d := g.v1["freezer"]; d != "" {
		frozen = os.WriteFile(filepath.Join(d, "freezer.state"), []byte("FROZEN"), 0) == nil
	}
	for round := 0; round < 100; round++ {
		n := 0
		for _, d := range g.v1 {
			for _, pid := range pids(d) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				n++
			}
		}
		if n == 0 || frozen {
			break
		}
	}
	if frozen {
		_ = os.WriteFile(filepath.Join(g.v1["freezer"], "freezer.state"), []byte("THAWED"), 0)
	}
	return nil
}

// knownEmpty reports whether the v2 cgroup reads as unpopulated. Unlike
// Empty, a read that fails (no descriptor left, say) is not taken for
// empty: a cgroup is released early or kept as a spare only when it is
// known to hold nothing.
func (g *Group) knownEmpty() bool {
	b, err := os.ReadFile(filepath.Join(g.v2, "cgroup.events"))
	return err == nil && bytes.Contains(b, []byte("populated 0"))
}

// Empty reports whether no process of the tree is left.
func (g *Group) Empty() bool {
	if g == nil {
		return true
	}
	if g.v2 != "" {
		b, err := os.ReadFile(filepath.Join(g.v2, "cgroup.events"))
		return err != nil || bytes.Contains(b, []byte("populated 0"))
	}
	for _, d := range g.v1 {
		if len(pids(d)) > 0 {
			return false
		}
	}
	return true
}

// LimitHit names the limit that ended a process with exit code code
// (128+N for signal N), or "" when none did.
func (g *Group) LimitHit(code int) string {
	if g == nil || code == 0 {
		return ""
	}
	sig := syscall.Signal(code - 128)
	switch {
	case g.lim.MemoryBytes > 0 && g.oomKills() > g.oom0:
		return LimitMemory
	case g.lim.CPUSeconds > 0 && (sig == syscall.SIGXCPU || sig == syscall.SIGKILL && g.cpuOver()):
		return LimitCPU
	case g.lim.FileSizeBytes > 0 && sig == syscall.SIGXFSZ:
		return LimitFileSize
	case g.lim.Pids > 0 && g.pidsMaxHit():
		return LimitPids
	}
	return ""
}

func (g *Group) oomKills() uint64 {
	if d := g.v1["memory"]; d != "" {
		return keyed(filepath.Join(d, "memory.oom_control"), "oom_kill")
	}
	if g.v2Has("memory.events") {
		return keyed(filepath.Join(g.v2, "memory.events"), "oom_kill")
	}
	return 0
}

func (g *Group) pidsMaxHit() bool {
	if d := g.v1["pids"]; d != "" {
		return keyed(filepath.Join(d, "pids.events"), "max") > 0
	}
	return g.v2Has("pids.events") && keyed(filepath.Join(g.v2, "pids.events"), "max") > 0
}

// cpuOver reports whether the tree used its CPU seconds (cpu.stat of the
// v2 cgroup, which exists without the cpu controller).
func (g *Group) cpuOver() bool {
	if g.v2 == "" {
		return false
	}
	usec := keyed(filepath.Join(g.v2, "cpu.stat"), "usage_usec")
	return usec >= g.lim.CPUSeconds*1e6
}

// Release kills what is left of the tree, waits (bounded) for it to empty
// and removes the cgroups (or keeps an empty one that was never killed for
// reuse, see Manager.spare). Safe to call more than once.
func (g *Group) Release() {
	if g == nil {
		return
	}
	if g.tree != nil {
		_ = g.reap.call(reqRelease, g.tree)
		g.tree = nil
	}
	empty := g.Empty()
	if !empty {
		_ = g.Kill()
		for i := 0; i < 200 && !empty; i++ {
			time.Sleep(time.Millisecond)
			empty = g.Empty()
		}
	}
	g.free(empty && g.v2 != "" && g.knownEmpty())
}

// ReleaseIfEmpty releases the group now if no process of its tree is left
// (the tree ended with its process: nothing remains to contain), and
// reports whether it did. A tree that is still running keeps its group
// until Release. Not for a subreaper's tree (ModeSubreaper), which is
// released by Release only.
func (g *Group) ReleaseIfEmpty() bool {
	if g == nil || g.tree != nil {
		return false
	}
	switch {
	case g.v2 != "":
		if !g.knownEmpty() {
			return false
		}
	case len(g.v1) == 0 || !g.Empty():
		return false
	}
	g.free(g.v2 != "")
	return true
}

// free closes the descriptor and removes the cgroups. A v2 cgroup known
// to be empty (knownEmpty), without limits and never killed goes back to
// the manager's spares if there is room.
func (g *Group) free(knownEmpty bool) {
	if g.recorded != "" {
		_ = os.Remove(g.recorded)
		g.recorded = ""
	}
	if g.fd != nil {
		g.fd.Close()
		g.fd = nil
	}
	if g.v2 != "" {
		kept := false
		if knownEmpty && !g.killed.Load() && g.pool != nil && len(g.v1) == 0 && !g.pool.closed.Load() {
			// Opened now, so that the start that takes it has nothing to do.
			if fd, err := os.Open(g.v2); err == nil {
				select {
				case g.pool.spare <- spareCgroup{dir: g.v2, fd: fd}:
					kept = true
				default:
					fd.Close()
				}
			}
		}
		if !kept {
			_ = rmdirQuiet(g.v2)
		}
		g.v2 = ""
	}
	for c, d := range g.v1 {
		_ = rmdirQuiet(d)
		delete(g.v1, c)
	}
}

func write(dir, file string, v uint64) error {
	if err := os.WriteFile(filepath.Join(dir, file), []byte(strconv.FormatUint(v, 10)), 0); err != nil {
		return fmt.Errorf("contain: set %s: %w", file, err)
	}
	return nil
}

// keyed reads "key N" from a flat-keyed cgroup file.
func keyed(path, key string) uint64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key+" "); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

func pids(dir string) []int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}
