package actors

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/runtimed/runtimed/actors/osproc"
)

// BenchmarkSpawnManagedNetwork: /bin/true from spawn to closed, without
// and with a managed network (proxies started before the child on
// loopback listeners, closed after its exit; with "netns" the listeners
// live in a new network namespace, as NamespacePlacer makes them). The
// difference is what a managed network adds to a start.
func BenchmarkSpawnManagedNetwork(b *testing.B) {
	spec, werr := ParseNetworkSpec([]byte(proxyRaw(`,"enableSocks5":true,"domains":{"pypi.org":"allow"}`)), nil, nil)
	if werr != nil {
		b.Fatal(werr)
	}
	for _, c := range []struct {
		name  string
		place NetPlacer
	}{{"none", nil}, {"loopback", loopbackPlacer}, {"netns", NamespacePlacer}} {
		b.Run(c.name, func(b *testing.B) {
			if c.name == "netns" {
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
				ref, _, err := sup.spawnCharged(context.Background(), fmt.Sprintf("p%d", i), Spec{Argv: []string{"/bin/true"}, Dir: "/", Env: env}, k, nil, nil, 0)
				if err != nil {
					b.Fatal(err)
				}
				<-ref.Closed()
				_ = ref.Discard(context.Background())
			}
		})
	}
}
