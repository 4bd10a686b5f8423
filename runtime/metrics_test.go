package runtime

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap/zaptest"

	"github.com/runtimed/runtimed/wire"
)

// metricValue returns the value of the series name{labels} in the
// server's registry (counter, gauge, or a histogram's sample count), and
// whether it exists.
func metricValue(t *testing.T, srv *Server, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := srv.MetricsRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for k, v := range labels {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == k && lp.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue series
				}
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				return m.GetCounter().GetValue(), true
			case dto.MetricType_GAUGE:
				return m.GetGauge().GetValue(), true
			case dto.MetricType_HISTOGRAM:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

func metric(t *testing.T, srv *Server, name string, kv ...string) float64 {
	t.Helper()
	labels := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		labels[kv[i]] = kv[i+1]
	}
	v, _ := metricValue(t, srv, name, labels)
	return v
}

// waitMetric waits (bounded) until name{kv} satisfies ok.
func waitMetric(t *testing.T, srv *Server, ok func(float64) bool, name string, kv ...string) float64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v := metric(t, srv, name, kv...)
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s%v stayed at %v", name, kv, v)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func eq(want float64) func(float64) bool { return func(v float64) bool { return v == want } }
func atLeast(want float64) func(float64) bool {
	return func(v float64) bool { return v >= want }
}

// TestMetricsMoveWithProcesses runs real children through a real websocket
// and checks that each metric moves as they start, print, exit, are
// terminated, fail to start, hit the process limit and lose output to
// retention, and that /metrics serves the same registry.
func TestMetricsMoveWithProcesses(t *testing.T) {
	ws := startWSServer(t, Config{Metrics: true, MaxProcesses: 2, RetainBytes: 4096, DetachTTL: time.Minute})
	srv := ws.srv
	ctx := ctxT(t)

	if v := metric(t, srv, "runtimed_processes_started_total"); v != 0 {
		t.Fatalf("started before any start: %v", v)
	}
	c, err := Dial(ctx, ws.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitMetric(t, srv, eq(1), "runtimed_connections_open", "transport", "websocket")
	waitMetric(t, srv, eq(1), "runtimed_sessions", "state", "attached")

	// A cat that runs until its stdin closes.
	spec := sh(t, "cat")
	spec.PipeStdin = true
	p, err := c.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if v := metric(t, srv, "runtimed_processes_started_total"); v != 1 {
		t.Fatalf("started = %v, want 1", v)
	}
	if v := metric(t, srv, "runtimed_processes_running"); v != 1 {
		t.Fatalf("running = %v, want 1", v)
	}
	if v := metric(t, srv, "runtimed_spawn_duration_seconds"); v != 1 {
		t.Fatalf("spawn histogram count = %v, want 1", v)
	}
	if err := p.Write(ctx, []byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, srv, eq(6), "runtimed_output_bytes_total", "stream", "stdout")
	if err := p.CloseStdin(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := p.Wait(ctx); err != nil || st.Code != 0 {
		t.Fatalf("wait: %v %v", st, err)
	}
	waitMetric(t, srv, eq(1), "runtimed_processes_ended_total", "reason", "exit")
	waitMetric(t, srv, eq(0), "runtimed_processes_running")

	// Terminated by the client.
	p2, err := c.Start(ctx, sh(t, "exec sleep 100"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p2.Terminate(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := p2.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, srv, eq(1), "runtimed_processes_ended_total", "reason", "terminated")

	// A start the OS refuses.
	if _, err := c.Start(ctx, Spec{Argv: []string{"/nonexistent/program"}, Dir: "/"}); err == nil {
		t.Fatal("start of a missing program succeeded")
	}
	if v := metric(t, srv, "runtimed_process_spawn_failures_total"); v != 1 {
		t.Fatalf("spawn failures = %v, want 1", v)
	}
	if v := metric(t, srv, "runtimed_request_errors_total", "code", "-32603"); v != 1 {
		t.Fatalf("request errors -32603 = %v, want 1", v)
	}

	// Retention: 64 KiB through a 4 KiB ring evicts.
	p3, err := c.Start(ctx, sh(t, "head -c 65536 /dev/zero"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p3.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, srv, atLeast(65536), "runtimed_output_bytes_total", "stream", "stdout")
	if v := metric(t, srv, "runtimed_output_evicted_bytes_total"); v < 65536-4096 {
		t.Fatalf("evicted bytes = %v, want at least %d", v, 65536-4096)
	}
	if v := metric(t, srv, "runtimed_output_evicted_chunks_total"); v < 1 {
		t.Fatalf("evicted chunks = %v", v)
	}

	// The process limit (2 active): two sleepers, then a refused third.
	for range 2 {
		if _, err := c.Start(ctx, sh(t, "exec sleep 100")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Start(ctx, sh(t, "exec sleep 100")); err == nil || !strings.Contains(err.Error(), "limit reached: processes per session = 2") {
		t.Fatalf("third start: %v", err)
	}
	if v := metric(t, srv, "runtimed_refusals_total", "limit", "processes_per_session"); v != 1 {
		t.Fatalf("refusals{processes} = %v, want 1", v)
	}
	// Observed just after the answer is written: wait for the last one.
	waitMetric(t, srv, eq(7), "runtimed_request_duration_seconds", "method", wire.MethodProcessStart)

	// /metrics serves the same registry, as text.
	oh := httptest.NewServer(srv.ObservabilityHandler(ObservabilityOptions{}))
	defer oh.Close()
	body := httpGet(t, oh.URL+"/metrics", 200)
	for _, want := range []string{"runtimed_processes_started_total 5", `runtimed_processes_ended_total{reason="exit"} 2`, "process_open_fds", "process_resident_memory_bytes", "runtimed_build_info"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	httpGet(t, oh.URL+"/debug/pprof/", 404) // not without the option

	// The client goes: its session is detached with its two sleepers.
	_ = c.Close()
	waitMetric(t, srv, eq(0), "runtimed_connections_open", "transport", "websocket")
	waitMetric(t, srv, eq(1), "runtimed_sessions", "state", "detached")
	waitMetric(t, srv, eq(0), "runtimed_sessions", "state", "attached")
	if v := metric(t, srv, "runtimed_connections_total", "transport", "websocket"); v != 1 {
		t.Fatalf("connections total = %v", v)
	}
}

// TestMetricsBackpressure: a client that does not read makes its process
// actor hold back the child's output, and the time is counted.
func TestMetricsBackpressure(t *testing.T) {
	ws := startWSServer(t, Config{Metrics: true, RetainBytes: 64 << 10, DetachTTL: -1})
	srv := ws.srv
	ctx := ctxT(t)
	tr, err := wire.DialWebsocket(ctx, ws.url, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	send := func(s string) {
		if err := tr.WriteMessage(ctx, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"id":1,"method":"initialize","params":{"clientName":"slow"}}`)
	if _, err := tr.ReadMessage(ctx); err != nil {
		t.Fatal(err)
	}
	send(`{"method":"initialized"}`)
	start, _ := json.Marshal(map[string]any{"id": 2, "method": "process/start", "params": map[string]any{
		"processId": "y", "argv": []string{"yes"}, "cwd": "/", "env": map[string]string{"PATH": "/usr/bin:/bin"}}})
	send(string(start))
	// Never read again: output fills the socket, then the events queue,
	// then the actor's allowance, and stops growing.
	last, still := -1.0, 0
	deadline := time.Now().Add(15 * time.Second)
	for still < 20 {
		if time.Now().After(deadline) {
			t.Fatalf("output never stopped growing (%v bytes)", last)
		}
		v := metric(t, srv, "runtimed_output_bytes_total", "stream", "stdout")
		if v == last && v > 0 {
			still++
		} else {
			still, last = 0, v
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Short holds may already be counted (the writer drains in bursts); the
	// current one is counted when it ends.
	before := metric(t, srv, "runtimed_output_backpressure_seconds_total")
	// The client goes; the actor takes output again (no subscriber) and
	// counts the time it held it back (at least the 100 ms observed).
	_ = tr.Close()
	waitMetric(t, srv, func(v float64) bool { return v >= before+0.1 }, "runtimed_output_backpressure_seconds_total")
}

// TestHealthEndpoints: /healthz and /readyz on the protocol handler and the
// observability handler; /readyz turns 503 once shutdown begins, and
// metrics off answers 404 on /metrics.
func TestHealthEndpoints(t *testing.T) {
	srv := NewServer(Config{Logger: zaptest.NewLogger(t), AuthToken: "s3cret"})
	main := httptest.NewServer(srv.Handler())
	defer main.Close()
	obs := httptest.NewServer(srv.ObservabilityHandler(ObservabilityOptions{Pprof: true}))
	defer obs.Close()
	for _, base := range []string{main.URL, obs.URL} {
		httpGet(t, base+"/healthz", 200) // no token needed for probes
		httpGet(t, base+"/readyz", 200)
	}
	httpGet(t, obs.URL+"/metrics", 404)
	if !strings.Contains(httpGet(t, obs.URL+"/debug/pprof/", 200), "goroutine") {
		t.Error("pprof index lacks goroutine")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	httpGet(t, obs.URL+"/readyz", 503)
	httpGet(t, obs.URL+"/healthz", 200)
}

func httpGet(t *testing.T, url string, want int) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("GET %s: %d %s, want %d", url, resp.StatusCode, b, want)
	}
	return string(b)
}
