package contain

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// Limits bound a process tree. Zero means no limit.
type Limits struct {
	MemoryBytes   uint64
	Pids          uint64
	CPUSeconds    uint64
	OpenFiles     uint64
	FileSizeBytes uint64
}

// IsZero reports whether no limit is set.
func (l Limits) IsZero() bool { return l == Limits{} }

// Limit names, as reported when a process ended because of one.
const (
	LimitMemory   = "memory"
	LimitPids     = "pids"
	LimitCPU      = "cpu"
	LimitOpenFile = "openFiles"
	LimitFileSize = "fileSize"
)

// ErrLimitUnavailable is wrapped when a limit cannot be applied here.
var ErrLimitUnavailable = errors.New("contain: limit unavailable on this host")

// Manager creates one cgroup per process under a directory of its own in
// each hierarchy it can write to. Its fields are set by NewManager and
// read-only after; Groups are owned by whoever created them.
type Manager struct {
	v2     string          // per-daemon directory in the unified hierarchy, "" if none
	v2Ctrl map[string]bool // controllers enabled for v2 children (memory, pids)
	v1     map[string]string
	// track is the v1 controller whose cgroups track trees when there is
	// no v2 hierarchy ("freezer" or "pids"), "" otherwise.
	track string
	// reap is the process's subreaper when trees are contained by it
	// (ModeSubreaper), nil otherwise. Set to nil by Close (closeOnce).
	reap      *reaper
	closeOnce sync.Once
	// spare holds empty per-process v2 cgroups for reuse (nil without a v2
	// hierarchy): a released group without limits whose tree is gone is
	// put here instead of removed, and the next NewGroup without limits
	// takes it instead of creating one: a start saves the mkdir and open,
	// its release the rmdir. At most spareCap wait. Drained by Close.
	spare  chan spareCgroup
	closed atomic.Bool // Close ran: no cgroup joins the spares any more
	// records is this manager's directory of process-group records in the
	// state directory (ModeSubreaper, ModePgroup), "" when it keeps none;
	// recordErr says why it keeps none when it should.
	records   string
	recordErr error
	// reclaimed is what CleanUpDead did when the manager was made.
	reclaimed []Reclaimed
}

// Reclaimed reports the trees of dead managers this one killed when it
// was made (see CleanUpDead).
func (m *Manager) Reclaimed() []Reclaimed { return m.reclaimed }

// NeedsGroup reports whether a tree with limits lim needs a Group: always,
// except by process group only (ModePgroup) without limits and without a
// record to keep.
func (m *Manager) NeedsGroup(lim Limits) bool {
	return m.Mode() != ModePgroup || !lim.IsZero() || m.records != ""
}

// RecordError says why this manager keeps no records of its process groups
// (nil when it keeps them, or needs none: its cgroups are the record).
func (m *Manager) RecordError() error { return m.recordErr }

// spareCgroup is an empty cgroup kept for reuse, with the descriptor to
// clone into it already open (a spare costs the manager one descriptor).
type spareCgroup struct {
	dir string
	fd  *os.File
}

// spareCap is how many empty cgroups a Manager keeps for reuse.
const spareCap = 16

// Mode values: how process trees are tracked.
const (
	ModeCgroup2 = "cgroup2" // clone into a v2 cgroup; cgroup.kill
	ModeCgroup1 = "cgroup1" // the helper joins a v1 freezer/pids cgroup; freeze, kill each pid, thaw
	// ModeSubreaper: this process is a child subreaper; adopted orphans
	// are reaped, attributed to their tree, and killed with it (reaper.go).
	ModeSubreaper = "subreaper"
	ModePgroup    = "pgroup" // the process group only
)

// NewManager probes the cgroup hierarchies and creates runtimed-<pid>
// directories (see managerName) where it can, using the best mode at most as good as want,
// in the order ModeCgroup2, ModeCgroup1, ModeSubreaper, ModePgroup
// (ModeCgroup2 for the best this host has). A host without writable
// cgroups gives a Manager that contains trees as a subreaper, or by
// process group only where that cannot be had (Mode says which); that is
// not an error.
//
// First it kills what managers of processes that died left running
// (CleanUpDead; Reclaimed reports it). In ModeSubreaper and ModePgroup it
// records each tree's process group in the state directory (ManagerOptions)
// so that a later manager can do the same for its trees.
func NewManager(want string) *Manager {
	return NewManagerWith(want, ManagerOptions{StateDir: DefaultStateDir()})
}

// ManagerOptions configure NewManagerWith.
type ManagerOptions struct {
	// StateDir holds the records of process groups (ModeSubreaper,
	// ModePgroup) and is searched for those of dead managers; "" means
	// neither.
	StateDir string
}

// NewManagerWith is NewManager with options.
func NewManagerWith(want string, o ManagerOptions) *Manager {
	m := &Manager{v1: map[string]string{}, v2Ctrl: map[string]bool{}}
	m.reclaimed = CleanUpDead(o.StateDir)
	name := managerName(os.Getpid(), managerSeq.Add(1))
	defer func() {
		if mode := m.Mode(); (mode == ModeSubreaper || mode == ModePgroup) && o.StateDir != "" {
			m.records, m.recordErr = openRecords(o.StateDir, name)
		}
	}()
	if want == ModePgroup {
		return m
	}
	if want == ModeSubreaper {
		m.reap, _ = acquireReaper()
		return m
	}
	mounts, own := cgroupMounts(), ownCgroups()
	if mnt, ok := mounts[""]; ok && want == ModeCgroup2 {
		base := filepath.Join(mnt, own[""])
		dir := filepath.Join(base, name)
		if err := os.Mkdir(dir, 0o755); err == nil || errors.Is(err, os.ErrExist) {
			if exists(filepath.Join(dir, "cgroup.kill")) {
				m.v2 = dir
				m.spare = make(chan spareCgroup, spareCap)
				// Delegate memory and pids to per-process children when the
				// daemon's own cgroup offers them.
				for _, c := range []string{"memory", "pids"} {
					if os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+c), 0) == nil {
						m.v2Ctrl[c] = true
					}
				}
			} else {
				_ = syscall.Rmdir(dir)
			}
		}
	}
	for _, c := range []string{"memory", "pids", "freezer"} {
		if m.v2Ctrl[c] {
			continue
		}
		mnt, ok := mounts[c]
		if !ok {
			continue
		}
		base := filepath.Join(mnt, own[c])
		dir := filepath.Join(base, name)
		if err := os.Mkdir(dir, 0o755); err == nil || errors.Is(err, os.ErrExist) {
			m.v1[c] = dir
		}
	}
	if m.v2 == "" {
		for _, c := range []string{"freezer", "pids"} {
			if m.v1[c] != "" {
				m.track = c
				break
			}
		}
	}
	if m.v2 == "" && m.track == "" {
		m.reap, _ = acquireReaper()
	}
	return m
}

// Mode names how trees are contained: ModeCgroup2 (every descendant is in
// the process's cgroup and dies with cgroup.kill), ModeCgroup1 (a v1
// freezer or pids cgroup joined before the command runs: frozen, killed
// pid by pid, thawed), ModeSubreaper (orphans are adopted by this
// process, attributed to their tree, frozen and killed with it) or
// ModePgroup (the process group only: descendants that call setsid
// escape).
func (m *Manager) Mode() string {
	switch {
	case m.v2 != "":
		return ModeCgroup2
	case m.track != "":
		return ModeCgroup1
	case m.reap != nil:
		return ModeSubreaper
	}
	return ModePgroup
}

// LimitsOnTree reports whether memory and pids limits bound whole trees
// here (a cgroup controller for each).
func (m *Manager) LimitsOnTree() bool {
	return (m.v2Ctrl["memory"] || m.v1["memory"] != "") && (m.v2Ctrl["pids"] || m.v1["pids"] != "")
}

// Summary describes containment and how each limit is applied here.
func (m *Manager) Summary() string {
	return fmt.Sprintf("tree containment: %s; limits: memory by %s, pids by %s, cpuSeconds/openFiles/fileSizeBytes by rlimits of each process",
		m.Mode(), m.how("memory"), m.how("pids"))
}

func (m *Manager) how(c string) string {
	switch {
	case m.v2Ctrl[c]:
		return "cgroup v2 (whole tree)"
	case m.v1[c] != "":
		return "cgroup v1 (whole tree)"
	case c == "memory":
		return "RLIMIT_AS (each process)"
	}
	return "nothing (refused)"
}

// Close removes the per-daemon directories and, for the last Manager in
// ModeSubreaper, stops the subreaper (killing and reaping every orphan
// left); groups must be released first. Safe to call more than once.
func (m *Manager) Close() error {
	m.closed.Store(true)
	m.closeOnce.Do(func() {
		if m.reap != nil {
			releaseReaper(m.reap)
		}
	})
	var errs []error
drain:
	for m.spare != nil {
		select {
		case sp := <-m.spare:
			sp.fd.Close()
			errs = append(errs, rmdirQuiet(sp.dir))
		default:
			break drain
		}
	}
	if m.v2 != "" {
		errs = append(errs, rmdirQuiet(m.v2))
	}
	if m.records != "" {
		_ = os.Remove(filepath.Join(m.records, ownerFile))
		errs = append(errs, rmdirQuiet(m.records))
	}
	for _, d := range m.v1 {
		errs = append(errs, rmdirQuiet(d))
	}
	return errors.Join(errs...)
}

// cgroupMounts maps a controller ("" for the unified hierarchy) to its mount point.
func cgroupMounts() map[string]string {
	out := map[string]string{}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		i := indexOf(fields, "-")
		if i < 0 || i+3 >= len(fields) || len(fields) < 5 {
			continue
		}
		fstype, mnt, opts := fields[i+1], fields[4], fields[i+3]
		switch fstype {
		case "cgroup2":
			if _, ok := out[""]; !ok {
				out[""] = mnt
			}
		case "cgroup":
			for _, o := range strings.Split(opts, ",") {
				if o == "memory" || o == "pids" || o == "freezer" {
					out[o] = mnt
				}
			}
		}
	}
	return out
}

// ownCgroups maps a controller ("" for unified) to this process's cgroup path.
func ownCgroups() map[string]string {
	out := map[string]string{}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return out
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out
}

// managerSeq numbers the Managers of this process.
var managerSeq atomic.Uint64

// managerName is the directory of a process's seq-th Manager:
// runtimed-<pid> for the first (a daemon's only one), runtimed-<pid>.<seq>
// for later ones, so Managers that live side by side in one process (two
// embedded runtimes, a test suite) never share a directory that one of
// them removes at Close.
func managerName(pid int, seq uint64) string {
	if seq == 1 {
		return fmt.Sprintf("runtimed-%d", pid)
	}
	return fmt.Sprintf("runtimed-%d.%d", pid, seq)
}

func indexOf(ss []string, s string) int {
	for i, x := range ss {
		if x == s {
			return i
		}
	}
	return -1
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func rmdirQuiet(p string) error {
	if err := syscall.Rmdir(p); err != nil && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("contain: remove %s: %w", p, err)
	}
	return nil
}
