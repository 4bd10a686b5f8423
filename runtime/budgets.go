package runtime

import (
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runtimed/runtimed/actors"
)

// Budget defaults that do not depend on the machine.
const (
	// DefaultOutboundQueueBytes is one connection's outbound queue budget:
	// events and responses waiting for a client that reads slowly.
	DefaultOutboundQueueBytes = 256 << 10 // 256 KiB
	// DefaultSlowConsumerTimeout: a websocket connection whose outbound
	// queue makes no progress for this long is closed as a slow consumer.
	DefaultSlowConsumerTimeout = 30 * time.Second
	// inboundMemoryShare: the inbound budget defaults to this fraction of
	// memory (at least twice the message limit).
	inboundMemoryShare = 64
	// fdOverhead is what the server keeps for itself beyond the descriptors
	// open when it starts (listeners, the poller, log files, HTTP clients).
	fdOverhead = 32
)

// Machine is what budget defaults are derived from.
type Machine struct {
	// OpenFiles is the process's descriptor limit (RLIMIT_NOFILE, soft;
	// Go raises it to the hard limit at start-up).
	OpenFiles int
	// OpenNow is how many descriptors the process has open.
	OpenNow int
	// MemoryBytes is the memory available to the process: physical memory,
	// or its cgroup's memory limit when that is lower.
	MemoryBytes int64
}

// ProbeMachine reads this machine's limits.
func ProbeMachine() Machine {
	var m Machine
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil && rl.Cur > 0 && rl.Cur < 1<<31 {
		m.OpenFiles = int(rl.Cur)
	} else {
		m.OpenFiles = 1024
	}
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		m.OpenNow = len(ents)
	}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		m.MemoryBytes = int64(si.Totalram) * int64(si.Unit)
	}
	if lim := cgroupMemoryLimit(); lim > 0 && (m.MemoryBytes == 0 || lim < m.MemoryBytes) {
		m.MemoryBytes = lim
	}
	if m.MemoryBytes <= 0 {
		m.MemoryBytes = 1 << 30
	}
	return m
}

// cgroupMemoryLimit returns the memory limit of this process's cgroup
// (v2 memory.max, or v1 memory.limit_in_bytes), 0 if none.
func cgroupMemoryLimit() int64 {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var path string
		switch {
		case parts[0] == "0" && parts[1] == "":
			path = "/sys/fs/cgroup" + parts[2] + "/memory.max"
		case strings.Contains(","+parts[1]+",", ",memory,"):
			path = "/sys/fs/cgroup/memory" + parts[2] + "/memory.limit_in_bytes"
		default:
			continue
		}
		v, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
		if err == nil && n > 0 && n < 1<<60 {
			return n
		}
	}
	return 0
}

// budgets resolves the configured budgets: zero fields take the defaults
// derived from m, negative ones mean unlimited.
func (c Config) budgets(m Machine) actors.Budgets {
	b := actors.Budgets{RLimitNoFile: m.OpenFiles}
	b.MaxOpenFiles = pickBudget(c.MaxOpenFiles, max(64, m.OpenFiles-m.OpenNow-fdOverhead))
	fdBudget := b.MaxOpenFiles
	if fdBudget == 0 {
		fdBudget = max(64, m.OpenFiles-m.OpenNow-fdOverhead) // unlimited: defaults still need a scale
	}
	b.FDReserve = pickBudget(c.FDReserve, min(1024, max(32, fdBudget/16)))
	b.MaxRetainedBytes = pickBudget(c.MaxRetainedBytes, m.MemoryBytes/2)
	b.OutboundQueueBytes = pickBudget(c.OutboundQueueBytes, DefaultOutboundQueueBytes)
	b.MaxOutboundBytes = pickBudget(c.MaxOutboundBytes, m.MemoryBytes/8)
	msgLimit := int64(c.MaxMessageBytes)
	if msgLimit <= 0 {
		msgLimit = DefaultMaxMessageBytes
	}
	b.MaxInboundBytes = pickBudget(c.MaxInboundBytes, max(m.MemoryBytes/inboundMemoryShare, 2*msgLimit))
	b.ConnInboundBytes = pickBudget(c.ConnInboundBytes, 2*msgLimit)
	perProc := actors.RetainedPerProcess(actors.ProcConfig{RetainBytes: c.RetainBytes})
	procs := max(1, (fdBudget-b.FDReserve)/actors.FDsPerProcess)
	if b.MaxRetainedBytes > 0 {
		procs = min(procs, int(max(1, b.MaxRetainedBytes/perProc)))
	}
	b.MaxProcesses = pickBudget(c.MaxProcessesTotal, procs)
	// Connections may hold three quarters of the descriptors: an idle one
	// costs its socket and about 25 KiB, so 10,000 fit in 20,000
	// descriptors; processes are refused (-32011) before the daemon
	// itself runs out.
	conns := max(1, fdBudget*3/4/actors.FDsPerConnection)
	if b.MaxOutboundBytes > 0 && b.OutboundQueueBytes > 0 {
		conns = min(conns, int(max(1, b.MaxOutboundBytes/int64(b.OutboundQueueBytes))))
	}
	b.MaxConnections = pickBudget(c.MaxConnections, conns)
	switch {
	case c.SlowConsumerTimeout < 0:
		b.SlowConsumerTimeout = 0
	case c.SlowConsumerTimeout == 0:
		b.SlowConsumerTimeout = DefaultSlowConsumerTimeout
	default:
		b.SlowConsumerTimeout = c.SlowConsumerTimeout
	}
	return b
}

// Budgets are the server-wide limits in force, with the defaults resolved
// against the machine (zero: unlimited). See Config for each.
type Budgets struct {
	MaxConnections      int           // Config.MaxConnections
	MaxProcessesTotal   int           // Config.MaxProcessesTotal
	MaxOpenFiles        int           // Config.MaxOpenFiles
	FDReserve           int           // Config.FDReserve
	MaxRetainedBytes    int64         // Config.MaxRetainedBytes
	MaxOutboundBytes    int64         // Config.MaxOutboundBytes
	OutboundQueueBytes  int           // Config.OutboundQueueBytes
	MaxInboundBytes     int64         // Config.MaxInboundBytes
	ConnInboundBytes    int64         // Config.ConnInboundBytes
	SlowConsumerTimeout time.Duration // Config.SlowConsumerTimeout
	// RLimitNoFile is the process's descriptor limit they were derived from.
	RLimitNoFile int
}

func publicBudgets(b actors.Budgets) Budgets {
	return Budgets{
		MaxConnections: b.MaxConnections, MaxProcessesTotal: b.MaxProcesses, MaxOpenFiles: b.MaxOpenFiles,
		FDReserve: b.FDReserve, MaxRetainedBytes: b.MaxRetainedBytes, MaxOutboundBytes: b.MaxOutboundBytes,
		OutboundQueueBytes: b.OutboundQueueBytes, MaxInboundBytes: b.MaxInboundBytes, ConnInboundBytes: b.ConnInboundBytes,
		SlowConsumerTimeout: b.SlowConsumerTimeout, RLimitNoFile: b.RLimitNoFile,
	}
}

// Budgets returns the budgets in force (defaults resolved against this
// machine), as runtimed serve logs them at start-up.
func (s *Server) Budgets() Budgets { return publicBudgets(s.budgets) }

// pickBudget is a configured budget: v when positive, def when zero, 0
// (unlimited) when negative.
func pickBudget[T int | int64](v, def T) T {
	switch {
	case v < 0:
		return 0
	case v == 0:
		return def
	}
	return v
}
