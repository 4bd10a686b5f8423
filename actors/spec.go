package actors

import (
	"time"

	"github.com/runtimed/runtimed/actors/osproc"
)

// Spec describes a child for Spawn: osproc's, already resolved (an
// absolute Dir, the whole Env, a Sandbox checked against the supervisor's
// host). Requests do not build one: Supervisor.Start makes it from a
// StartRequest.
type Spec = osproc.Spec

// TimeoutExitCode is the exit code reported for a process killed by its
// StartRequest.Timeout.
const TimeoutExitCode = 124

// keep is what a process actor keeps with its child beyond the Spec.
type keep struct {
	timeout  time.Duration   // > 0: killed after this long
	metadata *Metadata       // ProcessRef.Metadata
	network  *ManagedNetwork // started before the child (managednet.go); nil: none
	who      *Who            // ProcessRef.TokenName, the audit log
}
