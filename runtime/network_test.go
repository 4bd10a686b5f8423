package runtime

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/runtimed/runtimed/actors"
)

// loopbackPlacer confines nothing: it stands in for the sandbox's
// network namespace so that these tests prove the Go API's plumbing.
func loopbackPlacer(socks bool) (*actors.NetListeners, error) {
	h, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ls := &actors.NetListeners{HTTP: h, HTTPAddr: h.Addr().String()}
	if socks {
		s, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			h.Close()
			return nil, err
		}
		ls.SOCKS, ls.SOCKSAddr = s, s.Addr().String()
	}
	return ls, nil
}

type decisionLog struct {
	mu sync.Mutex
	ds []NetworkDecision
}

func (l *decisionLog) add(d NetworkDecision) { l.mu.Lock(); l.ds = append(l.ds, d); l.mu.Unlock() }
func (l *decisionLog) get() []NetworkDecision {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]NetworkDecision(nil), l.ds...)
}

func TestNetworkPolicyGoAPI(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed")
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hi") }))
	defer up.Close()
	port := up.URL[strings.LastIndexByte(up.URL, ':')+1:]
	cfg := Config{NetworkDeny: []string{"**.floor.test"}, netPlacer: loopbackPlacer}
	for _, bc := range []struct {
		name string
		make func(t *testing.T) Backend
	}{
		{"local", func(t *testing.T) Backend {
			c := cfg
			c.Logger = zaptest.NewLogger(t)
			l := NewLocal(c)
			t.Cleanup(func() { _ = l.Close() })
			return l
		}},
		{"websocket", func(t *testing.T) Backend { c, _ := newWSBackend(t, cfg, nil); return c }},
	} {
		t.Run(bc.name, func(t *testing.T) {
			b := bc.make(t)
			ctx := ctxT(t)
			var log decisionLog
			var out strings.Builder
			cmd := CommandContext(ctx, b, "sh", "-c", `curl -s -m 10 http://127.0.0.1:`+port+`/; echo; curl -s -m 10 -o /dev/null -w '%{http_code}' http://x.floor.test/; echo; echo "$HTTPS_PROXY"`)
			cmd.Dir, cmd.Env, cmd.Stdout = t.TempDir(), map[string]string{"PATH": "/usr/bin:/bin"}, &out
			cmd.Network = &Network{Allow: []string{"127.0.0.1", "x.floor.test"}, OnDecision: log.add}
			if err := cmd.Run(); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if len(lines) != 3 || lines[0] != "hi" || lines[1] != "403" || !strings.HasPrefix(lines[2], "http://127.0.0.1:") {
				t.Fatalf("output %q", out.String())
			}
			// Local calls OnDecision before the exit is reported; a Client
			// from its own goroutine, possibly just after Wait returned.
			ds := log.get()
			for deadline := time.Now().Add(10 * time.Second); len(ds) < 2 && time.Now().Before(deadline); ds = log.get() {
				time.Sleep(5 * time.Millisecond)
			}
			if len(ds) != 2 || !ds[0].Allow || ds[0].Host != "127.0.0.1" || ds[0].Protocol != "http" || ds[0].Method != "GET" ||
				ds[1].Allow || ds[1].Host != "x.floor.test" || ds[1].Reason != "denied" || ds[0].ProcessID == "" || ds[0].Time.IsZero() {
				t.Fatalf("decisions %+v", ds)
			}
		})
	}
}

func TestNetworkPolicyRefusedWithoutPlacer(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		spec := sh(t, "true")
		spec.Network = &Network{Allow: []string{"pypi.org"}}
		_, err := b.Start(ctxT(t), spec)
		var re *RPCError
		if err == nil || !errors.As(err, &re) || re.Code != -32602 || !strings.Contains(re.Message, "managed network") {
			t.Fatalf("Start with a managed network on a host without one: %v", err)
		}
	})
}
