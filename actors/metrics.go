package actors

import (
	"bytes"
	"time"

	"go.uber.org/zap"

	"github.com/runtimed/runtimed/actors/fsops"
	"github.com/runtimed/runtimed/wire"
)

// Metrics receives the measurements the actors take. Package runtime
// implements it over a Prometheus registry of its own; actors never import
// Prometheus. Implementations must be safe for concurrent use (every actor
// calls them from its own goroutine) and must not block: they are called on
// the hot paths (OutputBytes once per chunk read from a child).
type Metrics interface {
	// ProcessStarted: a child was started; spawn is how long the start took
	// (pipes or PTY, cgroup, sandbox, exec).
	ProcessStarted(spawn time.Duration)
	// SpawnFailed: a start failed (the OS refused, or the sandbox).
	SpawnFailed()
	// ProcessExited: a started child exited, for a reason of EndReason.
	ProcessExited(reason string)
	// OutputBytes: n bytes of output were read from a child's stream.
	OutputBytes(s Stream, n int)
	// Evicted: retention evicted chunks of output (bytes in total).
	Evicted(chunks, bytes int)
	// Backpressure: a process actor stopped reading its child's output for
	// d because its subscriber (a connection) had not taken what it had.
	Backpressure(d time.Duration)
	// Request: the connection answered a request of a known method after d
	// (for long polls and writes, when the answer was queued).
	Request(method string, d time.Duration)
	// RequestError: a request was answered with an error; a refusal by a
	// configured limit has e.Limit set.
	RequestError(e *wire.Error)
	// Sessions: the registry's counts after any change.
	Sessions(attached, detached int)
	// SessionExpired: a detached session's TTL ran out.
	SessionExpired()
	// NetworkDecision: a command's managed-network proxy decided one
	// destination ("allow" or "deny", by source: baseline_policy,
	// mode_guard, decider).
	NetworkDecision(decision, source string)
	// NetworkEventsDropped: decisions not sent as network/policyDecision
	// because the process's queue of them was full (a client that stopped
	// reading); they were counted and logged all the same.
	NetworkEventsDropped(n int)
}

// Reasons a process ended, as reported to [Metrics.ProcessExited].
const (
	EndExit       = "exit"       // it exited on its own (any code)
	EndTerminated = "terminated" // runtimed ended it: process/terminate, discard, shutdown
	EndTimeout    = "timeout"    // the app-server dialect's timeoutMs
	EndFailed     = "failed"     // the process actor failed (a recovered panic)
	// A resource limit ends it as "limit_" + the limit's name
	// ("limit_memory", "limit_pids", "limit_cpu", "limit_fileSize").
	EndLimitPrefix = "limit_"
)

// EndReason classifies an exit for metrics.
func EndReason(limit string, timedOut, terminating bool) string {
	switch {
	case limit != "":
		return EndLimitPrefix + limit
	case timedOut:
		return EndTimeout
	case terminating:
		return EndTerminated
	}
	return EndExit
}

// NopMetrics discards every measurement (metrics off).
type NopMetrics struct{}

func (NopMetrics) ProcessStarted(time.Duration)   {}
func (NopMetrics) SpawnFailed()                   {}
func (NopMetrics) ProcessExited(string)           {}
func (NopMetrics) OutputBytes(Stream, int)        {}
func (NopMetrics) Evicted(int, int)               {}
func (NopMetrics) Backpressure(time.Duration)     {}
func (NopMetrics) Request(string, time.Duration)  {}
func (NopMetrics) RequestError(*wire.Error)       {}
func (NopMetrics) Sessions(int, int)              {}
func (NopMetrics) SessionExpired()                {}
func (NopMetrics) NetworkDecision(string, string) {}
func (NopMetrics) NetworkEventsDropped(int)       {}

func metricsOrNop(m Metrics) Metrics {
	if m == nil {
		return NopMetrics{}
	}
	return m
}

// backpressure measures the time a process actor spends not taking output
// (owned by the process actor).
type backpressure struct {
	since time.Time // zero while output is taken
}

// update is called once per actor loop with whether output is held back.
func (b *backpressure) update(blocked bool, m Metrics) {
	switch {
	case blocked && b.since.IsZero():
		b.since = time.Now()
	case !blocked && !b.since.IsZero():
		m.Backpressure(time.Since(b.since))
		b.since = time.Time{}
	}
}

// endMetrics runs when the process actor ends (after recoverPanic): it
// closes an open backpressure interval, and counts a process whose actor
// failed before its exit was reported as ended ("failed"), so
// processes_running does not drift.
func (p *process) endMetrics() {
	p.bp.update(false, p.cfg.metrics)
	if p.exitSeq == 0 { // no exit took a seq (the phase may be gone: failure)
		p.cfg.metrics.ProcessExited(EndFailed)
	}
}

// observeRequest reports a request answered after start, and logs it at
// debug level with its id and method (every request log line carries both).
func (c *conn) observeRequest(method string, id wire.ID, start time.Time) {
	d := time.Since(start)
	c.sup.metrics.Request(requestLabel(method), d)
	if ce := c.log.Check(zap.DebugLevel, "request"); ce != nil {
		ce.Write(zap.String("method", method), zap.ByteString("request_id", id), zap.Duration("took", d))
	}
}

// requestLabel bounds the method label to the methods the server knows (a
// client choosing method names must not grow the metric without bound).
func requestLabel(method string) string {
	if _, ok := knownMethods[method]; ok {
		return method
	}
	if fsops.IsFsMethod(method) {
		return method
	}
	return "unknown"
}

// curRequest is the request the reader is handling (owned by the reader).
type curRequest struct {
	method   string
	id       wire.ID
	start    time.Time
	deferred bool  // answered later by a waiter or the fs worker, which observe it
	inbound  int64 // its charge to the inbound budget, returned once it is answered
}

// timedRequest handles a request and observes it, unless its answer was
// deferred (then whoever answers observes it).
func (c *conn) timedRequest(msg wire.Message, inbound int64) {
	c.cur = curRequest{method: msg.Method, id: msg.ID, start: time.Now(), inbound: inbound}
	c.safeRequest(msg)
	if !c.cur.deferred {
		c.observeRequest(msg.Method, msg.ID, c.cur.start)
		c.releaseInbound(inbound)
	}
	// msg.ID points into the message: kept here, it would pin the
	// connection's last message (60 MB for a large one) until the next.
	c.cur = curRequest{}
}

// deferObservation marks the current request as answered later and returns
// the function that observes it then.
func (c *conn) deferObservation() func() {
	c.cur.deferred = true
	r := c.cur
	r.id = bytes.Clone(r.id) // not the message the id points into
	return func() {
		c.observeRequest(r.method, r.id, r.start)
		c.releaseInbound(r.inbound)
	}
}

// releaseInbound returns a request's inbound charge (any goroutine of the
// connection; what is never returned returns when it ends).
func (c *conn) releaseInbound(n int64) {
	if n > 0 && c.gate != nil {
		c.sup.inboundRelease(c.gate.key, n)
	}
}
