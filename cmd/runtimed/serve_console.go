package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/runtimed/runtimed/actors/tokens"
	"github.com/runtimed/runtimed/runtime"
	"github.com/runtimed/runtimed/runtime/console"
)

// consoleFlags are serve's web console flags.
type consoleFlags struct {
	listen  string
	control bool
	con     *console.Console // set by setup
}

func registerConsoleFlags(fs *flag.FlagSet) *consoleFlags {
	cf := &consoleFlags{}
	fs.StringVar(&cf.listen, "console-listen", "", "IP:PORT of the web console (e.g. 127.0.0.1:8080): live processes, their output and audit trail; the same tokens as the protocol, TLS when --listen is wss://")
	fs.BoolVar(&cf.control, "console-control", false, "let console users attach to a PTY (type, resize) and terminate processes (each action audited); default: read-only")
	return cf
}

// setup creates the console (before the server: it watches the starts and
// reads the audit events) and wires it into cfg.
func (cf *consoleFlags) setup(cfg *runtime.Config, idn *identity, log *zap.Logger) {
	if cf.listen == "" {
		return
	}
	var src runtime.TokenSource
	switch {
	case cfg.Tokens != nil:
		src = cfg.Tokens
	case cfg.AuthToken != "":
		src = tokens.NewStore(tokens.Single(cfg.AuthToken))
	}
	cf.con = console.New(console.Options{Tokens: src, Control: cf.control, AuditLog: idn.auditor(), Logger: log.Named("console")})
	cfg.Audit = runtime.TeeAuditor(cf.con, idn.auditor())
	cfg.Watch = cf.con
}

// start listens and serves the console; the returned stop closes it.
func (cf *consoleFlags) start(tlsConfig *tls.Config, haveToken, insecure bool, stdout, stderr io.Writer, log *zap.Logger) (stop func(), err error) {
	if cf.con == nil {
		return func() {}, nil
	}
	host, _, err := net.SplitHostPort(cf.listen)
	ip := net.ParseIP(host)
	if err != nil || ip == nil {
		cf.con.Close()
		return nil, fmt.Errorf("--console-listen %q: expected IP:PORT", cf.listen)
	}
	if !ip.IsLoopback() && !haveToken {
		cf.con.Close()
		return nil, fmt.Errorf("--console-listen %s: refusing a non-loopback console without authentication; set --auth-token-file", cf.listen)
	}
	if !ip.IsLoopback() && tlsConfig == nil && !insecure {
		cf.con.Close()
		return nil, fmt.Errorf("--console-listen %s: refusing a non-loopback console without TLS (--listen wss:// with --tls-cert/--tls-key, or --insecure-listen)", cf.listen)
	}
	l, err := net.Listen("tcp", cf.listen)
	if err != nil {
		cf.con.Close()
		return nil, fmt.Errorf("--console-listen: %w", err)
	}
	scheme := "http"
	if tlsConfig != nil {
		l = tls.NewListener(l, tlsConfig)
		scheme = "https"
	}
	hs := &http.Server{Handler: cf.con.Handler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: zap.NewStdLog(log.Named("console.http"))}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := hs.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("console stopped", zap.Error(err))
		}
	}()
	url := scheme + "://" + l.Addr().String() + "/"
	log.Info("console listening", zap.String("url", url), zap.Bool("control", cf.control))
	fmt.Fprintln(stderr, "runtimed serve: console at", url)
	return func() { _ = hs.Close(); <-done; cf.con.Close() }, nil
}
