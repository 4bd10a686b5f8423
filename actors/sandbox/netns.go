package sandbox

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// ErrNetNSUnsupported: a Plan.NetNS for a start that is not sandboxed at
// the namespaces level (no policy, or --sandbox-level landlock), which
// could not keep the command in that namespace.
var ErrNetNSUnsupported = errors.New("sandbox: a start in a given network namespace needs a policy at the namespaces level")

// NetNS is an empty network namespace (loopback up) made before a start,
// so that its caller can place listeners inside it (the managed network's
// proxy, issue 25) and then start the command in it: Plan.NetNS. Without
// one, a start with the network restricted gets a namespace of its own
// made by the clone. The caller closes it once the start returned (the
// namespace lives on while a process is in it or a listener holds it).
type NetNS struct{ f *os.File }

// NewNetNS makes the namespace on a throwaway thread (unshare(CLONE_NEWNET)
// is per thread; the thread ends with the call).
func NewNetNS() (*NetNS, error) {
	var (
		n   *NetNS
		err error
	)
	onThrowawayThread(func() {
		if err = unix.Unshare(unix.CLONE_NEWNET); err != nil {
			err = fmt.Errorf("sandbox: unshare(CLONE_NEWNET): %w", err)
			return
		}
		if err = loopbackUp(); err != nil {
			err = fmt.Errorf("sandbox: loopback up: %w", err)
			return
		}
		var f *os.File
		if f, err = os.Open("/proc/thread-self/ns/net"); err == nil {
			n = &NetNS{f: f}
		}
	})
	return n, err
}

// Do runs fn on a throwaway thread that entered the namespace: a socket
// fn opens (net.Listen) is the namespace's and works from any goroutine
// after. (Not Listen itself: this package stays free of package net,
// whose initialisation every helper start would pay.)
func (n *NetNS) Do(fn func() error) error {
	var err error
	onThrowawayThread(func() {
		if err = unix.Setns(int(n.f.Fd()), unix.CLONE_NEWNET); err != nil {
			err = fmt.Errorf("sandbox: setns: %w", err)
			return
		}
		err = fn()
	})
	return err
}

// Close drops this handle on the namespace.
func (n *NetNS) Close() error {
	if n == nil {
		return nil
	}
	return n.f.Close()
}

// netPool keeps one empty network namespace made ahead (in the background,
// after each start that used one) for the next start with the network
// restricted: creating a network namespace in the helper's clone is about
// a fifth of a namespaced start (BenchmarkStartPremadeNetNS).
//
// Concurrency: mu guards ready, preparing and closed; no I/O under it.
type netPool struct {
	mu        sync.Mutex
	ready     *NetNS
	preparing bool
	closed    bool
}

// take returns the namespace made ahead, if any; the caller closes it.
func (np *netPool) take() *NetNS {
	if np == nil {
		return nil
	}
	np.mu.Lock()
	n := np.ready
	np.ready = nil
	np.mu.Unlock()
	return n
}

// refill makes the next one in the background unless one is ready or
// being made.
func (np *netPool) refill() {
	if np == nil {
		return
	}
	np.mu.Lock()
	if np.closed || np.ready != nil || np.preparing {
		np.mu.Unlock()
		return
	}
	np.preparing = true
	np.mu.Unlock()
	go func() {
		n, err := NewNetNS()
		np.mu.Lock()
		np.preparing = false
		if np.closed || err != nil {
			np.mu.Unlock()
			n.Close()
			return
		}
		np.ready = n
		np.mu.Unlock()
	}()
}

// close drops the namespace made ahead; none is made after.
func (np *netPool) close() {
	if np == nil {
		return
	}
	np.mu.Lock()
	np.closed = true
	n := np.ready
	np.ready = nil
	np.mu.Unlock()
	n.Close()
}

// NetNS returns an empty network namespace for a start that places
// listeners in it first (the managed network's proxies): the one made
// ahead if it is ready (making one is about a millisecond), else a new
// one; the next is made in the background. The caller closes it.
func (h *Host) NetNS() (*NetNS, error) {
	if h == nil {
		return NewNetNS()
	}
	defer h.nets.refill()
	if n := h.nets.take(); n != nil {
		return n, nil
	}
	return NewNetNS()
}
