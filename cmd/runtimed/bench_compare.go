package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/runtimed/runtimed/wire"
)

// Side-by-side round trips (issue 17): `runtimed bench --spawn A --vs B
// --echo` measures the small request round trip of A, of B (the reference
// exec-server) and of a bare Go websocket JSON-RPC echo server, in one run,
// interleaved (each run measures every target in turn), so that the load
// of a shared machine falls on all of them alike. The echo server is this
// binary in a hidden mode (`runtimed bench --serve-echo`), a process of its
// own like the others.

// compareTarget is one server of a comparison.
type compareTarget struct {
	name    string
	srv     *spawnedServer
	c       *benchClient
	idleID  string   // an exited process for process/read (not on the echo)
	methods []string // the requests timed
}

var compareMethods = []string{"process/read", "environment/status"}

func compareCmd(ctx context.Context, o benchOpts, spawn, vs string, echo, jsonOut bool, stdout, stderr io.Writer) int {
	var targets []*compareTarget
	defer func() {
		for _, t := range targets {
			if t.c != nil {
				t.c.close()
			}
			t.srv.stop()
		}
	}()
	add := func(name, cmd string, methods []string) error {
		srv, err := spawnServer(ctx, cmd, false, stderr)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		t := &compareTarget{name: name, srv: srv, methods: slices.Clone(methods)}
		targets = append(targets, t)
		tr, err := wire.DialWebsocket(ctx, srv.url, nil, 256<<20)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		// Inline: each request's answer is read by the caller, not handed
		// over by a reader goroutine (a hop that costs ~25 µs and noise per
		// round trip on a loaded machine), for every target alike.
		if t.c, err = newBenchClient(ctx, tr, false, true); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if len(methods) > 1 {
			t.idleID = "d-idle"
			if _, err := t.c.start(ctx, t.idleID, []string{"/bin/true"}, false); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if err := waitEnded(ctx, t.c, t.idleID); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		return nil
	}
	if err := add("runtimed", spawn, compareMethods); err != nil {
		fmt.Fprintln(stderr, "runtimed bench:", err)
		return 1
	}
	if vs != "" {
		if err := add("vs", vs, compareMethods); err != nil {
			fmt.Fprintln(stderr, "runtimed bench:", err)
			return 1
		}
	}
	if echo {
		self, err := os.Executable()
		if err != nil {
			fmt.Fprintln(stderr, "runtimed bench:", err)
			return 1
		}
		if err := add("echo", shellQuote(self)+" bench --serve-echo", []string{"environment/status"}); err != nil {
			fmt.Fprintln(stderr, "runtimed bench:", err)
			return 1
		}
	}
	// samples[target][method] = per-run p50 and p99 in µs.
	type stat struct{ p50, p99 []float64 }
	samples := make([]map[string]*stat, len(targets))
	for i := range samples {
		samples[i] = map[string]*stat{}
	}
	progress := newProgress(stderr)
	for run := 0; run < o.runs; run++ {
		progress.step("d small RPC, side by side", run+1, o.runs)
		for i, t := range targets {
			for _, m := range t.methods {
				d, err := roundTrips(ctx, t.c, m, t.idleID, o.rpcN)
				var re *wire.Error
				if errors.As(err, &re) && re.Code == wire.CodeMethodNotFound && i > 0 {
					// A server of an older generation without this method
					// (Codex 0.135 has no environment/status): left out.
					t.methods = slices.DeleteFunc(t.methods, func(x string) bool { return x == m })
					break
				}
				if err != nil {
					progress.done()
					fmt.Fprintf(stderr, "runtimed bench: %s %s: %v\n", t.name, m, err)
					return 1
				}
				s := samples[i][m]
				if s == nil {
					s = &stat{}
					samples[i][m] = s
				}
				s.p50 = append(s.p50, us(percentile(d, 0.50)))
				s.p99 = append(s.p99, us(percentile(d, 0.99)))
			}
		}
	}
	progress.done()
	var results []benchResult
	median := func(t int, m string, p99 bool) (float64, bool) {
		s := samples[t][m]
		if s == nil {
			if m == "process/read" || targets[t].name != "echo" {
				return 0, false
			}
			s = samples[t]["environment/status"]
		}
		if p99 {
			return summarize("", "", s.p99).Median, true
		}
		return summarize("", "", s.p50).Median, true
	}
	for _, m := range compareMethods {
		for _, q := range []string{"p50", "p99"} {
			for i, t := range targets {
				s := samples[i][m]
				if s == nil {
					continue
				}
				v := s.p50
				if q == "p99" {
					v = s.p99
				}
				results = append(results, summarize(fmt.Sprintf("d %s %s %s", m, q, t.name), "us", v))
			}
			base, _ := median(0, m, q == "p99")
			for i, t := range targets[1:] {
				other, ok := median(i+1, m, q == "p99")
				if !ok || other == 0 {
					continue
				}
				results = append(results, benchResult{Name: fmt.Sprintf("d %s %s runtimed/%s", m, q, t.name), Unit: "x", Median: base / other, Min: base / other, Max: base / other})
			}
		}
	}
	if jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(results)
		return 0
	}
	for _, r := range results {
		if r.Unit == "x" {
			fmt.Fprintf(stdout, "%-44s %12.2f  (ratio of the medians) %s\n", r.Name, r.Median, r.Unit)
			continue
		}
		fmt.Fprintf(stdout, "%-44s %12s  (min %s, max %s) %s\n", r.Name, fmtVal(r.Median, r.Unit), fmtVal(r.Min, r.Unit), fmtVal(r.Max, r.Unit), r.Unit)
	}
	return 0
}

// waitEnded waits until process id has ended by long-polling process/read
// on c (an inline client: nobody else reads its notifications).
func waitEnded(ctx context.Context, c *benchClient, id string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var after uint64
	for {
		raw, err := c.call(ctx, "process/read", map[string]any{"processId": id, "afterSeq": after, "waitMs": 1000})
		if err != nil {
			return err
		}
		var r wire.ReadResult
		if err := json.Unmarshal(raw, &r); err != nil {
			return fmt.Errorf("process/read result %s: %w", raw, err)
		}
		if r.Closed || r.Exited {
			return nil
		}
		if r.NextSeq > 0 {
			after = r.NextSeq - 1
		}
	}
}

// roundTrips times n requests of method, one at a time.
func roundTrips(ctx context.Context, c *benchClient, method, idleID string, n int) ([]time.Duration, error) {
	var params any = map[string]any{}
	if method == "process/read" {
		params = map[string]any{"processId": idleID, "afterSeq": 0, "waitMs": 0}
	}
	out := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if _, err := c.call(ctx, method, params); err != nil {
			return nil, err
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// serveEcho is the bare Go websocket JSON-RPC echo: it answers every
// request with {"id": its id, "result": {}}, decoding and encoding with
// encoding/json, one connection goroutine, no queues. It prints its URL
// and serves until killed.
func serveEcho(stdout, stderr io.Writer) int {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(stderr, "runtimed bench --serve-echo:", err)
		return 1
	}
	fmt.Fprintf(stdout, "ws://%s\n", l.Addr())
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
		if err != nil {
			return
		}
		c.SetReadLimit(64 << 20)
		ctx := context.Background()
		type request struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		type response struct {
			ID     json.RawMessage `json:"id"`
			Result struct{}        `json:"result"`
		}
		for {
			_, b, err := c.Read(ctx)
			if err != nil {
				return
			}
			var req request
			if json.Unmarshal(b, &req) != nil || req.ID == nil {
				continue // notifications get no answer
			}
			out, _ := json.Marshal(response{ID: req.ID})
			if c.Write(ctx, websocket.MessageText, out) != nil {
				return
			}
		}
	})
	err = http.Serve(l, h)
	if err != nil && !errors.Is(err, net.ErrClosed) {
		fmt.Fprintln(stderr, "runtimed bench --serve-echo:", err)
		return 1
	}
	return 0
}
