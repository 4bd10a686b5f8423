package runtime

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/runtimed/runtimed/wire"
)

// Local enforces the per-session process limit (a Local is one session)
// and the server-wide one with the same errors as a server.
func TestBackendProcessLimits(t *testing.T) {
	forBackendsWith(t, Config{MaxProcesses: 2}, func(t *testing.T, b Backend) {
		ctx := ctxT(t)
		var procs []Process
		for range 2 {
			p, err := b.Start(ctx, sh(t, "sleep 1000"))
			if err != nil {
				t.Fatal(err)
			}
			procs = append(procs, p)
		}
		_, err := b.Start(ctx, sh(t, "sleep 1000"))
		var re *RPCError
		if !errors.As(err, &re) || re.Code != wire.CodeBudgetExceeded || re.Message != "limit reached: processes per session = 2 (--max-processes): this session already has 2 active processes" {
			t.Fatalf("third start: %v", err)
		}
		if _, err := procs[0].Terminate(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := procs[0].Wait(ctx); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			p, err := b.Start(ctx, sh(t, "exit 0"))
			if err == nil {
				_, _ = p.Wait(ctx)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a closed process still counts: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		_, _ = procs[1].Terminate(ctx, 0)
	})
	forBackendsWith(t, Config{MaxProcessesTotal: 2, MaxProcesses: 10}, func(t *testing.T, b Backend) {
		ctx := ctxT(t)
		for range 2 {
			p, err := b.Start(ctx, sh(t, "sleep 1000"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _, _ = p.Terminate(ctx, 0) })
		}
		_, err := b.Start(ctx, sh(t, "sleep 1000"))
		var re *RPCError
		if !errors.As(err, &re) || re.Code != wire.CodeBudgetExceeded || !strings.HasPrefix(re.Message, "limit reached: processes = 2 (--max-processes-total)") {
			t.Fatalf("third start: %v", err)
		}
	})
}

// Both backends refuse environment names a child cannot carry before
// anything is sent, naming the field (the server's own -32602 for the
// same names is tested on the wire in cmd/runtimed).
func TestBackendEnvNames(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		ctx := ctxT(t)
		for _, name := range []string{"", "A=B", "A\x00B"} {
			spec := sh(t, "exit 0")
			spec.Env[name] = "x"
			_, err := b.Start(ctx, spec)
			if want := fmt.Sprintf("Spec.Env[%q]", name); optionOf(err) != want {
				t.Errorf("env name %q: %v; want an *OptionError naming %s", name, err, want)
			}
			spec = sh(t, "exit 0")
			spec.EnvPolicy = &EnvPolicy{Inherit: "none", Set: map[string]string{name: "x"}}
			_, err = b.Start(ctx, spec)
			if want := fmt.Sprintf("Spec.EnvPolicy.Set[%q]", name); optionOf(err) != want {
				t.Errorf("envPolicy.set name %q: %v; want an *OptionError naming %s", name, err, want)
			}
		}
		// EnvPolicy.Inherit is one of all, core, none (empty: all).
		for _, inherit := range []string{"some", "ALL", " all"} {
			spec := sh(t, "exit 0")
			spec.EnvPolicy = &EnvPolicy{Inherit: inherit}
			_, err := b.Start(ctx, spec)
			if optionOf(err) != "Spec.EnvPolicy.Inherit" || !strings.Contains(err.Error(), `"core"`) {
				t.Errorf("EnvPolicy.Inherit %q: %v; want an *OptionError naming Spec.EnvPolicy.Inherit", inherit, err)
			}
		}
		for _, inherit := range []string{"", "all", "core", "none"} {
			spec := sh(t, "exit 0")
			spec.EnvPolicy = &EnvPolicy{Inherit: inherit}
			p, err := b.Start(ctx, spec)
			if err != nil {
				t.Fatalf("envPolicy.inherit %q: %v", inherit, err)
			}
			if st, err := p.Wait(ctx); err != nil || st.Code != 0 {
				t.Fatalf("envPolicy.inherit %q: %v %v", inherit, st, err)
			}
		}
	})
}

// Budget defaults come from the machine; zero means derived, negative
// unlimited.
func TestBudgetDefaults(t *testing.T) {
	m := Machine{OpenFiles: 20000, OpenNow: 10, MemoryBytes: 24 << 30}
	b := Config{RetainBytes: DefaultRetainBytes}.budgets(m)
	if b.MaxOpenFiles != 20000-10-fdOverhead || b.FDReserve != 1024 || b.MaxRetainedBytes != 12<<30 || b.MaxOutboundBytes != 3<<30 ||
		b.OutboundQueueBytes != DefaultOutboundQueueBytes || b.SlowConsumerTimeout != DefaultSlowConsumerTimeout {
		t.Errorf("defaults on a 24 GiB machine with 20000 descriptors: %+v", b)
	}
	// 2.125 MiB per process (1 MiB retained + 18 reads of 64 KiB) allow
	// 5782 by memory; 6 descriptors each allow (20000-10-overhead-1024)/6:
	// descriptors are the tighter bound here.
	if byMem := int((12 << 30) / (17 << 17)); byMem != 5782 || b.MaxProcesses != (b.MaxOpenFiles-b.FDReserve)/6 || b.MaxProcesses >= byMem {
		t.Errorf("MaxProcesses %d; want %d (descriptors), under %d (memory)", b.MaxProcesses, (b.MaxOpenFiles-b.FDReserve)/6, byMem)
	}
	if mem := (Config{RetainBytes: DefaultRetainBytes}.budgets(Machine{OpenFiles: 1 << 20, OpenNow: 10, MemoryBytes: 24 << 30})); mem.MaxProcesses != 5782 {
		t.Errorf("MaxProcesses %d with a million descriptors; want 5782 (memory: 12 GiB / 2.125 MiB)", mem.MaxProcesses)
	}
	// Three quarters of the descriptors would allow 14968; 3 GiB of
	// outbound queues at 256 KiB each allow 12288, the tighter bound.
	if b.MaxConnections != 12288 || b.MaxOpenFiles*3/4 <= 12288 {
		t.Errorf("MaxConnections %d; want 12288 (3 GiB of outbound queues / 256 KiB)", b.MaxConnections)
	}
	small := Config{RetainBytes: DefaultRetainBytes}.budgets(Machine{OpenFiles: 256, OpenNow: 12, MemoryBytes: 64 << 30})
	if small.MaxOpenFiles != 212 || small.FDReserve != 32 || small.MaxProcesses != (212-32)/6 {
		t.Errorf("defaults with 256 descriptors: %+v", small)
	}
	off := Config{RetainBytes: DefaultRetainBytes, MaxConnections: -1, MaxProcessesTotal: -1, MaxOpenFiles: -1,
		MaxRetainedBytes: -1, MaxOutboundBytes: -1, SlowConsumerTimeout: -1}.budgets(m)
	if off.MaxConnections != 0 || off.MaxProcesses != 0 || off.MaxOpenFiles != 0 || off.MaxRetainedBytes != 0 || off.MaxOutboundBytes != 0 || off.SlowConsumerTimeout != 0 {
		t.Errorf("negative values must turn budgets off: %+v", off)
	}
}

// forBackendsWith runs f on each backend of backendsWith(cfg).
func forBackendsWith(t *testing.T, cfg Config, f func(t *testing.T, b Backend)) {
	for _, bc := range backendsWith(cfg) {
		t.Run(bc.name, func(t *testing.T) { f(t, bc.make(t)) })
	}
}
