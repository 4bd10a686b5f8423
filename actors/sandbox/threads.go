package sandbox

import (
	goruntime "runtime"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// threadPool keeps one spawning thread prepared ahead of the next
// confined start, so that a start waits neither for a thread's creation
// nor for the confinement it can know in advance.
//
// A prepared thread is a goroutine locked to an OS thread of its own (not
// the main thread) that has set no_new_privs and dropped the capability
// bounding set, the ambient and the inheritable capabilities (the same
// for every policy) and, speculatively, restricted itself to the
// confinement of the last start it knows of: the same Landlock grants
// (paths resolved to the same files: their device and inode numbers are
// part of the grants) and the same network filter. It then waits for one
// start. A start whose confinement is exactly that one skips both steps;
// one with another confinement (or the first) takes a thread prepared
// with capabilities only and applies its own; a thread prepared for
// another confinement is retired unused, and the start takes a fresh
// thread. The start then runs the rest exactly as on a fresh thread (the
// working directory's check, the spawner uid, the fork), and the
// goroutine exits locked, which ends the thread: each thread serves one
// start. Each start then has the next one prepared, in the background,
// for the confinement it asked for. A policy with overlays
// (a private mount namespace, mounted with CAP_SYS_ADMIN before the drop)
// takes a fresh thread as before.
//
// A prepared thread restricted ahead of its start is in a Landlock domain
// no process has yet; the command it forks inherits it, as it would
// inherit one created at the start, and the thread takes the spawner uid
// before it forks.
//
// Concurrency: ready holds at most one prepared thread; preparing admits
// one preparation at a time until its thread is ready (a second may then
// wait to be handed over: at most two threads prepared); next is the confinement the next preparation
// applies (stored by each start, read by the preparation); close ends a
// waiting thread (and one being prepared) through done. A prepared thread
// that is never used holds an OS thread and an idle goroutine until close.
type threadPool struct {
	ready     chan *preparedThread
	preparing atomic.Bool
	broken    atomic.Bool // dropping capabilities failed: starts take fresh threads from then on
	next      atomic.Pointer[confinement]
	done      chan struct{}
	closeOnce sync.Once
	used      atomic.Uint64 // starts served by a prepared thread (tests)
	restrictd atomic.Uint64 // of which on a thread restricted ahead (tests)
}

// preparedThread is a waiting prepared thread: jobs takes its one start;
// conf is the confinement it applied ahead (nil: capabilities only).
type preparedThread struct {
	jobs chan func()
	conf *confinement
}

// confinement is what applyLandlock and the network filter make of a
// policy's layers: equal confinements restrict a thread identically.
type confinement struct {
	restrictFS, network bool
	grants              []grant // with the resolved files' identities
}

func confinementOf(p *Policy, l layers) *confinement {
	return &confinement{restrictFS: p.RestrictFS, network: p.Network, grants: slices.Clone(l.Grants)}
}

func (c *confinement) equal(o *confinement) bool {
	return c.restrictFS == o.restrictFS && c.network == o.network && slices.Equal(c.grants, o.grants)
}

func newThreadPool() *threadPool {
	return &threadPool{ready: make(chan *preparedThread, 1), done: make(chan struct{})}
}

// run runs fn on the prepared thread and reports true once fn returned,
// or reports false at once when no thread fit want (none prepared, or one
// prepared for another confinement; the caller takes a fresh thread). fn
// is told whether the thread is restricted to want already. Either way,
// once run returns (after the start's fork: a preparation meanwhile would
// compete with it for the CPU), the next thread is being prepared, for
// want.
func (tp *threadPool) run(want *confinement, fn func(restricted bool)) bool {
	if tp == nil {
		return false
	}
	tp.next.Store(want)
	defer tp.refill()
	var t *preparedThread
	select {
	case t = <-tp.ready:
	default:
		return false
	}
	restricted := t.conf != nil
	if restricted && !t.conf.equal(want) {
		tp.hand(t, func() {}) // retired unused: its goroutine exits, which ends the thread
		return false
	}
	finished := make(chan struct{})
	if !tp.hand(t, func() { fn(restricted); close(finished) }) {
		return false
	}
	<-finished
	tp.used.Add(1)
	if restricted {
		tp.restrictd.Add(1)
	}
	return true
}

// hand gives t its job; false if the pool was closed meanwhile.
func (tp *threadPool) hand(t *preparedThread, job func()) bool {
	select {
	case t.jobs <- job:
		return true
	case <-tp.done:
		return false
	}
}

// refill prepares a thread in the background unless one is ready or being
// prepared.
func (tp *threadPool) refill() {
	select {
	case <-tp.done:
		return // closed: starts take fresh threads
	default:
	}
	if len(tp.ready) > 0 || tp.broken.Load() || !tp.preparing.CompareAndSwap(false, true) {
		return
	}
	go tp.prepare()
}

// prepare locks the goroutine to a thread that is not the main thread
// (holding the main thread meanwhile, as throwawayThread does), prepares
// it and waits for one start.
func (tp *threadPool) prepare() {
	goruntime.LockOSThread() // never unlocked: the thread ends with this goroutine
	if unix.Gettid() == unix.Getpid() {
		locked := make(chan struct{})
		go func() {
			goruntime.LockOSThread()
			close(locked)
			tp.serve()
		}()
		<-locked // the other goroutine has a thread of its own now
		goruntime.UnlockOSThread()
		return
	}
	tp.serve()
}

func (tp *threadPool) serve() {
	if dropCapabilities() != nil {
		tp.broken.Store(true) // starts take fresh threads, whose drop reports the error
		tp.preparing.Store(false)
		return
	}
	t := &preparedThread{jobs: make(chan func())}
	if conf := tp.next.Load(); conf != nil {
		var ps pins
		_, err := restrict(&Policy{RestrictFS: conf.restrictFS, Network: conf.network}, layers{Grants: conf.grants}, &ps)
		ps.close()
		if err != nil {
			// A granted path changed or went since that start: the next
			// start resolves its policy anew (and takes a fresh thread).
			tp.next.CompareAndSwap(conf, nil)
			tp.preparing.Store(false)
			return
		}
		t.conf = conf
	}
	// Cleared before the hand-over, so that the start that takes this
	// thread can start the next preparation (which then waits, if need be,
	// for this one to be taken).
	tp.preparing.Store(false)
	select {
	case tp.ready <- t:
	case <-tp.done:
		return
	}
	select {
	case job := <-t.jobs:
		job()
	case <-tp.done:
	}
}

// close ends the prepared thread, if any. Safe on nil and more than once.
func (tp *threadPool) close() {
	if tp == nil {
		return
	}
	tp.closeOnce.Do(func() { close(tp.done) })
}
