package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runtimed/runtimed/actors/osproc"
	"github.com/runtimed/runtimed/wire"
)

// Backend starts processes. [Local] runs them in this process; [Client]
// runs them on a runtimed server. Both behave identically.
type Backend interface {
	// Start starts a process and returns its handle once it runs.
	Start(ctx context.Context, spec Spec) (Process, error)
	// Close ends the backend: Local kills its processes; Client closes the
	// connection (a server keeps or kills the processes per its TTL).
	Close() error
}

// Spec describes a process to start. Start checks every field first, the
// same on Local and on a Client (nothing is sent for a bad Spec): a
// mistake is an *OptionError naming the field ("Spec.Size",
// "Spec.Sandbox.FileSystem[2].Path") that matches ErrInvalidOption.
// Strings must be valid UTF-8 (the protocol carries text), and those the
// kernel takes (Argv, Arg0, Dir, Env) must not contain NUL.
type Spec struct {
	// ID names the process within the backend's session; empty picks a
	// unique one ("proc-N").
	ID string
	// Argv is the command; Argv[0] is looked up on Env's PATH, then
	// /bin:/usr/bin. Required: nil, empty or an empty Argv[0] is an error.
	Argv []string
	// Dir is the working directory, required: an absolute path or a file:
	// URI (with no host but localhost). Empty is an error, not "the
	// current directory" (the process may run on another machine).
	Dir string
	// Env is the child's environment, laid over EnvPolicy's base if one is
	// set. Without EnvPolicy, a non-nil Env is exactly the environment (an
	// empty map: an empty environment, as the protocol's env {} is), and
	// a nil Env inherits the server's environment as os/exec does, except
	// that names matching *KEY*, *SECRET* or *TOKEN* are left out: it is
	// EnvPolicy{Inherit: "all"}, the protocol's default inheritance (set
	// EnvPolicy.IgnoreDefaultExcludes to keep them). "The server" is this
	// process for Local. Names must be non-empty, without '=' or NUL;
	// values without NUL.
	Env map[string]string
	// EnvPolicy, if set, builds a base from the server's environment first
	// (PROTOCOL.md, process/start's envPolicy); Env is laid over it. Nil:
	// see Env.
	EnvPolicy *EnvPolicy
	// TTY runs the child on a pseudo-terminal (output stream "pty");
	// false runs it on pipes (streams "stdout" and "stderr").
	TTY bool
	// PipeStdin gives a pipe child a writable stdin (a TTY child always
	// has one); false: its stdin is empty and Write returns ErrStdinClosed.
	PipeStdin bool
	// Size is the initial terminal size of a TTY child: zero means 24x80;
	// otherwise Rows and Cols must both be positive. A pipe child ignores it.
	Size Size
	// Arg0, if set, is the argv[0] the child sees; empty: Argv[0].
	Arg0 string
	// Sandbox, if set, confines the process and every descendant (see
	// Sandbox). Nil: the server's default sandbox, if any, applies.
	Sandbox *Sandbox
	// Limits bound the whole process tree; the zero value sets none.
	Limits Limits
	// Metadata, if set, attributes the process to a thread and tool call;
	// List shows it. Nil: none.
	Metadata *Metadata
	// Network, if set, gives the process a managed network: its only way
	// out is a proxy enforcing this policy (see Network). Nil: the
	// sandbox's network setting alone applies.
	Network *Network
}

// envPolicy is the policy Start sends for spec: a nil Env without a
// policy inherits (see Spec.Env). Both backends use it.
func (spec Spec) envPolicy() *EnvPolicy {
	if spec.Env == nil && spec.EnvPolicy == nil {
		return &EnvPolicy{Inherit: "all"}
	}
	return spec.EnvPolicy
}

// Metadata attributes a process to a client's thread and tool call
// (process/start's metadata). Empty fields are not sent; set ones must be
// valid UTF-8.
type Metadata struct {
	ThreadID   string // the client's conversation thread
	ToolCallID string // the tool call within it that started the process
}

// Size is a terminal size. The zero Size means the default (24x80 at
// Start); a Size with one of Rows and Cols zero is an error.
type Size struct {
	Rows uint16 // lines
	Cols uint16 // columns
}

// EnvPolicy builds a child's base environment (PROTOCOL.md, process/start).
// Globs use * and ? only and ignore case; an empty glob is an error (it
// would match no name). Nil slices and maps leave that step out.
type EnvPolicy struct {
	Inherit               string            // "all" (also ""), "none" or "core"; anything else is an error
	IgnoreDefaultExcludes bool              // keep names matching *KEY*, *SECRET*, *TOKEN*
	Exclude               []string          // drop names matching these globs (case-insensitive)
	Set                   map[string]string // then add these (names as in Spec.Env)
	IncludeOnly           []string          // then, if not empty, keep only names matching these globs
}

// Stream names an output stream.
type Stream string

// The output streams: a pipe process has stdout and stderr, a PTY
// process one merged stream.
const (
	Stdout Stream = "stdout"
	Stderr Stream = "stderr"
	PTY    Stream = "pty"
)

// Signal names a signal the protocol can send to a process group.
type Signal string

// The signals of process/signal: SIGINT, SIGTERM, SIGKILL, SIGHUP,
// SIGQUIT, SIGUSR1 and SIGUSR2.
const (
	SigInterrupt Signal = "interrupt"
	SigTerminate Signal = "terminate"
	SigKill      Signal = "kill"
	SigHangup    Signal = "hangup"
	SigQuit      Signal = "quit"
	SigUser1     Signal = "user1"
	SigUser2     Signal = "user2"
)

// Process is a handle on a started process, shaped like os/exec's Cmd
// after Start. All methods may be called concurrently. Unlike exec.Cmd,
// Wait may be called any number of times from any goroutine.
type Process interface {
	// ID is the process id within its session.
	ID() string
	// Write writes to stdin. It returns ErrStdinClosed when the process
	// has no writable stdin (any more).
	Write(ctx context.Context, p []byte) error
	// CloseStdin closes stdin after every earlier write.
	CloseStdin(ctx context.Context) error
	// Resize sets the terminal size; ErrNotPTY for a pipe process.
	Resize(ctx context.Context, rows, cols uint16) error
	// Signal sends sig to the process group (a no-op once exited).
	Signal(ctx context.Context, sig Signal) error
	// Terminate kills the process group: grace 0 sends SIGKILL now,
	// otherwise SIGTERM (SIGHUP on a PTY) and SIGKILL after grace. It
	// reports whether the process was still running.
	Terminate(ctx context.Context, grace time.Duration) (running bool, err error)
	// Read returns retained output after opts.After (at most
	// opts.MaxBytes), waiting up to opts.Wait for something new (a long
	// poll). ctx bounds the call, the long poll included.
	Read(ctx context.Context, opts ReadOptions) (ReadResult, error)
	// Wait waits until the process has exited and its output has ended
	// (like exec.Cmd.Wait) and returns its exit status.
	Wait(ctx context.Context) (ExitStatus, error)
	// Done is closed when Wait would return.
	Done() <-chan struct{}
	// Events subscribes to the process's history then its live events.
	Events(ctx context.Context) (*EventStream, error)
}

// ReadOptions are the arguments of Process.Read. The zero value reads
// everything retained, from seq 1, and answers at once.
type ReadOptions struct {
	// After: only chunks with a seq above it (0: from the start).
	After uint64
	// MaxBytes bounds the bytes of output returned; 0 means no limit. A
	// first chunk larger than MaxBytes is returned whole. Negative is an
	// error.
	MaxBytes int
	// Wait, if positive, waits up to this long for output after After, or
	// for the process to exit, when there is none yet (a long poll). ctx
	// still bounds the call. Negative is an error.
	Wait time.Duration
}

// ReadResult is the answer to Process.Read.
type ReadResult struct {
	Chunks   []Chunk // retained output after ReadOptions.After, in seq order
	NextSeq  uint64  // the seq the next event will take (read after NextSeq-1 next)
	Exited   bool    // the process has exited
	ExitCode int     // valid when Exited
	Closed   bool    // its output has ended too: nothing follows
	// Status is the whole ending, valid when Exited (as Wait returns it).
	Status ExitStatus
}

// Chunk is one piece of retained output.
type Chunk struct {
	Seq    uint64 // its place in the process's history
	Stream Stream // which stream it came from
	Data   []byte // the bytes, as the process wrote them
}

// ExitStatus is how a process ended: its exit code, or 128+N when killed
// by signal N, and the resource limit (Limit* constants) that ended it,
// if one did. Whether a signal killed it is known exactly from Local and
// from a runtimed server (its exitSignal extension): `sh -c 'exit 130'`
// is "exit status 130", a SIGINT death "signal: interrupt", both Code 130.
// From a server that does not say (Codex's exec-server), or for an
// ExitStatus made from a Code alone, a Code in 129..192 reads as a signal.
type ExitStatus struct {
	Code  int    // the exit code, or 128+N after signal N
	Limit string // the Limit* constant of the limit that ended it, or ""
	// sig is the truth when known: N>0 a death by signal N, -1 an exit of
	// its own; 0 unknown (Code's 128+N reading decides).
	sig int
}

// exitStatus makes the ExitStatus of a wire exit code and an exit signal
// as actors.Event.ExitSignal has it (0: exited, N: signal N, -1: unknown).
func exitStatus(code, signal int, limit string) ExitStatus {
	s := ExitStatus{Code: code, Limit: limit}
	switch {
	case signal > 0:
		s.sig = signal
	case signal == 0:
		s.sig = -1
	}
	return s
}

// Success reports whether the exit code is 0.
func (s ExitStatus) Success() bool { return s.Code == 0 }

// Signaled reports whether the process was killed by a signal (see
// ExitStatus for when that is a reading of Code's 128+N).
func (s ExitStatus) Signaled() bool {
	switch {
	case s.sig > 0:
		return true
	case s.sig < 0:
		return false
	}
	return s.Code > 128 && s.Code <= 128+64
}

// Exited reports whether the process exited on its own (not by a signal).
func (s ExitStatus) Exited() bool { return !s.Signaled() }

// ExitCode is the code the process exited with, or -1 if a signal killed it
// (like os.ProcessState.ExitCode).
func (s ExitStatus) ExitCode() int {
	if s.Signaled() {
		return -1
	}
	return s.Code
}

// Signal is the signal that killed the process, or -1.
func (s ExitStatus) Signal() syscall.Signal {
	if !s.Signaled() {
		return -1
	}
	if s.sig > 0 {
		return syscall.Signal(s.sig)
	}
	return syscall.Signal(s.Code - 128)
}

// String reads like os.ProcessState's: "exit status 3", "signal: killed",
// with the limit that ended it, if any: "signal: killed (memory limit)".
func (s ExitStatus) String() string {
	out := "exit status " + strconv.Itoa(s.Code)
	if s.Signaled() {
		out = "signal: " + s.Signal().String()
	}
	if s.Limit != "" {
		out += " (" + s.Limit + " limit)"
	}
	return out
}

// Sentinel errors. Errors from remote calls wrap these where they apply.
var (
	// ErrDisconnected: the client's transport failed. Its text starts with
	// "runtimed transport disconnected"; the wrapping error says why.
	ErrDisconnected = errors.New("runtimed transport disconnected")
	// ErrStdinClosed: the process has no writable stdin.
	ErrStdinClosed = errors.New("runtime: stdin is closed")
	// ErrUnknownProcess: the backend does not know the process (any more).
	ErrUnknownProcess = errors.New("runtime: unknown process")
	// ErrNotPTY: the process is not attached to a terminal.
	ErrNotPTY = errors.New("runtime: process is not attached to a PTY")
	// ErrClosed: the backend was closed.
	ErrClosed = errors.New("runtime: backend closed")
	// ErrInvalidOption: an option given to a function of this package is
	// out of range. Errors matching it are *OptionError, which names the
	// option and field. Nothing was started and nothing was sent.
	ErrInvalidOption = errors.New("runtime: invalid option")
	// ErrProcessExists: Start was given the ID of a process the session
	// still has. Errors matching it are *RPCError (code -32600).
	ErrProcessExists = errors.New("runtime: process id already exists")
	// ErrProcessFailed: the runtime failed the process after an internal
	// error (a recovered panic in its actor); its tree was killed. Errors
	// matching it are *ProcessError.
	ErrProcessFailed = errors.New("runtime: process failed")
	// ErrSessionGone: a resume (Dial with ResumeSessionID, a Client's
	// reconnect) named a session the server no longer has: its detach TTL
	// ran out, or the server restarted. Its processes are gone with it;
	// only a new session can go on. Errors matching it are *RPCError
	// (-32600 "unknown session id ..."); a resume that could not reach the
	// server at all does not match it (ErrDisconnected and the dial error).
	ErrSessionGone = errors.New("runtime: session gone")
)

// ProcessError is the failure of one process inside the runtime (not the
// process's own exit): Wait, the other methods and the event stream
// report it once it happened. It matches ErrProcessFailed.
type ProcessError struct {
	ID      string // the process
	Message string // what the runtime reported
}

// Error returns "runtime: " and the message.
func (e *ProcessError) Error() string { return "runtime: " + e.Message }

// Is makes errors.Is(err, ErrProcessFailed) hold.
func (e *ProcessError) Is(target error) bool { return target == ErrProcessFailed }

// RPCError is an error answered by a server, with the protocol's code and
// message; Local returns the same values for the same mistakes. Where one
// of this package's sentinels applies (ErrProcessExists), errors.Is
// matches it. A Start whose child could not be started (-32603 with the
// OS's text) matches what the OS said on both backends: exec.ErrNotFound
// for a command that does not exist, fs.ErrNotExist for it or a missing
// cwd, fs.ErrPermission, and the syscall.Errno (a server says which in
// the error's data, a runtimed extension).
type RPCError struct {
	Code    int    // the JSON-RPC error code (wire.Code* constants)
	Message string // the server's message, as PROTOCOL.md lists it

	sentinel error // what errors.Is matches besides the *RPCError itself
	cause    error // a spawn failure rebuilt from the error's data
}

// Error returns "runtimed error CODE: MESSAGE".
func (e *RPCError) Error() string { return fmt.Sprintf("runtimed error %d: %s", e.Code, e.Message) }

// Unwrap returns the sentinel the error stands for, or the spawn failure
// it reports, if any.
func (e *RPCError) Unwrap() error {
	if e.sentinel != nil {
		return e.sentinel
	}
	return e.cause
}

// rpcErr is the *RPCError of a server's (or Local's) *wire.Error.
func rpcErr(e *wire.Error) *RPCError {
	return &RPCError{Code: e.Code, Message: e.Message, cause: spawnCause(e.Data)}
}

// decodeRPCError decodes a JSON-RPC error object.
func decodeRPCError(raw []byte) *RPCError {
	var e wire.Error
	_ = json.Unmarshal(raw, &e)
	return rpcErr(&e)
}

// spawnFailure is what errors.Is sees of a spawn failure a server
// reported: the errno (fs.ErrNotExist, fs.ErrPermission, the Errno
// itself), and exec.ErrNotFound for a command that was not found.
type spawnFailure struct {
	op    string
	errno syscall.Errno
}

func (f *spawnFailure) Error() string { return "spawn failed at " + f.op + ": " + f.errno.Error() }

func (f *spawnFailure) Is(target error) bool {
	if target == exec.ErrNotFound {
		return (f.op == osproc.OpLookup || f.op == osproc.OpExec) && f.errno == syscall.ENOENT
	}
	return f.errno != 0 && (target == f.errno || f.errno.Is(target))
}

func spawnCause(d *wire.ErrorData) error {
	if d == nil || d.Spawn == nil {
		return nil
	}
	f := &spawnFailure{op: d.Spawn.Op}
	if d.Spawn.Errno != "" {
		f.errno = errnoByName()[d.Spawn.Errno]
	}
	return f
}

// errnoByName maps the names unix.ErrnoName gives back to their values.
var errnoByName = sync.OnceValue(func() map[string]syscall.Errno {
	m := make(map[string]syscall.Errno)
	for e := syscall.Errno(1); e < 4096; e++ {
		if name := unix.ErrnoName(e); name != "" {
			m[name] = e
		}
	}
	return m
})

// initializeError is the *RPCError of a refused initialize; a resume of a
// session the server does not have matches ErrSessionGone.
func initializeError(e *RPCError, resumed string) *RPCError {
	if resumed != "" && e.Code == wire.CodeInvalidRequest && e.Message == wire.ErrUnknownSession(resumed).Message {
		e.sentinel = ErrSessionGone
	}
	return e
}

// errProcessExists is the error both backends return for a duplicate id.
func errProcessExists(id string) error {
	re := rpcErr(wire.ErrProcessExists(id))
	re.sentinel = ErrProcessExists
	return re
}
