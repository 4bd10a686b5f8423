package main_test

// A websocket tap between the Codex CLI and the exec-server under test (runtimed, or Codex's own for
// reference runs). It relays every frame unchanged, records each JSON-RPC request with the answer it
// got (so a test can see which methods codex used and what the server said), and can drop every live
// connection on demand, as a network failure would.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/coder/websocket"
)

// tapCall is one request codex sent and the answer the server gave.
type tapCall struct {
	Conn     int // 1 for the first connection, 2 after a reconnect, ...
	ID       string
	Method   string
	Params   json.RawMessage
	Answered bool
	Result   json.RawMessage
	Err      *tapError
}

type tapError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// wsTap relays codex <-> target. mu guards conns, nconn, calls and notes: every relay goroutine
// records into them, the test reads them after codex has exited (or from a model turn, to drop).
type wsTap struct {
	target string
	srv    *httptest.Server
	ctx    context.Context // ends every relay when the tap closes
	cancel context.CancelFunc
	wg     sync.WaitGroup // relay goroutines

	mu    sync.Mutex
	conns map[int][2]*websocket.Conn // live pairs by connection number
	nconn int
	calls []*tapCall
	notes map[string]int // notifications by direction and method, e.g. "S->C process/output"
}

// newTap starts a tap in front of target (ws://...) and closes it when the test ends.
func newTap(t *testing.T, target string) *wsTap {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tap := &wsTap{target: target, ctx: ctx, cancel: cancel, conns: map[int][2]*websocket.Conn{}, notes: map[string]int{}}
	tap.srv = httptest.NewServer(http.HandlerFunc(tap.relay))
	t.Cleanup(tap.close)
	return tap
}

// url is what CODEX_EXEC_SERVER_URL must be.
func (tap *wsTap) url() string { return "ws://" + strings.TrimPrefix(tap.srv.URL, "http://") }

func (tap *wsTap) close() {
	tap.cancel()
	tap.srv.Close()
	tap.mu.Lock()
	for _, pair := range tap.conns {
		pair[0].CloseNow()
		pair[1].CloseNow()
	}
	tap.mu.Unlock()
	tap.wg.Wait()
}

// drop closes every live connection abruptly (no close handshake) and reports how many there were.
func (tap *wsTap) drop() int {
	tap.mu.Lock()
	defer tap.mu.Unlock()
	n := len(tap.conns)
	for id, pair := range tap.conns {
		pair[0].CloseNow()
		pair[1].CloseNow()
		delete(tap.conns, id)
	}
	return n
}

func (tap *wsTap) relay(w http.ResponseWriter, r *http.Request) {
	tap.wg.Add(1)
	defer tap.wg.Done()
	client, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	client.SetReadLimit(64 << 20)
	dialCtx, cancel := context.WithTimeout(tap.ctx, wait)
	server, _, err := websocket.Dial(dialCtx, tap.target, nil)
	cancel()
	if err != nil {
		client.Close(websocket.StatusInternalError, "tap: "+err.Error())
		return
	}
	server.SetReadLimit(64 << 20)
	tap.mu.Lock()
	tap.nconn++
	n := tap.nconn
	tap.conns[n] = [2]*websocket.Conn{client, server}
	tap.mu.Unlock()

	tap.wg.Add(1)
	go func() {
		defer tap.wg.Done()
		tap.pump(n, "S->C", server, client)
	}()
	tap.pump(n, "C->S", client, server)
}

// pump copies frames from one side to the other until either ends, then ends both.
func (tap *wsTap) pump(n int, dir string, from, to *websocket.Conn) {
	defer func() {
		from.CloseNow()
		to.CloseNow()
		tap.mu.Lock()
		delete(tap.conns, n)
		tap.mu.Unlock()
	}()
	for {
		typ, msg, err := from.Read(tap.ctx)
		if err != nil {
			return
		}
		tap.record(n, dir, msg)
		if err := to.Write(tap.ctx, typ, msg); err != nil {
			return
		}
	}
}

func (tap *wsTap) record(n int, dir string, msg []byte) {
	var env struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
		Result json.RawMessage `json:"result"`
		Error  *tapError       `json:"error"`
	}
	if json.Unmarshal(msg, &env) != nil {
		tap.mu.Lock()
		tap.notes[dir+" <not JSON>"]++
		tap.mu.Unlock()
		return
	}
	tap.mu.Lock()
	defer tap.mu.Unlock()
	hasID := len(env.ID) > 0 && string(env.ID) != "null"
	switch {
	case env.Method != "" && hasID && dir == "C->S":
		tap.calls = append(tap.calls, &tapCall{Conn: n, ID: string(env.ID), Method: env.Method, Params: env.Params})
	case env.Method != "":
		tap.notes[dir+" "+env.Method]++
	case hasID && dir == "S->C":
		for i := len(tap.calls) - 1; i >= 0; i-- {
			c := tap.calls[i]
			if c.Conn == n && c.ID == string(env.ID) && !c.Answered {
				c.Answered, c.Result, c.Err = true, env.Result, env.Error
				return
			}
		}
		tap.notes[dir+" <unmatched response>"]++
	default:
		tap.notes[dir+" <other>"]++
	}
}

// snapshot returns copies of the calls and notification counts recorded so far.
func (tap *wsTap) snapshot() ([]tapCall, map[string]int) {
	tap.mu.Lock()
	defer tap.mu.Unlock()
	calls := make([]tapCall, len(tap.calls))
	for i, c := range tap.calls {
		calls[i] = *c
	}
	notes := make(map[string]int, len(tap.notes))
	for k, v := range tap.notes {
		notes[k] = v
	}
	return calls, notes
}

// callsOf returns the recorded requests for method.
func (tap *wsTap) callsOf(method string) []tapCall {
	calls, _ := tap.snapshot()
	var out []tapCall
	for _, c := range calls {
		if c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// refused returns the first answer to method that was an error with code and a message containing
// substr, if any.
func (tap *wsTap) refused(method string, code int, substr string) (*tapError, bool) {
	for _, c := range tap.callsOf(method) {
		if c.Err != nil && c.Err.Code == code && strings.Contains(c.Err.Message, substr) {
			return c.Err, true
		}
	}
	return nil, false
}

// connections is how many websocket connections codex opened through the tap.
func (tap *wsTap) connections() int {
	tap.mu.Lock()
	defer tap.mu.Unlock()
	return tap.nconn
}

// trace renders the recorded calls, one line each, for failure messages.
func (tap *wsTap) trace() string {
	calls, notes := tap.snapshot()
	var b strings.Builder
	for _, c := range calls {
		fmt.Fprintf(&b, "  conn %d #%s %s %s -> %s\n", c.Conn, c.ID, c.Method, trunc(string(c.Params), 300), c.answer(300))
	}
	keys := make([]string, 0, len(notes))
	for k := range notes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "  notification %s x%d\n", k, notes[k])
	}
	return b.String()
}

func (c tapCall) answer(n int) string {
	switch {
	case !c.Answered:
		return "(no answer)"
	case c.Err != nil:
		return fmt.Sprintf("error %d %q", c.Err.Code, trunc(c.Err.Message, n))
	default:
		return trunc(string(c.Result), n)
	}
}

// ---- the methods table ----

// methodTable collects, across the cases of one codex version, every method codex called and how the
// server answered, for the closing note (printed with -v). mu guards rows: parallel cases add
// to it.
type methodTable struct {
	mu   sync.Mutex
	rows map[string]*methodRow
}

type methodRow struct {
	ok     int
	errors map[string]int // "code message-with-paths-elided" -> count
	notes  int            // for notifications
}

func newMethodTable() *methodTable { return &methodTable{rows: map[string]*methodRow{}} }

func (mt *methodTable) add(tap *wsTap) {
	calls, notes := tap.snapshot()
	mt.mu.Lock()
	defer mt.mu.Unlock()
	row := func(name string) *methodRow {
		r := mt.rows[name]
		if r == nil {
			r = &methodRow{errors: map[string]int{}}
			mt.rows[name] = r
		}
		return r
	}
	for _, c := range calls {
		r := row(c.Method)
		switch {
		case !c.Answered:
			r.errors["(no answer: connection ended first)"]++
		case c.Err != nil:
			r.errors[fmt.Sprintf("%d %s", c.Err.Code, elidePaths(c.Err.Message))]++
		default:
			r.ok++
		}
	}
	for k, v := range notes {
		row("notification " + k).notes += v
	}
}

func (mt *methodTable) String() string {
	mt.mu.Lock()
	defer mt.mu.Unlock()
	names := make([]string, 0, len(mt.rows))
	for k := range mt.rows {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("| method | ok | errors |\n|---|---|---|\n")
	for _, name := range names {
		r := mt.rows[name]
		if r.notes > 0 {
			fmt.Fprintf(&b, "| %s | %d seen | |\n", name, r.notes)
			continue
		}
		errs := make([]string, 0, len(r.errors))
		for e, n := range r.errors {
			errs = append(errs, fmt.Sprintf("%dx %s", n, e))
		}
		sort.Strings(errs)
		fmt.Fprintf(&b, "| %s | %d | %s |\n", name, r.ok, strings.Join(errs, "; "))
	}
	return b.String()
}

// elidePaths replaces absolute paths in an error message with PATH so that one kind of answer is one
// row however many files it concerned.
func elidePaths(msg string) string {
	words := strings.Fields(msg)
	for i, w := range words {
		trimmed := strings.Trim(w, "`'\":,")
		if strings.HasPrefix(trimmed, "/") || strings.HasPrefix(trimmed, "file:/") {
			words[i] = strings.Replace(w, trimmed, "PATH", 1)
		}
	}
	return strings.Join(words, " ")
}
