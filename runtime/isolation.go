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
	// net places managed-network proxies (Config.netPlacer: only tests
	// set one; nil refuses managed networks and keeps the capability off).
	net  actors.NetPlacer
	once sync.Once
}

func newIsolation(cfg Config) *isolation {
	iso := &isolation{}
	iso.net = cfg.netPlacer
	h, err := sandbox.Probe(os.TempDir())
	if err != nil {
		cfg.Logger.Warn("sandbox unavailable: sandboxed starts will be refused", zap.Error(err))
	} else {
		iso.Host = h
		cfg.Logger.Info("sandbox", zap.String("enforces", h.Summary()))
	}
	want := contain.ModeCgroup2
	switch cfg.Containment {
	case ContainProcessGroup:
		want = contain.ModePgroup
	case ContainSubreaper:
		want = contain.ModeSubreaper
	}
	iso.Contain = contain.NewManager(want)
	cfg.Logger.Info("containment", zap.String("mode", iso.Contain.Mode()), zap.String("detail", iso.Contain.Summary()))
	return iso
}

func (i *isolation) release() {
	i.once.Do(func() {
		_ = i.Contain.Close()
		_ = i.Host.Close()
	})
}
