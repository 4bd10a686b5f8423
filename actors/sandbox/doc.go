// Package sandbox confines a child process and all its descendants with
// the kernel. At the namespaces level (the default, ns.go and init.go)
// the helper is cloned into new mount, IPC, pid and network namespaces,
// makes the tree read-only with the policy's write entries bound back, a
// fresh /dev, /proc and /dev/shm, and stays as the pid namespace's init;
// inside, the same confinement as the landlock level applies to the
// command. At the landlock level (runtimed serve --sandbox-level
// landlock) it uses, on a spawning thread or the helper: Landlock for the file system (every right the kernel's ABI
// knows), signal and abstract-socket scoping (ABI 6+: no signals or ptrace
// outside the sandbox's own domain), a seccomp filter that lets only
// AF_UNIX sockets be created (so TCP and UDP to any address, loopback
// included, fail with EPERM, and io_uring cannot go around it), an empty
// capability set, and, where Landlock's allow-list cannot say it, bind
// mounts in a private mount namespace (a read-only .git under a writable
// root, a deny entry under a readable one). It knows nothing of actors or
// the wire: callers hand it a resolved Policy.
//
// # Usage
//
//	h, err := sandbox.Probe(os.TempDir())        // once per daemon
//	err = h.Check(policy)                         // *UnavailableError names what is missing
//	proc, err := sandbox.Start(h, sandbox.Plan{Path: exe, Argv: argv, Env: env, Policy: policy},
//		&os.ProcAttr{Dir: dir, Files: stdio, Sys: sys}) // returns once the command was exec'd
//	var res sandbox.Resolver                      // one per check: the rules' shared directories lstat'ed once
//	real, err := res.EvalSymlinks(path)           // filepath.EvalSymlinks's answer and error
//
// Start enforces a plan that carries only a policy on a spawning thread:
// a goroutine locks itself to a non-main OS thread, confines that thread
// (mount namespace, capabilities, Landlock, seccomp are per-thread kernel
// state), takes a uid of its own (the command, set back to the daemon's
// uid, must not be able to signal or trace it), forks the command from it
// and exits locked, so that the Go runtime ends the thread. The command
// inherits the confinement.
//
// A Go child cannot run code between fork and exec, so what must be set
// process-wide before the exec (rlimits, v1 cgroups to join) goes through
// a helper: this same executable, started by Start (or by NewLaunch and
// Started) with argv[0] "runtimed-sandbox-exec" and
// RUNTIMED_SANDBOX_EXEC=1, which an init function recognises; it reads
// the Plan from fd 3, joins v1 cgroups, sets rlimits, makes the overlays,
// drops capabilities, restricts itself and execs the command, which keeps
// the helper's pid, process group, session, terminal and exit status. Any
// Go program that imports this package (every program embedding runtimed)
// can therefore serve as its own helper.
//
// At the namespaces level with the pid namespace isolated, the helper of
// the next start of a recent plan is prepared ahead (prepared.go): after
// each such start a helper is started in the background, builds the
// plan's namespaces and confines its spawning thread, and waits on a
// socket; a start whose plan key is exactly the prepared one takes it
// (StartReported then also returns the init's ExitReport of the command's
// exit). With Plan.Recycle the caller waits, signals and kills through
// that report only, and the init, once the command has ended and it has
// cleaned up (prepared_init.go), serves the next start of its plan.
// Host.NoPrepare turns it off. Most starts on a prepared sandbox are
// direct (direct.go): the daemon forks the command into the sandbox's
// namespaces itself, from a thread of its own that joined them, and the
// init only reaps orphans and cleans up after the command; Host.NoDirect
// sends every start through the init.
//
// # Concurrency
//
// The prepared sandboxes are the Host's pool (a mutex over a short list,
// no I/O under it); each preparation is a goroutine of its own, at most
// one per plan key, which Close waits for. A taken sandbox and its
// ExitReport belong to the start that took it; a Recycled report gives it
// back to the pool when the command's exit is in (Wait), and its Signal
// and Abandon may be called from another goroutine meanwhile (each frame
// is one write on the socket; a direct start's report orders them against
// the reap with a mutex). A sandbox's direct thread takes jobs only from
// the sandbox's holder, one at a time, and ends with the sandbox's init.
//
// Host is read-only after Probe (but for its thread pool) and safe to
// share. Start may be called from any number of goroutines; each confined
// start has a thread of its own, which runs nothing else and ends with the
// start. One of them at a time may be prepared ahead by the Host's pool
// (threads.go): a goroutine locked to its thread, waiting for one start
// until Close; a start that finds it prepared for another confinement
// retires it. A Launch belongs
// to the goroutine that spawns the child. The helper runs single-threaded
// work on one locked OS thread, the one that calls execve.
//
// # Failure semantics
//
// A prepared sandbox runs one command at a time, never one on a stale
// view, and a recycled one leaves nothing of a command to the next (its
// namespace emptied of processes, /dev/shm emptied, a new IPC namespace,
// what the command could change of the init or its file systems put back,
// the pid counter too; signals for an ended command dropped): a start
// whose plan key differs
// (a file replaced, a mount made since) starts its own helper; a clean-up
// that fails ends the init; host sockets bound since are covered
// by the start before its fork; one found dead before
// it read its start (an idle helper killed) falls back to its own helper;
// a failure after it read its start is that start's *ExecError. A failed
// preparation is counted and leaves the next start to its own helper. A
// change of the daemon's mount table ends the waiting sandboxes at once
// (watchMounts): they hold a copy of the old table's mounts. An
// ExitReport says nothing if its init was killed: the init's own wait
// status is then the exit.
//
// A policy is checked once per start: Check plans it (stat-ing every
// rule) and keeps the plan with the policy, and Start or NewLaunch on the
// same Host enforce that plan without checking again (a policy that Host
// did not check is checked and planned by Start itself). The plan's files
// are matched again as the grants are applied, so a path swapped between
// Check and Start fails the start.
//
// Fail closed: Check refuses what the host cannot enforce (no Landlock ABI
// 6, no seccomp, no mount namespace for overlays) with an
// *UnavailableError that wraps ErrUnavailable; a policy this package cannot
// express (a rule under a deny) wraps ErrUnsupported. A failure inside the
// helper is reported on the status pipe as an *ExecError naming the stage
// (plan, cgroup, rlimit, mounts, capabilities, landlock, seccomp, exec);
// the helper then exits HelperExitCode without running the command, and
// the caller reaps it. The command never runs unconfined.
//
// # Backpressure
//
// Preparations are not queued: at most one per plan key runs, at most
// two sandboxes wait (prepared or given back; the oldest is ended), at
// nice 10. Concurrent starts of one plan beyond the sandboxes waiting
// build their own. Signal frames are small writes on a socket the init
// reads at once; a caller that sends them faster than the init relays
// blocks in the write (the socket's buffer). A direct thread holds at
// most one job (its holder waits for the answer) and one pending IPC
// namespace renewal (a flag); its eventfd counts wake-ups and cannot fill.
//
// None: Start blocks its caller until the command has been exec'd or the
// start failed (a few syscalls and one fork/exec on a spawning thread; one
// more exec of this binary, several milliseconds, through the helper,
// whose plan is one pipe write read to EOF).
package sandbox
