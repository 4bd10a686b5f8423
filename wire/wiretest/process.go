package wiretest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// B64 is a byte payload carried as standard base64 with padding.
type B64 []byte

// MarshalJSON encodes b as a base64 string.
func (b B64) MarshalJSON() ([]byte, error) {
	return json.Marshal(base64.StdEncoding.EncodeToString(b))
}

// UnmarshalJSON decodes a standard, padded base64 string (strictly).
func (b *B64) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("base64 payload is not a string: %s", data)
	}
	d, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil {
		return fmt.Errorf("bad base64 payload %q: %w", truncate(s, 40), err)
	}
	*b = d
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// Initialize sends `initialize` and then `initialized`, returning the session id.
func (c *Client) Initialize(ctx context.Context) (string, error) {
	return c.initialize(ctx, map[string]any{"clientName": "wiretest"})
}

// Resume sends `initialize` with resumeSessionId and, if it succeeds, `initialized`. A refusal is
// returned as *RPCError.
func (c *Client) Resume(ctx context.Context, sessionID string) (string, error) {
	return c.initialize(ctx, map[string]any{"clientName": "wiretest", "resumeSessionId": sessionID})
}

func (c *Client) initialize(ctx context.Context, params any) (string, error) {
	var res struct {
		SessionID string `json:"sessionId"`
	}
	if err := c.CallResult(ctx, "initialize", params, &res); err != nil {
		return "", err
	}
	if res.SessionID == "" {
		return "", errors.New("wiretest: initialize returned no sessionId")
	}
	if err := c.Notify(ctx, "initialized", map[string]any{}); err != nil {
		return "", err
	}
	return res.SessionID, nil
}

// Size is a terminal size.
type Size struct {
	Rows int `json:"rows"`
	Cols int `json:"cols"`
}

// StartParams are the parameters of process/start.
type StartParams struct {
	ProcessID string            `json:"processId"`
	Argv      []string          `json:"argv"`
	Cwd       string            `json:"cwd"`
	Env       map[string]string `json:"env"`
	EnvPolicy any               `json:"envPolicy,omitempty"`
	TTY       bool              `json:"tty"`
	PipeStdin bool              `json:"pipeStdin,omitempty"`
	Arg0      *string           `json:"arg0,omitempty"`
	Size      *Size             `json:"size,omitempty"`
}

// Start calls process/start and checks that the result echoes the process id.
func (c *Client) Start(ctx context.Context, p StartParams) error {
	var res struct {
		ProcessID string `json:"processId"`
	}
	if err := c.CallResult(ctx, "process/start", p, &res); err != nil {
		return err
	}
	if res.ProcessID != p.ProcessID {
		return fmt.Errorf("wiretest: process/start answered processId %q, want %q", res.ProcessID, p.ProcessID)
	}
	return nil
}

// ReadParams are the parameters of process/read; zero values are omitted (they are the defaults).
type ReadParams struct {
	ProcessID string `json:"processId"`
	AfterSeq  uint64 `json:"afterSeq,omitempty"`
	MaxBytes  int    `json:"maxBytes,omitempty"`
	WaitMs    int    `json:"waitMs,omitempty"`
}

// Chunk is one retained output chunk.
type Chunk struct {
	Seq    uint64 `json:"seq"`
	Stream string `json:"stream"`
	Chunk  B64    `json:"chunk"`
}

// ReadResult is the result of process/read.
type ReadResult struct {
	Chunks        []Chunk         `json:"chunks"`
	NextSeq       uint64          `json:"nextSeq"`
	Exited        bool            `json:"exited"`
	ExitCode      *int            `json:"exitCode"`
	Closed        bool            `json:"closed"`
	Failure       json.RawMessage `json:"failure"`
	SandboxDenied bool            `json:"sandboxDenied"`
}

// Bytes concatenates the chunks' payloads.
func (r *ReadResult) Bytes() []byte {
	var b []byte
	for _, ch := range r.Chunks {
		b = append(b, ch.Chunk...)
	}
	return b
}

// Read calls process/read.
func (c *Client) Read(ctx context.Context, p ReadParams) (*ReadResult, error) {
	var res ReadResult
	if err := c.CallResult(ctx, "process/read", p, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Write calls process/write (writeID "" omits the member) and returns the status.
func (c *Client) Write(ctx context.Context, processID string, data []byte, writeID string) (string, error) {
	p := map[string]any{"processId": processID, "chunk": B64(data)}
	if writeID != "" {
		p["writeId"] = writeID
	}
	var res struct {
		Status string `json:"status"`
	}
	if err := c.CallResult(ctx, "process/write", p, &res); err != nil {
		return "", err
	}
	return res.Status, nil
}

// Terminate calls process/terminate and returns `running`.
func (c *Client) Terminate(ctx context.Context, processID string) (bool, error) {
	var res struct {
		Running *bool `json:"running"`
	}
	if err := c.CallResult(ctx, "process/terminate", map[string]any{"processId": processID}, &res); err != nil {
		return false, err
	}
	if res.Running == nil {
		return false, errors.New("wiretest: process/terminate result has no `running`")
	}
	return *res.Running, nil
}

// Event is one process notification: process/output, process/exited or process/closed.
type Event struct {
	Method   string
	Seq      uint64
	Stream   string // output only
	Chunk    []byte // output only
	ExitCode *int   // exited only
	Params   json.RawMessage
}

// ProcessLog is the notification history of one process.
type ProcessLog struct {
	ProcessID string
	Events    []Event // in arrival order
}

// Sorted returns the events ordered by seq.
func (l *ProcessLog) Sorted() []Event {
	ev := append([]Event(nil), l.Events...)
	sort.SliceStable(ev, func(i, j int) bool { return ev[i].Seq < ev[j].Seq })
	return ev
}

// Output concatenates, in seq order, the output of the given streams (all streams if none given).
func (l *ProcessLog) Output(streams ...string) []byte {
	var b []byte
	for _, e := range l.Sorted() {
		if e.Method != "process/output" {
			continue
		}
		if len(streams) > 0 && !contains(streams, e.Stream) {
			continue
		}
		b = append(b, e.Chunk...)
	}
	return b
}

// OutputLen is the total number of output bytes received so far (all streams), without copying.
func (l *ProcessLog) OutputLen() int {
	n := 0
	for _, e := range l.Events {
		n += len(e.Chunk)
	}
	return n
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (l *ProcessLog) find(method string) *Event {
	for i := range l.Events {
		if l.Events[i].Method == method {
			return &l.Events[i]
		}
	}
	return nil
}

// Exited returns the process/exited event, if it arrived.
func (l *ProcessLog) Exited() *Event { return l.find("process/exited") }

// Closed returns the process/closed event, if it arrived.
func (l *ProcessLog) Closed() *Event { return l.find("process/closed") }

// CheckSequence checks the sequencing rules of PROTOCOL.md §4 on a complete history: seqs are exactly
// 1..n with no gap and no repeat, exactly one exited and one closed, and closed carries the highest seq.
func (l *ProcessLog) CheckSequence() error {
	ev := l.Sorted()
	var problems []string
	exited, closed := 0, 0
	for i, e := range ev {
		if e.Seq != uint64(i+1) {
			problems = append(problems, fmt.Sprintf("event #%d (%s) has seq %d, want %d", i, e.Method, e.Seq, i+1))
			break
		}
		switch e.Method {
		case "process/exited":
			exited++
		case "process/closed":
			closed++
		}
	}
	if exited != 1 {
		problems = append(problems, fmt.Sprintf("%d exited notifications, want 1", exited))
	}
	if closed != 1 {
		problems = append(problems, fmt.Sprintf("%d closed notifications, want 1", closed))
	}
	if n := len(ev); n > 0 && ev[n-1].Method != "process/closed" {
		problems = append(problems, fmt.Sprintf("highest seq %d is %s, not process/closed", ev[n-1].Seq, ev[n-1].Method))
	}
	if len(problems) > 0 {
		return fmt.Errorf("process %s: %s\n%s", l.ProcessID, strings.Join(problems, "; "), l.Summary())
	}
	return nil
}

// Summary renders the history compactly for failure messages.
func (l *ProcessLog) Summary() string {
	var b strings.Builder
	for _, e := range l.Sorted() {
		switch e.Method {
		case "process/output":
			fmt.Fprintf(&b, "  %d output %s %d bytes %q\n", e.Seq, e.Stream, len(e.Chunk), truncate(string(e.Chunk), 60))
		case "process/exited":
			code := "nil"
			if e.ExitCode != nil {
				code = fmt.Sprint(*e.ExitCode)
			}
			fmt.Fprintf(&b, "  %d exited code=%s\n", e.Seq, code)
		default:
			fmt.Fprintf(&b, "  %d %s\n", e.Seq, e.Method)
		}
	}
	return b.String()
}

// Watcher accumulates the notifications of one process as they arrive.
type Watcher struct {
	c   *Client
	Log ProcessLog
}

// Watch starts collecting the process notifications for processID (already buffered ones included).
// Only one watcher (or CollectProcess) per process id should run at a time.
func (c *Client) Watch(processID string) *Watcher {
	return &Watcher{c: c, Log: ProcessLog{ProcessID: processID}}
}

func isProcessEvent(method string) bool {
	return method == "process/output" || method == "process/exited" || method == "process/closed"
}

type eventParams struct {
	ProcessID string  `json:"processId"`
	Seq       *uint64 `json:"seq"`
	Stream    string  `json:"stream"`
	Chunk     *B64    `json:"chunk"`
	ExitCode  *int    `json:"exitCode"`
}

func processIDOf(params json.RawMessage) string {
	var p struct {
		ProcessID string `json:"processId"`
	}
	_ = json.Unmarshal(params, &p)
	return p.ProcessID
}

func (w *Watcher) absorb() error {
	id := w.Log.ProcessID
	got := w.c.takeProcessEvents(id)
	for _, n := range got {
		var p eventParams
		if err := json.Unmarshal(n.Params, &p); err != nil {
			return fmt.Errorf("wiretest: bad %s params %s: %w", n.Method, truncate(string(n.Params), 200), err)
		}
		if p.Seq == nil {
			return fmt.Errorf("wiretest: %s without seq: %s", n.Method, truncate(string(n.Params), 200))
		}
		e := Event{Method: n.Method, Seq: *p.Seq, Params: n.Params}
		switch n.Method {
		case "process/output":
			if p.Chunk == nil {
				return fmt.Errorf("wiretest: process/output without chunk: %s", truncate(string(n.Params), 200))
			}
			e.Stream, e.Chunk = p.Stream, *p.Chunk
		case "process/exited":
			if p.ExitCode == nil {
				return fmt.Errorf("wiretest: process/exited without exitCode: %s", n.Params)
			}
			e.ExitCode = p.ExitCode
		}
		w.Log.Events = append(w.Log.Events, e)
	}
	return nil
}

// WaitFor absorbs notifications until pred(log) is true, bounded by ctx.
func (w *Watcher) WaitFor(ctx context.Context, pred func(*ProcessLog) bool) error {
	for {
		wake, ended := w.c.waitChange()
		if err := w.absorb(); err != nil {
			return err
		}
		if pred(&w.Log) {
			return nil
		}
		if ended {
			return fmt.Errorf("wiretest: connection ended while watching process %s: %v\nso far:\n%s", w.Log.ProcessID, w.c.Err(), w.Log.Summary())
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return fmt.Errorf("wiretest: watching process %s: %w\nso far:\n%s", w.Log.ProcessID, ctx.Err(), w.Log.Summary())
		}
	}
}

// WaitOutput waits until the process's output (all streams, in seq order) contains want.
func (w *Watcher) WaitOutput(ctx context.Context, want string) error {
	return w.WaitFor(ctx, func(l *ProcessLog) bool { return bytes.Contains(l.Output(), []byte(want)) })
}

// WaitClosed waits for process/closed and returns the log.
func (w *Watcher) WaitClosed(ctx context.Context) (*ProcessLog, error) {
	err := w.WaitFor(ctx, func(l *ProcessLog) bool { return l.Closed() != nil })
	return &w.Log, err
}

// CollectProcess collects every process/output, process/exited and process/closed notification of
// processID until process/closed arrives and returns them with Events sorted by seq. On timeout it
// returns what arrived so far together with the error.
func (c *Client) CollectProcess(ctx context.Context, processID string) (*ProcessLog, error) {
	l, err := c.Watch(processID).WaitClosed(ctx)
	l.Events = l.Sorted()
	return l, err
}
