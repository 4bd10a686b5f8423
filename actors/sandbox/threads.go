package sandbox

import (
	goruntime "runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// threadPool keeps one spawning thread prepared ahead of the next
// confined start, so that a start does not wait for a thread's creation
// nor for the policy-independent part of its confinement.
//
// A prepared thread is a goroutine locked to an OS thread of its own (not
// the main thread) that has already set no_new_privs and dropped the
// capability bounding set, the ambient and the inheritable capabilities
// (dropCapabilities: the same for every policy), and waits for one start.
// That start runs the rest on it (Landlock, seccomp, the working
// directory's check, the spawner uid, the fork) exactly as on a fresh
// thread, and the goroutine then exits locked, which ends the thread:
// each thread serves one start. Taking the prepared thread starts the
// preparation of the next, in the background. A policy with overlays
// (a private mount namespace, mounted with CAP_SYS_ADMIN before the drop)
// takes a fresh thread as before.
//
// Concurrency: ready holds at most one prepared thread; preparing admits
// one preparation at a time; close ends a waiting thread (and one being
// prepared) through done. A prepared thread that is never used holds an
// OS thread and an idle goroutine until close.
type threadPool struct {
	ready     chan chan func()
	preparing atomic.Bool
	broken    atomic.Bool // a preparation failed: starts take fresh threads from then on
	done      chan struct{}
	closeOnce sync.Once
	used      atomic.Uint64 // starts served by a prepared thread (tests)
}

func newThreadPool() *threadPool {
	return &threadPool{ready: make(chan chan func(), 1), done: make(chan struct{})}
}

// run runs fn on the prepared thread and reports true once fn returned, or
// reports false at once when none is ready (the caller takes a fresh
// thread). Either way the next thread is being prepared.
func (tp *threadPool) run(fn func()) bool {
	if tp == nil {
		return false
	}
	defer tp.refill()
	var jobs chan func()
	select {
	case jobs = <-tp.ready:
	default:
		return false
	}
	finished := make(chan struct{})
	select {
	case jobs <- func() { fn(); close(finished) }:
	case <-tp.done:
		return false
	}
	<-finished
	tp.used.Add(1)
	return true
}

// refill prepares a thread in the background unless one is ready or being
// prepared.
func (tp *threadPool) refill() {
	if len(tp.ready) > 0 || tp.broken.Load() || !tp.preparing.CompareAndSwap(false, true) {
		return
	}
	go tp.prepare()
}

// prepare locks the goroutine to a thread that is not the main thread
// (holding the main thread meanwhile, as throwawayThread does), drops the
// capabilities and waits for one start.
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
	jobs := make(chan func())
	select {
	case tp.ready <- jobs:
	case <-tp.done:
		tp.preparing.Store(false)
		return
	}
	tp.preparing.Store(false)
	select {
	case fn := <-jobs:
		fn()
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
