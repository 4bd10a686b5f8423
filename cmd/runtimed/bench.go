package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/runtimed/runtimed/runtime"
	"github.com/runtimed/runtimed/wire"
)

const benchUsage = `usage: runtimed bench (--connect URL | --spawn 'CMD' [--stdio]) [flags]

Measures a runtimed (or any compatible exec-server) and prints, per figure,
the median with min and max over --runs:
  a  spawn /bin/true through to process/closed, sequential (back to back,
     or after --spawn-pause, an agent's think time): p50 and p99,
     interleaved with a bare fork/exec of /bin/true by this client (the
     floor; meaningful when the server runs on this machine) and with a
     sandboxed start (--sandbox, or workspace-write when none), and the
     ratios to the floor; also one request and its answer sent after the
     same idle pause (the protocol's own floor for a start) and the ratio
     of a start to the bare fork/exec plus that round trip
  b  streaming throughput of head -c N /dev/zero, MB/s of decoded bytes
     (plus the server's CPU seconds per GB when its pid is known)
  c  100 concurrent processes each printing 1 MiB: wall time
  d  small RPC round trip (process/read, waitMs 0, of an exited process): p50 and p99
  e  PTY streaming MB/s
  f  server RSS and threads with 1000 idle sleep children, and the time to terminate them
MB is 10^6 bytes. --spawn runs CMD with sh -c "exec CMD" and reads the URL
from its stdout (or, with --stdio, speaks the protocol on its stdin/stdout);
its pid is then known. With --connect, pass --pid for CPU/RSS figures.

With --soak (websocket only, the pid known) it runs hostile and careless
clients instead, one phase after another, and reports the server's RSS and
descriptors and a well-behaved client's environment/status percentiles:
idle connections, slow ones (each starts cat /dev/zero and never reads),
greedy ones (each starts sleep 1000 until refused, then a new connection's
first start), and connections that each send one large request
(--large-method: a process/write, or an environment/status with an
unknown parameter of that size).

With --vs 'CMD' (another server, e.g. the reference exec-server) and/or
--echo (a bare Go websocket JSON-RPC echo server, this binary) it times
figure d on every server side by side, interleaved in each run, and prints
the ratios of the medians (--spawn required, websocket). On a VM whose idle
vCPUs halt, a run stays in one latency mode; many short runs (--runs 41
--rpc-n 300) interleave the servers more finely.
`

type benchOpts struct {
	runs        int
	streamBytes int64
	ptyBytes    int64
	spawnN      int
	spawnPause  time.Duration
	rpcN        int
	idleN       int
	only        string
	rpcMethod   string
	pid         int
}

func benchCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("runtimed bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, benchUsage); fmt.Fprintln(stderr, "\nflags:"); fs.PrintDefaults() }
	connect := fs.String("connect", "", "websocket URL of a running server")
	spawn := fs.String("spawn", "", "command that starts a server (its URL is read from its stdout)")
	stdio := fs.Bool("stdio", false, "with --spawn: speak the protocol over the command's stdin/stdout")
	jsonOut := fs.Bool("json", false, "print results as JSON")
	noDecode := fs.Bool("no-decode", false, "count output bytes without base64-decoding them (measures the server when this client's CPU is the limit; results are labelled)")
	var o benchOpts
	fs.IntVar(&o.runs, "runs", 3, "repetitions of each figure")
	fs.Int64Var(&o.streamBytes, "stream-bytes", 256<<20, "bytes streamed in figure b")
	fs.Int64Var(&o.ptyBytes, "pty-bytes", 64<<20, "bytes streamed in figure e")
	fs.IntVar(&o.spawnN, "spawn-n", 200, "spawns per run in figure a")
	fs.DurationVar(&o.spawnPause, "spawn-pause", 0, "figure a: a pause before each round of spawns (an agent's think time between commands; 0: back to back)")
	fs.IntVar(&o.rpcN, "rpc-n", 2000, "round trips per run in figure d")
	fs.IntVar(&o.idleN, "idle-n", 1000, "idle children in figure f")
	fs.StringVar(&o.only, "only", "abcdef", "figures to run")
	fs.StringVar(&o.rpcMethod, "rpc-method", "process/read", "the request timed in figure d (process/read, or environment/status to leave out the process actor)")
	fs.IntVar(&o.pid, "pid", 0, "the server's pid, for CPU, RSS and thread figures (known with --spawn)")
	cpuProfile := fs.String("cpu-profile", "", "write a CPU profile of the benchmark client to this file")
	soak := fs.Bool("soak", false, "instead of figures a-f, run the hostile-client soak: idle, slow (never reading) and greedy (start until refused) clients, then large requests; reports RSS, fds and environment/status latency")
	var so soakOpts
	fs.IntVar(&so.idle, "idle-clients", 200, "soak: idle connections")
	fs.IntVar(&so.slow, "slow-clients", 50, "soak: connections that start `cat /dev/zero` and never read")
	fs.DurationVar(&so.slowFor, "slow-for", 10*time.Second, "soak: how long the slow phase lasts")
	fs.IntVar(&so.greedy, "greedy-clients", 2, "soak: connections that start `sleep 1000` until refused")
	fs.IntVar(&so.greedyProcs, "greedy-procs", 4096, "soak: starts each greedy connection attempts")
	fs.IntVar(&so.large, "large-clients", 20, "soak: connections that each send one large process/write")
	fs.IntVar(&so.largeBytes, "large-bytes", 60_000_000, "soak: size of each large request")
	fs.StringVar(&so.largeMethod, "large-method", "process/write", "soak: the large request: process/write (a chunk for `cat >/dev/null`) or environment/status (an unknown parameter)")
	fs.DurationVar(&so.largeSettle, "large-settle", 5*time.Second, "soak: wait after the large answers before measuring RSS")
	fs.DurationVar(&so.fdSettle, "fd-settle", 10*time.Second, "soak: wait after terminating the greedy processes before counting fds")
	noSandboxedSpawn := fs.Bool("no-sandboxed-spawn", false, "leave the sandboxed series out of figure a")
	sandbox := fs.String("sandbox", "none", "start every process under this sandbox: none, read-only or workspace-write (cwd / as the root); figures are labelled")
	tokenFile := fs.String("token-file", "", "with --connect: file holding the server's bearer token (or set RUNTIMED_AUTH_TOKEN)")
	caFile := fs.String("ca", "", "with --connect wss://: PEM certificate(s) to trust (default: the system roots)")
	vs := fs.String("vs", "", "with --spawn: also start this server (the reference exec-server) and time figure d on both, interleaved, with ratios")
	echo := fs.Bool("echo", false, "with --spawn: also time figure d on a bare Go websocket JSON-RPC echo server (this binary), interleaved, with ratios")
	serveEchoMode := fs.Bool("serve-echo", false, "serve the bare echo server used by --echo (prints its URL)")
	if code, done := parseArgs(fs, args); done {
		return code
	}
	if *cpuProfile != "" {
		stopProfile, err := startCPUProfile(*cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "runtimed bench: --cpu-profile:", err)
			return 2
		}
		defer stopProfile()
	}
	if *serveEchoMode {
		return serveEcho(stdout, stderr)
	}
	if (*connect == "") == (*spawn == "") {
		fmt.Fprintln(stderr, "runtimed bench: give exactly one of --connect URL or --spawn 'CMD'")
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()

	if *vs != "" || *echo {
		if *spawn == "" || *stdio {
			fmt.Fprintln(stderr, "runtimed bench: --vs and --echo need --spawn 'CMD' (websocket)")
			return 2
		}
		return compareCmd(ctx, o, *spawn, *vs, *echo, *jsonOut, stdout, stderr)
	}
	var dial func(ctx context.Context) (wire.Transport, error)
	srvURL := *connect
	if *spawn != "" {
		srv, err := spawnServer(ctx, *spawn, *stdio, stderr)
		if err != nil {
			fmt.Fprintln(stderr, "runtimed bench:", err)
			return 1
		}
		defer srv.stop()
		o.pid = srv.cmd.Process.Pid
		if *stdio {
			used := false
			dial = func(ctx context.Context) (wire.Transport, error) {
				if used {
					return nil, errors.New("a stdio server takes one connection")
				}
				used = true
				return srv.stdio, nil
			}
		} else {
			url := srv.url
			srvURL = url
			dial = func(ctx context.Context) (wire.Transport, error) { return wire.DialWebsocket(ctx, url, nil, 256<<20) }
		}
	} else {
		url := *connect
		header, tlsConfig, err := benchDialOptions(*tokenFile, *caFile)
		if err != nil {
			fmt.Fprintln(stderr, "runtimed bench:", err)
			return 2
		}
		dial = func(ctx context.Context) (wire.Transport, error) {
			return wire.DialWebsocketTLS(ctx, url, header, tlsConfig, 256<<20)
		}
	}
	if *soak {
		so.pid = o.pid
		return soakCmd(ctx, so, *connect, *spawn, *stdio, srvURL, *jsonOut, stdout, stderr)
	}
	t, err := dial(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "runtimed bench:", err)
		return 1
	}
	c, err := newBenchClient(ctx, t, *noDecode, false)
	if err != nil {
		fmt.Fprintln(stderr, "runtimed bench:", err)
		return 1
	}
	defer c.close()
	switch *sandbox {
	case "none":
	case "read-only":
		c.sandbox = runtime.ReadOnlySandbox()
	case "workspace-write":
		c.sandbox = runtime.WorkspaceWriteSandbox("/tmp")
	default:
		fmt.Fprintf(stderr, "runtimed bench: --sandbox %q: expected none, read-only or workspace-write\n", *sandbox)
		return 2
	}

	b := &bencher{c: c, o: o, log: stderr, progress: newProgress(stderr), spawnSandbox: c.sandbox, spawnSandboxName: *sandbox}
	if c.sandbox == nil && !*noSandboxedSpawn {
		b.spawnSandbox, b.spawnSandboxName = runtime.WorkspaceWriteSandbox("/tmp"), "workspace-write"
	}
	results, err := b.run(ctx)
	b.progress.done()
	if err != nil {
		fmt.Fprintln(stderr, "runtimed bench:", err)
		return 1
	}
	if c.sandbox != nil {
		for i := range results {
			if !strings.HasPrefix(results[i].Name, "a ") { // figure a names its sandboxed series
				results[i].Name += " (sandbox " + *sandbox + ")"
			}
		}
	}
	if *noDecode {
		for i := range results {
			if results[i].Unit == "MB/s" {
				results[i].Name += " (not decoded)"
			}
		}
	}
	if *jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(results)
		return 0
	}
	for _, r := range results {
		fmt.Fprintf(stdout, "%-52s %12s  (min %s, max %s) %s\n", r.Name, fmtVal(r.Median, r.Unit), fmtVal(r.Min, r.Unit), fmtVal(r.Max, r.Unit), r.Unit)
	}
	return 0
}

func fmtVal(v float64, unit string) string {
	switch unit {
	case "ms":
		return strconv.FormatFloat(v, 'f', 3, 64)
	case "us":
		return strconv.FormatFloat(v, 'f', 1, 64)
	case "x":
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
}

// benchResult is one figure: median, min and max over the runs.
type benchResult struct {
	Name   string    `json:"name"`
	Unit   string    `json:"unit"`
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Runs   []float64 `json:"runs"`
}

func summarize(name, unit string, runs []float64) benchResult {
	s := append([]float64(nil), runs...)
	sort.Float64s(s)
	r := benchResult{Name: name, Unit: unit, Runs: runs}
	if len(s) > 0 {
		r.Min, r.Max, r.Median = s[0], s[len(s)-1], s[len(s)/2]
	}
	return r
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s) == 0 {
		return 0
	}
	i := int(p*float64(len(s)-1) + 0.5)
	return s[i]
}

type bencher struct {
	c *benchClient
	// spawnSandbox is the sandbox of figure a's sandboxed series (nil:
	// none), named spawnSandboxName.
	spawnSandbox     any
	spawnSandboxName string
	o                benchOpts
	log              io.Writer
	seq              atomic.Int64
	progress         *progress // nil unless stderr is a terminal
}

func (b *bencher) id(prefix string) string { return prefix + "-" + strconv.FormatInt(b.seq.Add(1), 10) }

func (b *bencher) run(ctx context.Context) ([]benchResult, error) {
	var out []benchResult
	want := func(f string) bool { return strings.Contains(b.o.only, f) }
	if want("a") {
		var series [4][2][]float64 // bare, contained, sandboxed, idle round trip x p50, p99
		var ratio [3][]float64     // contained/bare, sandboxed/bare, contained/(bare + idle round trip) p50
		sandboxed := b.spawnSandbox != nil
		for i := 0; i < b.o.runs; i++ {
			b.progress.step("a spawn latency", i+1, b.o.runs)
			d, ok, err := b.spawnLatency(ctx, sandboxed)
			if err != nil {
				return nil, fmt.Errorf("figure a: %w", err)
			}
			sandboxed = ok
			for k := range d {
				if len(d[k]) == 0 {
					continue
				}
				series[k][0] = append(series[k][0], ms(percentile(d[k], 0.50)))
				series[k][1] = append(series[k][1], ms(percentile(d[k], 0.99)))
			}
			bare := percentile(d[0], 0.50)
			ratio[0] = append(ratio[0], float64(percentile(d[1], 0.50))/float64(bare))
			ratio[2] = append(ratio[2], float64(percentile(d[1], 0.50))/float64(bare+percentile(d[3], 0.50)))
			if len(d[2]) > 0 {
				ratio[1] = append(ratio[1], float64(percentile(d[2], 0.50))/float64(bare))
			}
		}
		sbName := "sandboxed " + b.spawnSandboxName
		out = append(out,
			summarize("a bare fork/exec p50 (client)", "ms", series[0][0]), summarize("a bare fork/exec p99 (client)", "ms", series[0][1]),
			summarize("a spawn->closed p50", "ms", series[1][0]), summarize("a spawn->closed p99", "ms", series[1][1]),
			summarize("a spawn->closed p50 / bare", "x", ratio[0]),
			summarize("a idle round trip p50 (after a bare fork/exec)", "ms", series[3][0]),
			summarize("a spawn->closed p50 / (bare + idle round trip)", "x", ratio[2]))
		if sandboxed {
			out = append(out,
				summarize("a spawn->closed p50, "+sbName, "ms", series[2][0]), summarize("a spawn->closed p99, "+sbName, "ms", series[2][1]),
				summarize("a spawn->closed p50, "+sbName+" / bare", "x", ratio[1]))
		}
	}
	if want("b") {
		var rate, cpu []float64
		for i := 0; i < b.o.runs; i++ {
			b.progress.step("b streaming", i+1, b.o.runs)
			r, c, err := b.stream(ctx, b.o.streamBytes, false)
			if err != nil {
				return nil, fmt.Errorf("figure b: %w", err)
			}
			rate, cpu = append(rate, r), append(cpu, c)
		}
		out = append(out, summarize("b streaming", "MB/s", rate))
		if b.o.pid > 0 {
			out = append(out, summarize("b server CPU per GB", "s/GB", cpu))
		}
	}
	if want("c") {
		var wall []float64
		for i := 0; i < b.o.runs; i++ {
			b.progress.step("c 100 concurrent", i+1, b.o.runs)
			d, err := b.concurrent(ctx, 100, 1<<20)
			if err != nil {
				return nil, fmt.Errorf("figure c: %w", err)
			}
			wall = append(wall, ms(d))
		}
		out = append(out, summarize("c 100 x 1 MiB concurrent", "ms", wall))
	}
	if want("d") {
		var p50, p99 []float64
		for i := 0; i < b.o.runs; i++ {
			b.progress.step("d small RPC", i+1, b.o.runs)
			d, err := b.rpc(ctx)
			if err != nil {
				return nil, fmt.Errorf("figure d: %w", err)
			}
			p50 = append(p50, us(percentile(d, 0.50)))
			p99 = append(p99, us(percentile(d, 0.99)))
		}
		out = append(out, summarize("d small RPC p50", "us", p50), summarize("d small RPC p99", "us", p99))
	}
	if want("e") {
		var rate []float64
		for i := 0; i < b.o.runs; i++ {
			b.progress.step("e PTY streaming", i+1, b.o.runs)
			r, _, err := b.stream(ctx, b.o.ptyBytes, true)
			if err != nil {
				return nil, fmt.Errorf("figure e: %w", err)
			}
			rate = append(rate, r)
		}
		out = append(out, summarize("e PTY streaming", "MB/s", rate))
	}
	if want("f") {
		var rss, threads, kill []float64
		for i := 0; i < b.o.runs; i++ {
			b.progress.step("f idle children", i+1, b.o.runs)
			r, th, k, err := b.idle(ctx)
			if err != nil {
				return nil, fmt.Errorf("figure f: %w", err)
			}
			rss, threads, kill = append(rss, r), append(threads, th), append(kill, ms(k))
		}
		if b.o.pid > 0 {
			out = append(out, summarize(fmt.Sprintf("f RSS per idle child (%d)", b.o.idleN), "KiB", rss),
				summarize(fmt.Sprintf("f server threads with %d children", b.o.idleN), "threads", threads))
		}
		out = append(out, summarize(fmt.Sprintf("f terminate %d idle children", b.o.idleN), "ms", kill))
	}
	return out, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// spawnLatency times spawnN spawns of /bin/true each way, interleaved so
// that all three see the same load: a bare fork/exec by this process, a
// process/start without a sandbox, and (when sandboxed) one with
// b.spawnSandbox. It reports false for sandboxed when the server refused
// the sandbox (the series is then left out).
//
// The fourth series is the protocol's own floor for a spawn: one request
// and its answer (process/read of an unknown process) sent, like a
// process/start, right after a bare fork/exec, when the server has been
// idle for as long. A spawn->closed cannot take less than a bare fork/exec
// plus that round trip (a request in, a message out).
func (b *bencher) spawnLatency(ctx context.Context, sandboxed bool) ([4][]time.Duration, bool, error) {
	var out [4][]time.Duration
	bareRun := func() (time.Duration, error) {
		start := time.Now()
		p, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{})
		if err != nil {
			return 0, err
		}
		if _, err := p.Wait(); err != nil {
			return 0, err
		}
		return time.Since(start), nil
	}
	for i := 0; i < b.o.spawnN; i++ {
		if b.o.spawnPause > 0 {
			select {
			case <-time.After(b.o.spawnPause):
			case <-ctx.Done():
				return out, sandboxed, ctx.Err()
			}
		}
		d, err := bareRun()
		if err != nil {
			return out, sandboxed, err
		}
		out[0] = append(out[0], d)
		for k, sb := range []any{nil, b.spawnSandbox} {
			if k == 1 && !sandboxed {
				break
			}
			start := time.Now()
			bp, err := b.c.startWith(ctx, b.id("a"), []string{"/bin/true"}, false, sb)
			if err != nil && k == 1 && i == 0 && len(out[2]) == 0 {
				fmt.Fprintf(b.log, "runtimed bench: figure a: the server refused a sandboxed start (%v); leaving that series out\n", err)
				sandboxed = false
				break
			}
			if err != nil {
				return out, sandboxed, err
			}
			if err := waitClosed(ctx, bp); err != nil {
				return out, sandboxed, err
			}
			out[k+1] = append(out[k+1], time.Since(start))
		}
		if _, err := bareRun(); err != nil { // the same idle pause
			return out, sandboxed, err
		}
		start := time.Now()
		_, err = b.c.call(ctx, "process/read", map[string]any{"processId": "a-none", "afterSeq": 0, "maxBytes": 1, "waitMs": 0})
		var re *wire.Error
		if err != nil && !errors.As(err, &re) {
			return out, sandboxed, err
		}
		out[3] = append(out[3], time.Since(start))
	}
	return out, sandboxed, nil
}

func waitClosed(ctx context.Context, p *benchProc) error {
	select {
	case <-p.closed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stream returns MB/s of decoded output and the server's CPU s/GB.
func (b *bencher) stream(ctx context.Context, n int64, tty bool) (float64, float64, error) {
	cpu0 := procCPU(b.o.pid)
	start := time.Now()
	p, err := b.c.start(ctx, b.id("s"), []string{"head", "-c", strconv.FormatInt(n, 10), "/dev/zero"}, tty)
	if err != nil {
		return 0, 0, err
	}
	if err := waitClosed(ctx, p); err != nil {
		return 0, 0, err
	}
	el := time.Since(start)
	if p.bytes < n {
		return 0, 0, fmt.Errorf("received %d of %d bytes", p.bytes, n)
	}
	cpu := procCPU(b.o.pid) - cpu0
	return float64(p.bytes) / 1e6 / el.Seconds(), cpu / (float64(p.bytes) / 1e9), nil
}

func (b *bencher) concurrent(ctx context.Context, n int, each int64) (time.Duration, error) {
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Go(func() {
			p, err := b.c.start(ctx, b.id("c"), []string{"head", "-c", strconv.FormatInt(each, 10), "/dev/zero"}, false)
			if err == nil {
				err = waitClosed(ctx, p)
			}
			if err == nil && p.bytes != each {
				err = fmt.Errorf("process got %d of %d bytes", p.bytes, each)
			}
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return el, nil
}

func (b *bencher) rpc(ctx context.Context) ([]time.Duration, error) {
	id := b.id("d")
	p, err := b.c.start(ctx, id, []string{"/bin/true"}, false)
	if err != nil {
		return nil, err
	}
	if err := waitClosed(ctx, p); err != nil {
		return nil, err
	}
	var params any = map[string]any{"processId": id, "afterSeq": 0, "waitMs": 0}
	if b.o.rpcMethod != "process/read" {
		params = map[string]any{}
	}
	out := make([]time.Duration, 0, b.o.rpcN)
	for i := 0; i < b.o.rpcN; i++ {
		start := time.Now()
		if _, err := b.c.call(ctx, b.o.rpcMethod, params); err != nil {
			return nil, err
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}

// idle starts idleN sleeping children and returns RSS KiB per child,
// the server's thread count, and the time to terminate them all.
func (b *bencher) idle(ctx context.Context) (float64, float64, time.Duration, error) {
	rss0, _ := procStatus(b.o.pid)
	ids := make([]string, b.o.idleN)
	procs := make([]*benchProc, b.o.idleN)
	var wg sync.WaitGroup
	var firstErr atomic.Value
	sem := make(chan struct{}, 32)
	for i := range ids {
		ids[i] = b.id("f")
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			p, err := b.c.start(ctx, ids[i], []string{"sleep", "1000"}, false)
			if err != nil {
				firstErr.CompareAndSwap(nil, err)
				return
			}
			procs[i] = p
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, 0, 0, err
	}
	rss1, threads := procStatus(b.o.pid)
	start := time.Now()
	for i := range ids {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if _, err := b.c.call(ctx, "process/terminate", map[string]any{"processId": ids[i]}); err != nil {
				firstErr.CompareAndSwap(nil, err)
			}
		})
	}
	wg.Wait()
	for _, p := range procs {
		if err := waitClosed(ctx, p); err != nil {
			return 0, 0, 0, err
		}
	}
	kill := time.Since(start)
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, 0, 0, err
	}
	return float64(rss1-rss0) / float64(b.o.idleN), float64(threads), kill, nil
}

// procCPU returns the user+system CPU seconds of pid (0 if unknown).
func procCPU(pid int) float64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	fields := strings.Fields(s[i+1:])
	if len(fields) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(fields[11], 64)
	st, _ := strconv.ParseFloat(fields[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// procStatus returns VmRSS in KiB and the thread count of pid.
func procStatus(pid int) (int64, int64) {
	if pid <= 0 {
		return 0, 0
	}
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	var rss, threads int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			rss, _ = strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			threads, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return rss, threads
}

type spawnedServer struct {
	cmd   *exec.Cmd
	url   string
	stdio wire.Transport
}

func spawnServer(ctx context.Context, command string, stdio bool, stderr io.Writer) (*spawnedServer, error) {
	cmd := exec.Command("/bin/sh", "-c", "exec "+command)
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &spawnedServer{cmd: cmd}
	if stdio {
		s.stdio = wire.NewStdioTransport(out, in, 256<<20)
		return s, nil
	}
	lines := bufio.NewReader(out)
	deadline := time.AfterFunc(30*time.Second, func() { _ = cmd.Process.Kill() })
	defer deadline.Stop()
	for {
		line, err := lines.ReadString('\n')
		if i := strings.Index(line, "ws://"); i >= 0 {
			s.url = strings.Fields(line[i:])[0]
			go func() { _, _ = io.Copy(io.Discard, lines) }()
			return s, nil
		}
		if err != nil {
			s.stop()
			return nil, fmt.Errorf("server printed no ws:// URL: %v", err)
		}
	}
}

func (s *spawnedServer) stop() {
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// benchDialOptions reads the token (file, else RUNTIMED_AUTH_TOKEN) and
// the trusted CA of --connect.
func benchDialOptions(tokenFile, caFile string) (http.Header, *tls.Config, error) {
	header := http.Header{}
	token := os.Getenv("RUNTIMED_AUTH_TOKEN")
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return nil, nil, fmt.Errorf("--token-file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	if token != "" {
		header.Set("Authorization", "Bearer "+token)
	}
	if caFile == "" {
		return header, nil, nil
	}
	tc, err := runtime.LoadCA(caFile)
	if err != nil {
		return nil, nil, fmt.Errorf("--ca: %w", err)
	}
	return header, tc, nil
}
