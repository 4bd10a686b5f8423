package actors

import (
	"errors"

	"github.com/runtimed/runtimed/actors/contain"
	"github.com/runtimed/runtimed/actors/policy"
	"github.com/runtimed/runtimed/actors/sandbox"
	"github.com/runtimed/runtimed/wire"
)

// Sandbox floors an operator can set (runtimed serve --default-sandbox).
const (
	FloorNone           = policy.FloorNone
	FloorReadOnly       = policy.FloorReadOnly
	FloorWorkspaceWrite = policy.FloorWorkspaceWrite
)

// SandboxFor turns a start's sandbox (nil: none asked) into the policy to
// enforce, applying the operator's floor: DefaultSandbox for starts that
// carry none, RequireSandbox refusing them. dir is the start's cwd and env
// the child's environment (for tmpdir). A nil policy means unconfined.
func (s *Supervisor) SandboxFor(sb *wire.Sandbox, dir string, env []string) (*sandbox.Policy, *wire.Error) {
	if sb == nil {
		switch {
		case s.cfg.DefaultSandbox != FloorNone:
			sb = policy.FloorSandbox(s.cfg.DefaultSandbox, dir)
		case s.cfg.RequireSandbox:
			return nil, wire.Errorf(wire.CodeInvalidParams, "this server requires a sandbox on every process (runtimed serve --require-sandbox): send process/start.sandbox with managed permissions")
		default:
			return nil, nil
		}
	}
	p, werr := policy.Resolve(sb, dir, env)
	if werr != nil {
		return nil, werr
	}
	if err := s.cfg.Isolation.Host.Check(p); err != nil {
		return nil, wire.Errorf(wire.CodeInvalidParams, "%s", err.Error())
	}
	return p, nil
}

// LimitsFrom converts process/start.limits.
func LimitsFrom(l *wire.StartLimits) contain.Limits {
	var out contain.Limits
	if l == nil {
		return out
	}
	get := func(p *uint64) uint64 {
		if p == nil {
			return 0
		}
		return *p
	}
	return contain.Limits{MemoryBytes: get(l.MemoryBytes), Pids: get(l.Pids), CPUSeconds: get(l.CPUSeconds),
		OpenFiles: get(l.OpenFiles), FileSizeBytes: get(l.FileSizeBytes)}
}

// spawnErrorCode maps a spawn failure: a budget's refusal is -32011, what
// the host cannot enforce for this request -32602, everything else -32603.
func spawnErrorCode(err error) int {
	if errors.Is(err, ErrBudget) {
		return wire.CodeBudgetExceeded
	}
	if errors.Is(err, sandbox.ErrUnavailable) || errors.Is(err, contain.ErrLimitUnavailable) || errors.Is(err, sandbox.ErrUnsupported) || errors.Is(err, ErrNoManagedNetwork) {
		return wire.CodeInvalidParams
	}
	return wire.CodeInternal
}

// SpawnWireError is the JSON-RPC error of a failed spawn.
func SpawnWireError(err error) *wire.Error {
	var be *BudgetError
	if errors.As(err, &be) {
		return be.Wire()
	}
	return wire.Errorf(spawnErrorCode(err), "%s", err.Error())
}

// SpawnErrorCode is spawnErrorCode for package runtime's Local.
func SpawnErrorCode(err error) int { return spawnErrorCode(err) }

// SandboxType is process/start's sandboxType for an enforced policy.
func SandboxType(p *sandbox.Policy) string {
	if p != nil {
		return wire.SandboxTypeLinux
	}
	return wire.SandboxTypeNone
}
