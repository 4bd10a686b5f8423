package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/runtimed/runtimed/runtime"
)

// netFlags are serve's flags for exposing the daemon: TLS, plain listening
// beyond loopback, and the observability listener.
type netFlags struct {
	tlsCert, tlsKey string
	insecureListen  bool
	metricsListen   string
	pprof           bool
	console         *consoleFlags // serve_console.go
}

func registerNetFlags(fs *flag.FlagSet) *netFlags {
	nf := &netFlags{}
	fs.StringVar(&nf.tlsCert, "tls-cert", "", "PEM certificate (chain) for --listen wss://; reloaded on SIGHUP and when the file changes")
	fs.StringVar(&nf.tlsKey, "tls-key", "", "PEM private key for --tls-cert")
	fs.BoolVar(&nf.insecureListen, "insecure-listen", false, "allow ws:// (no TLS) on a non-loopback address, e.g. behind a TLS-terminating proxy on a private network")
	fs.StringVar(&nf.metricsListen, "metrics-listen", "", "IP:PORT of a plain-HTTP listener for /metrics (Prometheus), /healthz and /readyz; no authentication, keep it reachable by monitoring only")
	fs.BoolVar(&nf.pprof, "pprof", false, "also serve /debug/pprof/ on --metrics-listen")
	return nf
}

// check validates the flags against the listen address; it returns the
// message to print, or "".
func (nf *netFlags) check(ip net.IP, secure, haveToken, stdio bool) string {
	switch {
	case stdio && (nf.metricsListen != "" || nf.tlsCert != "" || nf.tlsKey != "" || nf.pprof):
		return "--metrics-listen, --pprof, --tls-cert and --tls-key apply to a websocket --listen, not stdio"
	case nf.pprof && nf.metricsListen == "":
		return "--pprof is served on the metrics listener: set --metrics-listen IP:PORT too"
	case secure && (nf.tlsCert == "" || nf.tlsKey == ""):
		return "--listen wss:// needs --tls-cert FILE and --tls-key FILE"
	case !secure && (nf.tlsCert != "" || nf.tlsKey != ""):
		return "--tls-cert and --tls-key need --listen wss://IP:PORT"
	case stdio:
		return ""
	case !ip.IsLoopback() && !haveToken:
		return fmt.Sprintf("refusing to listen on non-loopback address %s without authentication; set --auth-token-file FILE (or RUNTIMED_AUTH_TOKEN)", ip)
	case !ip.IsLoopback() && !secure && !nf.insecureListen:
		return fmt.Sprintf("refusing to listen on non-loopback address %s without TLS: the token and every process's input and output would cross the network in clear; "+
			"use --listen wss://%s --tls-cert FILE --tls-key FILE, or --insecure-listen when a TLS-terminating proxy or a private network protects it", ip, net.JoinHostPort(ip.String(), "PORT"))
	}
	return ""
}

// startTLS loads the pair and keeps it fresh (file changes, SIGHUP) until
// ctx ends; the returned function waits for that goroutine.
func (nf *netFlags) startTLS(ctx context.Context, log *zap.Logger) (*tls.Config, func(), error) {
	r, err := runtime.NewCertReloader(nf.tlsCert, nf.tlsKey, log.Named("tls"))
	if err != nil {
		return nil, nil, err
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{}, 2)
	go func() { _ = r.Run(ctx); done <- struct{}{} }()
	go func() {
		defer func() { done <- struct{}{} }()
		for {
			select {
			case <-hup:
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_ = r.Reload(rctx) // Run logs the outcome
				cancel()
			case <-ctx.Done():
				return
			}
		}
	}()
	wait := func() { signal.Stop(hup); <-done; <-done }
	return r.TLSConfig(), wait, nil
}

// observability is the running metrics listener.
type observability struct {
	hs     *http.Server
	served chan struct{}
}

// startMetrics serves srv's observability handler on --metrics-listen.
func (nf *netFlags) startMetrics(srv *runtime.Server, log *zap.Logger) (*observability, error) {
	if nf.metricsListen == "" {
		return nil, nil
	}
	host, _, err := net.SplitHostPort(nf.metricsListen)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen %q: expected IP:PORT (0.0.0.0:9464, 127.0.0.1:9464)", nf.metricsListen)
	}
	if host != "" && net.ParseIP(host) == nil {
		return nil, fmt.Errorf("--metrics-listen %q: %q is a hostname; use an IP address", nf.metricsListen, host)
	}
	l, err := net.Listen("tcp", nf.metricsListen)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	o := &observability{
		hs:     &http.Server{Handler: srv.ObservabilityHandler(runtime.ObservabilityOptions{Pprof: nf.pprof}), ReadHeaderTimeout: 10 * time.Second, ErrorLog: zap.NewStdLog(log.Named("metrics"))},
		served: make(chan struct{}),
	}
	go func() {
		if err := o.hs.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics listener failed", zap.Error(err))
		}
		close(o.served)
	}()
	log.Info("metrics listening", zap.String("url", "http://"+l.Addr().String()+runtime.MetricsPath), zap.Bool("pprof", nf.pprof))
	return o, nil
}

// close stops the metrics listener (after shutdown, so /readyz answered 503
// meanwhile).
func (o *observability) close() {
	if o == nil {
		return
	}
	_ = o.hs.Close()
	<-o.served
}
