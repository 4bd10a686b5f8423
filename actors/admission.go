package actors

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runtimed/runtimed/actors/contain"
	"github.com/runtimed/runtimed/actors/netproxy"
	"github.com/runtimed/runtimed/actors/osproc"
	"github.com/runtimed/runtimed/actors/policy"
	"github.com/runtimed/runtimed/actors/sandbox"
	"github.com/runtimed/runtimed/wire"
)

// Admission: the one place a process is admitted. Every front end (the
// exec-server's process/start, the app-server's process/spawn, and
// runtime.Local.Start) decodes its request into a StartRequest and calls
// Supervisor.Start, which makes every check in one order, resolves and
// checks the sandbox once, spawns, and reports any failure as one
// *StartError; StartError.Wire is the one mapping to a JSON-RPC error.

// Dialect is the front end a StartRequest came from: it decides only the
// wording of two refusals (an empty argv, a duplicate id), as each
// dialect's clients expect them.
type Dialect uint8

const (
	// DialectExec is the exec-server's process/start (and runtime.Local,
	// which answers as a server does).
	DialectExec Dialect = iota
	// DialectApp is the app-server's process/spawn. Its ID is the
	// connection's process handle; the process runs as "app:"+ID, apart
	// from process/start ids.
	DialectApp
)

// StartRequest is a process start as every front end decodes it. Fields
// are as the client gave them; Start checks and resolves them.
type StartRequest struct {
	Dialect Dialect
	ID      string   // process/start processId; process/spawn processHandle
	Argv    []string // process/start argv; process/spawn command
	Arg0    string   // if set, the argv[0] the child sees
	Cwd     string   // an absolute path or a file: URI, as given
	// Env is laid over EnvPolicy's base (without EnvPolicy it is the whole
	// environment); the names in Unset are then removed (the app-server's
	// null values). Both are checked as "env".
	Env       map[string]string
	Unset     []string
	EnvPolicy *osproc.EnvPolicy
	TTY       bool
	PipeStdin bool
	Rows      uint16 // PTY size; 0 means 24x80
	Cols      uint16
	// Sandbox is the start's sandbox as parsed (nil: none asked; the
	// operator's floor applies).
	Sandbox *wire.Sandbox
	Network NetworkRequest
	Limits  contain.Limits
	Timeout time.Duration // > 0: killed after this long (exit code TimeoutExitCode)
	// Metadata is kept with the process (process/list).
	Metadata *Metadata
	// Who started it (token name, client, session), for process/list and
	// the audit log; nil: unknown (the Go API).
	Who *Who

	// Delivery, not checked: Subscriber, if its Out is set, receives live
	// events from seq 1; Listen > 0 registers a lag-mode listener of that
	// capacity (StartResult.Live) before the child can produce anything.
	Subscriber Subscriber
	Listen     int
}

// NetworkRequest is what a start asks of the managed network (process/
// start's networkProxy, enforceManagedNetwork and managedNetwork).
type NetworkRequest struct {
	LaunchProxy bool // networkProxy: launch a proxy here
	Enforce     bool // enforceManagedNetwork
	Managed     bool // managedNetwork was given
	// Proxy is networkProxy as the front end parsed it (nil: none), and
	// TimeoutMs the start's top-level policyDecisionTimeoutMs.
	Proxy     *wire.NetworkProxy
	TimeoutMs *uint64
	// Notify receives the proxies' decisions; Ask, if set, is asked about
	// uncovered hosts when the start asks for review (PROTOCOL.md 7.5).
	Notify func(netproxy.Event)
	Ask    netproxy.AskFunc
}

// StartResult is an admitted and started process.
type StartResult struct {
	Ref *ProcessRef
	// Sandboxed: the child runs under an enforced sandbox policy.
	Sandboxed bool
	// Live is the lag-mode listener StartRequest.Listen asked for.
	Live <-chan Event
}

// SandboxType is process/start's sandboxType for the result.
func (r StartResult) SandboxType() string {
	if r.Sandboxed {
		return wire.SandboxTypeLinux
	}
	return wire.SandboxTypeNone
}

// Owner is who a started process belongs to: a connection's session
// (process/start), a connection's app-server handles (process/spawn), a
// runtime.Local. Its methods are called on Start's goroutine, which for a
// connection is the one that owns its tables.
type Owner interface {
	// Reserve claims id for this start and returns how many processes
	// the owner has active (not yet closed, other starts under way
	// included); taken: a live process of the owner has id (nothing is
	// reserved then).
	Reserve(id string) (active int, taken bool)
	// Spawning is called once every check has passed, right before the
	// budget is charged and the child spawned.
	Spawning()
	// Started ends the reservation: ref is the started process, or nil
	// when the start failed (id is free again).
	Started(id string, ref *ProcessRef)
}

// Check names a step of admission, in the order Start makes them.
type Check uint8

const (
	CheckArgv    Check = iota + 1 // argv is not empty
	CheckCwd                      // cwd is an absolute path or a file: URI of this host
	CheckFsRoot                   // cwd is inside the --fs-root roots
	CheckID                       // the id is free in the owner
	CheckEnv                      // env and envPolicy.set names, envPolicy.inherit
	CheckCap                      // the owner is under MaxProcesses
	CheckFloor                    // no sandbox asked: --default-sandbox applies, --require-sandbox refuses
	CheckPolicy                   // the sandbox resolves (specials, URIs, globs → absolute rules)
	CheckHost                     // this host can enforce the policy (sandbox.Host.Check, once)
	CheckNetwork                  // the managed network can be provided
	CheckBudget                   // the server-wide budgets (and the supervisor still runs)
	CheckSpawn                    // the child started (limits are applied here: no cgroup manager refuses them)
)

var checkNames = [...]string{CheckArgv: "argv", CheckCwd: "cwd", CheckFsRoot: "fs-root", CheckID: "id", CheckEnv: "env",
	CheckCap: "cap", CheckFloor: "sandbox floor", CheckPolicy: "sandbox policy", CheckHost: "sandbox host",
	CheckNetwork: "managed network", CheckBudget: "budget", CheckSpawn: "spawn"}

func (c Check) String() string {
	if int(c) < len(checkNames) && checkNames[c] != "" {
		return checkNames[c]
	}
	return fmt.Sprintf("check(%d)", c)
}

// StartError is why Start did not start a process: the step that refused
// it, the request field at fault (as the protocol names it; "" when none
// is), and the cause. The cause is the *wire.Error of a rule's refusal,
// sandbox.Host.Check's error (CheckHost), or what the spawn returned: a
// *BudgetError, ErrStopped, an
// *osproc.SpawnError (matching exec.ErrNotFound, fs.ErrNotExist,
// fs.ErrPermission through errors.Is), an error wrapping
// sandbox.ErrUnavailable or contain.ErrLimitUnavailable.
type StartError struct {
	Check Check
	Field string
	Err   error
}

func (e *StartError) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("actors: start refused at %s (%s): %v", e.Check, e.Field, e.Err)
	}
	return fmt.Sprintf("actors: start refused at %s: %v", e.Check, e.Err)
}

func (e *StartError) Unwrap() error { return e.Err }

// Wire is the JSON-RPC error a start's failure is answered with; every
// front end (and Local) maps through it. A rule's refusal is its own
// *wire.Error; a budget's -32011; what the host cannot enforce for this
// request (the host check's refusal of a sandbox, a limit or sandbox the
// spawn found unavailable) -32602 with the error's text; everything else
// -32603 with the error's text, and, for a child that could not be
// started, the stage and errno in the error's data (wire.SpawnFailure).
func (e *StartError) Wire() *wire.Error {
	if we, ok := e.Err.(*wire.Error); ok { // a rule's refusal: no errors.As, no allocation
		return we
	}
	var we *wire.Error
	if errors.As(e.Err, &we) {
		return we
	}
	var be *BudgetError
	if errors.As(e.Err, &be) {
		return be.Wire()
	}
	if e.Check == CheckHost || errors.Is(e.Err, sandbox.ErrUnavailable) || errors.Is(e.Err, contain.ErrLimitUnavailable) || errors.Is(e.Err, sandbox.ErrUnsupported) {
		return wire.Errorf(wire.CodeInvalidParams, "%s", e.Err.Error())
	}
	out := wire.Errorf(wire.CodeInternal, "%s", e.Err.Error())
	var se *osproc.SpawnError
	if errors.As(e.Err, &se) {
		f := &wire.SpawnFailure{Op: se.Op}
		var errno unix.Errno
		if errors.As(se.Err, &errno) {
			f.Errno = unix.ErrnoName(errno)
		}
		out.Data = &wire.ErrorData{Spawn: f}
	}
	return out
}

// Start admits and starts a process for owner. The checks, in this order
// (the first failure is returned; nothing is started or charged then):
//
//  1. argv is not empty (the command);
//  2. cwd is an absolute path or a file: URI of this host;
//  3. cwd is inside the fs roots (--fs-root), if any;
//  4. the id is free in the owner (Owner.Reserve);
//  5. the env names (env, envPolicy.set) can be carried, envPolicy.inherit
//     is all, core or none;
//  6. the owner has fewer than MaxProcesses active processes;
//  7. the environment is built; without a sandbox the operator's floor
//     applies (--default-sandbox), or --require-sandbox refuses;
//  8. the sandbox resolves to absolute rules (policy.Resolve) and
//  9. this host can enforce it (sandbox.Host.Check: the one check of the
//     policy on this start; the spawn enforces the plan it made);
//  10. the managed network asked for can be provided;
//  11. the budgets grant the charge (and the supervisor is not stopping);
//  12. the child starts (osproc.Start: pipes or PTY, limits in a cgroup,
//     the sandbox), then its process actor.
//
// A failure is a *StartError naming the step and field; decoding the
// request (its JSON, the sandbox's schema) is the front end's and comes
// before. ctx bounds only the wait for the budget actor.
func (s *Supervisor) admit(ctx context.Context, owner Owner, req StartRequest) (StartResult, error) {
	refuse := func(c Check, field string, err error) (StartResult, error) {
		return StartResult{}, &StartError{Check: c, Field: field, Err: err}
	}
	argvField, idField := "argv", "processId"
	if req.Dialect == DialectApp {
		argvField, idField = "command", "processHandle"
	}
	if len(req.Argv) == 0 {
		if req.Dialect == DialectApp {
			return refuse(CheckArgv, argvField, wire.ErrEmptyCommand())
		}
		return refuse(CheckArgv, argvField, wire.ErrEmptyArgv())
	}
	dir, err := policy.NativePath(req.Cwd)
	if err != nil {
		return refuse(CheckCwd, "cwd", cwdError(req.Cwd, err))
	}
	if werr := s.cfg.FsRoots.Allow(req.Cwd); werr != nil {
		return refuse(CheckFsRoot, "cwd", werr)
	}
	active, taken := owner.Reserve(req.ID)
	if taken {
		if req.Dialect == DialectApp {
			return refuse(CheckID, idField, wire.ErrDuplicateHandle(req.ID))
		}
		return refuse(CheckID, idField, wire.ErrProcessExists(req.ID))
	}
	started := false
	defer func() {
		if !started {
			owner.Started(req.ID, nil)
		}
	}()
	if field, werr := checkStartEnv(&req); werr != nil {
		return refuse(CheckEnv, field, werr)
	}
	if max := s.cfg.MaxProcesses; max > 0 && active >= max {
		return refuse(CheckCap, "", wire.ErrProcessLimit(max))
	}
	spec := Spec{Argv: req.Argv, Arg0: req.Arg0, Dir: dir, TTY: req.TTY, PipeStdin: req.PipeStdin,
		Rows: req.Rows, Cols: req.Cols, Limits: req.Limits}
	spec.Env = osproc.BuildEnv(osproc.ServerEnv(), req.EnvPolicy, req.Env)
	if len(req.Unset) > 0 {
		spec.Env = slices.DeleteFunc(spec.Env, func(kv string) bool {
			name, _, _ := strings.Cut(kv, "=")
			return slices.Contains(req.Unset, name)
		})
	}
	sb := req.Sandbox
	if sb == nil {
		switch {
		case s.cfg.DefaultSandbox != FloorNone:
			sb = policy.FloorSandbox(s.cfg.DefaultSandbox, dir)
		case s.cfg.RequireSandbox:
			return refuse(CheckFloor, "sandbox", wire.ErrSandboxRequired())
		}
	}
	if sb != nil {
		p, werr := policy.Resolve(sb, dir, spec.Env)
		if werr != nil {
			return refuse(CheckPolicy, "sandbox", werr)
		}
		if p != nil {
			if err := s.cfg.Isolation.Host.Check(p); err != nil {
				return refuse(CheckHost, "sandbox", err)
			}
		}
		spec.Sandbox = p
	}
	ns, field, werr := managedNetwork(req.Network, spec.Sandbox != nil, s.cfg.NetworkDeny, s.cfg.NetPlacer != nil)
	if werr != nil {
		return refuse(CheckNetwork, field, werr)
	}
	var mn *ManagedNetwork
	if ns != nil {
		mn = &ManagedNetwork{Spec: ns, ProcessID: req.ID, Notify: req.Network.Notify, Who: req.Who}
		if ns.Review {
			mn.Ask = req.Network.Ask
		}
	}
	owner.Spawning()
	id := req.ID
	if req.Dialect == DialectApp {
		id = "app:" + req.ID // the dialect's handles apart from process/start ids
	}
	var live chan Event
	if req.Listen > 0 {
		live = make(chan Event, req.Listen)
	}
	var sub *Subscriber
	if req.Subscriber.Out != nil {
		cp := req.Subscriber // on the heap only for a start that gets this far
		sub = &cp
	}
	ref, check, err := s.spawnCharged(ctx, id, spec, keep{timeout: req.Timeout, metadata: req.Metadata, network: mn, who: req.Who}, sub, live, active)
	if err != nil {
		return refuse(check, "", err)
	}
	started = true
	owner.Started(req.ID, ref)
	res := StartResult{Ref: ref, Sandboxed: spec.Sandbox != nil}
	if live != nil {
		res.Live = live
	}
	return res, nil
}

// cwdError words NativePath's refusal of a cwd (as given: a URI's path
// when it is the relative part).
func cwdError(cwd string, err error) *wire.Error {
	var pe *policy.PathError
	if !errors.As(err, &pe) {
		return wire.ErrCwdRelative(cwd)
	}
	switch pe.Kind {
	case policy.PathBadURI:
		return wire.ErrCwdURI(pe.Path)
	case policy.PathForeignHost:
		return wire.ErrCwdForeignHost(pe.Host, pe.Path)
	}
	return wire.ErrCwdRelative(pe.Path)
}

// pathPredicate words NativePath's refusal after a field's name.
func pathPredicate(err error) string {
	var pe *policy.PathError
	if errors.As(err, &pe) {
		return pe.Predicate()
	}
	return err.Error()
}

// checkStartEnv is step 5: the field at fault and its refusal, or nil.
func checkStartEnv(req *StartRequest) (string, *wire.Error) {
	names := req.Env
	if len(req.Unset) > 0 {
		names = make(map[string]string, len(req.Env)+len(req.Unset))
		for k := range req.Env {
			names[k] = ""
		}
		for _, k := range req.Unset {
			names[k] = ""
		}
	}
	if e := checkEnvNames("env", names); e != nil {
		return "env", e
	}
	if p := req.EnvPolicy; p != nil {
		if e := checkEnvInherit(p.Inherit); e != nil {
			return "envPolicy.inherit", e
		}
		if e := checkEnvNames("envPolicy.set", p.Set); e != nil {
			return "envPolicy.set", e
		}
	}
	return "", nil
}
