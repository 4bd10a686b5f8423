package sandbox

import (
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkHelper measures one start through the helper to the command's
// exit: with no policy (the cost of the extra exec) and with a read-only
// policy (Landlock, seccomp, capabilities on top).
func BenchmarkHelper(b *testing.B) {
	h, err := Probe(os.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	for _, c := range []struct {
		name   string
		policy *Policy
	}{{"no-policy", nil}, {"read-only", &Policy{RestrictFS: true, Rules: []Rule{{Path: "/", Access: Read}}}}} {
		b.Run(c.name, func(b *testing.B) {
			if c.policy != nil && !h.Enforces() {
				b.Skip("no sandbox here")
			}
			devnull, _ := os.Open(os.DevNull)
			defer devnull.Close()
			for b.Loop() {
				l, err := NewLaunch(h, Plan{Path: "/bin/true", Argv: []string{"true"}, Policy: c.policy})
				if err != nil {
					b.Fatal(err)
				}
				proc, err := os.StartProcess(l.Exe, l.Argv, &os.ProcAttr{Env: l.Env, Files: []*os.File{devnull, devnull, devnull, l.Files[0], l.Files[1]}})
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Started(); err != nil {
					b.Fatal(err)
				}
				_, _ = proc.Wait()
			}
		})
	}
}

// BenchmarkTrue is the floor: /bin/true without the helper.
func BenchmarkTrue(b *testing.B) {
	for b.Loop() {
		p, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{})
		if err != nil {
			b.Fatal(err)
		}
		_, _ = p.Wait()
	}
}

// BenchmarkStartLevels measures Start to the command's exit of /bin/true
// under Codex's workspace-write policy at each level (and the namespaces
// level with the pid namespace inherited), reporting the start (Start's
// return) and the end (Wait's) separately.
func BenchmarkStartLevels(b *testing.B) {
	h, err := Probe(os.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	ws := b.TempDir()
	p := &Policy{RestrictFS: true, Rules: []Rule{{Path: "/", Access: Read}, {Path: ws, Access: Write}, {Path: "/tmp", Access: Write}}}
	for _, c := range []struct {
		name  string
		level Level
		pid   PidMode
		fresh bool // at the namespaces level, no prepared sandbox
	}{{"landlock", LevelLandlock, PidIsolate, false}, {"namespaces-fresh", LevelNamespaces, PidIsolate, true}, {"namespaces-prepared", LevelNamespaces, PidIsolate, false},
		{"namespaces-pid-inherit", LevelNamespaces, PidInherit, false}} {
		b.Run(c.name, func(b *testing.B) {
			hh := *h
			hh.Level, hh.PidNamespace, hh.NoPrepare = c.level, c.pid, c.fresh
			if !hh.Enforces() {
				b.Skip("not enforced here")
			}
			devnull, _ := os.Open(os.DevNull)
			defer devnull.Close()
			var start, end time.Duration
			used := h.prepared.usedCount()
			for b.Loop() {
				// A prepared sandbox is made in the background between
				// starts: wait for it outside the timing (each start is
				// then what a start after the previous one's preparation
				// costs, as in an agent's loop).
				b.StopTimer()
				h.prepared.settle()
				b.StartTimer()
				t0 := time.Now()
				proc, report, err := StartReported(&hh, Plan{Path: "/bin/true", Argv: []string{"true"}, Policy: p}, &os.ProcAttr{Dir: ws, Files: []*os.File{devnull, devnull, devnull}})
				if err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				// As the daemon waits (osproc): for the init's report of the
				// command's exit where there is one, else for the process.
				if _, ok := report.Wait(); !ok {
					_, _ = proc.Wait()
				}
				start += t1.Sub(t0)
				end += time.Since(t1)
				b.StopTimer()
				report.Close()
				_, _ = proc.Wait() // the init, reaped after its report (untimed, as in the daemon)
				b.StartTimer()
			}
			b.ReportMetric(float64(h.prepared.usedCount()-used)/float64(b.N), "prepared/op")
			b.ReportMetric(float64(start.Microseconds())/float64(b.N), "start-µs/op")
			b.ReportMetric(float64(end.Microseconds())/float64(b.N), "wait-µs/op")
		})
	}
}

// BenchmarkStartPremadeNetNS: the namespaces level with the network
// namespace made before the start (Plan.NetNS; made outside the timer)
// against one cloned with the helper, interleaved.
func BenchmarkStartPremadeNetNS(b *testing.B) {
	h, ws, p, devnull := nsBench(b)
	var took [2]time.Duration
	for b.Loop() {
		for i := 0; i < 2; i++ {
			plan := Plan{Path: "/bin/true", Argv: []string{"true"}, Policy: p}
			if i == 0 {
				b.StopTimer()
				n, err := NewNetNS()
				if err != nil {
					b.Fatal(err)
				}
				plan.NetNS = n
				b.StartTimer()
				defer n.Close()
			}
			t0 := time.Now()
			proc, err := Start(h, plan, &os.ProcAttr{Dir: ws, Files: []*os.File{devnull, devnull, devnull}})
			if err != nil {
				b.Fatal(err)
			}
			_, _ = proc.Wait()
			took[i] += time.Since(t0)
		}
	}
	b.ReportMetric(float64(took[0].Microseconds())/float64(b.N), "premade-µs")
	b.ReportMetric(float64(took[1].Microseconds())/float64(b.N), "cloned-µs")
}

// BenchmarkStartRecycled: back to back namespaced starts of /bin/true
// with Plan.Recycle, as the daemon makes them (osproc): each start takes
// the sandbox the last one gave back, while its init may still be
// cleaning up after the last command (scrub). Start to the report of the
// command's exit, against BenchmarkTrue.
func BenchmarkStartRecycled(b *testing.B) {
	h, ws, p, devnull := nsBench(b)
	start := func() {
		proc, report, err := StartReported(h, Plan{Path: "/bin/true", Argv: []string{"true"}, Policy: p, Recycle: true},
			&os.ProcAttr{Dir: ws, Files: []*os.File{devnull, devnull, devnull}})
		if err != nil {
			b.Fatal(err)
		}
		if report.Recycled() {
			if _, ok := report.Wait(); !ok {
				b.Fatal("no report")
			}
			_ = proc.Release()
			return
		}
		report.Wait()
		report.Close()
		_, _ = proc.Wait()
	}
	start() // the first starts a fresh helper and has the next one prepared
	h.prepared.settle()
	used, recycled := h.prepared.usedCount(), h.prepared.recycled.Load()
	for b.Loop() {
		start()
	}
	b.ReportMetric(float64(h.prepared.usedCount()-used)/float64(b.N), "prepared/op")
	b.ReportMetric(float64(h.prepared.recycled.Load()-recycled)/float64(b.N), "recycled/op")
}

// nsBench is a probed Host at the namespaces level (closed with the
// benchmark; skipped where there is none), a workspace, a workspace-write
// policy on it and /dev/null.
func nsBench(b *testing.B) (*Host, string, *Policy, *os.File) {
	b.Helper()
	h, err := Probe(os.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = h.Close() })
	if !h.Enforces() || !h.Namespaces {
		b.Skip("no namespaces level here")
	}
	ws := b.TempDir()
	p := &Policy{RestrictFS: true, Rules: []Rule{{Path: "/", Access: Read}, {Path: ws, Access: Write}, {Path: "/tmp", Access: Write}}}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { devnull.Close() })
	return h, ws, p, devnull
}

// BenchmarkStartDirect: BenchmarkStartRecycled with the tree's v2 cgroup
// given, as the daemon's contained starts have it: direct starts (the
// daemon forks the command into the sandbox itself), and through the
// init (Host.NoDirect) for comparison.
func BenchmarkStartDirect(b *testing.B) {
	root := cgroup2Root()
	if root == "" {
		b.Skip("no cgroup v2 hierarchy mounted")
	}
	cg, err := os.MkdirTemp(root, "runtimed-bench-")
	if err != nil {
		b.Skipf("cannot make a cgroup: %v", err)
	}
	b.Cleanup(func() { _ = os.Remove(cg) })
	cgfd, err := unix.Open(cg, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { unix.Close(cgfd) })
	for _, via := range []string{"direct", "init"} {
		b.Run(via, func(b *testing.B) {
			h, ws, p, devnull := nsBench(b)
			h.NoDirect = via == "init"
			start := func() {
				proc, report, err := StartReported(h, Plan{Path: "/bin/true", Argv: []string{"true"}, Policy: p, Recycle: true},
					&os.ProcAttr{Dir: ws, Files: []*os.File{devnull, devnull, devnull},
						Sys: &syscall.SysProcAttr{Setsid: true, UseCgroupFD: true, CgroupFD: cgfd}})
				if err != nil {
					b.Fatal(err)
				}
				if _, ok := report.Wait(); !ok {
					b.Fatal("no report")
				}
				if !report.Recycled() {
					report.Close()
					_, _ = proc.Wait()
					return
				}
				_ = proc.Release()
			}
			start()
			h.prepared.settle()
			direct := h.PreparedDirect()
			for b.Loop() {
				start()
			}
			b.ReportMetric(float64(h.PreparedDirect()-direct)/float64(b.N), "direct/op")
		})
	}
}

// BenchmarkPlanAndKey: what a start on a prepared sandbox checks before
// its fork: the plan made against the host's files (planWire) and its key.
func BenchmarkPlanAndKey(b *testing.B) {
	h, ws, p, _ := nsBench(b)
	plan := Plan{Path: "/bin/true", Argv: []string{"true"}, Policy: p, Dir: ws}
	for b.Loop() {
		wp, err := planWire(h, plan)
		if err != nil {
			b.Fatal(err)
		}
		_ = prepKey(wp, "own")
	}
}
