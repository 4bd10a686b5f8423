package main_test

// The memory and latency figures of issue 14, reproduced against the real binary by its own soak
// benchmark (`runtimed bench --soak`, a separate process that is not race-instrumented) and asserted.
// These tests are not parallel: they measure the server while nothing else of this package runs.
// Counts are scaled down where a smaller run proves the same bound (each test says so).

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/runtimed/runtimed/wire/wiretest"
)

// soakReport is the part of `runtimed bench --soak --json` these tests read.
type soakReport struct {
	BaselineRSSKiB int64 `json:"baselineRssKiB"`

	Idle           int     `json:"idle"`
	IdlePerConnKiB float64 `json:"idlePerConnKiB"`

	Slow            int     `json:"slow"`
	SlowPeakRSSKiB  int64   `json:"slowPeakRssKiB"`
	SlowStatusP50   float64 `json:"slowStatusP50Ms"`
	SlowStatusP99   float64 `json:"slowStatusP99Ms"`
	SlowStatusCount int     `json:"slowStatusCount"`

	Greedy            int    `json:"greedy"`
	GreedyStarted     int    `json:"greedyStarted"`
	GreedyRefused     int    `json:"greedyRefused"`
	GreedyFirstRefusa string `json:"greedyFirstRefusal"`
	GreedyOtherErrors int    `json:"greedyOtherErrors"`
	GreedyOtherError  string `json:"greedyOtherError"`
	FreshStartOK      bool   `json:"freshStartOk"`
	FreshStartError   string `json:"freshStartError"`

	Large           int   `json:"large"`
	LargeErrors     int   `json:"largeErrors"`
	LargePeakRSSKiB int64 `json:"largePeakRssKiB"`
	LargeSettledKiB int64 `json:"largeSettledRssKiB"`
}

// soak runs the soak benchmark against a server; every phase not named in args is off.
func soak(t *testing.T, url string, pid int, args ...string) soakReport {
	t.Helper()
	all := []string{"bench", "--soak", "--json", "--connect", url, "--pid", strconv.Itoa(pid),
		"--idle-clients", "0", "--slow-clients", "0", "--greedy-clients", "0", "--large-clients", "0", "--fd-settle", "0s"}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(all, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("runtimed bench --soak %v: %v\n%s", args, err, stderr.String())
	}
	var r soakReport
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("soak report %q: %v", stdout.String(), err)
	}
	var compact bytes.Buffer
	_ = json.Compact(&compact, stdout.Bytes())
	t.Logf("soak %v: %s", args, compact.String())
	return r
}

// 50 connections that each start a fast producer (cat /dev/zero) and never read: the server's RSS
// stays within 1 GiB and a well-behaved client's environment/status p99 within 50 ms (issue 14; it was
// 3.8 GiB and 410 ms). The full count: the producers block on their pipes once the outbound budget
// is full, so the run costs little CPU.
func TestSoakSlowClients(t *testing.T) {
	srv := wiretest.StartWS(t, bin, "--log-level", "warn")
	r := soak(t, srv.URL, srv.Pid(), "--slow-clients", "50", "--slow-for", "6s")
	if r.Slow != 50 || r.SlowStatusCount < 50 {
		t.Fatalf("the soak did not run its slow phase: %+v", r)
	}
	if mib := r.SlowPeakRSSKiB >> 10; mib > 1024 {
		t.Errorf("peak RSS %d MiB with 50 non-reading connections; want <= 1024 MiB", mib)
	}
	if r.SlowStatusP99 > 50 {
		t.Errorf("environment/status p99 %.1f ms (p50 %.1f ms) beside 50 non-reading connections; want <= 50 ms", r.SlowStatusP99, r.SlowStatusP50)
	}
}

// An idle connection (initialized, then silent) costs at most 32 KiB of server RSS (it was ~90 KiB).
// 400 connections: enough that RSS noise (a few hundred KiB) is under 1 KiB per connection.
func TestSoakIdleConnections(t *testing.T) {
	srv := wiretest.StartWS(t, bin, "--log-level", "warn")
	r := soak(t, srv.URL, srv.Pid(), "--idle-clients", "400")
	if r.Idle != 400 {
		t.Fatalf("the soak did not run its idle phase: %+v", r)
	}
	if r.IdlePerConnKiB > 32 {
		t.Errorf("an idle connection costs %.1f KiB; want <= 32 KiB", r.IdlePerConnKiB)
	}
}

// Large requests, answered, then idle: RSS is back under 300 MiB five seconds later (it was 2.6 GiB
// after twenty 60 MB requests). Scaled to six 60 MB requests: the release (read buffers dropped after
// the message, the collector run and memory returned once the requests are done) does not depend on
// the count, and six already take the peak past 700 MiB.
func TestSoakLargeRequests(t *testing.T) {
	srv := wiretest.StartWS(t, bin, "--log-level", "warn")
	r := soak(t, srv.URL, srv.Pid(), "--large-clients", "6", "--large-bytes", "60000000", "--large-settle", "5s")
	if r.Large != 6 || r.LargeErrors != 0 {
		t.Fatalf("large requests failed: %+v", r)
	}
	if r.LargePeakRSSKiB < 400<<10 {
		t.Logf("peak RSS only %d MiB: the requests may not have overlapped", r.LargePeakRSSKiB>>10)
	}
	if mib := r.LargeSettledKiB >> 10; mib > 300 {
		t.Errorf("RSS %d MiB five seconds after the large requests (peak %d MiB); want <= 300 MiB", mib, r.LargePeakRSSKiB>>10)
	}
}

// Two greedy sessions start processes until refused, on a server with 512 descriptors (scaled from
// 4096 starts each at 20 000 descriptors: the budget and its reserve scale with the limit). Every
// refusal is the budget's -32011, never "too many open files", and a third connection's first start
// works meanwhile (it failed with pipe2: too many open files).
func TestSoakGreedyClients(t *testing.T) {
	srv, url := startUlimitWS(t, 512, "--log-level", "warn")
	r := soak(t, url, srv.Pid(), "--greedy-clients", "2", "--greedy-procs", "300")
	if r.Greedy != 2 || r.GreedyStarted == 0 {
		t.Fatalf("the soak did not run its greedy phase: %+v", r)
	}
	if r.GreedyRefused == 0 {
		t.Errorf("600 starts on 512 descriptors were all accepted")
	}
	if r.GreedyOtherErrors != 0 {
		t.Errorf("%d starts failed otherwise than by a budget, e.g. %q", r.GreedyOtherErrors, r.GreedyOtherError)
	}
	if !r.FreshStartOK {
		t.Errorf("a new connection's first start failed while greedy sessions were refused: %s", r.FreshStartError)
	}
	t.Logf("greedy: %d started, %d refused with %q", r.GreedyStarted, r.GreedyRefused, r.GreedyFirstRefusa)
}
