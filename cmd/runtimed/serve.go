package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/runtimed/runtimed/runtime"
	"github.com/runtimed/runtimed/wire"
)

type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func serve(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("runtimed serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "ws://127.0.0.1:0", "where to listen: ws://IP:PORT (port 0 picks a free one), wss://IP:PORT (TLS, with --tls-cert and --tls-key) or stdio://")
	detachTTL := fs.Duration("detach-ttl", runtime.DefaultDetachTTL, "how long a dropped websocket's session and processes survive for a resume (0: terminate at once)")
	retainBytes := fs.Int("retain-bytes", runtime.DefaultRetainBytes, "retained output per process, in bytes")
	retainChunks := fs.Int("retain-chunks", runtime.DefaultRetainChunks, "retained output per process, in chunks")
	closedRetention := fs.Duration("closed-retention", runtime.DefaultClosedRetention, "how long a closed process stays readable (0: forget at once)")
	shutdownGrace := fs.Duration("shutdown-grace", runtime.DefaultShutdownGrace, "on SIGINT/SIGTERM, time between SIGTERM and SIGKILL for children")
	maxProcs := fs.Int("max-processes", runtime.DefaultMaxProcesses, "active processes allowed per session (and app-server processes per connection)")
	maxMessage := fs.Int("max-message-bytes", runtime.DefaultMaxMessageBytes, "largest inbound message")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error (logs go to stderr)")
	tokenFile := fs.String("auth-token-file", "", "file of the bearer tokens websocket clients may send: NAME TOKEN lines, or one bare token (named default); reloaded on SIGHUP (or set RUNTIMED_AUTH_TOKEN)")
	auditLog := fs.String("audit-log", "", "append the audit log (JSON lines, docs/audit.md) to this file, - for stdout; reopened on SIGHUP")
	httpRequests := fs.Bool("http-requests", true, "serve http/request: clients may make HTTP requests from this machine's network (false: refused with -32602)")
	httpMaxBody := fs.Int64("http-max-body-bytes", runtime.DefaultMaxHTTPBodyBytes, "largest buffered http/request response body (streamed bodies are not capped)")
	codexSystemDir := fs.String("codex-system-dir", "/etc/codex", "the executor's system Codex configuration directory (config.toml, requirements.toml, skills/) for environmentConfig/read and capability discovery; the user's is $CODEX_HOME, else ~/.codex")
	cpuProfile := fs.String("cpu-profile", "", "write a CPU profile of the whole run to this file (for performance work)")
	defaultSandbox := fs.String("default-sandbox", "", "confine starts that carry no sandbox: read-only or workspace-write (project root = the start's cwd); empty: run them unconfined")
	requireSandbox := fs.Bool("require-sandbox", false, "refuse starts that carry no sandbox (unless --default-sandbox applies one)")
	sandboxLevel := fs.String("sandbox-level", "namespaces", "what a sandboxed start gets: namespaces (read-only mount tree, private /dev, /proc, IPC and network, plus Landlock and seccomp; refused where namespaces cannot be made) or landlock (Landlock and seccomp only: see docs/sandbox.md for what that leaves open)")
	sandboxPidNS := fs.String("sandbox-pid-namespace", "isolate", "isolate (each sandboxed tree in a pid namespace of its own, with its own /proc) or inherit (the host's pids and /proc)")
	sandboxPrepare := fs.Bool("sandbox-prepare", true, "prepare the next sandbox of a recent policy in the background (namespaces level, pid namespace isolated), and give each back after its command, cleaned up, for the next start of its policy: a start that finds one ready skips the helper's start and the namespaces' creation; false: every sandboxed start builds its own")
	supervise := fs.String("supervise", "", "keep the services described in this JSON file running (see docs or runtime.LoadServices); they show in process/list")
	maxConns := fs.Int("max-connections", 0, "open connections allowed (0: derived from RLIMIT_NOFILE and memory; -1: unlimited)")
	maxProcsTotal := fs.Int("max-processes-total", 0, "active processes allowed server-wide (0: derived from RLIMIT_NOFILE and memory; -1: unlimited)")
	maxOpenFiles := fs.Int("max-open-files", 0, "descriptors connections (1 each) and processes (6 each) may hold (0: RLIMIT_NOFILE less what the server uses; -1: unlimited)")
	fdReserve := fs.Int("fd-reserve", 0, "part of --max-open-files kept for new connections and first starts (0: 1/16, between 32 and 1024)")
	maxRetained := fs.Int64("max-retained-bytes", 0, "output memory all processes may hold, each its retention plus read-ahead while running (0: half of memory; -1: unlimited)")
	maxOutbound := fs.Int64("max-outbound-bytes", 0, "outbound queue memory of all connections (0: an eighth of memory; -1: unlimited)")
	maxInbound := fs.Int64("max-inbound-bytes", 0, "requests of all connections being read or handled, a message counted at --max-message-bytes while it is read; past it the server stops reading (0: a sixty-fourth of memory, at least twice --max-message-bytes; -1: unlimited)")
	connInbound := fs.Int64("conn-inbound-bytes", 0, "requests of one connection being read or handled (0: twice --max-message-bytes; -1: unlimited)")
	outboundQueue := fs.Int("outbound-queue-bytes", runtime.DefaultOutboundQueueBytes, "one connection's outbound queue budget; beyond it its processes stop being read")
	slowConsumer := fs.Duration("slow-consumer-timeout", runtime.DefaultSlowConsumerTimeout, "close a websocket connection whose outbound queue makes no progress for this long (0: never)")
	containment := fs.String("containment", "auto", "how process trees are tracked and killed: auto (a cgroup per process where possible, else subreaper), subreaper (the daemon adopts and kills orphaned descendants) or pgroup (process groups only)")
	stateDirFlag := fs.String("state-dir", "", "where process groups are recorded (subreaper and pgroup containment) so that a daemon started after this one died kills what it left (default: $RUNTIMED_STATE_DIR, $XDG_RUNTIME_DIR/runtimed or /tmp/runtimed-<uid>)")
	nf := registerNetFlags(fs)
	nf.console = registerConsoleFlags(fs)
	var origins, fsRoots, netDeny stringList
	fs.Var(&fsRoots, "fs-root", "confine the fs/* methods and process/start cwd to this directory (repeatable; default: the whole filesystem)")
	fs.Var(&netDeny, "network-deny", "a domain pattern (host, *.d, **.d) that no client's managed-network policy can allow (repeatable): the operator's floor")
	fs.Var(&origins, "allowed-origin", "an Origin header value allowed to connect (repeatable; by default any request with an Origin is refused)")
	setUsage(fs, stderr, "runtimed serve [--listen ws://IP:PORT | wss://IP:PORT | stdio://] [flags]", `
Serves the runtimed protocol (docs/PROTOCOL.md). On websocket it prints the
URL it listens on as the first line of stdout; on stdio, stdout carries the
protocol. Logs go to stderr. SIGINT or SIGTERM terminates every process
(SIGTERM, SIGKILL after --shutdown-grace) and exits; SIGHUP reloads the TLS
pair, the --auth-token-file tokens and reopens --audit-log. Operator's guide: docs/operations.md.`)
	if code, done := parseArgs(fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "runtimed serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	level, err := zapcore.ParseLevel(*logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "runtimed serve: --log-level: %v\n", err)
		return 2
	}
	log := newLogger(stderr, level)
	defer log.Sync() //nolint:errcheck

	token := os.Getenv("RUNTIMED_AUTH_TOKEN")
	idn, code := openIdentity(*tokenFile, *auditLog, *listen, log, stderr)
	if code != 0 {
		return code
	}
	defer idn.close()
	cfg := runtime.Config{
		Logger:              log,
		DetachTTL:           nonZero(*detachTTL),
		RetainBytes:         *retainBytes,
		RetainChunks:        *retainChunks,
		ClosedRetention:     nonZero(*closedRetention),
		ShutdownGrace:       *shutdownGrace,
		MaxMessageBytes:     *maxMessage,
		MaxProcesses:        *maxProcs,
		AuthToken:           token,
		AllowedOrigins:      origins,
		FsRoots:             fsRoots,
		DefaultSandbox:      *defaultSandbox,
		RequireSandbox:      *requireSandbox,
		SandboxLevel:        *sandboxLevel,
		SandboxPidNamespace: *sandboxPidNS,
		NoPreparedSandboxes: !*sandboxPrepare,
		Tokens:              idn.tokenSource(),
		Audit:               idn.auditor(),
		Metrics:             nf.metricsListen != "",
		NetworkDeny:         netDeny,

		DisableHTTPRequests: !*httpRequests,
		MaxHTTPBodyBytes:    *httpMaxBody,
		CodexSystemDir:      *codexSystemDir,

		MaxConnections:      *maxConns,
		MaxProcessesTotal:   *maxProcsTotal,
		MaxOpenFiles:        *maxOpenFiles,
		FDReserve:           *fdReserve,
		MaxRetainedBytes:    *maxRetained,
		MaxOutboundBytes:    *maxOutbound,
		OutboundQueueBytes:  *outboundQueue,
		MaxInboundBytes:     *maxInbound,
		ConnInboundBytes:    *connInbound,
		SlowConsumerTimeout: nonZero(*slowConsumer),
		StateDir:            *stateDirFlag,
	}
	nf.console.setup(&cfg, idn, log)
	if *supervise != "" {
		svcs, err := runtime.LoadServices(*supervise)
		if err != nil {
			fmt.Fprintf(stderr, "runtimed serve: --supervise %s: %v\n", *supervise, err)
			return 2
		}
		cfg.Services = svcs
	}
	switch *containment {
	case "auto":
	case "pgroup":
		cfg.Containment = runtime.ContainProcessGroup
	case "subreaper":
		cfg.Containment = runtime.ContainSubreaper
	default:
		fmt.Fprintf(stderr, "runtimed serve: --containment %q: expected auto, subreaper or pgroup\n", *containment)
		return 2
	}
	if *defaultSandbox != "" && *defaultSandbox != "read-only" && *defaultSandbox != "workspace-write" {
		fmt.Fprintf(stderr, "runtimed serve: --default-sandbox %q: expected read-only or workspace-write\n", *defaultSandbox)
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "runtimed serve: %v\n", err) // names the setting: Config.FsRoots is --fs-root
		return 2
	}
	if *retainBytes <= 0 || *retainChunks <= 0 || *maxMessage <= 0 || *maxProcs <= 0 || *httpMaxBody <= 0 || *outboundQueue <= 0 {
		fmt.Fprintln(stderr, "runtimed serve: --retain-bytes, --retain-chunks, --max-processes, --max-message-bytes, --http-max-body-bytes and --outbound-queue-bytes must be positive")
		return 2
	}
	if *fdReserve < 0 || *slowConsumer < 0 {
		fmt.Fprintln(stderr, "runtimed serve: --fd-reserve and --slow-consumer-timeout must not be negative")
		return 2
	}

	if *cpuProfile != "" {
		stopProfile, err := startCPUProfile(*cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "runtimed serve: --cpu-profile: %v\n", err)
			return 2
		}
		defer stopProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	defer idn.reloadOnHUP(ctx, log)()

	switch {
	case *listen == "stdio" || *listen == "stdio://":
		if nf.console.listen != "" {
			fmt.Fprintln(stderr, "runtimed serve: --console-listen applies to a websocket --listen, not stdio")
			return 2
		}
		if msg := nf.check(nil, false, false, true); msg != "" {
			fmt.Fprintln(stderr, "runtimed serve:", msg)
			return 2
		}
		return serveStdio(ctx, cfg, stdin, stdout, log)
	case strings.HasPrefix(*listen, "ws://"), strings.HasPrefix(*listen, "wss://"):
		return serveWS(ctx, cfg, *listen, nf, stdout, stderr, log)
	default:
		fmt.Fprintf(stderr, "runtimed serve: --listen %q: expected ws://IP:PORT, wss://IP:PORT or stdio://\n", *listen)
		return 2
	}
}

// nonZero maps the CLI's "0 means none" onto Config's "negative means none".
func nonZero(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

func newLogger(w io.Writer, level zapcore.Level) *zap.Logger {
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.AddSync(w), level)
	return zap.New(core).Named("runtimed")
}

func serveWS(ctx context.Context, cfg runtime.Config, listen string, nf *netFlags, stdout, stderr io.Writer, log *zap.Logger) int {
	addr, err := parseWSListen(listen)
	if err != nil {
		fmt.Fprintf(stderr, "runtimed serve: --listen %q: %v\n", listen, err)
		return 2
	}
	secure := strings.HasPrefix(listen, "wss://")
	if msg := nf.check(addr.IP, secure, cfg.AuthToken != "" || cfg.Tokens != nil, false); msg != "" {
		fmt.Fprintln(stderr, "runtimed serve:", msg)
		return 2
	}
	var tlsConfig *tls.Config
	if secure {
		tctx, stopTLS := context.WithCancel(context.Background())
		var waitTLS func()
		tlsConfig, waitTLS, err = nf.startTLS(tctx, log)
		if err != nil {
			stopTLS()
			fmt.Fprintf(stderr, "runtimed serve: --tls-cert/--tls-key: %v\n", err)
			return 2
		}
		defer waitTLS()
		defer stopTLS()
	}
	network := "tcp6"
	if addr.IP.To4() != nil {
		network = "tcp4" // 0.0.0.0 means IPv4 only, not every address family
	}
	l, err := net.ListenTCP(network, addr)
	if err != nil {
		fmt.Fprintf(stderr, "runtimed serve: %v\n", err)
		return 1
	}
	srv := runtime.NewServer(cfg)
	logBudgets(log, srv.Budgets())
	if err := startServices(ctx, srv, stderr); err != nil {
		return 2
	}
	obs, err := nf.startMetrics(srv, log)
	if err != nil {
		_ = l.Close()
		_ = srv.Close()
		fmt.Fprintf(stderr, "runtimed serve: %v\n", err)
		return 2
	}
	defer obs.close()
	stopConsole, err := nf.console.start(tlsConfig, cfg.AuthToken != "" || cfg.Tokens != nil, nf.insecureListen, stdout, stderr, log)
	if err != nil {
		_ = l.Close()
		_ = srv.Close()
		fmt.Fprintf(stderr, "runtimed serve: %v\n", err)
		return 2
	}
	defer stopConsole()
	var ln net.Listener = l
	url := "ws://" + l.Addr().String()
	if secure {
		ln = tls.NewListener(l, tlsConfig)
		url = "wss://" + l.Addr().String()
	}
	fmt.Fprintln(stdout, url)
	log.Info("listening", zap.String("url", url), zap.Bool("auth", cfg.AuthToken != "" || cfg.Tokens != nil), zap.Bool("tls", secure))
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		log.Info("signal received; shutting down")
	case err := <-served:
		log.Error("serve failed", zap.Error(err))
		_ = srv.Close()
		return 1
	}
	return shutdown(srv, cfg, log)
}

func serveStdio(ctx context.Context, cfg runtime.Config, stdin io.Reader, stdout io.Writer, log *zap.Logger) int {
	// A signal must end a read of stdin that is waiting for the client:
	// read it through the poller so that closing it interrupts the read.
	stdin, restore := pollableStdin(stdin, log)
	defer restore()
	srv := runtime.NewServer(cfg)
	if err := startServices(ctx, srv, os.Stderr); err != nil {
		return 2
	}
	t := wire.NewStdioTransport(stdin, stdout, cfg.MaxMessageBytes)
	done := make(chan struct{})
	go func() {
		_ = srv.ServeTransport(t, false)
		close(done)
	}()
	select {
	case <-done:
		log.Debug("stdin closed; shutting down")
	case <-ctx.Done():
		log.Info("signal received; shutting down")
	}
	return shutdown(srv, cfg, log)
}

// startServices starts --supervise's services (each started once, or its
// first start failed and its restart policy took over).
func startServices(ctx context.Context, srv *runtime.Server, stderr io.Writer) error {
	if err := srv.StartServices(ctx); err != nil {
		fmt.Fprintf(stderr, "runtimed serve: --supervise: %v\n", err)
		_ = srv.Close()
		return err
	}
	return nil
}

// shutdownSlack is what Shutdown may take beyond the shutdown grace for
// the processes to hand their endings to the clients (after SIGKILL, the
// output drain); the connections' last flush and exiting follow, within
// the promised grace plus one second.
const shutdownSlack = 400 * time.Millisecond

func shutdown(srv *runtime.Server, cfg runtime.Config, log *zap.Logger) int {
	grace := srv.Config().ShutdownGrace
	ctx, cancel := context.WithTimeout(context.Background(), grace+shutdownSlack)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		log.Warn("shutdown did not finish in time; children were killed", zap.Error(err))
	}
	return 0
}

// parseWSListen accepts ws://IP:PORT with an IP literal (no hostnames: what
// a name resolves to is not something to guess when exposing a process runner).
func parseWSListen(listen string) (*net.TCPAddr, error) {
	u, err := url.Parse(listen)
	if err != nil {
		return nil, err
	}
	if u.Path != "" && u.Path != "/" {
		return nil, errors.New("a path is not allowed")
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		return nil, errors.New("a port is required (0 picks a free one)")
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return nil, fmt.Errorf("%q is a hostname; use an IP address such as 127.0.0.1", host)
	}
	p, err := net.LookupPort("tcp", port)
	if err != nil {
		return nil, fmt.Errorf("bad port %q", port)
	}
	return &net.TCPAddr{IP: ip, Port: p}, nil
}

func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// logBudgets says which server-wide limits are in force (0: unlimited).
func logBudgets(log *zap.Logger, b runtime.Budgets) {
	log.Info("budgets",
		zap.Int("max_connections", b.MaxConnections),
		zap.Int("max_processes_total", b.MaxProcessesTotal),
		zap.Int("max_open_files", b.MaxOpenFiles),
		zap.Int("fd_reserve", b.FDReserve),
		zap.Int64("max_retained_bytes", b.MaxRetainedBytes),
		zap.Int64("max_outbound_bytes", b.MaxOutboundBytes),
		zap.Int("outbound_queue_bytes", b.OutboundQueueBytes),
		zap.Int64("max_inbound_bytes", b.MaxInboundBytes),
		zap.Int64("conn_inbound_bytes", b.ConnInboundBytes),
		zap.Duration("slow_consumer_timeout", b.SlowConsumerTimeout),
		zap.Int("rlimit_nofile", b.RLimitNoFile))
}
