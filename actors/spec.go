package actors

import (
	"time"

	"github.com/runtimed/runtimed/actors/contain"
	"github.com/runtimed/runtimed/actors/osproc"
	"github.com/runtimed/runtimed/actors/sandbox"
)

// Spec describes a process to start: the child (what osproc.Start takes)
// and what its actor keeps with it. Admission (Supervisor.Start) builds it
// from a StartRequest; tests may hand one to Spawn directly.
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
	// descendant (see package sandbox); it must have been checked against
	// the supervisor's host (Supervisor.Start does).
	Sandbox *sandbox.Policy
	// Limits bound the whole tree (cgroups where possible, else rlimits).
	Limits contain.Limits
	// Metadata, if set, is kept with the process (see ProcessRef.Metadata).
	Metadata *Metadata
}

// os is the child part of s.
func (s *Spec) os() osproc.Spec {
	return osproc.Spec{Argv: s.Argv, Arg0: s.Arg0, Dir: s.Dir, Env: s.Env, TTY: s.TTY, PipeStdin: s.PipeStdin,
		Rows: s.Rows, Cols: s.Cols, Sandbox: s.Sandbox, Limits: s.Limits}
}

// TimeoutExitCode is the exit code reported for a process killed by its Timeout.
const TimeoutExitCode = 124
