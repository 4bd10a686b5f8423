package wiretest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Timeouts used by the harness itself. Tests bound their own waits with contexts.
var (
	// StartTimeout bounds the wait for the server's first stdout line (its URL).
	StartTimeout = 20 * time.Second
	// StopTimeout bounds the wait for the server to exit after SIGTERM (then it is killed).
	StopTimeout = 15 * time.Second
	// waitDelay bounds how long os/exec keeps copying a dead server's output.
	waitDelay = 5 * time.Second
)

// ModuleRoot walks up from the working directory to the directory holding go.mod.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if st, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil && !st.IsDir() {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("wiretest: no go.mod found above the working directory")
		}
		dir = parent
	}
}

// BuildBinary builds cmd/runtimed into dir/runtimed and returns its path.
func BuildBinary(dir string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "runtimed")
	cmd := exec.Command("go", "build", "-o", out, "github.com/runtimed/runtimed/cmd/runtimed")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("wiretest: go build ./cmd/runtimed: %v\n%s", err, b)
	}
	return out, nil
}

// Server is a running runtimed process.
type Server struct {
	// URL is the first line the server printed on stdout (websocket servers only).
	URL string

	t         testing.TB
	cmd       *exec.Cmd
	stderr    *syncBuffer
	stdout    *firstLineWriter // nil for stdio servers
	exited    chan struct{}
	waitErr   error
	stopOnce  sync.Once
	stopCode  int
	killTimer *time.Timer
}

// Start runs bin with exactly args (no URL is awaited). The server is stopped when the test ends and
// its stderr is logged if the test failed. Use it for start-up failures; see StartWS for the usual case.
func Start(t testing.TB, bin string, args ...string) *Server {
	t.Helper()
	s, err := start(t, bin, args, nil, nil)
	if err != nil {
		t.Fatalf("wiretest: start %s %q: %v", bin, args, err)
	}
	return s
}

// StartEnv is Start with extra environment variables ("K=V"). Its stdout is kept, so FirstLine works
// for any program that announces itself on its first stdout line (e.g. another exec-server).
func StartEnv(t testing.TB, bin string, env []string, args ...string) *Server {
	t.Helper()
	s, err := start(t, bin, args, env, nil)
	if err != nil {
		t.Fatalf("wiretest: start %s %q: %v", bin, args, err)
	}
	return s
}

// StartWS runs `bin serve --listen ws://127.0.0.1:0 extraArgs...` and waits (bounded by StartTimeout)
// for the URL it prints as the first stdout line.
func StartWS(t testing.TB, bin string, extraArgs ...string) *Server {
	t.Helper()
	return StartWSEnv(t, bin, nil, extraArgs...)
}

// StartWSFiles is StartWS with files the server inherits as descriptors 3, 4, ... (without
// close-on-exec, as a careless parent would leave them).
func StartWSFiles(t testing.TB, bin string, files []*os.File, extraArgs ...string) *Server {
	t.Helper()
	args := append([]string{"serve", "--listen", "ws://127.0.0.1:0"}, extraArgs...)
	s, err := start(t, bin, args, nil, func(cmd *exec.Cmd) { cmd.ExtraFiles = files })
	if err != nil {
		t.Fatalf("wiretest: start %s %q: %v", bin, args, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	line, err := s.FirstLine(ctx)
	if err != nil {
		t.Fatalf("wiretest: server %q did not print its URL: %v\nstderr:\n%s", args, err, s.Stderr())
	}
	s.URL = strings.TrimSpace(line)
	return s
}

// StartWSEnv is StartWS with extra environment variables ("K=V") for the server.
func StartWSEnv(t testing.TB, bin string, env []string, extraArgs ...string) *Server {
	t.Helper()
	args := append([]string{"serve", "--listen", "ws://127.0.0.1:0"}, extraArgs...)
	s, err := start(t, bin, args, env, nil)
	if err != nil {
		t.Fatalf("wiretest: start %s %q: %v", bin, args, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	line, err := s.FirstLine(ctx)
	if err != nil {
		t.Fatalf("wiretest: server %q did not print its URL: %v\nstderr:\n%s", args, err, s.Stderr())
	}
	s.URL = strings.TrimSpace(line)
	if !strings.HasPrefix(s.URL, "ws://127.0.0.1:") {
		t.Fatalf("wiretest: first stdout line %q is not a ws://127.0.0.1:PORT URL", line)
	}
	return s
}

func start(t testing.TB, bin string, args []string, extraEnv []string, configure func(*exec.Cmd)) (*Server, error) {
	s := &Server{
		t:      t,
		stderr: &syncBuffer{limit: 1 << 20},
		exited: make(chan struct{}),
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), extraEnv...)
	cmd.Stderr = s.stderr
	cmd.WaitDelay = waitDelay
	if configure != nil {
		configure(cmd)
	}
	if cmd.Stdout == nil {
		s.stdout = newFirstLineWriter()
		cmd.Stdout = s.stdout
	}
	s.cmd = cmd
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		s.waitErr = cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("runtimed %q stderr:\n%s", args, s.Stderr())
		}
	})
	return s, nil
}

// FirstLine waits for the first line the server writes to stdout (without the newline).
func (s *Server) FirstLine(ctx context.Context) (string, error) {
	if s.stdout == nil {
		return "", errors.New("wiretest: stdout of a stdio server belongs to the client")
	}
	select {
	case line := <-s.stdout.first:
		s.stdout.first <- line // keep it available for later callers
		return line, nil
	case <-s.exited:
		select {
		case line := <-s.stdout.first:
			s.stdout.first <- line
			return line, nil
		default:
		}
		return "", fmt.Errorf("server exited (%v) before writing a line to stdout", s.waitErr)
	case <-ctx.Done():
		return "", fmt.Errorf("no stdout line: %w", ctx.Err())
	}
}

// Stdout returns what a websocket server has written to stdout so far.
func (s *Server) Stdout() string {
	if s.stdout == nil {
		return ""
	}
	return s.stdout.String()
}

// Stderr returns what the server has written to stderr so far.
func (s *Server) Stderr() string { return s.stderr.String() }

// Pid is the server's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Exited is closed once the server process has exited and been reaped.
func (s *Server) Exited() <-chan struct{} { return s.exited }

// ExitCode is the exit status once Exited is closed: the code on a normal exit, 128+N when killed by
// signal N, and -1 if the server is still running.
func (s *Server) ExitCode() int {
	select {
	case <-s.exited:
	default:
		return -1
	}
	st := s.cmd.ProcessState
	if st == nil {
		return -1
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
}

// Wait waits, bounded by ctx, for the server to exit and returns its exit code.
func (s *Server) Wait(ctx context.Context) (int, error) {
	select {
	case <-s.exited:
		return s.ExitCode(), nil
	case <-ctx.Done():
		return -1, fmt.Errorf("server still running: %w", ctx.Err())
	}
}

// Signal sends sig to the server.
func (s *Server) Signal(sig os.Signal) error { return s.cmd.Process.Signal(sig) }

// Stop sends SIGTERM, waits up to StopTimeout, kills the server if it is still running, and returns its
// exit code. Calling it again returns the same code.
func (s *Server) Stop() int {
	s.stopOnce.Do(func() {
		select {
		case <-s.exited:
		default:
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-s.exited:
			case <-time.After(StopTimeout):
				s.t.Errorf("wiretest: server did not exit within %v of SIGTERM; killing it", StopTimeout)
				_ = s.cmd.Process.Kill()
				select {
				case <-s.exited:
				case <-time.After(StopTimeout):
					s.t.Errorf("wiretest: server did not exit after SIGKILL")
				}
			}
		}
		s.stopCode = s.ExitCode()
	})
	return s.stopCode
}

// Kill sends SIGKILL and waits (bounded) for the server to exit.
func (s *Server) Kill() {
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Kill()
	select {
	case <-s.exited:
	case <-time.After(StopTimeout):
		s.t.Errorf("wiretest: server did not exit after SIGKILL")
	}
}

// syncBuffer is a goroutine-safe byte buffer that keeps the last limit bytes written.
type syncBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	limit int
	lost  int
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if over := b.buf.Len() - b.limit; over > 0 {
		b.buf.Next(over)
		b.lost += over
	}
	return len(p), nil
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.lost > 0 {
		return fmt.Sprintf("[... %d earlier bytes dropped]\n%s", b.lost, b.buf.String())
	}
	return b.buf.String()
}

// firstLineWriter captures stdout and publishes its first line.
type firstLineWriter struct {
	syncBuffer
	first chan string
	sent  bool
}

func newFirstLineWriter() *firstLineWriter {
	return &firstLineWriter{syncBuffer: syncBuffer{limit: 1 << 20}, first: make(chan string, 1)}
}

func (w *firstLineWriter) Write(p []byte) (int, error) {
	n, err := w.syncBuffer.Write(p)
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.sent {
		if i := bytes.IndexByte(w.buf.Bytes(), '\n'); i >= 0 {
			w.sent = true
			w.first <- strings.TrimSuffix(string(w.buf.Bytes()[:i]), "\r")
		}
	}
	return n, err
}
