package runtime

import (
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// Health endpoints, served on the protocol listener and on the
// observability listener alike.
const (
	// HealthzPath answers 200 while the server process serves HTTP.
	HealthzPath = "/healthz"
	// ReadyzPath answers 200 while the server accepts connections, 503 once
	// Shutdown or Close began.
	ReadyzPath = "/readyz"
	// MetricsPath serves the Prometheus metrics (Config.Metrics).
	MetricsPath = "/metrics"
)

// ObservabilityOptions configure [Server.ObservabilityHandler]. The zero
// value serves metrics and health only (nothing here can be out of range).
type ObservabilityOptions struct {
	// Pprof serves net/http/pprof under /debug/pprof/ (CPU and heap
	// profiles, goroutine dumps): for a listener only operators reach.
	// False: no profiling endpoints.
	Pprof bool
}

// ObservabilityHandler returns the handler of a metrics listener:
// /metrics (404 when Config.Metrics is off), /healthz, /readyz, and with
// opts.Pprof /debug/pprof/. It performs no authentication: serve it on an
// address only the monitoring system reaches.
func (s *Server) ObservabilityHandler(opts ObservabilityOptions) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(HealthzPath, func(w http.ResponseWriter, r *http.Request) { s.serveHealth(w, r) })
	mux.HandleFunc(ReadyzPath, func(w http.ResponseWriter, r *http.Request) { s.serveHealth(w, r) })
	if s.metrics != nil {
		mux.Handle(MetricsPath, promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{
			ErrorLog: zap.NewStdLog(s.log.Named("metrics")), Registry: s.metrics.reg,
		}))
	} else {
		mux.HandleFunc(MetricsPath, func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "metrics are off (runtime.Config.Metrics)", http.StatusNotFound)
		})
	}
	if opts.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// MetricsRegistry returns the server's own Prometheus registry, so an
// embedding program can add collectors; nil when Config.Metrics is off.
func (s *Server) MetricsRegistry() *prometheus.Registry {
	if s.metrics == nil {
		return nil
	}
	return s.metrics.reg
}

// serveHealth answers GET /healthz and /readyz and reports whether the
// request was one of them.
func (s *Server) serveHealth(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	switch r.URL.Path {
	case HealthzPath:
	case ReadyzPath:
		if s.isClosing() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return true
		}
	default:
		return false
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte("ok\n"))
	return true
}
