package sandbox

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"syscall"

	"golang.org/x/sys/unix"
)

// The helper's reading of the frames a prepared sandbox's daemon writes
// (see frameStart in prepared.go).

// frames reads what the daemon writes on the socket (see frameStart):
// exact reads, all with recvmsg, so the descriptors that ride with a
// start arrive whichever read meets them. One reader at a time: the
// spawning thread until its command runs, then the relay until frameEnd,
// then the next spawning thread.
type frames struct {
	fd  int
	fds []int // received, not yet taken by a start
}

func (f *frames) read(b []byte) error {
	oob := make([]byte, unix.CmsgSpace(8*4)) // at most 6 come (stdio, devpts, netns, cgroup)
	for got := 0; got < len(b); {
		n, oobn, _, _, err := unix.Recvmsg(f.fd, b[got:], oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if oobn > 0 {
			msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
			if err != nil {
				return err
			}
			for _, m := range msgs {
				if r, err := unix.ParseUnixRights(&m); err == nil {
					f.fds = append(f.fds, r...)
				}
			}
		}
		if n == 0 {
			return io.EOF
		}
		got += n
	}
	return nil
}

// frame is a frame's type, and for frameSignal and frameEnd their fields
// (read whole); any other frame's fields are its reader's.
type frame struct {
	t     byte
	epoch uint32
	sig   syscall.Signal
}

// readFrame reads the next frame's type, and a signal's or an end's fields.
func (f *frames) readFrame() (frame, error) {
	var t [1]byte
	if err := f.read(t[:]); err != nil {
		return frame{}, err
	}
	fr := frame{t: t[0]}
	switch fr.t {
	case frameSignal:
		var rest [5]byte
		if err := f.read(rest[:]); err != nil {
			return fr, err
		}
		fr.epoch, fr.sig = binary.BigEndian.Uint32(rest[:4]), syscall.Signal(rest[4])
	case frameEnd:
		var rest [4]byte
		if err := f.read(rest[:]); err != nil {
			return fr, err
		}
		fr.epoch = binary.BigEndian.Uint32(rest[:])
	}
	return fr, nil
}

// next reads the next frame's type, skipping the signals and ends of
// earlier starts (a caller may signal its command after its end: those
// frames come before, or between, the next start's).
func (f *frames) next() (byte, error) {
	for {
		fr, err := f.readFrame()
		if err != nil {
			return 0, err
		}
		if fr.t != frameSignal && fr.t != frameEnd {
			return fr.t, nil
		}
	}
}

// readStart reads one preparedStart and its descriptors (close-on-exec),
// or the end of epoch (direct: the daemon ran the start itself), skipping
// earlier epochs' signals and ends; kill runs for a SIGKILL of epoch.
func (f *frames) readStart(epoch uint32, kill func()) (preparedStart, []int, bool, error) {
	st, fds, err := f.readStartFrame(epoch, kill)
	if err == errDirectEnded {
		return st, nil, true, nil
	}
	return st, fds, false, err
}

var errDirectEnded = errors.New("the start's epoch ended")

func (f *frames) readStartFrame(epoch uint32, kill func()) (preparedStart, []int, error) {
	var st preparedStart
	var t byte
	for {
		fr, err := f.readFrame()
		if err != nil {
			return st, nil, err
		}
		if fr.t == frameEnd && fr.epoch == epoch {
			return st, nil, errDirectEnded
		}
		if fr.t == frameSignal && fr.epoch == epoch && fr.sig == unix.SIGKILL {
			kill()
		}
		if fr.t != frameSignal && fr.t != frameEnd {
			t = fr.t
			break
		}
	}
	if t != frameStart {
		return st, nil, fmt.Errorf("frame %q where a start was due", t)
	}
	var hdr [8]byte
	if err := f.read(hdr[:]); err != nil {
		return st, nil, fmt.Errorf("start header: %w", err)
	}
	size := binary.BigEndian.Uint64(hdr[:])
	if size > 64<<20 {
		return st, nil, fmt.Errorf("start of %d bytes", size)
	}
	body := make([]byte, size)
	if err := f.read(body); err != nil {
		return st, nil, fmt.Errorf("start: %w", err)
	}
	fds := f.fds
	f.fds = nil
	if err := json.Unmarshal(body, &st); err != nil {
		return st, fds, fmt.Errorf("start: %w", err)
	}
	return st, fds, nil
}

// readGo reads the daemon's word to go on (frameGo: flags, then the
// socket covers to add); false for anything else.
func (f *frames) readGo() ([]mountOp, byte, bool) {
	t, err := f.next()
	if err != nil || t != frameGo {
		return nil, 0, false
	}
	var hdr [5]byte
	if f.read(hdr[:]) != nil {
		return nil, 0, false
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n == 0 {
		return nil, hdr[0], true
	}
	if n > 16<<20 {
		return nil, 0, false
	}
	body := make([]byte, n)
	if f.read(body) != nil {
		return nil, 0, false
	}
	var covers []mountOp
	if err := json.Unmarshal(body, &covers); err != nil {
		return nil, 0, false
	}
	return covers, hdr[0], true
}

// relayOne reads one frame while epoch's command (cmd) runs and passes a
// signal for it on (SIGKILL: to every process of the namespace but the
// init); frames of earlier epochs are dropped. False if the socket closed
// or the frame is out of protocol.
func (f *frames) relayOne(epoch uint32, cmd int) bool {
	fr, err := f.readFrame()
	switch {
	case err != nil:
		return false
	case fr.t == frameEnd: // an earlier epoch's: this one's comes after the report
		return true
	case fr.t != frameSignal:
		return false
	case fr.epoch != epoch:
		return true
	case fr.sig == unix.SIGKILL:
		_ = unix.Kill(-1, unix.SIGKILL)
		return true
	}
	forwardSignal(cmd, fr.sig)
	return true
}

// awaitEnd reads until the daemon ends epoch's signals (frameEnd), dropping
// the signals that come before it (the command has exited); false if the
// socket closed or a frame is out of protocol.
func (f *frames) awaitEnd(epoch uint32) bool {
	for {
		fr, err := f.readFrame()
		switch {
		case err != nil:
			return false
		case fr.t == frameEnd && fr.epoch == epoch:
			return true
		case fr.t != frameSignal && fr.t != frameEnd:
			return false
		}
	}
}
