package proptest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/runtimed/runtimed/wire"
)

// inMsg is a message from the server: a response or a notification.
type inMsg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *wire.Error     `json:"error"`
}

// note is one process notification, in arrival order.
type note struct {
	Method    string      `json:"-"`
	ProcessID string      `json:"processId"`
	Seq       uint64      `json:"seq"`
	Stream    string      `json:"stream"`
	Chunk     wire.Base64 `json:"chunk"`
	ExitCode  *int        `json:"exitCode"`
}

// rpcClient speaks the protocol over any wire.Transport, on the client
// core (wire.Client): the core owns the reader, the write side and the
// latch; this client's Peek handler sees every message first and does the
// correlation itself, because checking the server means seeing every
// response (a second answer to an id, an answer to an id never sent),
// which the core's own table would hide. It logs notifications; it ends
// when the transport fails or is closed.
type rpcClient struct {
	core   *wire.Client
	nextID int64
	done   <-chan struct{} // the core's latch: the connection has ended

	mu       sync.Mutex
	pending  map[string]chan inMsg
	answered map[string]bool
	notes    []note
	problems []string // protocol violations seen by the reader
	changed  chan struct{}
}

func newRPCClient(tr wire.Transport, firstID int64) *rpcClient {
	c := &rpcClient{nextID: firstID, pending: map[string]chan inMsg{}, answered: map[string]bool{}, changed: make(chan struct{})}
	c.core = wire.NewClient(tr, wire.ClientOptions{Peek: c.peek})
	c.done = c.core.Done()
	return c
}

// peek handles every inbound message (the core decodes nothing).
func (c *rpcClient) peek(b []byte) bool {
	var m inMsg
	if err := json.Unmarshal(b, &m); err != nil {
		c.problem("undecodable message %q: %v", b, err)
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if m.Method != "" {
		n := note{Method: m.Method}
		if err := json.Unmarshal(m.Params, &n); err != nil {
			c.problems = append(c.problems, fmt.Sprintf("bad notification %q: %v", b, err))
		}
		c.notes = append(c.notes, n)
	} else {
		key := string(m.ID)
		ch, ok := c.pending[key]
		switch {
		case c.answered[key]:
			c.problems = append(c.problems, fmt.Sprintf("second response for id %s", key))
		case !ok:
			c.problems = append(c.problems, fmt.Sprintf("response for an id never sent on this connection: %s", b))
		default:
			c.answered[key] = true
			delete(c.pending, key)
			ch <- m
		}
	}
	close(c.changed)
	c.changed = make(chan struct{})
	return true
}

func (c *rpcClient) problem(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

func (c *rpcClient) Problems() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.problems...)
}

// Send writes a request without waiting for its answer.
func (c *rpcClient) Send(method string, params any) (chan inMsg, error) {
	id := c.nextID
	c.nextID++
	key := strconv.FormatInt(id, 10)
	ch := make(chan inMsg, 1)
	c.mu.Lock()
	c.pending[key] = ch
	c.mu.Unlock()
	b, err := wire.AppendRequest(nil, wire.IntID(id), method, params)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), stepWait)
	defer cancel()
	return ch, c.core.WriteRaw(ctx, b)
}

// Notify writes a notification.
func (c *rpcClient) Notify(method string, params any) error {
	b, err := wire.AppendNotification(nil, method, params)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), stepWait)
	defer cancel()
	return c.core.WriteRaw(ctx, b)
}

// Await waits up to d for the answer on ch.
func (c *rpcClient) Await(ch chan inMsg, d time.Duration) (inMsg, error) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case m := <-ch:
		return m, nil
	case <-c.done:
		select {
		case m := <-ch:
			return m, nil
		default:
		}
		return inMsg{}, fmt.Errorf("connection ended: %v", c.ReadErr())
	case <-timer.C:
		return inMsg{}, fmt.Errorf("no answer within %v", d)
	}
}

// Call sends a request and decodes its result into out (if not nil).
func (c *rpcClient) Call(method string, params, out any, d time.Duration) (*wire.Error, error) {
	ch, err := c.Send(method, params)
	if err != nil {
		return nil, err
	}
	m, err := c.Await(ch, d)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	if m.Error != nil {
		return m.Error, nil
	}
	if out != nil {
		if err := json.Unmarshal(m.Result, out); err != nil {
			return nil, fmt.Errorf("%s: result %s: %w", method, m.Result, err)
		}
	}
	return nil, nil
}

func (c *rpcClient) ReadErr() error { return c.core.Err() }

// Notes returns the notifications for one process, in arrival order.
func (c *rpcClient) Notes(pid string) []note {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []note
	for _, n := range c.notes {
		if n.ProcessID == pid {
			out = append(out, n)
		}
	}
	return out
}

// WaitNotes waits up to d until pred holds for the notifications of pid.
func (c *rpcClient) WaitNotes(pid string, d time.Duration, pred func([]note) bool) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		c.mu.Lock()
		changed := c.changed
		c.mu.Unlock()
		if pred(c.Notes(pid)) {
			return true
		}
		select {
		case <-changed:
		case <-c.done:
			return pred(c.Notes(pid))
		case <-timer.C:
			return false
		}
	}
}

// Close closes the transport and waits for the reader.
func (c *rpcClient) Close() { c.core.Close() }

// handshake sends initialize (resuming sid if not empty) and initialized.
func (c *rpcClient) handshake(sid string) (string, error) {
	params := map[string]any{"clientName": "proptest"}
	if sid != "" {
		params["resumeSessionId"] = sid
	}
	var res wire.InitializeResult
	rerr, err := c.Call(wire.MethodInitialize, params, &res, stepWait)
	if err != nil {
		return "", err
	}
	if rerr != nil {
		return "", rerr
	}
	return res.SessionID, c.Notify(wire.MethodInitialized, map[string]any{})
}

// history is what is known of one process's (seq, stream, bytes) history,
// merged from notifications and reads; merging checks that every source
// tells the same story for every seq.
type history struct {
	out       map[uint64]note // output by seq
	exitSeq   uint64
	exitCode  *int
	closedSeq uint64
	nextSeq   uint64 // highest nextSeq any read reported
	exited    bool
	closed    bool
	reads     []readRec
}

func newHistory() *history { return &history{out: map[uint64]note{}} }

func (h *history) addOutput(seq uint64, stream string, data []byte) error {
	if seq == 0 {
		return errors.New("output with seq 0")
	}
	if seq == h.exitSeq || seq == h.closedSeq {
		return fmt.Errorf("seq %d is both output and exit/close", seq)
	}
	if old, ok := h.out[seq]; ok {
		if old.Stream != stream || !bytes.Equal(old.Chunk, data) {
			return fmt.Errorf("seq %d: %s %q, earlier %s %q", seq, stream, data, old.Stream, old.Chunk)
		}
		return nil
	}
	h.out[seq] = note{Seq: seq, Stream: stream, Chunk: append(wire.Base64(nil), data...)}
	return nil
}

// addNotes merges notifications (of every connection: they are never
// replayed, so no seq may be notified twice).
func (h *history) addNotes(notes []note) error {
	seen := map[uint64]bool{}
	for _, n := range notes {
		if seen[n.Seq] {
			return fmt.Errorf("seq %d notified twice", n.Seq)
		}
		seen[n.Seq] = true
		switch n.Method {
		case wire.NotifyProcessOutput:
			if err := h.addOutput(n.Seq, n.Stream, n.Chunk); err != nil {
				return err
			}
		case wire.NotifyProcessExited:
			if h.exitSeq != 0 && h.exitSeq != n.Seq {
				return fmt.Errorf("exited at seq %d and %d", h.exitSeq, n.Seq)
			}
			if _, ok := h.out[n.Seq]; ok || n.Seq == 0 || n.ExitCode == nil {
				return fmt.Errorf("bad exited notification seq %d", n.Seq)
			}
			if h.exitCode != nil && *h.exitCode != *n.ExitCode {
				return fmt.Errorf("exit code %d, earlier %d", *n.ExitCode, *h.exitCode)
			}
			h.exitSeq, h.exitCode, h.exited = n.Seq, n.ExitCode, true
		case wire.NotifyProcessClosed:
			if h.closedSeq != 0 && h.closedSeq != n.Seq {
				return fmt.Errorf("closed at seq %d and %d", h.closedSeq, n.Seq)
			}
			if _, ok := h.out[n.Seq]; ok || n.Seq == 0 {
				return fmt.Errorf("bad closed notification seq %d", n.Seq)
			}
			h.closedSeq, h.closed = n.Seq, true
		default:
			return fmt.Errorf("unknown notification %s", n.Method)
		}
	}
	return nil
}

// readRec is one process/read answer.
type readRec struct {
	after    uint64
	maxBytes *uint64
	r        wire.ReadResult
}

// addRead merges a process/read result; its flags are checked against the
// whole history in complete.
func (h *history) addRead(after uint64, maxBytes *uint64, r wire.ReadResult) error {
	last := after
	total := uint64(0)
	for i, c := range r.Chunks {
		if c.Seq <= last {
			return fmt.Errorf("read after %d: chunk seq %d not increasing", after, c.Seq)
		}
		last = c.Seq
		if maxBytes != nil && i > 0 && total+uint64(len(c.Chunk)) > max(*maxBytes, 1) {
			return fmt.Errorf("read after %d maxBytes %d: chunk %d goes over maxBytes", after, *maxBytes, i)
		}
		total += uint64(len(c.Chunk))
		if err := h.addOutput(c.Seq, c.Stream, c.Chunk); err != nil {
			return err
		}
	}
	if r.NextSeq == 0 || (len(r.Chunks) > 0 && r.NextSeq <= last) {
		return fmt.Errorf("read after %d: nextSeq %d, last chunk seq %d", after, r.NextSeq, last)
	}
	if maxBytes != nil && len(r.Chunks) > 0 && r.NextSeq != last+1 {
		return fmt.Errorf("read after %d with maxBytes: nextSeq %d, want last chunk seq+1 = %d", after, r.NextSeq, last+1)
	}
	if r.Exited != (r.ExitCode != nil) {
		return fmt.Errorf("exited %v with exitCode %v", r.Exited, r.ExitCode)
	}
	if r.Closed && !r.Exited {
		return errors.New("read: closed but not exited")
	}
	if r.Exited {
		if h.exitCode != nil && *h.exitCode != *r.ExitCode {
			return fmt.Errorf("read exit code %d, earlier %d", *r.ExitCode, *h.exitCode)
		}
		h.exitCode, h.exited = r.ExitCode, true
	}
	if r.Closed {
		h.closed = true
	}
	h.nextSeq = max(h.nextSeq, r.NextSeq)
	h.reads = append(h.reads, readRec{after: after, maxBytes: maxBytes, r: r})
	return nil
}

// complete checks a closed process's full history: seqs 1..closed with
// each output seq once, exactly one other seq for the exit, closed last
// and highest, and every read's flags and nextSeq consistent with it. It
// returns the bytes per stream.
func (h *history) complete() (map[string][]byte, error) {
	if !h.closed {
		return nil, errors.New("not closed")
	}
	closedSeq := h.nextSeq - 1
	if h.closedSeq != 0 && h.closedSeq != closedSeq {
		return nil, fmt.Errorf("closed notified at seq %d, but reads reach nextSeq %d: closed must carry the highest seq", h.closedSeq, h.nextSeq)
	}
	var missing []uint64
	for s := uint64(1); s < closedSeq; s++ {
		if _, ok := h.out[s]; !ok {
			missing = append(missing, s)
		}
	}
	// exactly one seq below closed is not output: the exit
	if len(missing) != 1 {
		return nil, fmt.Errorf("seqs 1..%d without output: %v, want exactly one (the exit)", closedSeq-1, missing)
	}
	exitSeq := missing[0]
	if h.exitSeq != 0 && h.exitSeq != exitSeq {
		return nil, fmt.Errorf("exit notified at seq %d, but seq %d is the gap", h.exitSeq, exitSeq)
	}
	seqs := make([]uint64, 0, len(h.out))
	for s := range h.out {
		if s >= closedSeq {
			return nil, fmt.Errorf("output seq %d at or after closed %d", s, closedSeq)
		}
		seqs = append(seqs, s)
	}
	for _, rr := range h.reads {
		if rr.maxBytes != nil && len(rr.r.Chunks) > 0 {
			continue // nextSeq is the last chunk's, not the process's
		}
		n := rr.r.NextSeq
		if rr.r.Exited != (n > exitSeq) || rr.r.Closed != (n > closedSeq) {
			return nil, fmt.Errorf("read after %d: nextSeq %d exited %v closed %v, but exit seq is %d and closed seq %d", rr.after, n, rr.r.Exited, rr.r.Closed, exitSeq, closedSeq)
		}
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	if err := h.checkReads(seqs); err != nil {
		return nil, err
	}
	streams := map[string][]byte{}
	for _, s := range seqs {
		n := h.out[s]
		streams[n.Stream] = append(streams[n.Stream], n.Chunk...)
	}
	return streams, nil
}

// dump describes the merged history for failure messages.
func (h *history) dump() string {
	seqs := make([]uint64, 0, len(h.out))
	for s := range h.out {
		seqs = append(seqs, s)
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	var b bytes.Buffer
	fmt.Fprintf(&b, "history: nextSeq %d exited %v closed %v exitSeq %d closedSeq %d exitCode %v\n", h.nextSeq, h.exited, h.closed, h.exitSeq, h.closedSeq, h.exitCode)
	for _, s := range seqs {
		fmt.Fprintf(&b, "  seq %d %s %q\n", s, h.out[s].Stream, h.out[s].Chunk)
	}
	for _, r := range h.reads {
		mb := "none"
		if r.maxBytes != nil {
			mb = strconv.FormatUint(*r.maxBytes, 10)
		}
		fmt.Fprintf(&b, "  read after %d maxBytes %s: %d chunks %s nextSeq %d exited %v closed %v\n", r.after, mb, len(r.r.Chunks), chunkSeqs(r.r.Chunks), r.r.NextSeq, r.r.Exited, r.r.Closed)
	}
	return b.String()
}

func chunkSeqs(cs []wire.Chunk) string {
	s := make([]uint64, len(cs))
	for i, c := range cs {
		s[i] = c.Seq
	}
	return fmt.Sprint(s)
}

// checkReads checks every read against the complete output history (seqs,
// ascending), assuming nothing was evicted: a read returns the outputs
// after its afterSeq in order without skipping any, all of those that
// existed (below its nextSeq) when it has no maxBytes, and none only if
// none existed.
func (h *history) checkReads(seqs []uint64) error {
	for _, rr := range h.reads {
		i := sort.Search(len(seqs), func(i int) bool { return seqs[i] > rr.after })
		var existing []uint64 // outputs after rr.after that existed at the read
		for _, s := range seqs[i:] {
			if s < rr.r.NextSeq || (rr.maxBytes != nil && len(rr.r.Chunks) > 0) {
				existing = append(existing, s)
			}
		}
		got := rr.r.Chunks
		if rr.maxBytes == nil || len(got) == 0 {
			if len(got) != len(existing) {
				return fmt.Errorf("read after %d (nextSeq %d) returned %s, but outputs %v existed", rr.after, rr.r.NextSeq, chunkSeqs(got), existing)
			}
		}
		for j, c := range got {
			if j >= len(existing) || c.Seq != existing[j] {
				return fmt.Errorf("read after %d returned %s, skipping outputs of %v", rr.after, chunkSeqs(got), existing)
			}
		}
	}
	return nil
}
