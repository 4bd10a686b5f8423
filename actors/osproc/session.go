package osproc

import (
	"errors"
	"os"
	"syscall"
	"time"

	"github.com/runtimed/runtimed/actors/contain"
	"github.com/runtimed/runtimed/actors/sandbox"
)

// Session is the OS side of one started process as its owner sees it. The
// real one is returned by Start; tests substitute osproctest.Session,
// which is driven by channels. Methods are called only by the owner's
// goroutine except Write and CloseStdin, which are called only by one
// stdin writer, and Output's readers and Wait (one goroutine each).
type Session interface {
	// Pid is the child's pid (also its process group id), or 0 for a fake.
	Pid() int
	// Streams lists the output streams, one reader goroutine each.
	Streams() []Stream
	// Output returns the reader of stream i (index into Streams()).
	Output(i int) Reader
	// Wait blocks until the child has exited and been reaped (for a start
	// with a sandbox init: until the init reported the command reaped;
	// the init is reaped in the background and Release waits for it) and returns
	// its wait status: the exit code, or SignaledBy(N) when killed by
	// signal N (a fake may return 128+N: it reads as that exit code).
	// Called once, by the waiter goroutine.
	Wait() int
	// HasStdin reports whether the child has a writable stdin.
	HasStdin() bool
	Write(p []byte) error
	CloseStdin() error
	// Signal sends sig to the child's whole process group.
	Signal(sig syscall.Signal) error
	// Resize sets the PTY window size; ErrNotPTY for a pipe session.
	Resize(rows, cols uint16) error
	// CloseOutputs closes the parent's read ends, which ends every reader
	// even when a descendant outside our control still holds the write ends.
	CloseOutputs()
	// Limit names the resource limit that ended the process with exit
	// code code, or "". Called after Wait returned.
	Limit(code int) string
	// ReleaseIfEmpty frees the tree's cgroup now if nothing of the tree
	// is left; called when the process is retained (closed, its ending
	// delivered). Release still follows.
	ReleaseIfEmpty()
	// Release kills what is left of the tree and frees its cgroup; called
	// once, when the owner is done with the process.
	Release()
}

// Reader is one output stream.
type Reader interface {
	Read(p []byte) (int, error)
}

// ChunkReader is an output stream that returns whole chunks. The real
// session's streams implement it; a Reader that does not is read with a
// buffer per reader goroutine.
type ChunkReader interface {
	// ReadChunk blocks until data is available and returns at most max
	// bytes in a new slice (all that could be read without blocking), or
	// io.EOF / another error at the end of the stream.
	ReadChunk(max int) ([]byte, error)
}

// ErrNotPTY is returned by Resize on a pipe session.
var ErrNotPTY = errors.New("osproc: process is not attached to a PTY")

// Discard kills and reaps a started child that nobody will own, and
// frees what it holds.
func Discard(sess Session) {
	_ = sess.Signal(syscall.SIGKILL)
	sess.CloseOutputs()
	if sess.HasStdin() {
		_ = sess.CloseStdin()
	}
	sess.Wait()
	sess.Release()
}

// osSession is the Session of a real child.
//
// Immutable after Start; its files are read and written by the goroutines
// Session's comment names, closed by CloseOutputs/CloseStdin.
type osSession struct {
	group   *contain.Group // nil without a cgroup manager
	pid     int
	tty     bool
	outputs []*os.File // pipes: stdout, stderr; pty: the master
	streams []Stream
	stdin   *os.File // pipe write end, or the PTY master; nil without stdin
	// report is the sandbox init's report of the command's exit (a start
	// with a sandbox init, prepared or not; nil otherwise). The three
	// fields are set by Start; from then on the waiter goroutine (Wait)
	// owns the reading of the report (and closes it) and closes reported
	// once the report is in or known missing, then initGone once the init
	// is reaped (in a goroutine of its own when the report came first; at
	// once for a Recycled report, whose init is the pool's). The owner
	// goroutine only waits on the two channels (Release) and, for a
	// Recycled report, signals and abandons through it (ExitReport.Signal
	// and Abandon are safe next to Wait); Signal's choice of path reads
	// the report's kind, fixed at Start.
	report   *sandbox.ExitReport
	reported chan struct{}
	initGone chan struct{}
}

func (s *osSession) Pid() int            { return s.pid }
func (s *osSession) Streams() []Stream   { return s.streams }
func (s *osSession) Output(i int) Reader { return newFileChunks(s.outputs[i], !s.tty) }
func (s *osSession) HasStdin() bool      { return s.stdin != nil }

func (s *osSession) Wait() int {
	if s.report.Recycled() {
		// The init serves other starts after this one: the report alone
		// says how the command ended (or that the init was killed, which
		// the report reaped).
		code, ok := s.report.Wait()
		close(s.reported)
		close(s.initGone)
		switch {
		case !ok:
			return SignaledBy(int(syscall.SIGKILL))
		case s.report.ExitSignal() != 0:
			return SignaledBy(s.report.ExitSignal())
		}
		return code
	}
	if s.report != nil {
		code, ok := s.report.Wait()
		s.report.Close()
		close(s.reported)
		if ok {
			if sig := s.report.ExitSignal(); sig != 0 {
				code = SignaledBy(sig)
			}
			// The command was reaped by its init, which exits now (its
			// namespaces' teardown is not the command's): reaped in the
			// background, waited for by Release.
			go func() {
				defer close(s.initGone)
				s.reap()
			}()
			return code
		}
		defer close(s.initGone)
	}
	return s.reap()
}

// reap waits for the child (s.pid) and returns its wait status.
func (s *osSession) reap() int {
	if w := newPidWaiter(s.pid); w != nil {
		if code, ok := w.wait(); ok {
			return code
		}
	}
	// No pidfd (an old kernel, or none left): a blocking wait4, which
	// holds a thread while the child runs.
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(s.pid, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return -1
		}
		break
	}
	if ws.Signaled() {
		return SignaledBy(int(ws.Signal()))
	}
	return ws.ExitStatus()
}

func (s *osSession) Write(p []byte) error {
	_, err := s.stdin.Write(p)
	return err
}

func (s *osSession) CloseStdin() error {
	if s.tty {
		// A PTY has no separate stdin: send the terminal's EOF character.
		_, err := s.stdin.Write([]byte{4})
		return err
	}
	return s.stdin.Close()
}

func (s *osSession) Signal(sig syscall.Signal) error {
	if s.report.Recycled() {
		// Through the init, by the report: the init's pid outlives the
		// command and serves the next start, which a late signal by pid
		// would reach. SIGKILL also kills the tree's cgroup.
		err := s.report.Signal(sig)
		if sig == syscall.SIGKILL {
			_ = s.group.Kill()
		}
		return err
	}
	if sig == syscall.SIGSTOP && s.report != nil {
		// A sandbox's init: SIGSTOP would stop it, not the command; it
		// stops the command's group on StopRelay.
		sig = sandbox.StopRelay
	}
	if sig == syscall.SIGKILL && s.report == nil {
		// The whole tree, including descendants that left the group,
		// while its root still holds it together (the subreaper's
		// freeze-and-kill attributes orphans through it), then the group.
		_ = s.group.Kill()
		return ignoreESRCH(syscall.Kill(-s.pid, sig))
	}
	// A sandbox's init first: a prepared sandbox's init is outside the
	// tree's cgroup, and one killed after its command could report the
	// command's death as an exit with code 137 (exitSignal 0) before its
	// own kill.
	err := syscall.Kill(-s.pid, sig)
	if sig == syscall.SIGKILL {
		_ = s.group.Kill()
	}
	return ignoreESRCH(err)
}

// ignoreESRCH: a group already gone is no failure to signal it.
func ignoreESRCH(err error) error {
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

func (s *osSession) Resize(rows, cols uint16) error {
	if !s.tty {
		return ErrNotPTY
	}
	return setWinsize(s.outputs[0], rows, cols)
}

func (s *osSession) Limit(code int) string { return s.group.LimitHit(code) }

func (s *osSession) Release() {
	if s.report.Recycled() {
		select {
		case <-s.reported:
		default:
			// The command still runs (a Release before its end: the
			// owner's panic path): its init and namespace go with it; the
			// waiter's report then says the init was killed.
			s.report.Abandon()
			t := time.NewTimer(time.Second)
			select {
			case <-s.reported:
			case <-t.C:
			}
			t.Stop()
		}
		s.group.Release()
		return
	}
	if s.initGone != nil {
		select {
		case <-s.reported:
		default:
			// The command still runs (a Release before its end: the
			// owner's panic path). Its init goes first, unreaped until
			// the waiter reaps it, so the pid is still its: it dies
			// without a report, and the waiter reports the kill.
			_ = syscall.Kill(-s.pid, syscall.SIGKILL)
		}
		// The init exits right after its report: its tree is in the
		// group until then (the kernel kills what is left of a pid
		// namespace whose init exited). Bounded all the same.
		t := time.NewTimer(time.Second)
		select {
		case <-s.initGone:
		case <-t.C:
		}
		t.Stop()
	}
	s.group.Release()
}

func (s *osSession) ReleaseIfEmpty() { s.group.ReleaseIfEmpty() }

func (s *osSession) CloseOutputs() {
	for _, f := range s.outputs {
		f.Close()
	}
}
