package runtime

import (
	"os"
	"sync"

	"go.uber.org/zap"

	"github.com/runtimed/runtimed/actors"
	"github.com/runtimed/runtimed/actors/contain"
	"github.com/runtimed/runtimed/actors/osproc"
	"github.com/runtimed/runtimed/actors/sandbox"
)

// Containment modes of Config.Containment.
const (
	// ContainAuto tracks each process tree with a cgroup where this host
	// lets the daemon create one, else as a child subreaper (orphans are
	// adopted, reaped, and killed with their tree), else by process group.
	ContainAuto = ""
	// ContainSubreaper skips cgroups and contains trees as a child
	// subreaper (no limits that need a cgroup): the fallback, forced.
	ContainSubreaper = "subreaper"
	// ContainProcessGroup uses process groups only (no cgroups, no limits
	// that need one; descendants that call setsid escape).
	ContainProcessGroup = "pgroup"
)

// isolation is the sandbox host and cgroup manager of one Server or Local,
// probed once at construction; release frees them after the supervisor
// has stopped.
type isolation struct {
	osproc.Isolation
	// net places managed-network proxies: actors.HostPlacer where
	// the namespaces level is enforced (the command's empty network
	// namespace is then the proxies' only reach); tests may set
	// Config.netPlacer. Nil refuses managed networks and keeps the
	// capabilities networkProxyLaunch and networkProxyReviewDomains off.
	net  actors.NetPlacer
	once sync.Once
}

func newIsolation(cfg Config) *isolation {
	iso := &isolation{}
	// Nothing this process inherited without close-on-exec reaches a
	// child (package sandbox seals again before each start).
	sandbox.SealDescriptors()
	iso.net = cfg.netPlacer
	h, err := sandbox.Probe(os.TempDir())
	if err != nil {
		cfg.Logger.Warn("sandbox unavailable: sandboxed starts will be refused", zap.Error(err))
	} else {
		iso.Host = h
		if cfg.SandboxLevel != "" {
			h.Level = sandbox.Level(cfg.SandboxLevel) // checked by Config.Validate
		}
		if cfg.SandboxPidNamespace != "" {
			h.PidNamespace = sandbox.PidMode(cfg.SandboxPidNamespace)
		}
		h.NoPrepare = cfg.NoPreparedSandboxes
		log := cfg.Logger.Info
		if !h.Enforces() {
			log = cfg.Logger.Warn
		}
		log("sandbox", zap.String("level", string(h.EnforcedLevel())), zap.String("enforces", h.Summary()))
		if iso.net == nil && h.EnforcedLevel() == sandbox.LevelNamespaces {
			iso.net = actors.HostPlacer(h)
		}
	}
	want := contain.ModeCgroup2
	switch cfg.Containment {
	case ContainProcessGroup:
		want = contain.ModePgroup
	case ContainSubreaper:
		want = contain.ModeSubreaper
	}
	iso.Contain = contain.NewManagerWith(want, contain.ManagerOptions{StateDir: stateDir(cfg)})
	cfg.Logger.Info("containment", zap.String("mode", iso.Contain.Mode()), zap.String("detail", iso.Contain.Summary()))
	logReclaimed(cfg.Logger, iso.Contain.Reclaimed())
	if err := iso.Contain.RecordError(); err != nil {
		cfg.Logger.Warn("process groups are not recorded: a daemon started after this one is killed cannot find its trees", zap.Error(err))
	}
	return iso
}

func stateDir(cfg Config) string {
	if cfg.StateDir != "" {
		return cfg.StateDir
	}
	return contain.DefaultStateDir()
}

func logReclaimed(log *zap.Logger, rs []contain.Reclaimed) {
	for _, r := range rs {
		log.Warn("killed what a runtime that died left running",
			zap.Int("dead_pid", r.Daemon), zap.String("where", r.Where), zap.Ints("killed", r.Killed), zap.Error(r.Err))
	}
}

// ReclaimedTree is a process tree a dead runtime left running that
// ReclaimOrphans (or a new Server or Local) killed.
type ReclaimedTree struct {
	DeadPid int    // the pid of the daemon or embedding program that died
	Where   string // its cgroup directory, or the state file that recorded its process group
	Killed  []int  // the processes killed (listed just before the kill)
	Err     error  // why the tree may have survived, if it may have
}

// ReclaimOrphans kills the process trees that runtimes of processes no
// longer running (a daemon killed with SIGKILL, a crashed embedding
// program) left behind: every process in their cgroups, and the process
// groups they recorded in stateDir ("" means the default,
// $RUNTIMED_STATE_DIR, $XDG_RUNTIME_DIR/runtimed or
// <os.TempDir>/runtimed-<uid>). NewServer and NewLocal do this
// themselves (and log it); a program that embeds runtime and wants it done
// before anything else calls it at start-up. Runtimes of live processes are
// never touched.
func ReclaimOrphans(stateDir string) []ReclaimedTree {
	if stateDir == "" {
		stateDir = contain.DefaultStateDir()
	}
	var out []ReclaimedTree
	for _, r := range contain.CleanUpDead(stateDir) {
		out = append(out, ReclaimedTree{DeadPid: r.Daemon, Where: r.Where, Killed: r.Killed, Err: r.Err})
	}
	return out
}

func (i *isolation) release() {
	i.once.Do(func() {
		_ = i.Contain.Close()
		_ = i.Host.Close()
	})
}
