package osproc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/creack/pty"

	"github.com/runtimed/runtimed/actors/contain"
	"github.com/runtimed/runtimed/actors/sandbox"
)

// Spec describes a child to start, already validated and resolved by the
// caller (package actors' admission, Supervisor.Start).
type Spec struct {
	Argv      []string // Argv[0] is looked up on Env's PATH, then /bin:/usr/bin
	Arg0      string   // if set, the argv[0] the child sees
	Dir       string   // absolute working directory
	Env       []string // the child's whole environment, KEY=VALUE
	TTY       bool
	PipeStdin bool
	Rows      uint16 // PTY size; 0 means 24x80
	Cols      uint16
	// Sandbox, if non-nil, is enforced by the kernel on the child and every
	// descendant (on a spawning thread or through the sandbox helper; see
	// package sandbox). Start does not check it against the host: the
	// caller did (sandbox.Host.Check), once.
	Sandbox *sandbox.Policy
	// Limits bound the whole tree (cgroups where possible, else rlimits).
	Limits contain.Limits
	// NetNS, if set, is the network namespace the child runs in (the
	// managed network's, its proxies listening inside); it needs Sandbox
	// at the namespaces level (else sandbox.ErrNetNSUnsupported). The
	// caller keeps and closes it.
	NetNS *sandbox.NetNS
}

// Isolation is what children are spawned with: the probed sandbox host
// (nil: sandboxes are refused) and the cgroup manager (nil: process
// groups only, no limits).
type Isolation struct {
	Host    *sandbox.Host
	Contain *contain.Manager
}

// PipeSize is the capacity an output pipe is enlarged to (F_SETPIPE_SZ)
// once its reader finds it half full.
const PipeSize = 1 << 20

// MaxChunk is the largest chunk one ReadChunk of a real session returns
// (the size of the pooled read buffers).
const MaxChunk = 64 << 10

// ErrEmptyArgv is the Err of the SpawnError of a Spec without Argv.
var ErrEmptyArgv = errors.New("argv must not be empty")

// SpawnError is a child that could not be started; Err is the OS error.
// errors.Is matches it against exec.ErrNotFound when the command was not
// found (not on the PATH, or the file does not exist), and through Err
// against fs.ErrNotExist (a missing command or cwd), fs.ErrPermission
// and the syscall.Errno.
type SpawnError struct {
	Argv0 string
	// Op is the stage that failed: OpCwd (the working directory), OpLookup
	// (the command on the PATH), OpExec (the exec itself, through the
	// sandbox or not), OpSetup (pipes, PTY, cgroup, limits).
	Op  string
	Err error
}

// SpawnError stages.
const (
	OpCwd    = "cwd"
	OpLookup = "lookup"
	OpExec   = "exec"
	OpSetup  = "setup"
)

func (e *SpawnError) Error() string { return fmt.Sprintf("failed to spawn %s: %v", e.Argv0, e.Err) }
func (e *SpawnError) Unwrap() error { return e.Err }

// Is matches exec.ErrNotFound for a command that does not exist.
func (e *SpawnError) Is(target error) bool {
	return target == exec.ErrNotFound && e.NotFound()
}

// NotFound reports whether the command itself was not found: not on the
// PATH, or its exec failed with ENOENT.
func (e *SpawnError) NotFound() bool {
	return (e.Op == OpLookup || e.Op == OpExec) && errors.Is(e.Err, syscall.ENOENT)
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

// Start starts the child described by spec in its own session and
// process group, in a cgroup of its own where iso has a manager, through
// package sandbox when it needs a policy or per-process limits. It
// returns once the child has been exec'd; a failure is a *SpawnError and
// leaves nothing running, open or charged.
func Start(spec Spec, iso Isolation) (Session, error) {
	if len(spec.Argv) == 0 {
		return nil, &SpawnError{Op: OpSetup, Err: ErrEmptyArgv}
	}
	s, op, err := start(spec, iso)
	if err != nil {
		return nil, &SpawnError{Argv0: spec.Argv[0], Op: op, Err: err}
	}
	return s, nil
}

// start is Start; a failure names its stage and the bare OS error.
func start(spec Spec, iso Isolation) (_ *osSession, op string, err error) {
	if st, serr := os.Stat(spec.Dir); serr != nil {
		return nil, OpCwd, fmt.Errorf("cwd %s: %w", spec.Dir, errUnwrapPath(serr))
	} else if !st.IsDir() {
		return nil, OpCwd, fmt.Errorf("cwd %s: %w", spec.Dir, syscall.ENOTDIR)
	}
	path, err := LookPath(spec.Argv[0], spec.Dir, spec.Env)
	if err != nil {
		return nil, OpLookup, syscall.ENOENT
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
	var devpts *os.File // the sandbox's own devpts instance of the PTY
	defer func() {
		if devpts != nil {
			devpts.Close()
		}
	}()
	if spec.TTY {
		var master, slave *os.File
		var perr error
		ok := false
		if spec.Sandbox != nil {
			master, slave, devpts, ok, perr = iso.Host.OpenPTY(spec.Rows, spec.Cols)
		}
		if !ok {
			master, slave, perr = pty.Open()
		}
		if perr == nil {
			master, perr = pollable(master)
		}
		if perr != nil {
			if slave != nil {
				slave.Close()
			}
			return nil, OpSetup, perr
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
				return nil, OpSetup, perr
			}
			stdinChild, s.stdin = r, w
			childFiles = append(childFiles, stdinChild)
		} else {
			devnull, perr := sharedDevNull()
			if perr != nil {
				return nil, OpSetup, perr
			}
			stdinChild = devnull // shared: not closed here
		}
		outR, outW, perr := outputPipe()
		if perr != nil {
			return nil, OpSetup, perr
		}
		childFiles = append(childFiles, outW)
		s.outputs = append(s.outputs, outR)
		errR, errW, perr := outputPipe()
		if perr != nil {
			return nil, OpSetup, perr
		}
		childFiles = append(childFiles, errW)
		s.outputs = append(s.outputs, errR)
		s.streams = []Stream{Stdout, Stderr}
		attr.Files = []*os.File{stdinChild, outW, errW}
	}
	if iso.Contain != nil && iso.Contain.NeedsGroup(spec.Limits) {
		g, gerr := iso.Contain.NewGroup(spec.Limits)
		if gerr != nil {
			return nil, OpSetup, gerr
		}
		s.group = g
		if fd := g.CgroupFD(); fd >= 0 {
			attr.Sys.UseCgroupFD, attr.Sys.CgroupFD = true, fd
		}
	} else if !spec.Limits.IsZero() {
		return nil, OpSetup, fmt.Errorf("%w: no cgroup manager configured", contain.ErrLimitUnavailable)
	}
	var proc *os.Process
	var serr error
	if plan, ok := helperPlan(spec, path, argv, s.group); ok {
		plan.DevPts = devpts
		// The session waits for and signals its command through the
		// report, so its init may serve the next start; not under the
		// subreaper's containment, whose tree is the init and its
		// descendants: this session's kill and Release would reach the
		// next session's command on the init.
		plan.Recycle = iso.Contain == nil || iso.Contain.Mode() != contain.ModeSubreaper
		proc, s.report, serr = sandbox.StartReported(iso.Host, plan, attr)
	} else {
		sandbox.SealDescriptors() // only its stdio reaches the child
		proc, serr = os.StartProcess(path, argv, attr)
	}
	if s.report != nil {
		s.initGone, s.reported = make(chan struct{}), make(chan struct{})
	}
	s.group.CloseFD() // the child is in its cgroup (or was not started)
	if serr != nil {
		return nil, OpExec, errUnwrapPath(serr)
	}
	s.pid = proc.Pid
	if gerr := s.group.Started(proc.Pid); gerr != nil { // the subreaper's tree root
		if s.report.Recycled() {
			s.report.Abandon() // kills and reaps the init, which is not ours to reap
			_ = proc.Release()
			return nil, OpSetup, gerr
		}
		_ = proc.Kill()
		_, _ = proc.Wait() // reaps it and closes its pidfd
		s.report.Close()
		return nil, OpSetup, gerr
	}
	// os.Process holds a pidfd (Go 1.23+) until Wait or Release, else until
	// the garbage collector finalizes it. The waiter reaps through a pidfd
	// of its own (pidWaiter) or wait4, so the handle is released now: a
	// running process holds only its pipes (or PTY master) and the
	// waiter's pidfd, an ended one nothing.
	_ = proc.Release()
	return s, "", nil
}

// helperPlan says whether the child must start through package sandbox
// (a spawning thread or the helper), and with what: a policy, per-process
// rlimits, or v1 cgroups to join before the command runs.
func helperPlan(spec Spec, path string, argv []string, g *contain.Group) (sandbox.Plan, bool) {
	plan := sandbox.Plan{Path: path, Argv: argv, Env: spec.Env, Policy: spec.Sandbox, JoinCgroups: g.JoinFiles(), NetNS: spec.NetNS}
	for _, r := range g.Rlimits() {
		plan.Rlimits = append(plan.Rlimits, sandbox.Rlimit{Resource: r.Resource, Cur: r.Cur, Max: r.Max})
	}
	// A tree with limits cannot lift them (see sandbox.Plan.LockLimits).
	plan.LockLimits = !spec.Limits.IsZero()
	return plan, plan.Policy != nil || plan.NetNS != nil || plan.LockLimits || len(plan.Rlimits) > 0 || len(plan.JoinCgroups) > 0
}

func errUnwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
