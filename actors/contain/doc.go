// Package contain tracks and bounds process trees with cgroups: one
// cgroup per process, created under a runtimed-<pid> directory in the
// daemon's own cgroup of each hierarchy it can write. On the unified (v2)
// hierarchy the child is cloned straight into its cgroup
// (CLONE_INTO_CGROUP), so every descendant, including those that call
// setsid or double-fork, is in it, and cgroup.kill ends them all. Memory
// and pids limits use v2 controllers when the daemon's cgroup delegates
// them, else the v1 memory and pids hierarchies (the child joins those
// before it runs anything, through the sandbox helper). CPU seconds, open
// files and file size are rlimits of each process. It knows nothing of
// actors or the wire.
//
// # Usage
//
//	m := contain.NewManager(contain.ModeCgroup2)       // once; m.Mode() is "cgroup2" or "pgroup"
//	g, err := m.NewGroup(limits)         // per process
//	// clone into g.CgroupFD() (if >= 0); the helper joins g.JoinFiles() and sets g.Rlimits()
//	g.Kill()                             // SIGKILL the whole tree
//	limit := g.LimitHit(exitCode)        // "memory", "pids", "cpu", "fileSize" or ""
//	g.Release()                          // kill what is left, remove the cgroups
//	m.Close()                            // at daemon exit
//
// Where no cgroup can be had, trees are contained by process group only
// (descendants that leave the group escape), memory falls back to
// RLIMIT_AS per process, and a pids limit is refused (RLIMIT_NPROC counts
// the whole user, not the tree).
//
// # Concurrency
//
// A Manager is read-only after NewManager. A Group is owned by the process
// actor of its process; Kill and LimitHit only write or read cgroup files.
//
// # Failure semantics
//
// NewGroup fails (wrapping ErrLimitUnavailable where the host cannot apply
// a limit) before anything is started. Kill on a gone cgroup is a no-op.
// Release waits at most 200 ms for the tree to empty; a cgroup that does
// not empty is left for the next daemon's clean-up of stale directories.
//
// # Backpressure
//
// None: every operation is a few file writes.
package contain
