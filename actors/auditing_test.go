package actors

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runtimed/runtimed/actors/audit"
)

type auditRec struct {
	mu sync.Mutex
	ev []audit.Event
}

func (r *auditRec) Audit(e audit.Event) { r.mu.Lock(); r.ev = append(r.ev, e); r.mu.Unlock() }

func (r *auditRec) of(typ string) []audit.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []audit.Event
	for _, e := range r.ev {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// A managed network's decisions reach the audit log (allow and deny, the
// host and port, the deciding source), with the start and the exit.
func TestManagedNetworkAudited(t *testing.T) {
	needCurl(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") }))
	defer up.Close()
	port := up.URL[strings.LastIndexByte(up.URL, ':')+1:]
	rec := &auditRec{}
	sup := NewSupervisor(Config{
		Proc:        ProcConfig{RetainBytes: 1 << 20, RetainChunks: 100, ClosedRetention: time.Minute, DrainAfterTerminate: 50 * time.Millisecond, ShutdownGrace: time.Second},
		DetachTTL:   time.Second,
		NetPlacer:   loopbackPlacer,
		NetworkDeny: []string{"**.floor.test"},
		netResolver: exampleResolver{},
		Audit:       rec,
	})
	t.Cleanup(func() { sup.Kill(); _ = sup.Wait(context.Background()) })
	c := startConn(t, sup, false)
	dir := t.TempDir()
	script := `curl -s -m 10 http://127.0.0.1:` + port + `/ >/dev/null; curl -s -m 10 -o /dev/null http://a.floor.test/`
	r := c.call("process/start", map[string]any{"processId": "p1", "argv": []string{"sh", "-c", script}, "cwd": dir,
		"env": map[string]string{"PATH": os.Getenv("PATH"), "SECRET": "v"}, "enforceManagedNetwork": true, "managedNetwork": nil,
		"networkProxy": map[string]any{"proxy": proxyObj(map[string]any{"domains": map[string]string{"127.0.0.1": "allow", "a.floor.test": "allow"}}), "executionId": "e1"}})
	mustOK(t, r)
	c.waitNote(func(m map[string]any) bool { return m["method"] == "process/exited" && params(m)["processId"] == "p1" })
	deadline := time.Now().Add(10 * time.Second)
	for len(rec.of(audit.ProcessExit)) == 0 || len(rec.of(audit.NetworkDecision)) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("audit: %+v", rec.ev)
		}
		time.Sleep(5 * time.Millisecond)
	}
	ds := rec.of(audit.NetworkDecision)
	if ds[0].Action != "allow" || ds[0].Host != "127.0.0.1:"+port || ds[0].Process != "p1" || ds[0].Check != "baseline_policy" {
		t.Errorf("first decision %+v", ds[0])
	}
	if ds[1].Action != "deny" || !strings.HasPrefix(ds[1].Host, "a.floor.test") || ds[1].Reason != "denied" {
		t.Errorf("second decision %+v", ds[1])
	}
	st := rec.of(audit.ProcessStart)
	if len(st) != 1 || st[0].Network == "" || strings.Join(st[0].EnvNames, ",") != "PATH,SECRET" {
		t.Errorf("start %+v", st)
	}
}
