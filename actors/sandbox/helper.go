package sandbox

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	goruntime "runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// The helper is this same executable started with argv[0] == helperArg0
// and helperEnv set: a Go child cannot run code between fork and exec, so
// the parent execs the helper, which reads its Plan, applies it to itself
// and execs the command. The command keeps the helper's pid, process
// group, session, controlling terminal and open descriptors 0-2, so it is
// started exactly as without a helper, one exec later.
//
// Descriptors: 3 carries the Plan (JSON, read to EOF); 4 is the status
// pipe, close-on-exec in the helper: EOF means the command was exec'd, a
// JSON helperStatus means the helper failed and exits 127.
const (
	helperArg0 = "runtimed-sandbox-exec"
	helperEnv  = "RUNTIMED_SANDBOX_EXEC=1"
	planFD     = 3
	statusFD   = 4
	// Then, at the namespaces level, Plan.DevPts and Plan.NetNS in this
	// order (nsPlan.DevPtsFD, NetNSFD).
	// HelperExitCode is the helper's exit code when it fails before exec.
	HelperExitCode = 127
)

// Rlimit is one resource limit set before exec.
type Rlimit struct {
	Resource int    `json:"resource"`
	Cur      uint64 `json:"cur"`
	Max      uint64 `json:"max"`
}

// Plan is everything the helper does before exec.
type Plan struct {
	Path string   `json:"path"` // resolved executable
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	// JoinCgroups are cgroup.procs files (cgroup v1 controllers) the
	// helper moves itself into first, before any descendant can exist.
	JoinCgroups []string `json:"joinCgroups,omitempty"`
	Rlimits     []Rlimit `json:"rlimits,omitempty"`
	// Policy, if non-nil, is enforced with Landlock, seccomp and mounts.
	Policy *Policy `json:"policy,omitempty"`
	// Dir is the command's working directory (Start fills it from the
	// ProcAttr): the namespaces level enters it again once the mounts are
	// made.
	Dir string `json:"dir,omitempty"`
	// Ctty: the command takes fd 0 as its controlling terminal (Start
	// fills it from the ProcAttr).
	Ctty bool `json:"ctty,omitempty"`
	// LockLimits, for a start with limits and no policy: the command may
	// neither leave its cgroups nor raise their limits, even as root (a
	// cgroup namespace, a read-only view of the cgroup file systems, and
	// the capabilities that could undo either dropped; see lockLimits).
	LockLimits bool `json:"lockLimits,omitempty"`
	// DevPts, if set, is the detached devpts instance of the command's
	// PTY (Host.OpenPTY), attached at the namespace's /dev/pts.
	DevPts *os.File `json:"-"`
	// NetNS, if set, is the network namespace the command runs in
	// (NewNetNS), instead of a new one, at the namespaces level.
	NetNS *NetNS `json:"-"`
	// Recycle: the caller learns the command's end from the ExitReport
	// alone and signals it through the report (ExitReport.Signal), never
	// through the process Start returns; the init of a prepared sandbox may
	// then serve the next start of its plan once it has reported this
	// one's exit (see "Recycling" in prepared.go). Without it, the init
	// exits after its report, as a fresh helper's does.
	Recycle bool `json:"-"`
}

type wirePlan struct {
	Plan
	Layers  layers  `json:"layers"`
	Scratch string  `json:"scratch"`
	NS      *nsPlan `json:"ns,omitempty"` // the namespaces level (ns.go)
	// Prepare: this helper is a prepared sandbox (prepared.go): it builds
	// NS, then waits on statusFD for its start, and reports a started
	// command in so many words.
	Prepare bool `json:"prepare,omitempty"`
}

type helperStatus struct {
	Stage string `json:"stage"`
	Errno int    `json:"errno"`
	Msg   string `json:"msg"`
}

// ExecError is a failure reported by the helper before the command ran.
// Stage "exec" is the command's own execve (ENOENT, EACCES, ...); other
// stages are the sandbox's.
type ExecError struct {
	Stage string
	Errno syscall.Errno
	Msg   string
}

func (e *ExecError) Error() string {
	switch e.Stage {
	case "exec":
		return e.Errno.Error()
	case "cwd":
		return fmt.Sprintf("the sandbox does not allow reading the working directory: %v", e.Errno)
	}
	return fmt.Sprintf("sandbox %s: %s", e.Stage, e.Msg)
}

func (e *ExecError) Unwrap() error {
	if e.Errno != 0 {
		return e.Errno
	}
	return nil
}

func init() {
	if len(os.Args) == 0 || os.Args[0] != helperArg0 || os.Getenv("RUNTIMED_SANDBOX_EXEC") != "1" {
		return
	}
	goruntime.LockOSThread()
	st := helperMain()
	b, _ := json.Marshal(st)
	_, _ = unix.Write(statusFD, b)
	os.Exit(HelperExitCode)
}

// enforce confines the calling thread (and what it forks and execs) to
// policy p planned as l: the mounts (in a private mount namespace the
// caller already entered), capabilities, Landlock, seccomp; then it checks
// that dir, the command's working directory, is readable under it. On
// failure it names the stage. Shared by the helper and the spawning thread.
func enforce(p *Policy, l layers, scratch, dir string, ps *pins) (string, error) {
	if err := applyOverlays(l, scratch, ps); err != nil {
		return "mounts", err
	}
	if err := dropCapabilities(); err != nil {
		return "capabilities", err
	}
	return confine(p, l, dir, ps)
}

// confine is enforce after the mounts and the capabilities (which a
// prepared spawning thread dropped ahead of its start, see threadPool):
// Landlock, seccomp, the working directory's check.
func confine(p *Policy, l layers, dir string, ps *pins) (string, error) {
	if stage, err := restrict(p, l, ps); err != nil {
		return stage, err
	}
	return checkCwd(dir)
}

// restrict applies Landlock and the network filter: what a thread prepared
// for a policy's confinement has done already (see threadPool).
func restrict(p *Policy, l layers, ps *pins) (string, error) {
	if err := applyLandlock(p, l, ps); err != nil {
		return "landlock", err
	}
	if !p.Network {
		if err := installNetworkFilter(); err != nil {
			return "seccomp", err
		}
	}
	return "", nil
}

// checkCwd: a working directory the policy does not let the command read
// is a failed start, not a command that fails mysteriously later.
func checkCwd(dir string) (string, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "cwd", err
	}
	unix.Close(fd)
	return "", nil
}

// helperMain applies the plan and execs; it returns only on failure.
func helperMain() helperStatus {
	fail := func(stage string, err error) helperStatus {
		var errno syscall.Errno
		errors.As(err, &errno)
		return helperStatus{Stage: stage, Errno: int(errno), Msg: err.Error()}
	}
	syscall.CloseOnExec(statusFD)
	f := os.NewFile(planFD, "plan")
	raw, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return fail("plan", err)
	}
	var p wirePlan
	if err := json.Unmarshal(raw, &p); err != nil {
		return fail("plan", err)
	}
	for _, procs := range p.JoinCgroups {
		if err := os.WriteFile(procs, []byte("0"), 0); err != nil {
			return fail("cgroup", err)
		}
	}
	for _, r := range p.Rlimits {
		lim := unix.Rlimit{Cur: r.Cur, Max: r.Max}
		if err := unix.Setrlimit(r.Resource, &lim); err != nil {
			return fail("rlimit", fmt.Errorf("setrlimit(%d): %w", r.Resource, err))
		}
	}
	if p.NS != nil && p.Prepare {
		return preparedMain(&p)
	}
	if p.NS != nil {
		return nsMain(&p)
	}
	if p.LockLimits && p.Policy == nil {
		if stage, err := lockLimits(); err != nil {
			return fail(stage, err)
		}
	}
	if p.Policy != nil {
		var ps pins // closed by execve
		if stage, err := enforce(p.Policy, p.Layers, p.Scratch, ".", &ps); err != nil {
			return fail(stage, err)
		}
	}
	err = unix.Exec(p.Path, p.Argv, p.Env)
	return fail("exec", err)
}

// Launch is a command started through the helper. Use: NewLaunch, start
// the process with Exe/Argv/Env and Files appended after stdio, then
// Started (or Abort if the start failed).
type Launch struct {
	Exe  string
	Argv []string
	Env  []string
	// Files are the helper's descriptors 3 and 4.
	Files [2]*os.File
	// NewMountNS asks the caller to clone the child into a private mount
	// namespace (CLONE_NEWNS).
	NewMountNS bool
	// Cloneflags are the namespaces the caller must clone the helper into
	// (the namespaces level); with InitCtty the helper becomes the pid
	// namespace's init and the command, not the helper, must take the
	// controlling terminal (the caller clears Setctty).
	Cloneflags uintptr
	InitCtty   bool

	plan    []byte
	planW   *os.File
	statusR *os.File
}

// afterNamespacePlan, when set (by tests only), runs between the namespace
// plan and the helper's start, on the start's own goroutine (a prepared
// sandbox's plan, made in the background, does not run it): the window in
// which the host may change.
var afterNamespacePlan func()

// NewLaunch checks plan against the host and prepares the pipes.
func NewLaunch(h *Host, plan Plan) (*Launch, error) {
	wp, err := planWire(h, plan)
	if err != nil {
		return nil, err
	}
	if wp.NS != nil && afterNamespacePlan != nil {
		afterNamespacePlan()
	}
	return newLaunch(h, wp)
}

// planWire checks plan against the host and plans what the helper does:
// the layers, and at the namespaces level the namespace plan.
func planWire(h *Host, plan Plan) (wirePlan, error) {
	wp := wirePlan{Plan: plan}
	if plan.Policy != nil {
		// The layers go to the helper as they are: planned by the
		// caller's h.Check, or checked and planned now.
		l, err := h.checked(plan.Policy)
		if err != nil {
			return wp, err
		}
		wp.Layers, wp.Scratch = l, h.Scratch
		if h.namespaces() {
			np, err := planNamespace(plan.Policy)
			if err != nil {
				return wp, err
			}
			np.PidNS = h.PidNamespace != PidInherit
			np.NetNS = !plan.Policy.Network && plan.NetNS == nil
			np.Dir, np.Ctty = plan.Dir, plan.Ctty
			if np.Dir == "" {
				np.Dir, _ = os.Getwd()
			}
			wp.NS = &np
			wp.Layers.Overlays = nil // the namespace plan's mounts replace them
		}
	}
	return wp, nil
}

func newLaunch(h *Host, wp wirePlan) (*Launch, error) {
	plan := wp.Plan
	if wp.NS != nil {
		// The devpts and network namespace descriptors follow the status
		// descriptor, in this order.
		next := statusFD + 1
		if plan.DevPts != nil {
			wp.NS.DevPtsFD, next = next, next+1
		}
		if plan.NetNS != nil {
			wp.NS.NetNSFD, wp.NS.NetNS = next, false
		}
	}
	raw, err := json.Marshal(wp)
	if err != nil {
		return nil, fmt.Errorf("sandbox: encode plan: %w", err)
	}
	l := &Launch{Exe: h.exe(), Argv: []string{helperArg0}, Env: []string{helperEnv, "GOMAXPROCS=1", "GOGC=off", raceExitNow}, plan: raw}
	l.NewMountNS = len(wp.Layers.Overlays) > 0 || (plan.LockLimits && plan.Policy == nil)
	if wp.NS != nil {
		l.Cloneflags = unix.CLONE_NEWNS | unix.CLONE_NEWIPC
		if wp.NS.PidNS {
			l.Cloneflags |= unix.CLONE_NEWPID
			l.InitCtty = wp.NS.Ctty
		}
		if wp.NS.NetNS {
			l.Cloneflags |= unix.CLONE_NEWNET
		}
	}
	planR, planW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox: plan pipe: %w", err)
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		planR.Close()
		planW.Close()
		return nil, fmt.Errorf("sandbox: status pipe: %w", err)
	}
	l.Files = [2]*os.File{planR, statusW}
	l.planW, l.statusR = planW, statusR
	return l, nil
}

// Started hands the plan to the running helper and waits until it has
// exec'd the command (nil) or failed (*ExecError; the helper then exits
// with HelperExitCode and the caller must reap it).
func (l *Launch) Started() error {
	report, err := l.started()
	report.Close()
	return err
}

// started is Started, and for a helper that stays as the command's init
// (a pid namespace) the report of the command's exit it makes on the same
// pipe (nil for a helper that exec'd the command in place: the pipe's EOF
// was its word).
func (l *Launch) started() (*ExitReport, error) {
	l.Files[0].Close()
	l.Files[1].Close()
	_, werr := l.planW.Write(l.plan)
	l.planW.Close()
	r := bufio.NewReaderSize(l.statusR, 512)
	line, rerr := r.ReadString('\n')
	if line == preparedStarted {
		return newExitReport(l.statusR, r), nil
	}
	rest, _ := io.ReadAll(r) // a failure is one JSON status, then EOF
	out := append([]byte(line), rest...)
	l.statusR.Close()
	if len(out) > 0 {
		var st helperStatus
		if err := json.Unmarshal(out, &st); err != nil {
			return nil, &ExecError{Stage: "helper", Msg: fmt.Sprintf("unreadable status %q", out)}
		}
		return nil, &ExecError{Stage: st.Stage, Errno: syscall.Errno(st.Errno), Msg: st.Msg}
	}
	if rerr != nil && rerr != io.EOF {
		return nil, &ExecError{Stage: "helper", Msg: rerr.Error()}
	}
	if werr != nil {
		return nil, &ExecError{Stage: "plan", Msg: werr.Error()}
	}
	return nil, nil
}

// Abort releases the pipes after a failed start.
func (l *Launch) Abort() {
	for _, f := range []*os.File{l.Files[0], l.Files[1], l.planW, l.statusR} {
		f.Close()
	}
}

// raceExitNow is in every helper's environment: a helper built with the
// race detector (this package's tests) would otherwise sleep a second in
// every exit with status 0; without the race detector it means nothing.
const raceExitNow = "GORACE=atexit_sleep_ms=0"
