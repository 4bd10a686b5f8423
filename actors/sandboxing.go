package actors

import (
	"github.com/runtimed/runtimed/actors/contain"
	"github.com/runtimed/runtimed/actors/policy"
	"github.com/runtimed/runtimed/wire"
)

// Sandbox floors an operator can set (runtimed serve --default-sandbox).
const (
	FloorNone           = policy.FloorNone
	FloorReadOnly       = policy.FloorReadOnly
	FloorWorkspaceWrite = policy.FloorWorkspaceWrite
)

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
