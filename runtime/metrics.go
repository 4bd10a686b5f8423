package runtime

import (
	"runtime/debug"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/runtimed/runtimed/actors"
	"github.com/runtimed/runtimed/actors/sandbox"
	"github.com/runtimed/runtimed/wire"
)

// serverMetrics is the Prometheus side of actors.Metrics, in a registry of
// the server's own (no global registry: two servers in one process keep
// their numbers apart). Every field is safe for concurrent use; the label
// sets are closed (known methods, streams, reasons, limits, codes), so a
// client cannot grow the registry.
type serverMetrics struct {
	reg *prometheus.Registry

	connsOpen      *prometheus.GaugeVec
	connsTotal     *prometheus.CounterVec
	sessions       *prometheus.GaugeVec
	sessionExpired prometheus.Counter
	started        prometheus.Counter
	spawnFailed    prometheus.Counter
	running        prometheus.Gauge
	ended          *prometheus.CounterVec
	spawnSeconds   prometheus.Histogram
	outputBytes    [3]prometheus.Counter // by actors.Stream
	evictedChunks  prometheus.Counter
	evictedBytes   prometheus.Counter
	backpressure   prometheus.Counter
	requestSeconds *prometheus.HistogramVec
	requestErrors  *prometheus.CounterVec
	refusals       *prometheus.CounterVec
	netDecisions   *prometheus.CounterVec // by decision, source (closed sets)
	netDropped     prometheus.Counter
}

var _ actors.Metrics = (*serverMetrics)(nil)

func newServerMetrics() *serverMetrics {
	reg := prometheus.NewRegistry()
	f := func(c prometheus.Collector) { reg.MustRegister(c) }
	m := &serverMetrics{reg: reg}
	m.connsOpen = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "runtimed_connections_open", Help: "Protocol connections being served, by transport."}, []string{"transport"})
	m.connsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runtimed_connections_total", Help: "Protocol connections accepted, by transport."}, []string{"transport"})
	m.sessions = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "runtimed_sessions", Help: "Sessions by state: attached to a connection, or detached and waiting for a resume."}, []string{"state"})
	m.sessionExpired = prometheus.NewCounter(prometheus.CounterOpts{Name: "runtimed_sessions_expired_total", Help: "Detached sessions whose TTL ran out (their processes were terminated)."})
	m.started = prometheus.NewCounter(prometheus.CounterOpts{Name: "runtimed_processes_started_total", Help: "Processes started (process/start, process/spawn, the Go API)."})
	m.spawnFailed = prometheus.NewCounter(prometheus.CounterOpts{Name: "runtimed_process_spawn_failures_total", Help: "Starts that failed (the OS or the sandbox helper refused)."})
	m.running = prometheus.NewGauge(prometheus.GaugeOpts{Name: "runtimed_processes_running", Help: "Processes started and not yet exited."})
	m.ended = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runtimed_processes_ended_total", Help: "Processes that exited, by reason: exit, terminated, timeout, limit_<name>."}, []string{"reason"})
	m.spawnSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "runtimed_spawn_duration_seconds", Help: "Time to start a process: pipes or PTY, cgroup, sandbox helper, exec.",
		Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1}})
	outBytes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runtimed_output_bytes_total", Help: "Output bytes read from children, by stream."}, []string{"stream"})
	for _, s := range []actors.Stream{actors.Stdout, actors.Stderr, actors.PTY} {
		m.outputBytes[streamIndex(s)] = outBytes.WithLabelValues(s.String())
	}
	m.evictedChunks = prometheus.NewCounter(prometheus.CounterOpts{Name: "runtimed_output_evicted_chunks_total", Help: "Output chunks evicted by retention (--retain-bytes, --retain-chunks)."})
	m.evictedBytes = prometheus.NewCounter(prometheus.CounterOpts{Name: "runtimed_output_evicted_bytes_total", Help: "Output bytes evicted by retention."})
	m.backpressure = prometheus.NewCounter(prometheus.CounterOpts{Name: "runtimed_output_backpressure_seconds_total", Help: "Time process actors held back their children's output because a connection had not taken what it was sent (summed over processes)."})
	m.requestSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "runtimed_request_duration_seconds", Help: "Time from a request's arrival to its answer, by method (long polls include their wait; fs methods their run on the fs worker).",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}, []string{"method"})
	m.requestErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runtimed_request_errors_total", Help: "Requests answered with an error, by JSON-RPC code."}, []string{"code"})
	m.refusals = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runtimed_refusals_total", Help: "Requests refused by a configured limit, by limit."}, []string{"limit"})
	m.netDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runtimed_network_decisions_total", Help: "Decisions of managed-network proxies, by decision (allow, deny) and source (baseline_policy, mode_guard, decider)."}, []string{"decision", "source"})
	m.netDropped = prometheus.NewCounter(prometheus.CounterOpts{Name: "runtimed_network_decision_notifications_dropped_total", Help: "network/policyDecision notifications not sent because a process's queue of them was full."})
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "runtimed_build_info", Help: "Always 1; the labels describe the build."}, []string{"version", "goversion"})
	build.WithLabelValues(buildVersion(), goVersion()).Set(1)
	for _, c := range []prometheus.Collector{m.connsOpen, m.connsTotal, m.sessions, m.sessionExpired, m.started, m.spawnFailed, m.running, m.ended,
		m.spawnSeconds, outBytes, m.evictedChunks, m.evictedBytes, m.backpressure, m.requestSeconds, m.requestErrors, m.refusals, m.netDecisions, m.netDropped, build,
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector()} {
		f(c)
	}
	// Present from the start, so dashboards show 0 rather than no data.
	m.sessions.WithLabelValues("attached")
	m.sessions.WithLabelValues("detached")
	return m
}

// registerSandboxMetrics exports how the sandboxes prepared ahead do (see
// sandbox.Host.PreparedStats): read at each scrape, zero where none are
// prepared (a nil Host: no sandbox; not the namespaces level).
func registerSandboxMetrics(reg *prometheus.Registry, h *sandbox.Host) {
	stat := func(pick func(used, failed, missed uint64) uint64) func() float64 {
		return func() float64 { return float64(pick(h.PreparedStats())) }
	}
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "runtimed_sandbox_prepared_starts_total",
			Help: "Sandboxed starts served by a sandbox prepared ahead for their plan (namespaces level)."},
			stat(func(u, _, _ uint64) uint64 { return u })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "runtimed_sandbox_prepared_misses_total",
			Help: "Sandboxed starts that could have used a prepared sandbox but started a fresh one (none ready for their plan, or it had died)."},
			stat(func(_, _, m uint64) uint64 { return m })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "runtimed_sandbox_prepared_failures_total",
			Help: "Preparations of a sandbox ahead that failed (the next start of that plan starts a fresh one)."},
			stat(func(_, f, _ uint64) uint64 { return f })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "runtimed_sandbox_prepared_recycled_total",
			Help: "Prepared sandboxes given back after their command's end to serve the next start of their plan (their init cleaned up)."},
			func() float64 { return float64(h.PreparedRecycled()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "runtimed_sandbox_prepared_direct_total",
			Help: "Starts on a prepared sandbox that the daemon forked into its namespaces itself, not through its init."},
			func() float64 { return float64(h.PreparedDirect()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "runtimed_sandbox_prepared_ready",
			Help: "Sandboxes prepared ahead or given back, waiting for a start (at most two)."},
			func() float64 { return float64(h.PreparedReady()) }),
	)
}

func streamIndex(s actors.Stream) int {
	switch s {
	case actors.Stderr:
		return 1
	case actors.PTY:
		return 2
	}
	return 0
}

func (m *serverMetrics) ProcessStarted(spawn time.Duration) {
	m.started.Inc()
	m.running.Inc()
	m.spawnSeconds.Observe(spawn.Seconds())
}
func (m *serverMetrics) SpawnFailed() { m.spawnFailed.Inc() }
func (m *serverMetrics) ProcessExited(reason string) {
	m.running.Dec()
	m.ended.WithLabelValues(reason).Inc()
}
func (m *serverMetrics) OutputBytes(s actors.Stream, n int) {
	m.outputBytes[streamIndex(s)].Add(float64(n))
}
func (m *serverMetrics) Evicted(chunks, bytes int) {
	m.evictedChunks.Add(float64(chunks))
	m.evictedBytes.Add(float64(bytes))
}
func (m *serverMetrics) Backpressure(d time.Duration) { m.backpressure.Add(d.Seconds()) }
func (m *serverMetrics) Request(method string, d time.Duration) {
	m.requestSeconds.WithLabelValues(method).Observe(d.Seconds())
}
func (m *serverMetrics) RequestError(e *wire.Error) {
	m.requestErrors.WithLabelValues(strconv.Itoa(e.Code)).Inc()
	if e.Limit != "" {
		m.refusals.WithLabelValues(e.Limit).Inc()
	}
}
func (m *serverMetrics) Sessions(attached, detached int) {
	m.sessions.WithLabelValues("attached").Set(float64(attached))
	m.sessions.WithLabelValues("detached").Set(float64(detached))
}
func (m *serverMetrics) SessionExpired() { m.sessionExpired.Inc() }
func (m *serverMetrics) NetworkDecision(decision, source string) {
	m.netDecisions.WithLabelValues(decision, source).Inc()
}
func (m *serverMetrics) NetworkEventsDropped(n int) { m.netDropped.Add(float64(n)) }

// connOpened counts a connection of t's transport until the returned
// function is called. A nil receiver (metrics off) counts nothing.
func (m *serverMetrics) connOpened(t wire.Transport) func() {
	if m == nil {
		return func() {}
	}
	name := "other"
	switch t.(type) {
	case *wire.WebsocketTransport:
		name = "websocket"
	case *wire.StdioTransport:
		name = "stdio"
	}
	m.connsTotal.WithLabelValues(name).Inc()
	g := m.connsOpen.WithLabelValues(name)
	g.Inc()
	return g.Dec
}

// BuildVersion is runtimed's version: the main module's version from the
// build information ("(devel)" for a build from a checkout, with the VCS
// revision appended when it was recorded).
func BuildVersion() string { return buildVersion() }

func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && v == "(devel)" {
			rev := s.Value
			if len(rev) > 12 {
				rev = rev[:12]
			}
			v += "+" + rev
		}
	}
	return v
}

func goVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.GoVersion
	}
	return "unknown"
}
