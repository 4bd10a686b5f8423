package actors

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/runtimed/runtimed/actors/osproc"
	"github.com/runtimed/runtimed/actors/sandbox"
)

// BenchmarkSpawnManagedNetwork: /bin/true from spawn to closed, without
// and with a managed network (proxies started before the child on
// loopback listeners, closed after its exit; with "netns" the listeners
// live in a new network namespace, as NamespacePlacer makes them). The
// difference is what a managed network adds to a start. The "sandboxed"
// pair is what a host enforcing the namespaces level does: a sandboxed
// start (its network cut: an empty network namespace made ahead) against
// the same start with a managed network (the placer's namespace, the
// proxies listening inside, the policy's network cut lifted).
func BenchmarkSpawnManagedNetwork(b *testing.B) {
	spec, werr := ParseNetworkSpec([]byte(proxyRaw(`,"enableSocks5":true,"domains":{"pypi.org":"allow"}`)), nil, nil)
	if werr != nil {
		b.Fatal(werr)
	}
	for _, c := range []struct {
		name      string
		place     NetPlacer
		sandboxed bool
	}{{"none", nil, false}, {"loopback", loopbackPlacer, false}, {"sandboxed", nil, true}, {"sandboxed+netns", NamespacePlacer, true}} {
		b.Run(c.name, func(b *testing.B) {
			var iso osproc.Isolation
			var policy *sandbox.Policy
			if c.sandboxed {
				h, err := sandbox.Probe(b.TempDir())
				if err != nil || h.EnforcedLevel() != sandbox.LevelNamespaces {
					b.Skipf("the namespaces level is not enforced here: %v", err)
				}
				iso.Host, policy = h, &sandbox.Policy{}
				if c.place != nil {
					c.place = HostPlacer(h)
				}
			}
			if c.place != nil && c.sandboxed {
				if ls, err := NamespacePlacer(false); err != nil {
					b.Skipf("no network namespaces: %v", err)
				} else {
					ls.HTTP.Close()
					ls.NS.Close()
				}
			}
			sup := NewSupervisor(Config{
				Proc:      ProcConfig{RetainBytes: 1 << 20, RetainChunks: 50_000, ClosedRetention: time.Minute, DrainAfterTerminate: 50 * time.Millisecond, ShutdownGrace: time.Second},
				DetachTTL: time.Second,
				NetPlacer: c.place,
				Isolation: iso,
				Logger:    zap.NewNop(),
			})
			defer func() { sup.Kill(); _ = sup.Wait(context.Background()) }()
			env := osproc.BuildEnv(osproc.ServerEnv(), nil, map[string]string{"PATH": "/usr/bin:/bin"})
			i := 0
			for b.Loop() {
				i++
				var k keep
				if c.place != nil {
					k.network = &ManagedNetwork{Spec: spec, ProcessID: "p"}
				}
				ref, _, err := sup.spawnCharged(context.Background(), fmt.Sprintf("p%d", i), Spec{Argv: []string{"/bin/true"}, Dir: "/", Env: env, Sandbox: policy}, k, nil, nil, 0)
				if err != nil {
					b.Fatal(err)
				}
				<-ref.Closed()
				_ = ref.Discard(context.Background())
			}
		})
	}
}
