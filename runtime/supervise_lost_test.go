package runtime

import (
	"context"
	"errors"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/runtimed/runtimed/wire"

	"github.com/runtimed/runtimed/actors/clock/clocktest"
)

// countingBackend counts the Starts that reach a backend.
type countingBackend struct {
	Backend
	starts atomic.Int32
}

func (b *countingBackend) Start(ctx context.Context, spec Spec) (Process, error) {
	b.starts.Add(1)
	return b.Backend.Start(ctx, spec)
}

// startWSAt serves a Server on a real websocket listening on addr
// ("127.0.0.1:0" for any port); closed at the end of the test.
func startWSAt(t *testing.T, addr string) *wsServer {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(Config{Logger: zaptest.NewLogger(t)})
	hs := httptest.NewUnstartedServer(srv.Handler())
	_ = hs.Listener.Close()
	hs.Listener = l
	hs.Start()
	ws := &wsServer{srv: srv, hs: hs, url: "ws" + strings.TrimPrefix(hs.URL, "http")}
	t.Cleanup(ws.stop)
	return ws
}

// stdioServer is a Server serving one Client over a pair of pipes.
type stdioServer struct {
	c    *Client
	kill func() // the server goes away: its ends of the pipes close, then it closes
}

func newStdioServer(t *testing.T, cfg Config) *stdioServer {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = zaptest.NewLogger(t)
	}
	srv := NewServer(cfg)
	toServerR, toServerW, _ := os.Pipe()
	toClientR, toClientW, _ := os.Pipe()
	served := make(chan struct{})
	go func() {
		_ = srv.ServeTransport(wire.NewStdioTransport(toServerR, toClientW, 0), false)
		close(served)
	}()
	c, err := NewClient(ctxT(t), wire.NewStdioTransport(toClientR, toServerW, 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	kill := sync.OnceFunc(func() {
		_ = toClientW.Close() // first: nothing the server does next reaches the client
		_ = toServerR.Close()
		<-served
		_ = srv.Close()
	})
	t.Cleanup(func() {
		_ = c.Close() // the server reads EOF and ends the session
		<-served
		kill()
	})
	return &stdioServer{c: c, kill: kill}
}

// pidLines waits (bounded) until path has n lines and returns the last
// as a pid.
func pidLines(t *testing.T, path string, n int) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(path)
		if lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n"); strings.HasSuffix(string(b), "\n") && len(lines) >= n {
			pid, err := strconv.Atoi(lines[n-1])
			if err != nil {
				t.Fatalf("%s: %q", path, b)
			}
			return pid
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s never had %d lines", path, n)
	return 0
}

// asked returns the duration of the next timer the supervisor asks for.
func asked(t *testing.T, clk *clocktest.Clock) time.Duration {
	t.Helper()
	select {
	case d := <-clk.Asked():
		return d
	case <-time.After(20 * time.Second):
		t.Fatal("the supervisor asked for no timer")
		return 0
	}
}

// noTimerAsked checks, after a Status round trip (the actor has handled
// everything before it), that the supervisor asked for no timer.
func noTimerAsked(t *testing.T, clk *clocktest.Clock, sup *Supervisor, want ServiceState) {
	t.Helper()
	st, err := sup.Status(ctxT(t))
	if err != nil || len(st) != 1 || st[0].State != want {
		t.Fatalf("status %+v %v; want %s", st, err, want)
	}
	select {
	case d := <-clk.Asked():
		t.Fatalf("the supervisor asked for a %v timer", d)
	default:
	}
}

// lostCase is a backend that can be lost and brought back.
type lostCase struct {
	name      string
	first     func(t *testing.T) (b Backend, lose func(), revive func(), redial func(ctx context.Context) (Backend, error))
	exitFirst bool  // losing the backend ends the process first (Local.Close kills it): a real exit, then the restart meets the loss
	cause     error // what the lost error wraps
}

var lostCases = []lostCase{
	{name: "websocket", cause: ErrDisconnected, first: func(t *testing.T) (Backend, func(), func(), func(context.Context) (Backend, error)) {
		ws := startWSAt(t, "127.0.0.1:0")
		addr, url := ws.hs.Listener.Addr().String(), ws.url
		c, err := Dial(ctxT(t), url, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		// The server is closed and a new one listens on the same address.
		return c, ws.stop, func() { startWSAt(t, addr) }, func(ctx context.Context) (Backend, error) {
			return Dial(ctx, url, &ClientOptions{ConnectTimeout: 5 * time.Second})
		}
	}},
	{name: "stdio", cause: ErrDisconnected, first: func(t *testing.T) (Backend, func(), func(), func(context.Context) (Backend, error)) {
		s := newStdioServer(t, Config{})
		var up atomic.Bool // the daemon at the other end of the pipes was started again
		return s.c, s.kill, func() { up.Store(true) }, func(ctx context.Context) (Backend, error) {
			if !up.Load() {
				return nil, errors.New("runtimed --stdio: not started yet")
			}
			return newStdioServer(t, Config{}).c, nil
		}
	}},
	{name: "local", cause: ErrClosed, exitFirst: true, first: func(t *testing.T) (Backend, func(), func(), func(context.Context) (Backend, error)) {
		l := newLocalBackend(t)
		var up atomic.Bool
		return l, func() { _ = l.Close() }, func() { up.Store(true) }, func(ctx context.Context) (Backend, error) {
			if !up.Load() {
				return nil, errors.New("not yet")
			}
			return NewLocal(Config{Logger: zaptest.NewLogger(t)}), nil
		}
	}},
}

// TestSupervisorLostBackend: a service whose backend is lost (a remote
// server closed, a stdio daemon gone, a Local closed) is ServiceLost, not
// an exit: its LastExit is not a made-up "exit status 0", nothing is
// started on the lost backend, the supervisor redials with backoff (on
// its clock) and, once a backend is back (a new server on the same
// address), starts the service again on it.
func TestSupervisorLostBackend(t *testing.T) {
	for _, lc := range lostCases {
		t.Run(lc.name, func(t *testing.T) {
			b0, lose, revive, redial := lc.first(t)
			first := &countingBackend{Backend: b0}
			clk := clocktest.New()
			dir := t.TempDir()
			pids := filepath.Join(dir, "pids")
			redials := make(chan error, 16)
			svc := Service{Name: "web", Spec: sh(t, "echo $$ >> "+pids+"; exec sleep 600"), Restart: RestartAlways,
				Backoff: Backoff{Initial: time.Second}, StopGrace: time.Second}
			sup, events := supervise(t, first, &SupervisorOptions{Clock: clk, Rand: func() float64 { return 0.5 },
				Redial: func(ctx context.Context) (Backend, error) {
					b, err := redial(ctx)
					redials <- err
					return b, err
				}}, svc)
			ctx := ctxT(t)
			if ev := nextServiceEvent(t, events, ServiceRunning); ev.ProcessID != "web#1" {
				t.Fatalf("first run %+v", ev.ServiceStatus)
			}
			pid1 := pidLines(t, pids, 1)

			lose()
			wantID, wantStarts := "web#1", int32(1)
			if lc.exitFirst { // the process was killed: a real exit, then the restart meets the closed backend
				ev := nextServiceEvent(t, events, ServiceBackoff)
				if ev.LastExit == nil || !ev.LastExit.Signaled() {
					t.Fatalf("killed by Close: %+v", ev.ServiceStatus)
				}
				clk.Advance(asked(t, clk))
				wantID, wantStarts = "web#2", 2
			}
			ev := nextServiceEvent(t, events, ServiceLost)
			if ev.Reason != ReasonBackendLost || !errors.Is(ev.LastError, ErrBackendLost) || !errors.Is(ev.LastError, lc.cause) ||
				ev.ProcessID != wantID || ev.Restarts != int(wantStarts)-1 || (!lc.exitFirst && ev.LastExit != nil) {
				t.Fatalf("lost: %+v (LastExit %v)", ev.ServiceStatus, ev.LastExit)
			}
			// The first redial ran at once and failed: the next is on the clock.
			if err := <-redials; err == nil {
				t.Fatal("redial succeeded while the backend was down")
			}
			d := asked(t, clk)
			if d != redialInitial {
				t.Errorf("redial delay %v, want %v", d, redialInitial)
			}
			noTimerAsked(t, clk, sup, ServiceLost) // no restart was scheduled
			if n := first.starts.Load(); n != wantStarts {
				t.Fatalf("%d starts on the first backend, want %d", n, wantStarts)
			}
			// Still down at the second attempt: the delay doubles.
			clk.Advance(d)
			if err := <-redials; err == nil {
				t.Fatal("redial succeeded while the backend was down")
			}
			if d2 := asked(t, clk); d2 != 2*redialInitial {
				t.Errorf("second redial delay %v, want %v", d2, 2*redialInitial)
			} else {
				d = d2
			}

			revive()
			clk.Advance(d)
			if err := <-redials; err != nil {
				t.Fatalf("redial after the backend came back: %v", err)
			}
			ev = nextServiceEvent(t, events, ServiceStarting)
			if ev.Reason != ReasonBackendBack {
				t.Errorf("restart after the loss: %+v", ev.ServiceStatus)
			}
			ev = nextServiceEvent(t, events, ServiceRunning)
			if wantNext := "web#" + strconv.Itoa(int(wantStarts)+1); ev.ProcessID != wantNext || ev.Restarts != int(wantStarts) || ev.LastError != nil {
				t.Fatalf("running again: %+v, want %s", ev.ServiceStatus, wantNext)
			}
			pid2 := pidLines(t, pids, 2)
			if pid2 == pid1 || !processAlive(pid2) {
				t.Fatalf("new process %d (first %d) alive %v", pid2, pid1, processAlive(pid2))
			}
			if n := first.starts.Load(); n != wantStarts {
				t.Errorf("%d starts on the first backend, want %d", n, wantStarts)
			}
			if err := sup.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			if processAlive(pid2) {
				t.Errorf("pid %d survived Stop", pid2)
			}
		})
	}
}

// TestSupervisorLostBackendNoRedial: without Redial a lost service stays
// lost, whatever its policy: no restart is scheduled against a backend
// that cannot start anything, Status says so, and Stop stops it.
func TestSupervisorLostBackendNoRedial(t *testing.T) {
	for _, policy := range []RestartPolicy{RestartAlways, RestartOnFailure, RestartNever} {
		t.Run(string(policy), func(t *testing.T) {
			ws := startWSAt(t, "127.0.0.1:0")
			c, err := Dial(ctxT(t), ws.url, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			clk := clocktest.New()
			sup, events := supervise(t, c, &SupervisorOptions{Clock: clk}, Service{Name: "web", Spec: sh(t, "exec sleep 600"), Restart: policy})
			ctx := ctxT(t)
			nextServiceEvent(t, events, ServiceRunning)
			ws.stop()
			ev := nextServiceEvent(t, events, ServiceLost)
			if ev.LastExit != nil || !errors.Is(ev.LastError, ErrDisconnected) {
				t.Fatalf("lost: %+v", ev.ServiceStatus)
			}
			noTimerAsked(t, clk, sup, ServiceLost)
			if err := sup.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			st := nextServiceEvent(t, events, ServiceStopped)
			if st.Reason != ReasonStop || st.ProcessID != "web#1" {
				t.Errorf("stopped: %+v", st.ServiceStatus)
			}
		})
	}
}

// TestSupervisorReconnectingClientServerRestarted: a Client with
// Reconnect reconnects to the restarted server, whose new session does
// not know the old one: the client gives up, the service is lost, and
// Redial brings it back on a new client, with no timer involved.
func TestSupervisorReconnectingClientServerRestarted(t *testing.T) {
	ws := startWSAt(t, "127.0.0.1:0")
	addr, url := ws.hs.Listener.Addr().String(), ws.url
	c, err := Dial(ctxT(t), url, &ClientOptions{Reconnect: true, ReconnectWindow: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	clk := clocktest.New()
	sup, events := supervise(t, c, &SupervisorOptions{Clock: clk, Redial: func(ctx context.Context) (Backend, error) {
		return Dial(ctx, url, &ClientOptions{Reconnect: true})
	}}, Service{Name: "web", Spec: sh(t, "exec sleep 600"), Restart: RestartOnFailure, StopGrace: time.Second})
	ctx := ctxT(t)
	nextServiceEvent(t, events, ServiceRunning)
	ws.stop()
	startWSAt(t, addr)
	ev := nextServiceEvent(t, events, ServiceLost)
	if ev.LastExit != nil || !errors.Is(ev.LastError, ErrDisconnected) {
		t.Fatalf("lost: %+v", ev.ServiceStatus)
	}
	ev = nextServiceEvent(t, events, ServiceRunning)
	if ev.ProcessID != "web#2" || ev.Restarts != 1 {
		t.Fatalf("running again: %+v", ev.ServiceStatus)
	}
	noTimerAsked(t, clk, sup, ServiceRunning)
	if err := sup.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSupervisorReconnectingClientBlip: a Client with Reconnect whose
// connection drops while the server lives resumes its session: the
// service is not lost, not restarted (no event at all), and the exit of
// its process after the reconnect is reported as it really was.
func TestSupervisorReconnectingClientBlip(t *testing.T) {
	ws := startWSAt(t, "127.0.0.1:0")
	conns := make(chan *cuttable, 4)
	c, err := Dial(ctxT(t), ws.url, &ClientOptions{Reconnect: true, DialTransport: func(ctx context.Context) (wire.Transport, error) {
		tr, err := wire.DialWebsocket(ctx, ws.url, nil, 0)
		if err != nil {
			return nil, err
		}
		ct := &cuttable{Transport: tr}
		conns <- ct
		return ct, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	first := <-conns
	clk := clocktest.New()
	fifo := mkfifo(t, t.TempDir())
	sup, events := supervise(t, c, &SupervisorOptions{Clock: clk, Rand: func() float64 { return 0.5 }},
		Service{Name: "web", Spec: sh(t, "read x < "+fifo+"; exit 3"), Backoff: Backoff{Initial: time.Second}})
	ctx := ctxT(t)
	nextServiceEvent(t, events, ServiceRunning)
	first.cut()
	select {
	case <-conns: // the client dialed again
	case <-time.After(20 * time.Second):
		t.Fatal("the client did not reconnect")
	}
	if _, err := c.EnvironmentStatus(ctx); err != nil { // a round trip on the resumed session
		t.Fatal(err)
	}
	st, err := sup.Status(ctx)
	if err != nil || st[0].State != ServiceRunning || st[0].ProcessID != "web#1" {
		t.Fatalf("after the blip: %+v %v", st, err)
	}
	select {
	case ev := <-events:
		t.Fatalf("an event for a blip the client recovered: %+v", ev.ServiceStatus)
	default:
	}
	release(t, fifo)
	ev := nextServiceEvent(t, events, ServiceBackoff)
	if ev.LastExit == nil || ev.LastExit.Code != 3 || ev.LastError != nil || ev.Reason != ReasonExited {
		t.Fatalf("the exit after the reconnect: %+v (LastExit %v)", ev.ServiceStatus, ev.LastExit)
	}
}
