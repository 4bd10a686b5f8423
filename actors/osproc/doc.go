// Package osproc is the OS half of a runtimed process: it starts a child
// (fork/exec in its own session and process group, pipes or a PTY, a
// cgroup or rlimits, a sandbox through package sandbox) and hands back a
// Session to read, write, signal, resize, reap and release it. It also
// builds a child's environment (BuildEnv, the protocol's envPolicy). It
// knows nothing of actors or the wire: callers hand it a resolved Spec
// whose sandbox policy they already checked against the host.
//
// # Usage
//
//	sess, err := osproc.Start(osproc.Spec{Argv: argv, Dir: dir, Env: env, Sandbox: policy}, iso)
//	for i, st := range sess.Streams() { go read(st, sess.Output(i)) } // one reader per stream
//	go func() { exit <- sess.Wait() }()                              // one waiter
//	_ = sess.Signal(syscall.SIGTERM)
//	sess.CloseOutputs(); sess.Release()                               // once done with it
//
// Tests that need a process without a child use package osproctest's
// Session, driven by channels.
//
// # Concurrency
//
// Start may be called concurrently. A Session has no goroutine of its own
// and no lock: its owner (the process actor) calls Signal, Resize,
// CloseOutputs, Limit and Release; one reader goroutine per stream reads
// Output(i); one waiter calls Wait once; one stdin writer calls Write and
// CloseStdin. Output readers wait in the runtime poller and Wait reaps
// through a pidfd registered with it, so an idle child holds no thread.
// The read buffers are pooled and shared by every session (a sync.Pool).
//
// # Failure semantics
//
// A failed Start is a *SpawnError naming argv[0], the stage (Op: cwd,
// lookup, exec, setup) and the OS error; nothing is left running, open or
// in a cgroup. errors.Is matches it against exec.ErrNotFound (the command
// does not exist), fs.ErrNotExist (command or cwd), fs.ErrPermission
// (EACCES/EPERM) and the syscall.Errno; a sandbox or limit the host cannot
// enforce wraps sandbox.ErrUnavailable or contain.ErrLimitUnavailable.
// Signal to a reaped group is not an error. Resize of a pipe session is
// ErrNotPTY.
//
// # Backpressure
//
// None is added here: a reader that stops reading leaves the child's
// writes blocked on a full pipe (enlarged to PipeSize once it is found
// half full) or PTY, which is the backpressure the owner relies on.
// ReadChunk coalesces what is available into one chunk of at most max
// bytes.
package osproc
