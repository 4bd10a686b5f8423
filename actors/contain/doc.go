// Package contain tracks and bounds process trees with cgroups: one
// cgroup per process, created under a runtimed-<pid> directory in the
// daemon's own cgroup of each hierarchy it can write (runtimed-<pid>.<n>
// for the n-th Manager of one process, so each has its own). On the unified (v2)
// hierarchy the child is cloned straight into its cgroup
// (CLONE_INTO_CGROUP), so every descendant, including those that call
// setsid or double-fork, is in it, and cgroup.kill ends them all. Memory
// and pids limits use v2 controllers when the daemon's cgroup delegates
// them, else the v1 memory and pids hierarchies (the child joins those
// before it runs anything, through the sandbox helper). CPU seconds, open
// files and file size are rlimits of each process. It knows nothing of
// actors or the wire.
//
// Where no cgroup can be had, the process becomes a child subreaper
// (ModeSubreaper, reaper.go): orphaned descendants are reparented to it,
// reaped when they exit, attributed to their tree and frozen and killed
// with it. Only where that cannot be had either (no pidfds, no /proc)
// are trees contained by process group (ModePgroup: descendants that
// leave the group escape). Without a cgroup, memory falls back to RLIMIT_AS per
// process, and a pids limit is refused (RLIMIT_NPROC counts the whole
// user, not the tree).
//
// # Usage
//
//	m := contain.NewManager(contain.ModeCgroup2) // once; m.Mode(): cgroup2, cgroup1, subreaper or pgroup
//	g, err := m.NewGroup(limits)         // per process
//	// clone into g.CgroupFD() (if >= 0); the helper joins g.JoinFiles() and sets g.Rlimits()
//	g.Started(pid)                       // right after the start (registers the tree with the subreaper)
//	g.Kill()                             // SIGKILL the whole tree
//	limit := g.LimitHit(exitCode)        // "memory", "pids", "cpu", "fileSize" or ""
//	g.ReleaseIfEmpty()                   // once the process ended: free the cgroup if its tree is gone
//	g.Release()                          // kill what is left, remove the cgroups
//	m.Close()                            // at daemon exit
//
// Cloning into a cgroup just created costs more than into one that
// existed, so a Manager keeps up to 16 spare v2 cgroups: an empty cgroup
// without limits whose tree ended by itself (never cgroup.kill'ed: on
// Linux 6.18 a killed cgroup kills whatever is cloned into it later) goes
// back to the spares on release (with a descriptor of it opened then), and
// NewGroup without limits takes one before it creates a cgroup: the start
// that takes a spare makes no system call for its cgroup.
//
// # Concurrency
//
// A Manager is read-only after NewManager (Close is once) except its
// spares, a buffered channel any group's owner may put to or take from. A Group is
// owned by the process actor of its process; Kill and LimitHit only write
// or read cgroup files, or ask the subreaper. The subreaper is one
// goroutine per process (PR_SET_CHILD_SUBREAPER is a process attribute)
// that owns all its state; Managers in ModeSubreaper share it by a
// reference count (a package mutex guards only that count and pointer),
// and the last Close stops it.
//
// # Failure semantics
//
// NewGroup fails (wrapping ErrLimitUnavailable where the host cannot apply
// a limit) before anything is started. Kill on a gone cgroup or tree is a
// no-op. Release waits at most 200 ms for the tree to empty; a cgroup that
// does not empty is left for the next daemon's clean-up of stale
// directories. Started fails only if the child has no pidfd (then the
// caller kills it). The subreaper never reaps a child that another pidfd
// in the process names (the waiter of os/exec or of the process actor);
// its freeze is bounded by 200 ms, after which what was found is killed
// and later sweeps take the rest. After it stopped, Group calls return
// ErrReaperGone. Its one attribution gap (an orphan that called setsid
// before it was seen, while an older tree lives) is in reaper.go.
//
// A Manager whose process died (SIGKILL) leaves its trees running; the
// next Manager made on the host kills them first (CleanUpDead, stale.go):
// every process in the cgroups under a dead pid's runtimed-<pid>
// directories, and in ModeSubreaper and ModePgroup the process groups
// recorded in the state directory (one file per tree, named after its
// process group and holding the leader's start time; a number that now
// names a later process is not killed). Reclaimed reports what it did.
//
// # Backpressure
//
// Cgroup operations are a few file writes. Requests to the subreaper go
// through a mailbox of 16 and block the calling process actor until
// handled (a freeze and kill takes at most about 200 ms); its sweeps
// (on SIGCHLD, coalesced, and every 250 ms) read one /proc file per thread
// and per unknown child.
package contain
