//go:build linux

package netns

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// ErrUnavailable wraps why a namespace cannot be made here (no
// CAP_SYS_ADMIN, user namespaces off...).
var ErrUnavailable = errors.New("netns: network namespaces unavailable")

// ErrClosed is returned by the methods of a closed NS.
var ErrClosed = errors.New("netns: namespace closed")

// ErrStuckThread: the calling thread could not return to its own
// namespace; it was left locked so that Go retires it with the goroutine.
var ErrStuckThread = errors.New("netns: could not return the thread to its namespace")

// NS is one network namespace, held open by a descriptor.
type NS struct {
	mu sync.Mutex // guards f against Close; held across the (short) setns round trip
	f  *os.File   // nil once closed
}

// New makes an empty network namespace whose loopback interface is up.
func New() (*NS, error) {
	var ns *NS
	err := onLockedThread(func(orig *os.File) error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("%w: unshare: %v", ErrUnavailable, err)
		}
		f, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			return err
		}
		if err := loopbackUp(); err != nil {
			f.Close()
			return fmt.Errorf("netns: loopback up: %w", err)
		}
		ns = &NS{f: f}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ns, nil
}

// onLockedThread runs f on a thread of its own and puts the thread back
// in its original namespace afterwards (f may change it).
func onLockedThread(f func(orig *os.File) error) error {
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	ferr := f(orig)
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// Stay locked: the thread ends with this goroutine's lock.
		return errors.Join(ferr, fmt.Errorf("%w: %v", ErrStuckThread, err))
	}
	runtime.UnlockOSThread()
	return ferr
}

func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// Do runs f on a thread that is inside the namespace (sockets f creates
// belong to it; a child f starts with os/exec inherits it), then returns
// the thread to where it was.
func (n *NS) Do(f func() error) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.f == nil {
		return ErrClosed
	}
	return onLockedThread(func(*os.File) error {
		if err := unix.Setns(int(n.f.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("netns: setns: %w", err)
		}
		return f()
	})
}

// Listen opens a listener inside the namespace (e.g. "tcp",
// "127.0.0.1:0"); it serves from any goroutine.
func (n *NS) Listen(network, addr string) (net.Listener, error) {
	var l net.Listener
	err := n.Do(func() (err error) {
		l, err = net.Listen(network, addr)
		return err
	})
	return l, err
}

// ListenPacket opens a packet socket inside the namespace.
func (n *NS) ListenPacket(network, addr string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := n.Do(func() (err error) {
		pc, err = net.ListenPacket(network, addr)
		return err
	})
	return pc, err
}

// Fd is the namespace's descriptor, for a child to join (setns) before
// it execs; valid until Close.
func (n *NS) Fd() (uintptr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.f == nil {
		return 0, ErrClosed
	}
	return n.f.Fd(), nil
}

// Close drops this handle; the namespace ends with its last user (its
// sockets, and the processes inside it).
func (n *NS) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.f == nil {
		return nil
	}
	err := n.f.Close()
	n.f = nil
	return err
}
