package actors

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/creack/pty"

	"github.com/runtimed/runtimed/actors/contain"
	"github.com/runtimed/runtimed/actors/sandbox"
)

// Spec describes a child to start. It is what process/start asks for,
// already validated and resolved by the connection edge.
type Spec struct {
	Argv      []string // Argv[0] is looked up on Env's PATH, then /bin:/usr/bin
	Arg0      string   // if set, the argv[0] the child sees
	Dir       string   // absolute working directory
	Env       []string // the child's whole environment, KEY=VALUE
	TTY       bool
	PipeStdin bool
	Rows      uint16 // PTY size; 0 means 24x80
	Cols      uint16
	// Timeout, if > 0, kills the process group after this long; the exit
	// code is then TimeoutExitCode (the app-server dialect's timeoutMs).
	Timeout time.Duration
	// Sandbox, if non-nil, is enforced by the kernel on the child and every
	// descendant (on a spawning thread or through the sandbox helper; see
	// package sandbox).
	Sandbox *sandbox.Policy
	// Limits bound the whole tree (cgroups where possible, else rlimits).
	Limits contain.Limits
	// Metadata, if set, is kept with the process (see ProcessRef.Metadata).
	Metadata *Metadata
	// Network, if set, starts the command's managed-network proxies first
	// (managednet.go); they end when it exits.
	Network *ManagedNetwork
}

// Isolation is what the supervisor spawns with: the probed sandbox host
// (nil: sandboxes are refused) and the cgroup manager (nil: process
// groups only, no limits).
type Isolation struct {
	Host    *sandbox.Host
	Contain *contain.Manager
	// Net places a command's proxy listeners (nil: managed networks are
	// refused; see NetPlacer).
	Net NetPlacer
}

// pipeSize is the capacity requested for output pipes (F_SETPIPE_SZ).
const pipeSize = 1 << 20

// TimeoutExitCode is the exit code reported for a process killed by its Timeout.
const TimeoutExitCode = 124

// Session is the OS side of one process as the process actor sees it. The
// real one is an osSession; tests substitute a fake that is driven by
// channels. Methods are called only by the process actor's goroutine
// except Write and CloseStdin, which are called only by the stdin writer.
type Session interface {
	// Pid is the child's pid (also its process group id), or 0 for a fake.
	Pid() int
	// Streams lists the output streams, one reader goroutine each.
	Streams() []Stream
	// Output returns the reader of stream i (index into Streams()).
	Output(i int) Reader
	// Wait blocks until the child has exited and been reaped and returns
	// its exit code (128+N when killed by signal N). Called once, by the
	// waiter goroutine.
	Wait() int
	// Stdin reports whether the child has a writable stdin.
	HasStdin() bool
	Write(p []byte) error
	CloseStdin() error
	// Signal sends sig to the child's whole process group.
	Signal(sig syscall.Signal) error
	// Resize sets the PTY window size; an error for a pipe session.
	Resize(rows, cols uint16) error
	// CloseOutputs closes the parent's read ends, which ends every reader
	// even when a descendant outside our control still holds the write ends.
	CloseOutputs()
	// Limit names the resource limit that ended the process with exit
	// code code, or "". Called by the actor after Wait returned.
	Limit(code int) string
	// ReleaseIfEmpty frees the tree's cgroup now if nothing of the tree
	// is left; called when the process is retained (closed, its ending
	// delivered). Release still follows.
	ReleaseIfEmpty()
	// Release kills what is left of the tree and frees its cgroup; called
	// once, when the process actor ends.
	Release()
}

// Reader is one output stream.
type Reader interface {
	Read(p []byte) (int, error)
}

// ErrNotPTY is returned by Resize on a pipe session.
var ErrNotPTY = errors.New("actors: process is not attached to a PTY")

// SpawnError is a child that could not be started; Err is the OS error.
type SpawnError struct {
	Argv0 string
	Err   error
}

func (e *SpawnError) Error() string { return fmt.Sprintf("failed to spawn %s: %v", e.Argv0, e.Err) }
func (e *SpawnError) Unwrap() error { return e.Err }

type osSession struct {
	group   *contain.Group // nil without a cgroup manager
	pid     int
	tty     bool
	outputs []*os.File // pipes: stdout, stderr; pty: the master
	streams []Stream
	stdin   *os.File // pipe write end, or the PTY master; nil without stdin
}

// LookPath resolves argv0 the way process/start does: a name with a slash
// is used as is (relative to dir); otherwise each directory of the child's
// PATH, then /bin and /usr/bin.
func LookPath(argv0, dir string, env []string) (string, error) {
	if strings.Contains(argv0, "/") {
		return argv0, nil
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	dirs := filepath.SplitList(path)
	dirs = append(dirs, "/bin", "/usr/bin")
	for _, d := range dirs {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		p := filepath.Join(d, argv0)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fs.ErrNotExist
}

// startOS starts the child described by spec in its own session and
// process group, in a cgroup of its own where iso has a manager, through
// package sandbox when it needs a policy or per-process limits.
func startOS(spec Spec, iso Isolation) (_ *osSession, err error) {
	if len(spec.Argv) == 0 {
		return nil, &SpawnError{Err: errors.New("argv must not be empty")}
	}
	if st, serr := os.Stat(spec.Dir); serr != nil {
		return nil, &SpawnError{Argv0: spec.Argv[0], Err: fmt.Errorf("cwd %s: %w", spec.Dir, errUnwrapPath(serr))}
	} else if !st.IsDir() {
		return nil, &SpawnError{Argv0: spec.Argv[0], Err: fmt.Errorf("cwd %s: %w", spec.Dir, syscall.ENOTDIR)}
	}
	path, err := LookPath(spec.Argv[0], spec.Dir, spec.Env)
	if err != nil {
		return nil, &SpawnError{Argv0: spec.Argv[0], Err: syscall.ENOENT}
	}
	argv := append([]string(nil), spec.Argv...)
	if spec.Arg0 != "" {
		argv[0] = spec.Arg0
	}
	s := &osSession{tty: spec.TTY}
	var childFiles []*os.File // closed in the parent after start
	defer func() {
		for _, f := range childFiles {
			f.Close()
		}
		if err != nil {
			s.group.Release()
			for _, f := range s.outputs {
				f.Close()
			}
			if s.stdin != nil && !s.tty {
				s.stdin.Close()
			}
		}
	}()
	attr := &os.ProcAttr{Dir: spec.Dir, Env: spec.Env, Sys: &syscall.SysProcAttr{Setsid: true}}
	if spec.TTY {
		master, slave, perr := pty.Open()
		if perr == nil {
			master, perr = pollable(master)
		}
		if perr != nil {
			if slave != nil {
				slave.Close()
			}
			return nil, &SpawnError{Argv0: spec.Argv[0], Err: perr}
		}
		rows, cols := spec.Rows, spec.Cols
		if rows == 0 || cols == 0 {
			rows, cols = 24, 80
		}
		_ = setWinsize(master, rows, cols)
		childFiles = append(childFiles, slave)
		s.outputs, s.streams, s.stdin = []*os.File{master}, []Stream{PTY}, master
		attr.Files = []*os.File{slave, slave, slave}
		attr.Sys.Setctty = true
		attr.Sys.Ctty = 0
	} else {
		var stdinChild *os.File
		if spec.PipeStdin {
			r, w, perr := os.Pipe()
			if perr != nil {
				return nil, &SpawnError{Argv0: spec.Argv[0], Err: perr}
			}
			stdinChild, s.stdin = r, w
			childFiles = append(childFiles, stdinChild)
		} else {
			devnull, perr := sharedDevNull()
			if perr != nil {
				return nil, &SpawnError{Argv0: spec.Argv[0], Err: perr}
			}
			stdinChild = devnull // shared: not closed here
		}
		outR, outW, perr := outputPipe()
		if perr != nil {
			return nil, &SpawnError{Argv0: spec.Argv[0], Err: perr}
		}
		childFiles = append(childFiles, outW)
		s.outputs = append(s.outputs, outR)
		errR, errW, perr := outputPipe()
		if perr != nil {
			return nil, &SpawnError{Argv0: spec.Argv[0], Err: perr}
		}
		childFiles = append(childFiles, errW)
		s.outputs = append(s.outputs, errR)
		s.streams = []Stream{Stdout, Stderr}
		attr.Files = []*os.File{stdinChild, outW, errW}
	}
	if iso.Contain != nil && (iso.Contain.Mode() != contain.ModePgroup || !spec.Limits.IsZero()) {
		g, gerr := iso.Contain.NewGroup(spec.Limits)
		if gerr != nil {
			return nil, &SpawnError{Argv0: spec.Argv[0], Err: gerr}
		}
		s.group = g
		if fd := g.CgroupFD(); fd >= 0 {
			attr.Sys.UseCgroupFD, attr.Sys.CgroupFD = true, fd
		}
	} else if !spec.Limits.IsZero() {
		return nil, &SpawnError{Argv0: spec.Argv[0], Err: fmt.Errorf("%w: no cgroup manager configured", contain.ErrLimitUnavailable)}
	}
	var proc *os.Process
	var serr error
	if plan, ok := helperPlan(spec, path, argv, s.group); ok {
		proc, serr = sandbox.Start(iso.Host, plan, attr)
	} else {
		proc, serr = os.StartProcess(path, argv, attr)
	}
	s.group.CloseFD() // the child is in its cgroup (or was not started)
	if serr != nil {
		return nil, &SpawnError{Argv0: spec.Argv[0], Err: errUnwrapPath(serr)}
	}
	s.pid = proc.Pid
	if gerr := s.group.Started(proc.Pid); gerr != nil { // the subreaper's tree root
		_ = proc.Kill()
		_, _ = proc.Wait() // reaps it and closes its pidfd
		return nil, &SpawnError{Argv0: spec.Argv[0], Err: gerr}
	}
	// os.Process holds a pidfd (Go 1.23+) until Wait or Release, else until
	// the garbage collector finalizes it. The waiter reaps through a pidfd
	// of its own (pidWaiter) or wait4, so the handle is released now: a
	// running process holds only its pipes (or PTY master) and the
	// waiter's pidfd, an ended one nothing.
	_ = proc.Release()
	return s, nil
}

// helperPlan says whether the child must start through package sandbox
// (a spawning thread or the helper), and with what: a policy, per-process
// rlimits, or v1 cgroups to join before the command runs.
func helperPlan(spec Spec, path string, argv []string, g *contain.Group) (sandbox.Plan, bool) {
	plan := sandbox.Plan{Path: path, Argv: argv, Env: spec.Env, Policy: spec.Sandbox, JoinCgroups: g.JoinFiles()}
	for _, r := range g.Rlimits() {
		plan.Rlimits = append(plan.Rlimits, sandbox.Rlimit{Resource: r.Resource, Cur: r.Cur, Max: r.Max})
	}
	return plan, plan.Policy != nil || len(plan.Rlimits) > 0 || len(plan.JoinCgroups) > 0
}

func errUnwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func (s *osSession) Pid() int            { return s.pid }
func (s *osSession) Streams() []Stream   { return s.streams }
func (s *osSession) Output(i int) Reader { return newFileChunks(s.outputs[i], !s.tty) }
func (s *osSession) HasStdin() bool      { return s.stdin != nil }

func (s *osSession) Wait() int {
	if w := newPidWaiter(s.pid); w != nil {
		if code, ok := w.wait(); ok {
			return code
		}
	}
	// No pidfd (an old kernel, or none left): a blocking wait4, which
	// holds a thread while the child runs.
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(s.pid, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return -1
		}
		break
	}
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

func (s *osSession) Write(p []byte) error {
	_, err := s.stdin.Write(p)
	return err
}

func (s *osSession) CloseStdin() error {
	if s.tty {
		// A PTY has no separate stdin: send the terminal's EOF character.
		_, err := s.stdin.Write([]byte{4})
		return err
	}
	return s.stdin.Close()
}

func (s *osSession) Signal(sig syscall.Signal) error {
	if sig == syscall.SIGKILL {
		// The whole tree, including descendants that left the group.
		_ = s.group.Kill()
	}
	err := syscall.Kill(-s.pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

func (s *osSession) Resize(rows, cols uint16) error {
	if !s.tty {
		return ErrNotPTY
	}
	return setWinsize(s.outputs[0], rows, cols)
}

func (s *osSession) Limit(code int) string { return s.group.LimitHit(code) }

func (s *osSession) Release() { s.group.Release() }

func (s *osSession) ReleaseIfEmpty() { s.group.ReleaseIfEmpty() }

func (s *osSession) CloseOutputs() {
	for _, f := range s.outputs {
		f.Close()
	}
}
