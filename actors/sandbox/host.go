package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// MinLandlockABI is the lowest Landlock ABI this package enforces with:
// ABI 6 adds signal and abstract-socket scoping, without which a
// sandboxed child could signal the daemon (ABI 3 would already cover
// truncation, ABI 4 TCP).
const MinLandlockABI = 6

// Host is what this machine can enforce, probed once at start-up.
type Host struct {
	// LandlockABI is the kernel's Landlock ABI version (0: none).
	LandlockABI int
	// LandlockErrata is the kernel's bit set of fixed Landlock errata
	// (bit N-1 for erratum N).
	LandlockErrata int
	// Seccomp reports whether seccomp filters can be installed.
	Seccomp bool
	// MountNS reports whether a child can get a private mount namespace
	// (the daemon has CAP_SYS_ADMIN), needed for read-only subpaths under
	// writable roots and for deny entries under readable ones.
	MountNS bool
	// Exe is the executable that runs the helper (this program).
	Exe string
	// Scratch is an empty directory over which a sandbox's private mount
	// namespace mounts the tmpfs holding the empty, unreadable file and
	// directory that hide denied paths (nothing is ever written in it on
	// the host).
	Scratch string
	// Level is what a sandboxed start gets: LevelNamespaces (the default
	// where namespaces can be made) or LevelLandlock (the operator's
	// choice: Landlock and seccomp only, see docs/sandbox.md for what that
	// leaves open).
	Level Level
	// PidNamespace is PidIsolate (the default: each sandboxed tree in a
	// pid namespace of its own, with its own /proc) or PidInherit.
	PidNamespace PidMode
	// Namespaces reports whether this host can make the namespaces level's
	// namespaces and mounts; NamespacesMissing says why not.
	Namespaces        bool
	NamespacesMissing string
	// HelperOnly sends every confined start through the helper, also
	// those Start would enforce on a spawning thread (tests and
	// benchmarks compare the two ways).
	HelperOnly bool

	// spawner reports that a thread can take spawnerUID (see start.go).
	spawner bool
	// nets keeps an empty network namespace made ahead for the next
	// namespaced start with the network restricted (nil: none). Copies of
	// a Host share it.
	nets *netPool
	// prepared keeps sandboxes prepared for the next namespaced starts of
	// the recent policies (nil: none; set by Probe where namespaces can be
	// made, ended by Close). Copies of a Host share it.
	prepared *preparedPool
	// NoPrepare makes every namespaced start build its sandbox itself
	// (tests and benchmarks compare the two ways).
	NoPrepare bool
	// NoDirect sends every start on a prepared sandbox through its init,
	// also those the daemon could fork into it itself (direct.go; tests
	// and benchmarks compare the two ways).
	NoDirect bool
	// threads keeps a spawning thread prepared for the next confined
	// start (nil: none; set by Probe when threads can be confined, ended
	// by Close). Copies of a Host share it.
	threads *threadPool
}

// Level is a sandbox level (runtimed serve --sandbox-level).
type Level string

const (
	// LevelNamespaces: mount, pid, IPC, cgroup and network namespaces are
	// the boundary, Landlock and seccomp the second wall (ns.go).
	LevelNamespaces Level = "namespaces"
	// LevelLandlock: Landlock and seccomp on a spawning thread or the
	// helper, with mount overlays only where Landlock cannot say it.
	LevelLandlock Level = "landlock"
)

// PidMode is runtimed serve --sandbox-pid-namespace.
type PidMode string

const (
	// PidIsolate: each sandboxed tree in a pid namespace of its own, the
	// helper its init.
	PidIsolate PidMode = "isolate"
	// PidInherit: the host's pid namespace (no init; /proc shows the host).
	PidInherit PidMode = "inherit"
)

// ParseLevel reads runtimed serve --sandbox-level.
func ParseLevel(s string) (Level, error) {
	switch Level(s) {
	case LevelNamespaces, LevelLandlock:
		return Level(s), nil
	}
	return "", fmt.Errorf("sandbox level %q: expected namespaces or landlock", s)
}

// ParsePidMode reads runtimed serve --sandbox-pid-namespace.
func ParsePidMode(s string) (PidMode, error) {
	switch PidMode(s) {
	case PidIsolate, PidInherit:
		return PidMode(s), nil
	}
	return "", fmt.Errorf("sandbox pid namespace %q: expected isolate or inherit", s)
}

// UnavailableError is a policy this host cannot enforce. The message names
// what is missing and how to check it.
type UnavailableError struct {
	What    string // the part of the policy ("file system restrictions")
	Missing string // what the host lacks
	Check   string // how an operator checks it
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("sandbox cannot be enforced on this host: %s needs %s (%s)", e.What, e.Missing, e.Check)
}

// ErrUnavailable is wrapped by every *UnavailableError.
var ErrUnavailable = errors.New("sandbox: unavailable on this host")

func (e *UnavailableError) Unwrap() error { return ErrUnavailable }

// Probe reads what this host can enforce. scratch is where the hiding
// entries are created (a fresh private directory is made inside it).
func Probe(scratch string) (*Host, error) {
	h := &Host{}
	if v, err := ll.LandlockGetABIVersion(); err == nil {
		h.LandlockABI = v
		if e, err := ll.LandlockGetErrata(); err == nil {
			h.LandlockErrata = e
		}
	}
	if _, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err == nil {
		h.Seccomp = seccompFilterAvailable()
	}
	h.MountNS = hasCap(unix.CAP_SYS_ADMIN)
	h.Level, h.PidNamespace = LevelNamespaces, PidIsolate
	h.NamespacesMissing = probeNamespaces()
	h.Namespaces = h.NamespacesMissing == ""
	h.spawner = hasCap(unix.CAP_SETUID) && probeSpawner()
	if h.spawner && h.LandlockErrata&erratumThreadSignals != 0 {
		h.threads = newThreadPool()
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("sandbox: find own executable: %w", err)
	}
	h.Exe = exe
	if h.Namespaces {
		h.nets = &netPool{}
		h.prepared = &preparedPool{}
	}
	dir, err := os.MkdirTemp(scratch, "runtimed-sandbox-")
	if err != nil {
		return nil, fmt.Errorf("sandbox: scratch directory: %w", err)
	}
	h.Scratch = dir
	return h, nil
}

// erratumThreadSignals is Landlock erratum 2 (ABI 6): threads of one
// process may always signal each other whatever their domains. Without
// it, a confined spawning thread could not send the Go runtime's
// preemption signals to the process's other threads.
const erratumThreadSignals = 1 << (2 - 1)

// confinesThreads reports whether Start may confine a spawning thread:
// it must be able to signal its siblings under Landlock and to take a
// uid of its own (a daemon without CAP_SETUID uses the helper).
func (h *Host) confinesThreads() bool {
	return h != nil && !h.HelperOnly && h.spawner && h.LandlockErrata&erratumThreadSignals != 0
}

// Close ends the prepared spawning thread and removes the scratch
// directory.
func (h *Host) Close() error {
	if h == nil {
		return nil
	}
	h.threads.close()
	h.nets.close()
	h.prepared.close()
	if h.Scratch == "" {
		return nil
	}
	return os.RemoveAll(h.Scratch)
}

// preparedFor is the pool a start of plan with attr takes a prepared
// sandbox from and refills (nil: not prepared ahead: no policy, not at
// the namespaces level, no pid namespace, the host says no, or attr asks
// for what a prepared helper cannot give, see preparedAttr).
func (h *Host) preparedFor(plan Plan, attr *os.ProcAttr) *preparedPool {
	if h == nil || h.NoPrepare || plan.Policy == nil || !h.namespaces() || h.PidNamespace == PidInherit || !preparedAttr(attr) {
		return nil
	}
	return h.prepared
}

// PreparedStats reports how the prepared sandboxes do since the Host was
// probed: used is the starts served by a prepared sandbox, missed the
// starts that could have been (namespaces level, pid namespace isolated,
// nothing asked that a prepared sandbox cannot honour) but started a fresh
// helper (none was ready for their policy, the one taken had died, or
// their plan, made meanwhile, was not the one it was built from), failed
// the preparations that failed. All zero where nothing is prepared (nil
// Host, not at the namespaces level, NoPrepare). Safe for concurrent use.
func (h *Host) PreparedStats() (used, failed, missed uint64) {
	if h == nil || h.prepared == nil {
		return 0, 0, 0
	}
	pp := h.prepared
	return pp.used.Load(), pp.failed.Load(), pp.missed.Load()
}

// PreparedRecycled reports how many times a prepared sandbox was given
// back after its command's end to serve the next start of its plan (see
// Plan.Recycle); 0 where nothing is prepared. Safe for concurrent use.
func (h *Host) PreparedRecycled() uint64 {
	if h == nil || h.prepared == nil {
		return 0
	}
	return h.prepared.recycled.Load()
}

// PreparedReady reports how many prepared sandboxes wait for a start
// (at most one per plan, at most two plans; 0 where nothing is prepared).
// Safe for concurrent use.
func (h *Host) PreparedReady() int {
	if h == nil || h.prepared == nil {
		return 0
	}
	h.prepared.mu.Lock()
	defer h.prepared.mu.Unlock()
	return len(h.prepared.ready)
}

// namespaces reports whether sandboxed starts take the namespaces level.
func (h *Host) namespaces() bool { return h != nil && h.Level != LevelLandlock }

// probeNamespaces makes, on a throwaway thread, the namespaces a
// sandboxed start needs, and clones and re-attributes a mount the way
// the helper does; it returns what failed ("" when nothing did).
func probeNamespaces() string {
	missing := ""
	onThrowawayThread(func() {
		if !hasCap(unix.CAP_SYS_ADMIN) {
			missing = "CAP_SYS_ADMIN in the daemon (run runtimed as root)"
			return
		}
		if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_NEWIPC | unix.CLONE_NEWNET | unix.CLONE_NEWPID | unix.CLONE_NEWCGROUP); err != nil {
			missing = fmt.Sprintf("mount, IPC, network, pid and cgroup namespaces (unshare: %v)", err)
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			missing = fmt.Sprintf("private mounts (%v)", err)
			return
		}
		t, err := unix.OpenTree(unix.AT_FDCWD, "/", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			missing = fmt.Sprintf("open_tree(2) (Linux 5.2+: %v)", err)
			return
		}
		defer unix.Close(t)
		if err := unix.MountSetattr(t, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
			missing = fmt.Sprintf("mount_setattr(2) (Linux 5.12+: %v)", err)
		}
	})
	return missing
}

// Check tells whether p can be enforced here, or names what is missing.
func (h *Host) Check(p *Policy) error {
	if p == nil {
		return nil
	}
	if h == nil {
		return &UnavailableError{What: "a sandbox", Missing: "a probed sandbox host", Check: "the embedding program configured no sandbox.Host"}
	}
	if h.namespaces() && !h.Namespaces {
		return &UnavailableError{What: "the namespaces sandbox (a read-only mount tree, private /dev, /proc, IPC and network)",
			Missing: h.NamespacesMissing,
			Check: "check with `unshare --mount --pid --ipc --net --cgroup --fork true` as the daemon's user; " +
				"or start runtimed serve --sandbox-level landlock, which leaves open what docs/sandbox.md lists"}
	}
	if h.LandlockABI < MinLandlockABI {
		return &UnavailableError{What: "confinement of a sandboxed process (file system, signals, ptrace)",
			Missing: fmt.Sprintf("Landlock ABI %d or newer, this kernel has ABI %d", MinLandlockABI, h.LandlockABI),
			Check:   "Linux 6.12+ with landlock in the lsm= boot list; see `cat /sys/kernel/security/lsm`"}
	}
	if !p.Network && !h.Seccomp {
		return &UnavailableError{What: "network restriction", Missing: "seccomp filters",
			Check: "a kernel built with CONFIG_SECCOMP_FILTER; `grep Seccomp /proc/self/status`"}
	}
	l, err := p.planDevices(!h.namespaces())
	if err != nil {
		return err
	}
	if err := h.checkLayers(l); err != nil {
		return err
	}
	p.planned, p.checkedBy = &l, h
	return nil
}

// checked returns the layers of policy for a start on h: the plan h.Check
// made of it (a policy is checked once per start, by the caller's Check),
// or, for a policy h has not checked, the checks and the plan made now
// (without keeping it: starts may run concurrently on one policy).
func (h *Host) checked(policy *Policy) (layers, error) {
	if h == nil {
		return layers{}, &UnavailableError{What: "a sandbox", Missing: "a probed host", Check: "internal: no sandbox.Host configured"}
	}
	if policy.planned != nil && policy.checkedBy == h {
		return *policy.planned, nil
	}
	if err := h.Check(&Policy{Network: policy.Network}); err != nil {
		return layers{}, err
	}
	l, err := policy.planDevices(!h.namespaces())
	if err != nil {
		return layers{}, err
	}
	if err := h.checkLayers(l); err != nil {
		return layers{}, err
	}
	return l, nil
}

// checkLayers is the part of Check that depends on the planned layers.
func (h *Host) checkLayers(l layers) error {
	if len(l.Overlays) > 0 && !h.MountNS && !h.namespaces() {
		return &UnavailableError{What: "read-only or denied paths inside readable or writable roots",
			Missing: "a private mount namespace (CAP_SYS_ADMIN in the daemon)",
			Check:   "run runtimed as root or with CAP_SYS_ADMIN, or drop the narrower entries"}
	}
	return nil
}

// Summary says what this host enforces, for the start-up log.
func (h *Host) Summary() string {
	var b strings.Builder
	switch {
	case h.namespaces() && h.Namespaces:
		fmt.Fprintf(&b, "level namespaces (read-only mount tree, private /dev /proc IPC network, pid namespace %s); ", h.PidNamespace)
	case h.namespaces():
		fmt.Fprintf(&b, "level namespaces UNAVAILABLE (%s): sandboxed starts are refused unless --sandbox-level landlock; ", h.NamespacesMissing)
	default:
		b.WriteString("level landlock (operator's choice: no mount, pid, IPC or network namespaces; see docs/sandbox.md); ")
	}
	if h.LandlockABI >= MinLandlockABI {
		fmt.Fprintf(&b, "file system and signal/ptrace confinement by Landlock ABI %d", h.LandlockABI)
	} else {
		fmt.Fprintf(&b, "NO confinement (Landlock ABI %d < %d): sandboxed starts are refused", h.LandlockABI, MinLandlockABI)
	}
	if h.Seccomp {
		b.WriteString("; network cut by seccomp (socket families other than AF_UNIX)")
	} else {
		b.WriteString("; NO network restriction (no seccomp): starts that restrict the network are refused")
	}
	if h.MountNS {
		b.WriteString("; read-only and denied subpaths by a private mount namespace")
	} else {
		b.WriteString("; read-only/denied subpaths under broader roots refused (no CAP_SYS_ADMIN)")
	}
	return b.String()
}

// Enforces reports whether a sandbox of any kind can be enforced here.
func (h *Host) Enforces() bool {
	return h != nil && h.LandlockABI >= MinLandlockABI && h.Seccomp && (!h.namespaces() || h.Namespaces)
}

// EnforcedLevel names the level sandboxed starts get here ("" if none).
func (h *Host) EnforcedLevel() Level {
	if !h.Enforces() {
		return ""
	}
	if h.namespaces() {
		return LevelNamespaces
	}
	return LevelLandlock
}

// hasCap reads the effective capability set of the calling thread.
func hasCap(c int) bool {
	f, err := os.Open("/proc/thread-self/status") // this thread's: a spawning thread drops its own
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && n&(1<<uint(c)) != 0
		}
	}
	return false
}

// seccompFilterAvailable asks the kernel whether SECCOMP_MODE_FILTER is
// built in: SECCOMP_GET_ACTION_AVAIL answers for a filter action.
func seccompFilterAvailable() bool {
	action := uint32(unix.SECCOMP_RET_ERRNO)
	_, _, errno := syscall.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptrOf(&action))
	return errno == 0
}

// PreparedDirect reports how many starts the daemon forked into a
// prepared sandbox itself (direct.go).
func (h *Host) PreparedDirect() uint64 {
	if h == nil || h.prepared == nil {
		return 0
	}
	return h.prepared.direct.Load()
}
