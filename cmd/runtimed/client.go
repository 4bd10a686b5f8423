package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/runtimed/runtimed/runtime"
)

// clientFlags are the flags shared by exec, stdio and ps.
type clientFlags struct {
	connect   string
	tokenFile string
	ca        string
}

func (cf *clientFlags) register(fs *flag.FlagSet, connectRequired bool) {
	help := "runtimed server URL: ws://HOST:PORT, or wss://HOST:PORT for TLS"
	if !connectRequired {
		help += "; without it the command runs in an embedded runtime"
	}
	fs.StringVar(&cf.connect, "connect", "", help)
	fs.StringVar(&cf.tokenFile, "token-file", "", "file holding the server's bearer token (or set RUNTIMED_AUTH_TOKEN)")
	fs.StringVar(&cf.ca, "ca", "", "PEM certificate(s) to trust for a wss:// server (default: the system roots)")
}

func (cf *clientFlags) dial(ctx context.Context, opts runtime.ClientOptions) (*runtime.Client, error) {
	opts.Token = os.Getenv("RUNTIMED_AUTH_TOKEN")
	if cf.tokenFile != "" {
		b, err := os.ReadFile(cf.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		opts.Token = strings.TrimSpace(string(b))
	}
	if cf.ca != "" {
		tc, err := runtime.LoadCA(cf.ca)
		if err != nil {
			return nil, fmt.Errorf("--ca: %w", err)
		}
		opts.TLSConfig = tc
	}
	c, err := runtime.Dial(ctx, cf.connect, &opts)
	return c, explainDial(err, cf.connect, opts.Token != "")
}

// dialSession resumes a detached session for the CLI command cmd ("ps",
// "attach"), saying on stderr why it could not (the server's refusal, or
// the connection's failure).
func (cf *clientFlags) dialSession(ctx context.Context, cmd, session string, stderr io.Writer) (*runtime.Client, bool) {
	c, err := cf.dial(ctx, runtime.ClientOptions{ClientName: "runtimed-" + cmd, ResumeSessionID: session})
	if err != nil {
		var re *runtime.RPCError
		if errors.As(err, &re) {
			fmt.Fprintf(stderr, "runtimed %s: %s refused session %s: %s\n", cmd, cf.connect, session, re.Message)
		} else {
			fmt.Fprintf(stderr, "runtimed %s: %v\n", cmd, err)
		}
		return nil, false
	}
	return c, true
}

// backend returns the remote client, or an embedded runtime without --connect.
func (cf *clientFlags) backend(ctx context.Context) (runtime.Backend, error) {
	if cf.connect == "" {
		return runtime.NewLocal(runtime.Config{}), nil
	}
	return cf.dial(ctx, runtime.ClientOptions{ClientName: "runtimed-cli"})
}

// commandFlags are the flags of commands that start a process (exec, stdio).
type commandFlags struct {
	clientFlags
	envs     stringList
	cwd      string
	sandbox  string
	writable stringList
	network  bool
	memory   string
	pids     uint64
	// The managed network (--allow-domain ...).
	allowDomains, denyDomains stringList
	netLimited, socks5        bool
	netLog                    io.Writer // --network-log: denials are reported here (stderr)
	netLogOn                  bool
}

func (cf *commandFlags) register(fs *flag.FlagSet) {
	cf.clientFlags.register(fs, false)
	fs.Var(&cf.envs, "env", "KEY=VALUE laid over the server's environment (repeatable)")
	fs.StringVar(&cf.cwd, "cwd", "", "working directory on the runtime (default: the current directory)")
	fs.StringVar(&cf.sandbox, "sandbox", "none", "confine the command: none, read-only, or workspace-write (the cwd is the project root)")
	fs.Var(&cf.writable, "writable", "with --sandbox: another directory the command may write (repeatable)")
	fs.BoolVar(&cf.network, "network", false, "with --sandbox: allow network access (default: cut)")
	fs.StringVar(&cf.memory, "memory", "", "memory limit of the whole process tree, e.g. 64MiB, 1GiB")
	fs.Uint64Var(&cf.pids, "pids", 0, "limit on the number of processes in the tree (0: none)")
	fs.Var(&cf.allowDomains, "allow-domain", "with --sandbox: a managed network that reaches only these hosts, through a proxy (repeatable; host, *.d subdomains, **.d apex and subdomains, * any)")
	fs.Var(&cf.denyDomains, "deny-domain", "with --allow-domain: a host pattern refused even if allowed (repeatable)")
	fs.BoolVar(&cf.netLimited, "network-limited", false, "with --allow-domain: only GET, HEAD and OPTIONS (no CONNECT, no SOCKS5)")
	fs.BoolVar(&cf.socks5, "socks5", false, "with --allow-domain: also a SOCKS5 proxy (ALL_PROXY=socks5h://...)")
	fs.BoolVar(&cf.netLogOn, "network-log", false, "with --allow-domain: report each refused destination on stderr")
}

// spec is the process the command starts: argv with the server's
// environment (envPolicy inherit all) plus --env, a writable stdin.
func (cf *commandFlags) spec(argv []string) (runtime.Spec, error) {
	env, err := parseEnv(cf.envs)
	if err != nil {
		return runtime.Spec{}, err
	}
	dir := cf.cwd
	if dir == "" {
		dir, _ = os.Getwd()
	}
	spec := runtime.Spec{Argv: argv, Dir: dir, Env: env, EnvPolicy: &runtime.EnvPolicy{Inherit: "all"}, PipeStdin: true}
	switch cf.sandbox {
	case "none", "":
		if len(cf.writable) > 0 || cf.network {
			return runtime.Spec{}, fmt.Errorf("--writable and --network need --sandbox read-only or workspace-write")
		}
	case "read-only":
		spec.Sandbox = runtime.ReadOnlySandbox()
	case "workspace-write":
		spec.Sandbox = runtime.WorkspaceWriteSandbox(dir)
	default:
		return runtime.Spec{}, fmt.Errorf("--sandbox %q: expected none, read-only or workspace-write", cf.sandbox)
	}
	if len(cf.allowDomains) > 0 || len(cf.denyDomains) > 0 || cf.netLimited || cf.socks5 || cf.netLogOn {
		switch {
		case len(cf.allowDomains) == 0:
			return runtime.Spec{}, fmt.Errorf("--deny-domain, --network-limited, --socks5 and --network-log need --allow-domain")
		case spec.Sandbox == nil:
			return runtime.Spec{}, fmt.Errorf("--allow-domain needs --sandbox read-only or workspace-write")
		case cf.network:
			return runtime.Spec{}, fmt.Errorf("--allow-domain and --network exclude each other: --network opens the whole network")
		}
		spec.Network = &runtime.Network{Allow: cf.allowDomains, Deny: cf.denyDomains, Limited: cf.netLimited, SOCKS5: cf.socks5}
		if cf.netLogOn && cf.netLog != nil {
			w := cf.netLog
			spec.Network.OnDecision = func(d runtime.NetworkDecision) {
				if !d.Allow {
					fmt.Fprintf(w, "runtimed exec: network: refused %s %s:%d (%s)\n", d.Protocol, d.Host, d.Port, d.Reason)
				}
			}
		}
	}
	if spec.Sandbox != nil {
		spec.Sandbox.Network = cf.network
		for _, w := range cf.writable {
			abs, err := filepath.Abs(w)
			if err != nil {
				return runtime.Spec{}, fmt.Errorf("--writable %s: %w", w, err)
			}
			spec.Sandbox.FileSystem = append(spec.Sandbox.FileSystem, runtime.FSRule{Path: abs, Access: runtime.FSWrite})
		}
	}
	if cf.memory != "" {
		n, err := parseSize(cf.memory)
		if err != nil {
			return runtime.Spec{}, fmt.Errorf("--memory: %w", err)
		}
		spec.Limits.MemoryBytes = n
	}
	spec.Limits.Pids = cf.pids
	return spec, nil
}

// parseSize reads a byte count: a number with an optional unit, binary
// (KiB, MiB, GiB, TiB) or decimal (k/KB, M/MB, G/GB, T/TB); bare is bytes.
func parseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9') {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("%q: expected a number with an optional unit (64MiB, 1GiB)", s)
	}
	n, err := strconv.ParseUint(t[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q: %w", s, err)
	}
	units := map[string]uint64{"": 1, "b": 1, "k": 1e3, "kb": 1e3, "kib": 1 << 10, "m": 1e6, "mb": 1e6, "mib": 1 << 20,
		"g": 1e9, "gb": 1e9, "gib": 1 << 30, "t": 1e12, "tb": 1e12, "tib": 1 << 40}
	mul, ok := units[strings.ToLower(strings.TrimSpace(t[i:]))]
	if !ok {
		return 0, fmt.Errorf("%q: unknown unit %q (use KiB, MiB, GiB)", s, t[i:])
	}
	if n > ^uint64(0)/mul {
		return 0, fmt.Errorf("%q: too large", s)
	}
	return n * mul, nil
}

func parseEnv(kvs []string) (map[string]string, error) {
	env := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--env %q: expected KEY=VALUE", kv)
		}
		env[k] = v
	}
	return env, nil
}

// execCmd runs a command and exits with its exit code.
func execCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("runtimed exec", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf commandFlags
	cf.register(fs)
	cf.netLog = stderr
	tty := fs.Bool("t", false, "run on a terminal: raw local terminal, window size forwarded, restored on exit")
	setUsage(fs, stderr, "runtimed exec [--connect URL [--token-file F] [--ca F]] [-t] [--env K=V]... [--cwd DIR] [--sandbox MODE [--allow-domain PATTERN]...] -- CMD [ARGS...]", `
Runs CMD on a runtimed server (--connect), or in an embedded runtime without
it, with local stdin, stdout and stderr connected, and exits with its exit
code (127 when it cannot be started, 130 when interrupted).`)
	if code, done := parseArgs(fs, args); done {
		return code
	}
	argv := fs.Args()
	if len(argv) == 0 {
		fs.Usage()
		return 2
	}
	spec, err := cf.spec(argv)
	if err != nil {
		fmt.Fprintln(stderr, "runtimed exec:", err)
		return 2
	}
	// Signals go to the remote command, as with `docker run`: SIGINT is
	// forwarded (a second one within 2 s terminates it), SIGTERM
	// terminates it; the CLI then exits with the command's real status.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, err := cf.backend(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "runtimed exec:", err)
		return exitRuntimeFailed
	}
	defer b.Close()
	var restore func()
	if *tty {
		f, ok := stdin.(*os.File)
		if !ok || !term.IsTerminal(int(f.Fd())) {
			fmt.Fprintln(stderr, "runtimed exec: -t needs a terminal on stdin")
			return 2
		}
		spec.TTY = true
		if w, h, err := term.GetSize(int(f.Fd())); err == nil {
			spec.Size = runtime.Size{Rows: uint16(h), Cols: uint16(w)}
		}
		if t := os.Getenv("TERM"); t != "" {
			spec.Env["TERM"] = t
		}
		state, err := term.MakeRaw(int(f.Fd()))
		if err != nil {
			fmt.Fprintln(stderr, "runtimed exec: raw mode:", err)
			return exitRuntimeFailed
		}
		restore = func() { _ = term.Restore(int(f.Fd()), state) }
		defer restore()
	}
	p, err := b.Start(ctx, spec)
	if err != nil {
		if restore != nil {
			restore()
		}
		fmt.Fprintln(stderr, "runtimed exec:", err)
		return startFailureCode(err)
	}
	go forwardSignals(ctx, p, sigs)
	if *tty {
		go forwardWinch(ctx, p, stdin.(*os.File))
	}
	go forwardStdin(ctx, p, stdin)
	code, err := copyOutput(ctx, p, stdout, stderr)
	if err != nil {
		if restore != nil {
			restore()
		}
		fmt.Fprintln(stderr, "runtimed exec:", err)
		return exitRuntimeFailed
	}
	if st, err := p.Wait(ctx); err == nil && st.Limit != "" {
		fmt.Fprintf(stderr, "runtimed exec: the process was ended by its %s limit (exit code %d)\n", st.Limit, st.Code)
	}
	return code
}

// Exit codes of exec and stdio when the command itself gives none, as
// `docker run` documents them.
const (
	exitRuntimeFailed = 125 // runtimed failed: cannot connect, refused, protocol error, lost connection
	exitCannotInvoke  = 126 // the command exists but cannot be run (permission, format)
	exitNotFound      = 127 // the command was not found
)

// startFailureCode maps a refused start: the OS error of the spawn says
// whether the command is missing (127) or cannot be run (126); anything
// else is runtimed's failure (125).
func startFailureCode(err error) int {
	var re *runtime.RPCError
	if errors.As(err, &re) && strings.HasPrefix(re.Message, "failed to spawn ") {
		switch {
		case strings.HasSuffix(re.Message, "no such file or directory"):
			return exitNotFound
		case strings.HasSuffix(re.Message, "permission denied"), strings.HasSuffix(re.Message, "exec format error"),
			strings.HasSuffix(re.Message, "is a directory"):
			return exitCannotInvoke
		}
	}
	return exitRuntimeFailed
}

// forwardSignals sends SIGINT on to the command (a second SIGINT within
// 2 s terminates it, grace 1 s) and terminates it on SIGTERM.
func forwardSignals(ctx context.Context, p runtime.Process, sigs <-chan os.Signal) {
	var lastInt time.Time
	for {
		select {
		case sig := <-sigs:
			switch {
			case sig == syscall.SIGTERM || time.Since(lastInt) < 2*time.Second:
				_, _ = p.Terminate(ctx, time.Second)
			default:
				lastInt = time.Now()
				_ = p.Signal(ctx, runtime.SigInterrupt)
			}
		case <-p.Done():
			return
		case <-ctx.Done():
			return
		}
	}
}

// forwardStdin copies local stdin to the process and closes its stdin at EOF.
func forwardStdin(ctx context.Context, p runtime.Process, stdin io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := stdin.Read(buf)
		if n > 0 {
			if werr := p.Write(ctx, append([]byte(nil), buf[:n]...)); werr != nil {
				return
			}
		}
		if err != nil {
			_ = p.CloseStdin(ctx)
			return
		}
	}
}

func forwardWinch(ctx context.Context, p runtime.Process, f *os.File) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGWINCH)
	defer signal.Stop(ch)
	for {
		select {
		case <-ch:
			if w, h, err := term.GetSize(int(f.Fd())); err == nil {
				_ = p.Resize(ctx, uint16(h), uint16(w))
			}
		case <-p.Done():
			return
		case <-ctx.Done():
			return
		}
	}
}

// copyOutput streams the process's events to stdout/stderr and returns its exit code.
func copyOutput(ctx context.Context, p runtime.Process, stdout, stderr io.Writer) (int, error) {
	s, err := p.Events(ctx)
	if err != nil {
		return 0, err
	}
	code := 0
	for {
		ev, err := s.Next(ctx)
		if err == io.EOF {
			return code, nil
		}
		if err != nil {
			return 0, err
		}
		switch ev.Kind {
		case runtime.EventOutput:
			if ev.Stream == runtime.Stderr {
				_, _ = stderr.Write(ev.Data)
			} else {
				_, _ = stdout.Write(ev.Data)
			}
		case runtime.EventExited:
			code = ev.ExitCode
		case runtime.EventGap:
			fmt.Fprintf(stderr, "runtimed: output %d..%d was lost to retention\n", ev.Seq, ev.To)
		case runtime.EventFailed:
			return 0, ev.Err
		}
	}
}

// stdioCmd bridges local stdin/stdout to a process byte for byte.
func stdioCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("runtimed stdio", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf commandFlags
	cf.register(fs)
	setUsage(fs, stderr, "runtimed stdio [--connect URL [--token-file F] [--ca F]] [--env K=V]... [--cwd DIR] -- CMD [ARGS...]", `
Bridges local stdin and stdout to CMD byte for byte (for example an MCP
server run remotely); CMD's stderr goes to local stderr. Exits with CMD's
exit code.`)
	if code, done := parseArgs(fs, args); done {
		return code
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	spec, err := cf.spec(fs.Args())
	if err != nil {
		fmt.Fprintln(stderr, "runtimed stdio:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	b, err := cf.backend(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "runtimed stdio:", err)
		return exitRuntimeFailed
	}
	defer b.Close()
	p, err := b.Start(ctx, spec)
	if err != nil {
		fmt.Fprintln(stderr, "runtimed stdio:", err)
		return startFailureCode(err)
	}
	pipe, err := runtime.Pipe(ctx, p, runtime.PipeOptions{Stderr: stderr})
	if err != nil {
		fmt.Fprintln(stderr, "runtimed stdio:", err)
		return exitRuntimeFailed
	}
	go func() {
		_, _ = io.Copy(pipe, stdin)
		_ = pipe.Close()
	}()
	if _, err := io.Copy(stdout, pipe); err != nil {
		fmt.Fprintln(stderr, "runtimed stdio:", err)
		return exitRuntimeFailed
	}
	st, err := p.Wait(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "runtimed stdio:", err)
		return exitRuntimeFailed
	}
	return st.Code
}

// psCmd lists the processes of a session.
func psCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("runtimed ps", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf clientFlags
	cf.register(fs, true)
	session := fs.String("session", "", "session id to resume and list (required: processes belong to a session)")
	setUsage(fs, stderr, "runtimed ps --connect URL --session ID [--token-file F] [--ca F]", `
Lists the processes of a session: a header line naming the server and the
session, then a table of id, pid, state, exit code, terminal, next seq and
command. A session is resumed to list it: run it against a detached session
(its client gone); it is refused while another connection holds the session.
Exits 0 when it showed the list, 2 on a usage error, and 125 when it could
not show it (cannot connect, refused, unknown session, protocol error).`)
	if code, done := parseArgs(fs, args); done {
		return code
	}
	if cf.connect == "" {
		fmt.Fprintln(stderr, "runtimed ps: --connect URL is required")
		return 2
	}
	if *session == "" {
		fmt.Fprintln(stderr, "runtimed ps: --session ID is required: processes belong to a session; pass the sessionId a client got from initialize to list that (detached) session's processes")
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, ok := cf.dialSession(ctx, "ps", *session, stderr)
	if !ok {
		return exitRuntimeFailed
	}
	defer c.Close()
	procs, err := c.List(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "runtimed ps: process/list:", err)
		return exitRuntimeFailed
	}
	fmt.Fprintf(stdout, "processes of session %s on %s (%d):\n", *session, cf.connect, len(procs))
	printProcessTable(stdout, procs)
	return 0
}
