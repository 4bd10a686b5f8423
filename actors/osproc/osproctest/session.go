package osproctest

import (
	"bytes"
	"io"
	"os"
	"slices"
	"sync"
	"syscall"

	"github.com/runtimed/runtimed/actors/osproc"
)

// Options shape a Session.
type Options struct {
	// Streams are the output streams; nil means stdout and stderr, or the
	// PTY when TTY is set.
	Streams []osproc.Stream
	// TTY makes Resize succeed (and the default stream the PTY).
	TTY bool
	// Stdin: HasStdin reports true.
	Stdin bool
	// Limit is what Limit names for a nonzero exit code.
	Limit string
}

// Session is a fake osproc.Session. Pid is 0.
type Session struct {
	opts       Options
	streams    []osproc.Stream
	outs       []*stream
	exitCh     chan int
	forced     chan struct{}
	forcedOnce sync.Once

	mu           sync.Mutex // guards the records below only
	writes       [][]byte
	stdinCloses  int
	signals      []syscall.Signal
	forcedCloses int
}

var _ osproc.Session = (*Session)(nil)

// New returns a Session whose streams are open and whose child runs.
func New(o Options) *Session {
	s := &Session{opts: o, exitCh: make(chan int, 1), forced: make(chan struct{})}
	s.streams = o.Streams
	if s.streams == nil {
		s.streams = []osproc.Stream{osproc.Stdout, osproc.Stderr}
		if o.TTY {
			s.streams = []osproc.Stream{osproc.PTY}
		}
	}
	for range s.streams {
		s.outs = append(s.outs, &stream{ch: make(chan []byte), end: make(chan struct{}), forced: s.forced})
	}
	return s
}

// Out is where the test sends stream i's output: a send completes when
// the reader goroutine has taken the piece.
func (s *Session) Out(i int) chan<- []byte { return s.outs[i].ch }

// End ends stream i (io.EOF once its pieces are read). Idempotent.
func (s *Session) End(i int) { s.outs[i].endOnce.Do(func() { close(s.outs[i].end) }) }

// Exit makes Wait return code: the child exited (or was killed: 128+N).
// It blocks while an earlier code has not been taken by Wait.
func (s *Session) Exit(code int) { s.exitCh <- code }

// TryExit is Exit unless a code is already waiting; it reports whether
// code was given.
func (s *Session) TryExit(code int) bool {
	select {
	case s.exitCh <- code:
		return true
	default:
		return false
	}
}

// Signals returns the signals the actor sent, in order.
func (s *Session) Signals() []syscall.Signal {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.signals)
}

// Writes returns the stdin writes, in order.
func (s *Session) Writes() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.writes)
}

// StdinCloses counts the CloseStdin calls.
func (s *Session) StdinCloses() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stdinCloses
}

// ForcedCloses counts the CloseOutputs calls.
func (s *Session) ForcedCloses() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.forcedCloses
}

func (s *Session) Pid() int                   { return 0 }
func (s *Session) Streams() []osproc.Stream   { return s.streams }
func (s *Session) Output(i int) osproc.Reader { return s.outs[i] }
func (s *Session) Wait() int                  { return <-s.exitCh }
func (s *Session) HasStdin() bool             { return s.opts.Stdin }
func (s *Session) Release()                   {}
func (s *Session) ReleaseIfEmpty()            {}

func (s *Session) Resize(rows, cols uint16) error {
	if s.opts.TTY {
		return nil
	}
	return osproc.ErrNotPTY
}

func (s *Session) Limit(code int) string {
	if code == 0 {
		return ""
	}
	return s.opts.Limit
}

func (s *Session) Write(p []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes = append(s.writes, bytes.Clone(p))
	return nil
}

func (s *Session) CloseStdin() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stdinCloses++
	return nil
}

func (s *Session) Signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.signals = append(s.signals, sig)
	return nil
}

// CloseOutputs ends every stream with os.ErrClosed (a held write end, a
// stream never ended, included) and counts the call.
func (s *Session) CloseOutputs() {
	s.mu.Lock()
	s.forcedCloses++
	s.mu.Unlock()
	s.forcedOnce.Do(func() { close(s.forced) })
}

// stream is one output stream: pieces on ch (unbuffered), end closed for
// EOF, forced closed by CloseOutputs.
type stream struct {
	ch      chan []byte
	end     chan struct{}
	endOnce sync.Once
	forced  <-chan struct{}
	rem     []byte // owned by the reader goroutine
}

func (r *stream) Read(p []byte) (int, error) {
	if len(r.rem) == 0 {
		select {
		case b := <-r.ch:
			r.rem = b
		case <-r.end:
			return 0, io.EOF
		case <-r.forced:
			return 0, os.ErrClosed
		}
	}
	n := copy(p, r.rem)
	r.rem = r.rem[n:]
	return n, nil
}
