package contain

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The subreaper: where no cgroup can be had, this process sets
// PR_SET_CHILD_SUBREAPER, so a descendant whose parent dies (a double
// fork, a daemonizing tool, a grandchild left behind by setsid) is
// reparented to us instead of to init. The reaper then
//
//   - reaps adopted orphans that exited (no zombie accumulates), without
//     ever taking the exit status of a direct child someone waits for;
//   - kills the adopted orphans of a tree with the tree (ModeSubreaper's
//     Group.Kill), and at the latest once no live tree can own them.
//
// PR_SET_CHILD_SUBREAPER is an attribute of the whole process, so there
// is one reaper per process, shared by every Manager in ModeSubreaper
// (reference counted: the last Close stops it and clears the attribute).
//
// Why reaping never steals a direct child's exit status. The reaper
// reaps only through a pidfd it opened itself (waitid P_PIDFD), so it acts
// on exactly the process that pidfd names, never on a reused pid. It
// leaves registered tree roots to their process actor, and any other
// child only if, after the reaper's pidfd was opened on it, no other
// pidfd in this process refers to it. Go's os.StartProcess (os/exec, and
// osproc.Start) creates a pidfd with the child (CLONE_PIDFD) and holds it
// until Wait has reaped the child or Release abandoned it. So while a
// direct child is unreaped, its waiter's pidfd is in our descriptor table
// and the reaper leaves the child alone; once that pidfd is gone, the
// child was reaped by its waiter (our waitid then gets ECHILD and does
// nothing) or abandoned (reaping it is right). The order matters: the
// reaper opens its pidfd first and lists the descriptors after; listing
// first would let a reaped pid be reused by a new direct child whose
// pidfd the list missed. Residual: a direct child started without a pidfd
// (a cgo fork, or raw syscall.ForkExec plus wait4) is not protected; the
// daemon starts none, and subreaper mode is refused where pidfds do not
// work (Go then falls back to wait4 too).
//
// How an orphan is attributed to its tree. Every tree root runs in a
// session of its own (Setsid), so an orphan that did not call setsid
// carries the root's session id; the kernel does not reuse a pid while
// it names a session, so that match is exact. The session of every
// member the reaper has seen (walking /proc/<pid>/task/*/children from
// the root and from the tree's orphans) is recorded too, and an orphan
// is attributed when it is first seen, so one adopted before it called
// setsid stays attributed. An orphan whose session is unknown (it called
// setsid and its parent exited before the reaper saw it) could belong to
// any tree whose root started no later than it did (start times have a
// granularity of 10 ms): it is killed with a tree when that is the only
// such live tree, and otherwise as soon as none of them is live (killed
// or released). With one tree at a time this is exact; with concurrent
// trees such an orphan may outlive its own tree until the older trees
// end (docs/operations.md says so). An orphan born while no tree lived
// is not a tree's (an embedding program's own child left it): it is
// reaped when it exits, never killed.
//
// Killing is freeze, then kill: every member found is sent SIGSTOP (a
// stopped process cannot fork), the walk repeats until it finds no new
// member and every member is seen stopped (bounded: 200 ms), then every
// member gets SIGKILL through its pidfd.

// reaper owns the subreaper's state; run is its one goroutine.
type reaper struct {
	reqs chan reapReq   // bounded mailbox; a sender selects on done
	done chan struct{}  // closed when run returns
	sigs chan os.Signal // SIGCHLD, buffered 1 (signal.Notify coalesces)
	self int
	// keep: PR_SET_CHILD_SUBREAPER was set before us; leave it set.
	keep bool

	// Owned by run:
	trees    map[*tree]bool    // registered, not yet released
	roots    map[int]*tree     // root pid -> tree, for registered trees
	sidOwner map[int]*tree     // session id -> the tree whose member has it
	orphans  map[int]*orphan   // adopted children, by pid
	direct   map[int]*directCh // children someone else holds a pidfd on
	// past: when released trees lived ([root start, release], in ticks,
	// merged, oldest first, at most maxPast): an orphan that no live tree
	// can own is killed only if it was born in one of these spans, so the
	// orphans of children that are not trees (os/exec elsewhere in an
	// embedding program) are reaped but never killed.
	past []span
}

// span is a closed interval of clock ticks after boot.
type span struct{ from, to uint64 }

// maxPast bounds past; the oldest spans are dropped first (an orphan
// born then and unattributed is then only reaped, not killed).
const maxPast = 1024

// tree is one process tree in ModeSubreaper. Its fields are set by
// register and owned by the reaper's goroutine from then on.
type tree struct {
	root   int
	rootFD int    // pidfd on the root, -1 once released
	start  uint64 // the root's start time (ticks)
	sids   map[int]bool
	// killed: Kill ended the tree; it can no longer own a new orphan
	// (one found later is killed), nor make others wait for it.
	killed bool
}

// orphan is an adopted child of this process (its parent died).
type orphan struct {
	proc
	session int
	owner   *tree // nil: not known (see "attributed" above)
}

// directCh is a child of this process that someone waits for.
type directCh struct {
	start   uint64
	zombied int // sweeps it has been seen as a zombie, unreaped
}

// proc is one process bound to a pidfd.
type proc struct {
	pid   int
	fd    int
	start uint64
}

type reqKind uint8

const (
	reqRegister reqKind = iota // t.root and t.rootFD are set
	reqKill                    // freeze and kill the tree
	reqRelease                 // kill, then forget the tree
	reqStop                    // the last Manager closed
)

// reapReq is a message to the reaper; reply has capacity 1.
type reapReq struct {
	kind  reqKind
	t     *tree
	reply chan struct{}
}

// ErrReaperGone is returned when the reaper has stopped.
var ErrReaperGone = errors.New("contain: subreaper stopped")

// errNoSubreaper wraps why subreaper mode cannot be had here.
var errNoSubreaper = errors.New("contain: subreaper unavailable")

// The process's one reaper. mu guards only these three fields and is
// never held across a wait or I/O.
var reaperSingleton struct {
	mu       sync.Mutex
	cur      *reaper
	refs     int
	stopping chan struct{} // done of a reaper that is stopping
}

// acquireReaper returns the process's reaper, starting it (and making
// this process a subreaper) for the first user.
func acquireReaper() (*reaper, error) {
	s := &reaperSingleton
	for {
		s.mu.Lock()
		if s.cur != nil {
			s.refs++
			r := s.cur
			s.mu.Unlock()
			return r, nil
		}
		if d := s.stopping; d != nil {
			s.mu.Unlock()
			<-d // the previous reaper clears the attribute first
			s.mu.Lock()
			if s.stopping == d {
				s.stopping = nil
			}
			s.mu.Unlock()
			continue
		}
		r, err := startReaper()
		if err == nil {
			s.cur, s.refs = r, 1
		}
		s.mu.Unlock()
		return r, err
	}
}

// releaseReaper drops one reference; the last one stops the reaper: it
// kills every adopted orphan, reaps them (bounded), and clears
// PR_SET_CHILD_SUBREAPER.
func releaseReaper(r *reaper) {
	s := &reaperSingleton
	s.mu.Lock()
	if s.cur != r {
		s.mu.Unlock()
		return
	}
	s.refs--
	if s.refs > 0 {
		s.mu.Unlock()
		return
	}
	s.cur, s.stopping = nil, r.done
	s.mu.Unlock()
	_ = r.call(reqStop, nil)
	<-r.done
}

func startReaper() (*reaper, error) {
	fd := pidfdOpen(os.Getpid())
	if fd < 0 {
		return nil, fmt.Errorf("%w: pidfd_open does not work here", errNoSubreaper)
	}
	unix.Close(fd)
	// The reaper reads /proc: a process's stat, and the children of each
	// thread (CONFIG_PROC_CHILDREN). An empty root or a kernel without
	// them leaves process groups.
	if _, ok := readStat(os.Getpid()); !ok {
		return nil, fmt.Errorf("%w: /proc is not mounted", errNoSubreaper)
	}
	if _, err := os.ReadFile("/proc/thread-self/children"); err != nil {
		return nil, fmt.Errorf("%w: %v", errNoSubreaper, err)
	}
	var was int32
	_ = unix.Prctl(unix.PR_GET_CHILD_SUBREAPER, uintptr(unsafe.Pointer(&was)), 0, 0, 0)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("%w: PR_SET_CHILD_SUBREAPER: %v", errNoSubreaper, err)
	}
	r := &reaper{
		reqs:     make(chan reapReq, 16),
		done:     make(chan struct{}),
		sigs:     make(chan os.Signal, 1),
		self:     os.Getpid(),
		keep:     was != 0,
		trees:    map[*tree]bool{},
		roots:    map[int]*tree{},
		sidOwner: map[int]*tree{},
		orphans:  map[int]*orphan{},
		direct:   map[int]*directCh{},
	}
	signal.Notify(r.sigs, syscall.SIGCHLD)
	go r.run()
	return r, nil
}

// call sends a request and waits for its reply, or for the reaper to end.
func (r *reaper) call(kind reqKind, t *tree) error {
	req := reapReq{kind: kind, t: t, reply: make(chan struct{}, 1)}
	select {
	case r.reqs <- req:
	case <-r.done:
		return ErrReaperGone
	}
	select {
	case <-req.reply:
		return nil
	case <-r.done:
		return ErrReaperGone
	}
}

// sweepEvery bounds how late an orphan that no live tree can own is
// noticed and killed when no SIGCHLD arrives.
const sweepEvery = 250 * time.Millisecond

func (r *reaper) run() {
	defer close(r.done)
	tick := time.NewTicker(sweepEvery)
	defer tick.Stop()
	for {
		select {
		case req := <-r.reqs:
			r.handle(req)
			req.reply <- struct{}{}
			if req.kind == reqStop {
				return
			}
		case <-r.sigs:
			r.sweep()
		case <-tick.C:
			r.sweep()
		}
	}
}

func (r *reaper) handle(req reapReq) {
	t := req.t
	switch req.kind {
	case reqRegister:
		r.trees[t] = true
		r.roots[t.root] = t
		t.sids = map[int]bool{t.root: true} // the root called setsid
		r.sidOwner[t.root] = t
	case reqKill:
		if r.trees[t] {
			r.killTree(t)
			t.killed = true
			r.cull() // orphans this tree was the last candidate for die now
		}
	case reqRelease:
		if !r.trees[t] {
			return
		}
		r.killTree(t)
		delete(r.trees, t)
		if r.roots[t.root] == t {
			delete(r.roots, t.root)
		}
		for sid := range t.sids {
			if r.sidOwner[sid] == t {
				delete(r.sidOwner, sid)
			}
		}
		unix.Close(t.rootFD)
		t.rootFD = -1
		r.remember(span{t.start, nowTicks()})
		r.sweep() // orphans this tree was the last candidate for die now
	case reqStop:
		r.shutdown()
	}
}

// shutdown kills every registered tree and adopted orphan, reaps what it
// can within a bound, and stops being a subreaper.
func (r *reaper) shutdown() {
	signal.Stop(r.sigs)
	for t := range r.trees {
		r.killTree(t)
		unix.Close(t.rootFD)
		r.remember(span{t.start, nowTicks()})
	}
	r.trees, r.roots, r.sidOwner = map[*tree]bool{}, map[int]*tree{}, map[int]*tree{}
	deadline := time.Now().Add(time.Second)
	for {
		r.sweep() // with no live tree, every orphan of a tree is killed
		live := 0
		for _, o := range r.orphans {
			if r.doomed(o) && pidfdAlive(o.fd) {
				live++
			}
		}
		if live == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	for pid, o := range r.orphans {
		unix.Close(o.fd)
		delete(r.orphans, pid)
	}
	if !r.keep {
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	}
}

// zombieGrace is how many sweeps a zombie child someone held a pidfd on
// is left to its waiter before it is looked at again (an abandoned one).
const zombieGrace = 4

// sweep looks at every child of this process: reaps exited orphans,
// records and attributes new live ones, and kills those no live tree can
// own.
func (r *reaper) sweep() {
	r.scan()
	r.cull()
}

// cull kills the orphans (and their descendants) that must die: their
// tree was released, or their tree is not known, no live tree can own
// them and they were born while a released tree lived.
func (r *reaper) cull() {
	var seeds []proc
	for _, o := range r.orphans {
		if r.doomed(o) && pidfdAlive(o.fd) {
			seeds = append(seeds, o.proc)
		}
	}
	if len(seeds) > 0 {
		r.freezeKill(nil, func() []proc { return seeds })
	}
}

func (r *reaper) doomed(o *orphan) bool {
	if o.owner != nil {
		return !r.trees[o.owner] || o.owner.killed
	}
	return !r.anyCandidate(o.start) && r.bornInEndedTree(o.start)
}

// scan reaps exited orphans and records and attributes new live ones.
func (r *reaper) scan() {
	seen := map[int]bool{}
	var unknown []proc
	for _, pid := range childrenOf("self") {
		seen[pid] = true
		// Known processes are checked through their pidfds (one system
		// call, no /proc read): while a pidfd is not reaped, its pid
		// names that process.
		if t := r.roots[pid]; t != nil && t.rootFD >= 0 && pidfdAlive(t.rootFD) {
			continue // its process actor waits for it
		}
		if o := r.orphans[pid]; o != nil {
			if pidfdAlive(o.fd) {
				if pidfdReap(o.fd) { // it exited
					unix.Close(o.fd)
					delete(r.orphans, pid)
				}
				continue
			}
			unix.Close(o.fd) // reaped; the pid names another process now
			delete(r.orphans, pid)
		}
		st, ok := readStat(pid)
		if !ok || st.ppid != r.self {
			continue
		}
		if d := r.direct[pid]; d != nil && d.start != st.start {
			delete(r.direct, pid) // reaped by its waiter; the pid was reused
		} else if d != nil {
			if st.state != 'Z' {
				continue
			}
			if d.zombied++; d.zombied < zombieGrace {
				continue // its waiter reaps it
			}
			delete(r.direct, pid) // abandoned? classify afresh below
		}
		// Bind the pid to one process before anything else.
		fd := pidfdOpen(pid)
		if fd < 0 {
			continue
		}
		st2, ok := readStat(pid)
		if !ok || st2.ppid != r.self || !pidfdAlive(fd) {
			unix.Close(fd) // exited and reaped meanwhile
			continue
		}
		unknown = append(unknown, proc{pid: pid, fd: fd, start: st2.start})
	}
	for pid, o := range r.orphans {
		if !seen[pid] {
			unix.Close(o.fd)
			delete(r.orphans, pid)
		}
	}
	for pid := range r.direct {
		if !seen[pid] {
			delete(r.direct, pid)
		}
	}
	if len(unknown) > 0 {
		held, whole := heldPidfds(r.ownFDs(unknown))
		for _, p := range unknown {
			if !whole { // fail closed: reap nothing, look again at the next sweep
				unix.Close(p.fd)
				continue
			}
			if held[p.pid] {
				r.direct[p.pid] = &directCh{start: p.start}
				unix.Close(p.fd)
				continue
			}
			if pidfdReap(p.fd) { // an exited orphan
				unix.Close(p.fd)
				continue
			}
			st, ok := readStat(p.pid)
			if !ok || !pidfdAlive(p.fd) {
				unix.Close(p.fd)
				continue
			}
			o := &orphan{proc: p, session: st.session}
			o.owner = r.sidOwner[st.session]
			r.orphans[p.pid] = o
		}
	}
}

// anyCandidate reports whether a live (not killed) tree could own a process started at
// start (its root started no later).
func (r *reaper) anyCandidate(start uint64) bool {
	for t := range r.trees {
		if !t.killed && t.start <= start {
			return true
		}
	}
	return false
}

// remember records the lifetime of a released tree.
func (r *reaper) remember(s span) {
	if n := len(r.past); n > 0 && s.from <= r.past[n-1].to {
		last := &r.past[n-1]
		last.from, last.to = min(last.from, s.from), max(last.to, s.to)
		// Merging may reach back over earlier spans.
		for n = len(r.past); n > 1 && r.past[n-1].from <= r.past[n-2].to; n = len(r.past) {
			r.past[n-2].from = min(r.past[n-2].from, r.past[n-1].from)
			r.past[n-2].to = max(r.past[n-2].to, r.past[n-1].to)
			r.past = r.past[:n-1]
		}
		return
	}
	r.past = append(r.past, s)
	if len(r.past) > maxPast {
		r.past = append(r.past[:0], r.past[1:]...)
	}
}

// bornInEndedTree reports whether a process started at start was born
// while a tree that has ended (killed, or released) lived.
func (r *reaper) bornInEndedTree(start uint64) bool {
	for t := range r.trees {
		if t.killed && t.start <= start {
			return true
		}
	}
	for _, s := range r.past {
		if s.from <= start && start <= s.to {
			return true
		}
	}
	return false
}

// ticksPerSecond is USER_HZ, the unit of /proc/<pid>/stat's start time:
// 100 on every Linux architecture Go supports.
const ticksPerSecond = 100

// nowTicks is the time in the unit of procStat.start (boot time based).
func nowTicks() uint64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return ^uint64(0)
	}
	return uint64(ts.Sec)*ticksPerSecond + uint64(ts.Nsec)/(1e9/ticksPerSecond) + 1
}

// onlyCandidate reports whether t is the only live tree that could own a
// process started at start.
func (r *reaper) onlyCandidate(t *tree, start uint64) bool {
	if t.start > start {
		return false
	}
	for u := range r.trees {
		if u != t && !u.killed && u.start <= start {
			return false
		}
	}
	return true
}

// ownFDs are the reaper's own pidfds, which heldPidfds must not count.
func (r *reaper) ownFDs(extra []proc) map[int]bool {
	own := map[int]bool{}
	for t := range r.trees {
		own[t.rootFD] = true
	}
	for _, o := range r.orphans {
		own[o.fd] = true
	}
	for _, p := range extra {
		own[p.fd] = true
	}
	return own
}
