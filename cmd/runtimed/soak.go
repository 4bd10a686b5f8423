package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runtimed/runtimed/wire"
)

// soakOpts configure `runtimed bench --soak`: phases of hostile and careless
// clients against one server, each measured and cleaned up before the next.
type soakOpts struct {
	url          string
	pid          int
	idle         int           // idle connections (initialized, then silent)
	slow         int           // connections that start a fast producer and never read
	slowFor      time.Duration // how long the slow phase lasts
	greedy       int           // connections that start processes until refused
	greedyProcs  int           // starts each greedy connection attempts
	large        int           // connections that each send one large request
	largeBytes   int           // size of each large request
	largeMethod  string        // process/write (a chunk to cat) or environment/status (an unknown parameter)
	largeSettle  time.Duration // wait after the large answers before measuring
	fdSettle     time.Duration // wait after terminating the greedy processes before counting fds
	statusPeriod time.Duration // how often the well-behaved client asks environment/status
}

// soakReport is what the soak measures. RSS in KiB, latency in ms.
type soakReport struct {
	BaselineRSSKiB int64 `json:"baselineRssKiB"`
	BaselineFDs    int   `json:"baselineFds"`

	Idle            int     `json:"idle"`
	IdleRSSKiB      int64   `json:"idleRssKiB"`
	IdlePerConnKiB  float64 `json:"idlePerConnKiB"`
	IdleFDs         int     `json:"idleFds"`
	IdleStatusP50   float64 `json:"idleStatusP50Ms"`
	IdleStatusP99   float64 `json:"idleStatusP99Ms"`
	IdleStatusCount int     `json:"idleStatusCount"`

	Slow            int     `json:"slow"`
	SlowPeakRSSKiB  int64   `json:"slowPeakRssKiB"`
	SlowFDs         int     `json:"slowFds"`
	SlowStatusP50   float64 `json:"slowStatusP50Ms"`
	SlowStatusP99   float64 `json:"slowStatusP99Ms"`
	SlowStatusMax   float64 `json:"slowStatusMaxMs"`
	SlowStatusCount int     `json:"slowStatusCount"`
	SlowClosed      int     `json:"slowClosedByServer"` // slow connections the server closed during the phase

	Greedy            int     `json:"greedy"`
	GreedyStarted     int     `json:"greedyStarted"`
	GreedyRefused     int     `json:"greedyRefused"`
	GreedyFirstRefusa string  `json:"greedyFirstRefusal"`
	GreedyOtherErrors int     `json:"greedyOtherErrors"` // refusals that are not a budget error (e.g. EMFILE)
	GreedyOtherError  string  `json:"greedyOtherError"`
	GreedyPeakFDs     int     `json:"greedyPeakFds"`
	GreedyPeakRSSKiB  int64   `json:"greedyPeakRssKiB"`
	FreshStartOK      bool    `json:"freshStartOk"` // a new connection's first start while the greedy ones hold their processes
	FreshStartError   string  `json:"freshStartError"`
	FreshStartMs      float64 `json:"freshStartMs"`
	FDsAfterTerminate int     `json:"fdsAfterTerminate"`

	Large            int    `json:"large"`
	LargeBytes       int    `json:"largeBytes"`
	LargeMethod      string `json:"largeMethod"`
	LargeErrors      int    `json:"largeErrors"`
	LargePeakRSSKiB  int64  `json:"largePeakRssKiB"`
	LargeSettledKiB  int64  `json:"largeSettledRssKiB"`
	LargeSettleAfter int64  `json:"largeSettleMs"`
}

func runSoak(ctx context.Context, o soakOpts, log io.Writer) (*soakReport, error) {
	r := &soakReport{}
	dial := func(ctx context.Context) (wire.Transport, error) {
		return wire.DialWebsocket(ctx, o.url, nil, 256<<20)
	}
	t, err := dial(ctx)
	if err != nil {
		return nil, err
	}
	good, err := newBenchClient(ctx, t, true, false)
	if err != nil {
		return nil, err
	}
	defer good.close()
	r.BaselineRSSKiB, _ = procStatus(o.pid)
	r.BaselineFDs = countFDs(o.pid)
	period := o.statusPeriod
	if period <= 0 {
		period = 10 * time.Millisecond
	}

	if o.idle > 0 {
		fmt.Fprintf(log, "soak: %d idle connections\n", o.idle)
		conns, err := openSessions(ctx, dial, o.idle)
		if err != nil {
			closeAll(conns)
			return nil, fmt.Errorf("idle: %w", err)
		}
		settle(ctx, time.Second)
		r.Idle = o.idle
		r.IdleRSSKiB, _ = procStatus(o.pid)
		r.IdlePerConnKiB = float64(r.IdleRSSKiB-r.BaselineRSSKiB) / float64(o.idle)
		r.IdleFDs = countFDs(o.pid)
		lat := statusLoop(ctx, good, period, time.Second, nil)
		r.IdleStatusP50, r.IdleStatusP99, _ = latencies(lat)
		r.IdleStatusCount = len(lat)
		closeAll(conns)
	}

	if o.slow > 0 {
		fmt.Fprintf(log, "soak: %d slow connections with a fast producer each, for %v\n", o.slow, o.slowFor)
		conns, err := openSessions(ctx, dial, o.slow)
		if err != nil {
			closeAll(conns)
			return nil, fmt.Errorf("slow: %w", err)
		}
		for i, c := range conns {
			// The start answer is read; after it nothing is.
			if _, err := c.call(ctx, "process/start", startParams("slow-"+strconv.Itoa(i), []string{"cat", "/dev/zero"}, false)); err != nil {
				closeAll(conns)
				return nil, fmt.Errorf("slow start: %w", err)
			}
		}
		var peak atomic.Int64
		lat := statusLoop(ctx, good, period, o.slowFor, func() {
			if rss, _ := procStatus(o.pid); rss > peak.Load() {
				peak.Store(rss)
			}
		})
		r.Slow = o.slow
		r.SlowPeakRSSKiB = peak.Load()
		r.SlowFDs = countFDs(o.pid)
		r.SlowStatusP50, r.SlowStatusP99, r.SlowStatusMax = latencies(lat)
		r.SlowStatusCount = len(lat)
		for _, c := range conns {
			if c.closedByServer() {
				r.SlowClosed++
			}
		}
		// Terminate the producers from the well-behaved side is impossible
		// (other sessions); reconnecting would need reads. Closing the
		// connections detaches their sessions; terminate through each.
		for i, c := range conns {
			c.send(ctx, "process/terminate", map[string]any{"processId": "slow-" + strconv.Itoa(i)})
		}
		closeAll(conns)
	}

	if o.greedy > 0 {
		fmt.Fprintf(log, "soak: %d greedy connections starting up to %d processes each\n", o.greedy, o.greedyProcs)
		conns, err := openSessions(ctx, dial, o.greedy)
		if err != nil {
			closeAll(conns)
			return nil, fmt.Errorf("greedy: %w", err)
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, c := range conns {
			wg.Go(func() {
				ok, refused, other, first, otherMsg := c.greedyStarts(ctx, o.greedyProcs)
				mu.Lock()
				defer mu.Unlock()
				r.GreedyStarted += ok
				r.GreedyRefused += refused
				r.GreedyOtherErrors += other
				if r.GreedyFirstRefusa == "" {
					r.GreedyFirstRefusa = first
				}
				if r.GreedyOtherError == "" {
					r.GreedyOtherError = otherMsg
				}
			})
		}
		wg.Wait()
		r.Greedy = o.greedy
		r.GreedyPeakFDs = countFDs(o.pid)
		r.GreedyPeakRSSKiB, _ = procStatus(o.pid)
		// A new connection's first start while the greedy ones hold everything.
		start := time.Now()
		fresh, err := openSessions(ctx, dial, 1)
		if err == nil {
			_, err = fresh[0].call(ctx, "process/start", startParams("fresh", []string{"/bin/true"}, false))
		}
		r.FreshStartMs = ms(time.Since(start))
		r.FreshStartOK = err == nil
		if err != nil {
			r.FreshStartError = err.Error()
		}
		closeAll(fresh)
		for _, c := range conns {
			wg.Go(func() { c.terminateAll(ctx) })
		}
		wg.Wait()
		closeAll(conns)
		settle(ctx, o.fdSettle)
		r.FDsAfterTerminate = countFDs(o.pid)
	}

	if o.large > 0 {
		fmt.Fprintf(log, "soak: %d connections sending one %d-byte request each\n", o.large, o.largeBytes)
		conns, err := openSessions(ctx, dial, o.large)
		if err != nil {
			closeAll(conns)
			return nil, fmt.Errorf("large: %w", err)
		}
		var peak atomic.Int64
		stopSample := make(chan struct{})
		var sampler sync.WaitGroup
		sampler.Go(func() {
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-tick.C:
					if rss, _ := procStatus(o.pid); rss > peak.Load() {
						peak.Store(rss)
					}
				case <-stopSample:
					return
				}
			}
		})
		var errs atomic.Int64
		var wg sync.WaitGroup
		for i, c := range conns {
			wg.Go(func() {
				if err := c.largeRequest(ctx, "large-"+strconv.Itoa(i), o.largeMethod, o.largeBytes); err != nil {
					fmt.Fprintf(log, "soak: large request: %v\n", err)
					errs.Add(1)
				}
			})
		}
		wg.Wait()
		close(stopSample)
		sampler.Wait()
		settle(ctx, o.largeSettle)
		r.Large = o.large
		r.LargeBytes = o.largeBytes
		r.LargeMethod = o.largeMethod
		r.LargeErrors = int(errs.Load())
		r.LargePeakRSSKiB = peak.Load()
		r.LargeSettledKiB, _ = procStatus(o.pid)
		r.LargeSettleAfter = o.largeSettle.Milliseconds()
		closeAll(conns)
	}
	return r, ctx.Err()
}

func settle(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

// statusLoop times environment/status on the well-behaved client every
// period for d, calling sample (if set) between requests.
func statusLoop(ctx context.Context, c *benchClient, period, d time.Duration, sample func()) []time.Duration {
	var out []time.Duration
	end := time.Now().Add(d)
	tick := time.NewTicker(period)
	defer tick.Stop()
	for time.Now().Before(end) && ctx.Err() == nil {
		start := time.Now()
		if _, err := c.call(ctx, "environment/status", nil); err != nil {
			break
		}
		out = append(out, time.Since(start))
		if sample != nil {
			sample()
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
	return out
}

func latencies(d []time.Duration) (p50, p99, maxMs float64) {
	if len(d) == 0 {
		return 0, 0, 0
	}
	return ms(percentile(d, 0.50)), ms(percentile(d, 0.99)), ms(percentile(d, 1))
}

// countFDs counts the open descriptors of pid (0 if unknown).
func countFDs(pid int) int {
	if pid <= 0 {
		return 0
	}
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return 0
	}
	return len(ents)
}

func startParams(id string, argv []string, pipeStdin bool) map[string]any {
	return map[string]any{
		"processId": id, "argv": argv, "cwd": "/", "tty": false, "pipeStdin": pipeStdin,
		"env": map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin"},
	}
}

// rawConn is a hostile client's connection: requests are written and
// answers read only when the scenario says so (a slow client stops
// reading). Owned by one goroutine at a time.
type rawConn struct {
	t      wire.Transport
	nextID int64
	lost   atomic.Bool // a read or write failed: the server closed it
}

func openSessions(ctx context.Context, dial func(context.Context) (wire.Transport, error), n int) ([]*rawConn, error) {
	conns := make([]*rawConn, 0, n)
	for range n {
		t, err := dial(ctx)
		if err != nil {
			return conns, err
		}
		c := &rawConn{t: t}
		conns = append(conns, c)
		if _, err := c.call(ctx, "initialize", map[string]any{"clientName": "runtimed-soak"}); err != nil {
			return conns, err
		}
		if err := c.write(ctx, []byte(`{"method":"initialized","params":{}}`)); err != nil {
			return conns, err
		}
	}
	return conns, nil
}

func closeAll(conns []*rawConn) {
	for _, c := range conns {
		c.t.Close()
	}
}

func (c *rawConn) closedByServer() bool {
	if c.lost.Load() {
		return true
	}
	// A short read: a closed connection reports an error at once; an open
	// one with data pending (a slow client's backlog) returns a message.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.t.ReadMessage(ctx)
	return err != nil && ctx.Err() == nil
}

func (c *rawConn) write(ctx context.Context, b []byte) error {
	err := c.t.WriteMessage(ctx, b)
	if err == nil {
		err = c.t.Flush()
	}
	if err != nil {
		c.lost.Store(true)
	}
	return err
}

// send writes a request without waiting for its answer.
func (c *rawConn) send(ctx context.Context, method string, params any) int64 {
	c.nextID++
	b, _ := wire.AppendRequest(nil, wire.IntID(c.nextID), method, params)
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_ = c.write(wctx, b)
	return c.nextID
}

// call writes a request and reads until its answer, skipping everything else.
func (c *rawConn) call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	c.nextID++
	id := c.nextID
	b, err := wire.AppendRequest(nil, wire.IntID(id), method, params)
	if err != nil {
		return nil, err
	}
	if err := c.write(ctx, b); err != nil {
		return nil, err
	}
	return c.await(ctx, id)
}

func (c *rawConn) await(ctx context.Context, id int64) (json.RawMessage, error) {
	want := []byte(`{"id":` + strconv.FormatInt(id, 10) + `,`)
	for {
		msg, err := c.t.ReadMessage(ctx)
		if err != nil {
			c.lost.Store(true)
			return nil, err
		}
		if !bytes.HasPrefix(msg, want) {
			continue
		}
		var env struct {
			Result json.RawMessage `json:"result"`
			Error  *wire.Error     `json:"error"`
		}
		if err := json.Unmarshal(msg, &env); err != nil {
			return nil, err
		}
		if env.Error != nil {
			return nil, env.Error
		}
		return append(json.RawMessage(nil), env.Result...), nil
	}
}

// greedyStarts pipelines n starts of idle children and counts the answers.
func (c *rawConn) greedyStarts(ctx context.Context, n int) (ok, refused, other int, firstRefusal, otherMsg string) {
	firstID := c.nextID + 1
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < n; i++ {
			msg, err := c.t.ReadMessage(ctx)
			if err != nil {
				c.lost.Store(true)
				return
			}
			var env struct {
				ID    *int64      `json:"id"`
				Error *wire.Error `json:"error"`
			}
			if json.Unmarshal(msg, &env) != nil || env.ID == nil || *env.ID < firstID {
				i--
				continue
			}
			switch {
			case env.Error == nil:
				ok++
			case env.Error.Code == wire.CodeBudgetExceeded:
				refused++
				if firstRefusal == "" {
					firstRefusal = env.Error.Message
				}
			default:
				other++
				if otherMsg == "" {
					otherMsg = env.Error.Message
				}
			}
		}
	}()
	for i := 0; i < n; i++ {
		c.nextID++
		b, _ := wire.AppendRequest(nil, wire.IntID(c.nextID), "process/start", startParams("g-"+strconv.Itoa(i), []string{"sleep", "1000"}, false))
		if c.write(ctx, b) != nil {
			break
		}
	}
	<-done
	return
}

// terminateAll kills every process of the session (SIGKILL) and waits for
// the answers.
func (c *rawConn) terminateAll(ctx context.Context) {
	res, err := c.call(ctx, "process/list", nil)
	if err != nil {
		return
	}
	var list struct {
		Processes []struct {
			ProcessID string `json:"processId"`
		} `json:"processes"`
	}
	if json.Unmarshal(res, &list) != nil {
		return
	}
	last := int64(0)
	for _, p := range list.Processes {
		last = c.send(ctx, "process/terminate", map[string]any{"processId": p.ProcessID, "graceMs": 0})
	}
	if last > 0 {
		_, _ = c.await(ctx, last)
	}
}

// largeRequest sends one request of about size bytes and waits for the
// answer: a process/write (a base64 chunk) to a child that discards its
// stdin, or an environment/status whose unknown parameter holds the bytes.
func (c *rawConn) largeRequest(ctx context.Context, id, method string, size int) error {
	status := method == "environment/status"
	if !status {
		if _, err := c.call(ctx, "process/start", startParams(id, []string{"sh", "-c", "cat >/dev/null"}, true)); err != nil {
			return err
		}
	}
	raw := size * 3 / 4
	var b strings.Builder
	b.Grow(size + 128)
	c.nextID++
	reqID := c.nextID
	if status {
		fmt.Fprintf(&b, `{"id":%d,"method":"environment/status","params":{"padding":"`, reqID)
	} else {
		fmt.Fprintf(&b, `{"id":%d,"method":"process/write","params":{"processId":%q,"chunk":"`, reqID, id)
	}
	enc := base64.NewEncoder(base64.StdEncoding, &b)
	zeros := make([]byte, 64<<10)
	for left := raw; left > 0; left -= len(zeros) {
		_, _ = enc.Write(zeros[:min(left, len(zeros))])
	}
	_ = enc.Close()
	b.WriteString(`"}}`)
	if err := c.write(ctx, []byte(b.String())); err != nil {
		return err
	}
	if _, err := c.await(ctx, reqID); err != nil {
		return err
	}
	if status {
		return nil
	}
	_, err := c.call(ctx, "process/closeStdin", map[string]any{"processId": id})
	return err
}

var errSoakUsage = errors.New("soak: give --connect URL and --pid, or --spawn")

func soakCmd(ctx context.Context, o soakOpts, connect, spawn string, stdio bool, url string, jsonOut bool, stdout, stderr io.Writer) int {
	if stdio {
		fmt.Fprintln(stderr, "runtimed bench --soak: the soak needs a websocket server (many connections), not --stdio")
		return 2
	}
	if o.pid <= 0 {
		fmt.Fprintln(stderr, "runtimed bench --soak:", errSoakUsage)
		return 2
	}
	if o.largeMethod != "process/write" && o.largeMethod != "environment/status" {
		fmt.Fprintf(stderr, "runtimed bench --soak: --large-method %q: expected process/write or environment/status\n", o.largeMethod)
		return 2
	}
	o.url = url
	r, err := runSoak(ctx, o, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "runtimed bench --soak:", err)
		return 1
	}
	if jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(r)
		return 0
	}
	fmt.Fprintf(stdout, "baseline                          RSS %7.1f MiB  fds %d\n", mib(r.BaselineRSSKiB), r.BaselineFDs)
	if r.Idle > 0 {
		fmt.Fprintf(stdout, "%4d idle connections             RSS %7.1f MiB  fds %d  per connection %.1f KiB  status p50 %.2f ms p99 %.2f ms\n",
			r.Idle, mib(r.IdleRSSKiB), r.IdleFDs, r.IdlePerConnKiB, r.IdleStatusP50, r.IdleStatusP99)
	}
	if r.Slow > 0 {
		fmt.Fprintf(stdout, "%4d slow connections (producers) peak RSS %7.1f MiB  fds %d  status p50 %.2f ms p99 %.2f ms max %.2f ms (%d samples)  closed by server %d\n",
			r.Slow, mib(r.SlowPeakRSSKiB), r.SlowFDs, r.SlowStatusP50, r.SlowStatusP99, r.SlowStatusMax, r.SlowStatusCount, r.SlowClosed)
	}
	if r.Greedy > 0 {
		fmt.Fprintf(stdout, "%4d greedy connections           started %d  refused %d (%q)  other errors %d (%q)  peak fds %d  peak RSS %.1f MiB\n",
			r.Greedy, r.GreedyStarted, r.GreedyRefused, r.GreedyFirstRefusa, r.GreedyOtherErrors, r.GreedyOtherError, r.GreedyPeakFDs, mib(r.GreedyPeakRSSKiB))
		fmt.Fprintf(stdout, "     a fresh connection's first start: ok=%v %.1f ms %s;  fds %v after terminating: %d\n",
			r.FreshStartOK, r.FreshStartMs, r.FreshStartError, o.fdSettle, r.FDsAfterTerminate)
	}
	if r.Large > 0 {
		fmt.Fprintf(stdout, "%4d x %d-byte %s requests  peak RSS %7.1f MiB  RSS %d ms later %.1f MiB  errors %d\n",
			r.Large, r.LargeBytes, r.LargeMethod, mib(r.LargePeakRSSKiB), r.LargeSettleAfter, mib(r.LargeSettledKiB), r.LargeErrors)
	}
	return 0
}

func mib(kib int64) float64 { return float64(kib) / 1024 }
