package wiretest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/runtimed/runtimed/wire"
)

// Protocol transcripts: interaction tests in the style of etcd raft's
// testdata/*.txt, read by github.com/cockroachdb/datadriven (the library
// raft uses; it parses the files, shows a diff and regenerates the
// expected blocks with -rewrite). A transcript file is a list of
// directives, each with its input and, after "----", the frames expected
// back:
//
//	send
//	{"id":1,"method":"initialize","params":{"clientName":"t"}}
//	{"method":"initialized"}
//	----
//	{"id":1,"result":{"sessionId":"<uuid:1>",...}}
//
// Directives (arguments in brackets are optional; conn names a connection,
// default "c", opened on first use; durations are Go durations):
//
//	send [conn=] [within=10s] [min=] [async]
//	    writes each input line as one frame, as it is (a line need not be
//	    valid JSON), then waits for the answer to every line that has an id
//	    and prints the answers in the order of the lines. async: waits for
//	    nothing (the answers join the pile). min: fails if the answers came
//	    sooner (a long poll's wait).
//	await [conn=] [within=10s] cond...
//	    waits until every condition holds, then prints the pile: every frame
//	    received and not printed yet, in a canonical order (answers nobody
//	    waited for, in arrival order; then other notifications, in arrival
//	    order; then process/* notifications sorted by processId and seq, the
//	    order the protocol guarantees, not the arrival order, which it does
//	    not). Conditions: closed=P, exited=P (that process/... notification
//	    of process P), output=(P,TEXT) (P's output so far, decoded, contains
//	    TEXT), method=M (a notification M), response=ID (the answer to ID).
//	    Every await also waits for the pile to stay quiet for 20 ms: what
//	    the server sends right after the condition is printed with it.
//	events [conn=]
//	    prints the pile now, without waiting.
//	touch PATH
//	    creates an empty file (the release of a child waiting for it).
//	close [conn=]
//	    closes a connection's client end.
//	skip-unless exists=PATH
//	    skips the rest of the file when PATH does not exist.
//
// and the caller's own TranscriptConfig.Commands.
//
// Inputs may use $NAME for the file's variables: $TMP (a directory of the
// file's own), $GATE (a sh function: `gate FILE` waits until FILE exists)
// and TranscriptConfig.Vars, and <uuid:N> for the N-th UUID the server
// sent. Outputs are normalised so that they do not depend on the run:
// variable values become $NAME again (inside base64 payloads too: the
// payload is decoded, substituted and encoded again), UUIDs <uuid:N> (numbered by first
// appearance in the file), "pid" values <pid>, *AtMs values <ms>, then
// TranscriptConfig.Normalize applies. Request ids are whatever the lines
// say: they are part of the transcript.

// TranscriptConfig is how RunTranscripts reaches the server under test.
type TranscriptConfig struct {
	// Start starts the server one transcript file talks to (a fresh one
	// per file) and returns how to open a connection to it: the client end
	// of a new transport, for instance a MemPipe whose other end the
	// server serves. Start registers the server's cleanup with t.
	Start func(t *testing.T) (connect func() wire.Transport)
	// Vars are more $NAME variables, for instance a path of the host.
	Vars map[string]string
	// Normalize rewrites output further (after the built-in rules).
	Normalize []Rewrite
	// Commands are directives of the caller's own (they may read the
	// file's variables with Transcript.Var).
	Commands map[string]func(t *testing.T, s *Transcript, d *datadriven.TestData) string
	// Timeout is the default bound of send and await; default 10 s.
	Timeout time.Duration
}

// Rewrite replaces what Re matches with With (regexp.ReplaceAllString),
// or with what Func returns for it when Func is set.
type Rewrite struct {
	Re   *regexp.Regexp
	With string
	Func func(match string) string
}

// GateFunc is $GATE: a sh function, `gate FILE` waits until FILE exists.
const GateFunc = `gate() { while [ ! -e $1 ]; do sleep 0.01; done; };`

// RunTranscripts runs every *.txt file under dir as a transcript, each a
// subtest of t with a server of its own.
func RunTranscripts(t *testing.T, dir string, cfg TranscriptConfig) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts in %s (%v)", dir, err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			s := newTranscript(t, cfg)
			datadriven.RunTest(t, f, func(t *testing.T, d *datadriven.TestData) string {
				return s.run(t, d)
			})
		})
	}
}

// Transcript is the state of one transcript file: its server, its
// connections and its variables. It is used by one goroutine (the test's);
// each connection's frames arrive on its client core's reader.
type Transcript struct {
	cfg     TranscriptConfig
	connect func() wire.Transport
	vars    map[string]string
	conns   map[string]*tconn
	uuids   map[string]string // server value → <uuid:N>
	byName  map[string]string // <uuid:N> → value
}

func newTranscript(t *testing.T, cfg TranscriptConfig) *Transcript {
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	s := &Transcript{cfg: cfg, vars: map[string]string{"TMP": t.TempDir(), "GATE": GateFunc},
		conns: map[string]*tconn{}, uuids: map[string]string{}, byName: map[string]string{}}
	for k, v := range cfg.Vars {
		s.vars[k] = v
	}
	s.connect = cfg.Start(t)
	t.Cleanup(func() {
		for _, c := range s.conns {
			_ = c.core.Close()
		}
	})
	return s
}

// Var returns the value of the variable name ("TMP", ...).
func (s *Transcript) Var(name string) string { return s.vars[name] }

var varRef = regexp.MustCompile(`\$([A-Z][A-Z0-9_]*)|<uuid:[0-9]+>`)

// Expand replaces $NAME and <uuid:N> in in by their values.
func (s *Transcript) Expand(in string) string {
	return varRef.ReplaceAllStringFunc(in, func(m string) string {
		if strings.HasPrefix(m, "<") {
			if v, ok := s.byName[m]; ok {
				return v
			}
			return m
		}
		if v, ok := s.vars[m[1:]]; ok {
			return v
		}
		return m
	})
}

var (
	uuidRe = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	pidRe  = regexp.MustCompile(`"pid":[0-9]+`)
	// base64Field is a base64 member of a frame.
	base64Field = regexp.MustCompile(`("(?:chunk|dataBase64|bodyBase64|delta)":")([A-Za-z0-9+/=]+)"`)
	msRe        = regexp.MustCompile(`"([A-Za-z]+AtMs)":[0-9]+`)
)

// normalise makes one output frame independent of the run.
func (s *Transcript) normalise(frame string) string {
	type kv struct{ k, v string }
	var vars []kv
	for k, v := range s.vars {
		if k != "GATE" && len(v) > 1 { // "/" (a HOME of /) would rewrite every path
			vars = append(vars, kv{k, v})
		}
	}
	sort.Slice(vars, func(i, j int) bool { return len(vars[i].v) > len(vars[j].v) })
	subst := func(x string) string {
		for _, e := range vars {
			x = strings.ReplaceAll(x, e.v, "$"+e.k)
		}
		return x
	}
	// Base64 payloads (output chunks, file data, bodies) get the same
	// substitutions in their decoded bytes, then are encoded again.
	frame = base64Field.ReplaceAllStringFunc(frame, func(m string) string {
		sub := base64Field.FindStringSubmatch(m)
		raw, err := base64.StdEncoding.DecodeString(sub[2])
		if err != nil {
			return m
		}
		if out := subst(string(raw)); out != string(raw) {
			return sub[1] + base64.StdEncoding.EncodeToString([]byte(out)) + `"`
		}
		return m
	})
	frame = subst(frame)
	frame = uuidRe.ReplaceAllStringFunc(frame, func(u string) string {
		name, ok := s.uuids[u]
		if !ok {
			name = fmt.Sprintf("<uuid:%d>", len(s.uuids)+1)
			s.uuids[u], s.byName[name] = name, u
		}
		return name
	})
	frame = pidRe.ReplaceAllString(frame, `"pid":<pid>`)
	frame = msRe.ReplaceAllString(frame, `"$1":<ms>`)
	for _, r := range s.cfg.Normalize {
		if r.Func != nil {
			frame = r.Re.ReplaceAllStringFunc(frame, r.Func)
			continue
		}
		frame = r.Re.ReplaceAllString(frame, r.With)
	}
	return frame
}

func (s *Transcript) run(t *testing.T, d *datadriven.TestData) string {
	if f, ok := s.cfg.Commands[d.Cmd]; ok {
		return f(t, s, d)
	}
	switch d.Cmd {
	case "send":
		return s.send(t, d)
	case "await":
		return s.await(t, d)
	case "events":
		return s.print(s.conn(t, d).takePile())
	case "touch":
		for _, a := range d.CmdArgs {
			p := s.Expand(a.Key)
			if !filepath.IsAbs(p) {
				p = filepath.Join(s.vars["TMP"], p)
			}
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				d.Fatalf(t, "touch: %v", err)
			}
		}
		return ""
	case "close":
		c := s.conn(t, d)
		_ = c.core.Close()
		delete(s.conns, c.name)
		return ""
	case "skip-unless":
		var p string
		d.ScanArgs(t, "exists", &p)
		if _, err := os.Stat(p); err != nil {
			t.Skipf("%s: %s does not exist", d.Pos, p)
		}
		return ""
	}
	d.Fatalf(t, "unknown directive %q", d.Cmd)
	return ""
}

// conn returns the directive's connection (conn=, default "c"), opening it
// on first use.
func (s *Transcript) conn(t *testing.T, d *datadriven.TestData) *tconn {
	name := "c"
	d.MaybeScanArgs(t, "conn", &name)
	return s.connByName(name)
}

func (s *Transcript) connByName(name string) *tconn {
	if c, ok := s.conns[name]; ok {
		return c
	}
	c := &tconn{name: name, changed: make(chan struct{})}
	c.core = wire.NewClient(s.connect(), wire.ClientOptions{Peek: c.peek})
	s.conns[name] = c
	return c
}

func (s *Transcript) duration(t *testing.T, d *datadriven.TestData, key string, def time.Duration) time.Duration {
	var v string
	if !d.MaybeScanArgs(t, key, &v) {
		return def
	}
	dur, err := time.ParseDuration(v)
	if err != nil {
		d.Fatalf(t, "%s=%s: %v", key, v, err)
	}
	return dur
}

func (s *Transcript) send(t *testing.T, d *datadriven.TestData) string {
	c := s.conn(t, d)
	within := s.duration(t, d, "within", s.cfg.Timeout)
	minimum := s.duration(t, d, "min", 0)
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var ids []string
	t0 := time.Now()
	for _, line := range strings.Split(d.Input, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		frame := s.Expand(line)
		if err := c.core.WriteRaw(ctx, []byte(frame)); err != nil {
			d.Fatalf(t, "send %s: %v", line, err)
		}
		var env struct {
			ID json.RawMessage `json:"id"`
		}
		if json.Unmarshal([]byte(frame), &env) == nil && len(env.ID) > 0 && string(env.ID) != "null" {
			ids = append(ids, idKey(env.ID))
		}
	}
	if d.HasArg("async") {
		return ""
	}
	answers, err := c.waitAnswers(ctx, ids)
	if err != nil {
		d.Fatalf(t, "%v within %v; received and not printed:\n%s", err, within, s.print(c.takePile()))
	}
	if took := time.Since(t0); took < minimum {
		d.Fatalf(t, "answered after %v, sooner than min=%v", took, minimum)
	}
	return s.print(answers)
}

func (s *Transcript) await(t *testing.T, d *datadriven.TestData) string {
	c := s.conn(t, d)
	within := s.duration(t, d, "within", s.cfg.Timeout)
	var conds []func([]frame) bool
	for _, a := range d.CmdArgs {
		a := a
		switch a.Key {
		case "conn", "within":
		case "closed", "exited":
			conds = append(conds, func(fs []frame) bool {
				return has(fs, func(f frame) bool { return f.method == "process/"+a.Key && f.processID == a.Vals[0] })
			})
		case "method":
			conds = append(conds, func(fs []frame) bool {
				return has(fs, func(f frame) bool { return f.method == a.Vals[0] })
			})
		case "response":
			conds = append(conds, func(fs []frame) bool {
				return has(fs, func(f frame) bool { return f.method == "" && f.id == idKey(json.RawMessage(a.Vals[0])) })
			})
		case "output":
			if len(a.Vals) != 2 {
				d.Fatalf(t, "output=(process,text)")
			}
			conds = append(conds, func(fs []frame) bool {
				var out []byte
				for _, f := range fs {
					if f.method == "process/output" && f.processID == a.Vals[0] {
						out = append(out, f.chunk...)
					}
				}
				return bytes.Contains(out, []byte(a.Vals[1]))
			})
		default:
			d.Fatalf(t, "await: unknown condition %q", a.Key)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if err := c.waitPile(ctx, func(fs []frame) bool {
		for _, cond := range conds {
			if !cond(fs) {
				return false
			}
		}
		return true
	}); err != nil {
		d.Fatalf(t, "%s: not within %v (%v); received and not printed:\n%s", d.FullCmd(), within, err, s.print(c.takePile()))
	}
	return s.print(c.takePile())
}

func has(fs []frame, pred func(frame) bool) bool {
	for _, f := range fs {
		if pred(f) {
			return true
		}
	}
	return false
}

// print renders frames, one per line, normalised.
func (s *Transcript) print(fs []frame) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteString(s.normalise(string(f.raw)))
		b.WriteByte('\n')
	}
	return b.String()
}

// frame is one inbound message.
type frame struct {
	raw       []byte
	id        string // the answer's id (its JSON text, strings unquoted); "" for notifications
	method    string
	processID string
	seq       uint64
	chunk     []byte // process/output's decoded chunk
	n         int    // arrival order
}

func parseFrame(b []byte, n int) frame {
	f := frame{raw: b, n: n}
	var env struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			ProcessID string      `json:"processId"`
			Seq       uint64      `json:"seq"`
			Chunk     wire.Base64 `json:"chunk"`
		} `json:"params"`
	}
	_ = json.Unmarshal(b, &env)
	f.method, f.processID, f.seq, f.chunk = env.Method, env.Params.ProcessID, env.Params.Seq, env.Params.Chunk
	if env.Method == "" {
		f.id = idKey(env.ID)
	}
	return f
}

// tconn is one connection of a transcript. The pile (frames received and
// not printed) is guarded by mu: the client core's reader appends, the
// test's goroutine takes.
type tconn struct {
	name string
	core *wire.Client

	mu      sync.Mutex
	pile    []frame
	n       int
	last    time.Time
	changed chan struct{} // closed and replaced on every arrival
}

func (c *tconn) peek(data []byte) bool {
	b := append([]byte(nil), data...)
	c.mu.Lock()
	c.n++
	c.pile = append(c.pile, parseFrame(b, c.n))
	c.last = time.Now()
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
	return true
}

// quiet is how long the pile must stay unchanged for an await to end.
const quiet = 20 * time.Millisecond

// waitPile waits until cond holds on the pile and nothing arrived for
// quiet.
func (c *tconn) waitPile(ctx context.Context, cond func([]frame) bool) error {
	for {
		c.mu.Lock()
		ok, ch, since := cond(c.pile), c.changed, time.Since(c.last)
		c.mu.Unlock()
		if ok && since >= quiet {
			return nil
		}
		wait := quiet - since
		if !ok {
			wait = time.Hour
		}
		tm := time.NewTimer(wait)
		select {
		case <-ch:
		case <-tm.C:
		case <-c.core.Done():
			tm.Stop()
			c.mu.Lock()
			ok = cond(c.pile)
			c.mu.Unlock()
			if ok {
				return nil
			}
			return c.core.Err()
		case <-ctx.Done():
			tm.Stop()
			return ctx.Err()
		}
		tm.Stop()
	}
}

// waitAnswers waits for the answers to ids and takes them off the pile.
func (c *tconn) waitAnswers(ctx context.Context, ids []string) ([]frame, error) {
	err := c.waitPile(ctx, func(fs []frame) bool {
		for _, id := range ids {
			if !has(fs, func(f frame) bool { return f.method == "" && f.id == id }) {
				return false
			}
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("no answer to every id of %v: %w", ids, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]frame, 0, len(ids))
	for _, id := range ids {
		for i, f := range c.pile {
			if f.method == "" && f.id == id {
				out = append(out, f)
				c.pile = append(c.pile[:i], c.pile[i+1:]...)
				break
			}
		}
	}
	return out, nil
}

// takePile empties the pile, in the canonical order.
func (c *tconn) takePile() []frame {
	c.mu.Lock()
	fs := c.pile
	c.pile = nil
	c.mu.Unlock()
	rank := func(f frame) int {
		switch {
		case f.method == "":
			return 0
		case strings.HasPrefix(f.method, "process/") && f.processID != "" && f.seq != 0:
			return 2
		}
		return 1
	}
	sort.SliceStable(fs, func(i, j int) bool {
		a, b := fs[i], fs[j]
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra < rb
		}
		if rank(a) == 2 {
			if a.processID != b.processID {
				return a.processID < b.processID
			}
			return a.seq < b.seq
		}
		return a.n < b.n
	})
	return fs
}
