package runtime

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/runtimed/runtimed/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type backendCase struct {
	name string
	make func(t *testing.T) Backend
}

var backends = []backendCase{
	{"local", newLocalBackend},
	{"websocket", func(t *testing.T) Backend { c, _ := newWSBackend(t, Config{}, nil); return c }},
	{"stdio", newStdioBackend},
}

func newLocalBackend(t *testing.T) Backend {
	l := NewLocal(Config{Logger: zaptest.NewLogger(t)})
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// newWSBackend serves a Server on a real websocket and dials it.
func newWSBackend(t *testing.T, cfg Config, opts *ClientOptions) (*Client, *wsServer) {
	t.Helper()
	ws := startWSServer(t, cfg)
	c, err := Dial(ctxT(t), ws.url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, ws
}

type wsServer struct {
	srv *Server
	hs  *httptest.Server
	url string
}

func startWSServer(t *testing.T, cfg Config) *wsServer {
	if cfg.Logger == nil {
		cfg.Logger = zaptest.NewLogger(t)
	}
	srv := NewServer(cfg)
	hs := httptest.NewServer(srv.Handler())
	ws := &wsServer{srv: srv, hs: hs, url: "ws" + strings.TrimPrefix(hs.URL, "http")}
	t.Cleanup(ws.stop)
	return ws
}

func (ws *wsServer) stop() {
	_ = ws.srv.Close()
	ws.hs.Close()
}

func newStdioBackend(t *testing.T) Backend { return newStdioServer(t, Config{}).c }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func sh(t *testing.T, script string) Spec {
	return Spec{Argv: []string{"/bin/sh", "-c", script}, Dir: t.TempDir(), Env: map[string]string{"PATH": "/usr/bin:/bin"}}
}

type entry struct {
	seq    uint64
	kind   EventKind
	stream Stream
	data   string
	code   int
}

// collect reads a stream to its end.
func collect(t *testing.T, ctx context.Context, s *EventStream) []entry {
	t.Helper()
	var out []entry
	for {
		ev, err := s.Next(ctx)
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("Next: %v (after %d events)", err, len(out))
		}
		out = append(out, entry{seq: ev.Seq, kind: ev.Kind, stream: ev.Stream, data: string(ev.Data), code: ev.ExitCode})
	}
}

func forEachBackend(t *testing.T, f func(t *testing.T, b Backend)) {
	for _, bc := range backends {
		t.Run(bc.name, func(t *testing.T) { f(t, bc.make(t)) })
	}
}

func TestBackendStartExit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		ctx := ctxT(t)
		for _, code := range []int{0, 7} {
			p, err := b.Start(ctx, sh(t, "exit "+string(rune('0'+code))))
			if err != nil {
				t.Fatal(err)
			}
			st, err := p.Wait(ctx)
			if err != nil || st.Code != code {
				t.Fatalf("Wait = %+v, %v; want %d", st, err, code)
			}
			if st2, _ := p.Wait(ctx); st2 != st {
				t.Fatalf("second Wait = %+v", st2)
			}
		}
		p, err := b.Start(ctx, sh(t, "kill -9 $$"))
		if err != nil {
			t.Fatal(err)
		}
		if st, _ := p.Wait(ctx); st.Code != 137 {
			t.Fatalf("killed by SIGKILL: code %d; want 137", st.Code)
		}
		if _, err := b.Start(ctx, Spec{Argv: nil, Dir: "/"}); optionOf(err) != "Spec.Argv" {
			t.Fatalf("empty argv: %v", err)
		}
		var re *RPCError
		if _, err := b.Start(ctx, Spec{Argv: []string{"no-such-binary-xyz"}, Dir: "/"}); !errors.As(err, &re) || re.Code != wire.CodeInternal {
			t.Fatalf("missing binary: %v", err)
		}
		q, err := b.Start(ctx, Spec{ID: "dup", Argv: []string{"sleep", "10"}, Dir: "/"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Start(ctx, Spec{ID: "dup", Argv: []string{"true"}, Dir: "/"}); !errors.As(err, &re) || re.Message != "process dup already exists" {
			t.Fatalf("duplicate id: %v", err)
		}
		if running, err := q.Terminate(ctx, 0); err != nil || !running {
			t.Fatalf("terminate = %v, %v", running, err)
		}
		if st, _ := q.Wait(ctx); st.Code != 137 {
			t.Fatalf("terminated: code %d", st.Code)
		}
	})
}

func TestBackendEventsAndReadAgree(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		ctx := ctxT(t)
		p, err := b.Start(ctx, sh(t, `printf 'event output\n'; sleep 0.1; printf 'event err\n' >&2; sleep 0.1; exit 7`))
		if err != nil {
			t.Fatal(err)
		}
		s, err := p.Events(ctx)
		if err != nil {
			t.Fatal(err)
		}
		live := collect(t, ctx, s)
		want := []entry{
			{1, EventOutput, Stdout, "event output\n", 0},
			{2, EventOutput, Stderr, "event err\n", 0},
			{3, EventExited, "", "", 7},
			{4, EventClosed, "", "", 0},
		}
		if !equalEntries(live, want) {
			t.Fatalf("live events %+v; want %+v", live, want)
		}
		// Subscribing after close replays the same history.
		s2, err := p.Events(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if replay := collect(t, ctx, s2); !equalEntries(replay, want) {
			t.Fatalf("replayed events %+v", replay)
		}
		r, err := p.Read(ctx, ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Chunks) != 2 || r.NextSeq != 5 || !r.Exited || r.ExitCode != 7 || !r.Closed {
			t.Fatalf("read %+v", r)
		}
		for i, c := range r.Chunks {
			if c.Seq != want[i].seq || c.Stream != want[i].stream || string(c.Data) != want[i].data {
				t.Fatalf("read chunk %d = %+v; events say %+v", i, c, want[i])
			}
		}
	})
}

func equalEntries(a, b []entry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestBackendWriteReadPipeAndTTY(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		ctx := ctxT(t)
		spec := sh(t, "cat")
		spec.PipeStdin = true
		p, err := b.Start(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Write(ctx, []byte("hello\n")); err != nil {
			t.Fatal(err)
		}
		if got := readUntil(t, ctx, p, "hello\n"); got != "hello\n" {
			t.Fatalf("pipe echo %q", got)
		}
		if err := p.CloseStdin(ctx); err != nil {
			t.Fatal(err)
		}
		if st, err := p.Wait(ctx); err != nil || st.Code != 0 {
			t.Fatalf("cat after closeStdin: %+v %v", st, err)
		}
		if err := p.Write(ctx, []byte("late")); !errors.Is(err, ErrStdinClosed) && !errors.Is(err, ErrUnknownProcess) {
			t.Fatalf("write after close: %v", err)
		}
		if err := p.Resize(ctx, 10, 10); !errors.Is(err, ErrNotPTY) {
			t.Fatalf("resize of a pipe process: %v; want ErrNotPTY", err)
		}

		q, err := b.Start(ctx, sh(t, "sleep 5"))
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Write(ctx, []byte("x")); !errors.Is(err, ErrStdinClosed) {
			t.Fatalf("write without pipeStdin: %v; want ErrStdinClosed", err)
		}
		_, _ = q.Terminate(ctx, 0)

		tspec := sh(t, "stty -echo; echo ready; read line; echo got:$line; stty size")
		tspec.TTY = true
		tspec.Size = Size{Rows: 30, Cols: 100}
		tp, err := b.Start(ctx, tspec)
		if err != nil {
			t.Fatal(err)
		}
		readUntil(t, ctx, tp, "ready")
		if err := tp.Write(ctx, []byte("abc\n")); err != nil {
			t.Fatal(err)
		}
		out := readUntil(t, ctx, tp, "30 100")
		if !strings.Contains(out, "got:abc") {
			t.Fatalf("tty output %q", out)
		}
		r, _ := tp.Read(ctx, ReadOptions{})
		if len(r.Chunks) == 0 || r.Chunks[0].Stream != PTY {
			t.Fatalf("tty chunks %+v; want stream pty", r.Chunks)
		}
	})
}

// readUntil reads output (all streams) until it contains want.
func readUntil(t *testing.T, ctx context.Context, p Process, want string) string {
	t.Helper()
	var out bytes.Buffer
	after := uint64(0)
	for !strings.Contains(out.String(), want) {
		r, err := p.Read(ctx, ReadOptions{After: after, Wait: 5 * time.Second})
		if err != nil {
			t.Fatalf("read: %v (have %q)", err, out.String())
		}
		for _, c := range r.Chunks {
			out.Write(c.Data)
		}
		after = r.NextSeq - 1
		if r.Closed && !strings.Contains(out.String(), want) {
			t.Fatalf("closed without %q; output %q", want, out.String())
		}
	}
	return out.String()
}

func TestBackendQueuedEventsBeforeSubscribe(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		ctx := ctxT(t)
		p, err := b.Start(ctx, sh(t, `for i in 1 2 3 4 5; do echo line$i; done`))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		s, err := p.Events(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		evs := collect(t, ctx, s)
		for i, e := range evs {
			if e.seq != uint64(i+1) {
				t.Fatalf("seq %d at %d", e.seq, i)
			}
			out.WriteString(e.data)
		}
		if out.String() != "line1\nline2\nline3\nline4\nline5\n" || evs[len(evs)-1].kind != EventClosed {
			t.Fatalf("late subscriber saw %q, %+v", out.String(), evs)
		}
	})
}

func TestBackendTerminateGraceAndSignal(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		ctx := ctxT(t)
		p, err := b.Start(ctx, sh(t, `trap 'echo bye; exit 3' TERM; echo ready; while :; do sleep 0.01; done`))
		if err != nil {
			t.Fatal(err)
		}
		readUntil(t, ctx, p, "ready")
		if running, err := p.Terminate(ctx, 5*time.Second); err != nil || !running {
			t.Fatalf("terminate = %v, %v", running, err)
		}
		if st, _ := p.Wait(ctx); st.Code != 3 {
			t.Fatalf("a child that traps TERM exits with its own code: got %d", st.Code)
		}
		q, err := b.Start(ctx, sh(t, `trap 'echo int; exit 5' INT; echo ready; while :; do sleep 0.01; done`))
		if err != nil {
			t.Fatal(err)
		}
		readUntil(t, ctx, q, "ready")
		if err := q.Signal(ctx, SigInterrupt); err != nil {
			t.Fatal(err)
		}
		if st, _ := q.Wait(ctx); st.Code != 5 {
			t.Fatalf("after interrupt: code %d", st.Code)
		}
	})
}

func TestEventsLaggedRecovers(t *testing.T) {
	defer func(old int) { liveQueueCap = old }(liveQueueCap)
	liveQueueCap = 4
	forEachBackend(t, func(t *testing.T, b Backend) {
		ctx := ctxT(t)
		dir := t.TempDir()
		rel := filepath.Join(dir, "go")
		// Enough small lines to overflow a subscriber queue that nobody reads.
		p, err := b.Start(ctx, sh(t, `while [ ! -e `+rel+` ]; do sleep 0.01; done; i=0; while [ $i -lt 2000 ]; do echo line$i; i=$((i+1)); done`))
		if err != nil {
			t.Fatal(err)
		}
		s, err := p.Events(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(rel, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Wait(ctx); err != nil { // all output exists before we read any
			t.Fatal(err)
		}
		var out strings.Builder
		var seq uint64
		lagged := 0
		for {
			ev, err := s.Next(ctx)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			switch ev.Kind {
			case EventLagged, EventFailed, EventGap:
				if ev.Kind != EventLagged {
					t.Fatalf("unexpected %v: %+v", ev.Kind, ev)
				}
				lagged++
				continue
			}
			if ev.Seq != seq+1 {
				t.Fatalf("seq %d after %d", ev.Seq, seq)
			}
			seq = ev.Seq
			out.Write(ev.Data)
		}
		var want strings.Builder
		for i := 0; i < 2000; i++ {
			want.WriteString("line" + itoa(i) + "\n")
		}
		if out.String() != want.String() {
			t.Fatalf("recovered output differs: got %d bytes, want %d", out.Len(), want.Len())
		}
		if seq > uint64(liveQueueCap)+2 && lagged == 0 {
			t.Fatalf("%d events overflowed an unread queue of %d without a lagged marker", seq, liveQueueCap)
		}
		t.Logf("%d events, %d lagged markers", seq, lagged)
	})
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

type lister interface {
	List(ctx context.Context) ([]ProcessInfo, error)
}

func TestBackendResizeListAndGraceKill(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		ctx := ctxT(t)
		spec := sh(t, `echo ready; while read x; do stty size; done`)
		spec.TTY = true
		p, err := b.Start(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		readUntil(t, ctx, p, "ready")
		if err := p.Resize(ctx, 33, 77); err != nil {
			t.Fatal(err)
		}
		if err := p.Write(ctx, []byte("\n")); err != nil {
			t.Fatal(err)
		}
		readUntil(t, ctx, p, "33 77")

		state := func(id string) string {
			infos, err := b.(lister).List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, in := range infos {
				if in.ID == id {
					return in.State
				}
			}
			return "missing"
		}
		if s := state(p.ID()); s != "running" {
			t.Fatalf("state %q; want running", s)
		}
		// A child that ignores SIGTERM is killed when the grace ends.
		q, err := b.Start(ctx, sh(t, `trap '' TERM HUP; echo ready; while :; do sleep 0.01; done`))
		if err != nil {
			t.Fatal(err)
		}
		readUntil(t, ctx, q, "ready")
		start := time.Now()
		if running, _ := q.Terminate(ctx, 300*time.Millisecond); !running {
			t.Fatal("terminate: not running")
		}
		st, err := q.Wait(ctx)
		if err != nil || st.Code != 137 {
			t.Fatalf("after grace: %+v %v; want 137", st, err)
		}
		if d := time.Since(start); d < 300*time.Millisecond {
			t.Fatalf("killed after %v, before the grace ended", d)
		}
		if s := state(q.ID()); s != "closed" {
			t.Fatalf("state after Wait %q; want closed", s)
		}
		if _, err := p.Terminate(ctx, 0); err != nil {
			t.Fatal(err)
		}
	})
}

// Concurrent starts of one id: exactly one wins, the others get the
// protocol's duplicate error (and nothing panics).
func TestBackendConcurrentStartSameID(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		ctx := ctxT(t)
		const n = 8
		errs := make(chan error, n)
		procs := make(chan Process, n)
		for i := 0; i < n; i++ {
			go func() {
				p, err := b.Start(ctx, Spec{ID: "same", Argv: []string{"sleep", "1000"}, Dir: "/"})
				if err == nil {
					procs <- p
				}
				errs <- err
			}()
		}
		won := 0
		for i := 0; i < n; i++ {
			err := <-errs
			var re *RPCError
			switch {
			case err == nil:
				won++
			case errors.As(err, &re) && re.Message == "process same already exists":
			default:
				t.Errorf("start: %v", err)
			}
		}
		if won != 1 {
			t.Fatalf("%d starts of one id succeeded; want 1", won)
		}
		p := <-procs
		if _, err := p.Terminate(ctx, 0); err != nil {
			t.Fatal(err)
		}
	})
}
