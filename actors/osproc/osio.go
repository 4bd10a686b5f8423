package osproc

import (
	"io"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// readBufs holds read buffers between reads, so an idle stream (blocked in
// the runtime poller, not in a thread) holds no buffer at all.
var readBufs = sync.Pool{New: func() any { b := make([]byte, MaxChunk); return &b }}

// fileChunks reads a pipe or PTY master through the runtime poller and
// coalesces everything already available, up to max, into one chunk:
// fewer, larger chunks when the child writes faster than the client reads.
//
// grow, for a pipe, is the size to enlarge it to once a read finds it at
// least half full (a child that writes faster than a small pipe drains);
// 0 once done, or for a PTY. Owned by the reader goroutine.
type fileChunks struct {
	f    *os.File
	rc   syscall.RawConn
	grow int
}

// pipeGrowAt is how much one read must find in a pipe of the default 64
// KiB before the pipe is enlarged to PipeSize.
const pipeGrowAt = 32 << 10

func newFileChunks(f *os.File, pipe bool) Reader {
	rc, err := f.SyscallConn()
	if err != nil {
		return f
	}
	r := &fileChunks{f: f, rc: rc}
	if pipe {
		r.grow = PipeSize
	}
	return r
}

// Read satisfies Reader for callers that do not know ReadChunk.
func (r *fileChunks) Read(p []byte) (int, error) { return r.f.Read(p) }

func (r *fileChunks) ReadChunk(max int) ([]byte, error) {
	var out []byte
	var rerr error
	err := r.rc.Read(func(fd uintptr) bool {
		bp := readBufs.Get().(*[]byte)
		buf := (*bp)[:min(max, len(*bp))]
		n := 0
		for n < len(buf) {
			m, e := syscall.Read(int(fd), buf[n:])
			if m > 0 {
				n += m
				continue
			}
			if e == syscall.EINTR {
				continue
			}
			if e == syscall.EAGAIN {
				break
			}
			if e == nil { // m == 0: end of stream
				rerr = io.EOF
			} else {
				rerr = e
			}
			break
		}
		if n >= pipeGrowAt && r.grow > 0 {
			// Enlarged here, not at the start: most children never fill
			// a pipe, and a start is quicker without the allocation.
			_, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, r.grow)
			r.grow = 0
		}
		if n > 0 {
			out = append([]byte(nil), buf[:n]...)
			rerr = nil // report the end on the next call
		}
		readBufs.Put(bp)
		return n > 0 || rerr != nil // false: wait for readability
	})
	if out != nil {
		return out, nil
	}
	if rerr != nil {
		return nil, rerr
	}
	return nil, err // the file was closed under us
}

// outputPipe makes a child's output pipe (its reader enlarges it to
// PipeSize when the child fills it, see fileChunks): the read end
// non-blocking and registered with the runtime poller (a reader parks no
// thread), the write end blocking and not registered, as the child wants
// it (os.Pipe would register both ends, then make the child's blocking
// again: two more system calls each way for an end the parent only
// closes).
func outputPipe() (r, w *os.File, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, os.NewSyscallError("pipe2", err)
	}
	// The read end's only status flag is then O_NONBLOCK (O_RDONLY is 0).
	if _, err := unix.FcntlInt(uintptr(p[0]), unix.F_SETFL, unix.O_NONBLOCK); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return nil, nil, os.NewSyscallError("fcntl", err)
	}
	return os.NewFile(uintptr(p[0]), "|0"), os.NewFile(uintptr(p[1]), "|1"), nil
}

// devNull is /dev/null opened once for reading, the stdin of every child
// started without one. Each child gets its own descriptor of one shared
// open file: a child that sets O_NONBLOCK or locks it affects the others,
// which for reads of /dev/null (always end of file) changes nothing.
var devNull struct {
	once sync.Once
	f    *os.File
	err  error
}

func sharedDevNull() (*os.File, error) {
	devNull.once.Do(func() { devNull.f, devNull.err = os.Open(os.DevNull) })
	return devNull.f, devNull.err
}

// pidWaiter reaps a child through a pidfd registered with the runtime
// poller: waiting costs no thread (a blocking wait4 holds one per child).
type pidWaiter struct {
	f *os.File
}

func newPidWaiter(pid int) *pidWaiter {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return nil
	}
	return &pidWaiter{f: os.NewFile(uintptr(fd), "pidfd")}
}

const (
	cldExited = 1
	cldKilled = 2
	cldDumped = 3
)

// wait blocks (in the poller) until the child exits, reaps it and returns
// its wait status (the exit code, or SignaledBy(N) when killed by signal N). ok is false if the pidfd
// could not be used, in which case nothing was reaped.
func (w *pidWaiter) wait() (code int, ok bool) {
	defer w.f.Close()
	rc, err := w.f.SyscallConn()
	if err != nil {
		return 0, false
	}
	reaped := false
	rerr := rc.Read(func(fd uintptr) bool {
		var info unix.Siginfo
		for {
			err := unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOHANG, nil)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return true // e.g. ECHILD: give up on the pidfd path
			}
			break
		}
		pid := *(*int32)(unsafe.Add(unsafe.Pointer(&info), 16))
		if pid == 0 {
			return false // not exited yet: wait for the pidfd to become readable
		}
		status := int(*(*int32)(unsafe.Add(unsafe.Pointer(&info), 24)))
		switch info.Code {
		case cldKilled, cldDumped:
			code = SignaledBy(status)
		default:
			code = status
		}
		reaped = true
		return true
	})
	if rerr != nil || !reaped {
		return 0, false
	}
	return code, true
}

// pollable returns f as a non-blocking file registered with the runtime
// poller. creack/pty's ioctls call Fd(), which puts the PTY master in
// blocking mode, so that every read would pin a thread; a non-blocking
// duplicate restores poller reads (and Close unblocking them).
func pollable(f *os.File) (*os.File, error) {
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		f.Close()
		return nil, err
	}
	f.Close()
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "/dev/ptmx"), nil
}

// setWinsize sets a PTY's window size without touching the file's mode.
func setWinsize(f *os.File, rows, cols uint16) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	}); err != nil {
		return err
	}
	return ierr
}
