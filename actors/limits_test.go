package actors

import (
	"strings"
	"testing"

	"github.com/runtimed/runtimed/actors/contain"
)

// TestLimitsAppliedAndReportedOnlyWhenHit: the per-process limits reach
// the child as the rlimits they stand for (openFiles as RLIMIT_NOFILE,
// cpuSeconds as RLIMIT_CPU soft with the hard limit one second above it
// for the SIGKILL, fileSizeBytes as RLIMIT_FSIZE), and a process that
// ends by itself under memory or pids limits is not reported as ended by
// a limit.
func TestLimitsAppliedAndReportedOnlyWhenHit(t *testing.T) {
	sup := newIsoSupervisor(t)
	dir := t.TempDir()
	r := runConfined(t, sup, dir, nil, contain.Limits{OpenFiles: 48, CPUSeconds: 30, FileSizeBytes: 1 << 20},
		`echo "nofile $(ulimit -Sn) $(ulimit -Hn) cpu $(ulimit -St) $(ulimit -Ht) fsize $(ulimit -Sf)"`)
	// bash's ulimit -f counts 1024-byte blocks.
	if want := "nofile 48 48 cpu 30 31 fsize 1024"; r.code != 0 || !strings.Contains(r.out, want) {
		t.Errorf("rlimits: code %d, %q; want %q", r.code, r.out, want)
	}
	lims := []contain.Limits{{MemoryBytes: 64 << 20}}
	if isoMgr.LimitsOnTree() {
		lims = append(lims, contain.Limits{Pids: 64}, contain.Limits{MemoryBytes: 64 << 20, Pids: 64})
	}
	for _, lim := range lims {
		r := runConfined(t, sup, dir, nil, lim, `echo ok; exit 3`)
		if r.code != 3 || r.limit != "" {
			t.Errorf("limits %+v, a process that exits 3 by itself: code %d limit %q; want 3 and no limit", lim, r.code, r.limit)
		}
	}
}
