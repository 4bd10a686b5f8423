package contain

import (
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// freezeBound bounds the freeze before the kill: a tree that keeps
// forking faster than it can be stopped is killed as found, and the
// next sweep (or a repeated Kill) takes what was missed.
const freezeBound = 200 * time.Millisecond

// killTree freezes and kills tree t: its root, the orphans attributed to
// it, the orphans only it can own, and every descendant of those.
func (r *reaper) killTree(t *tree) {
	r.freezeKill(t, func() []proc {
		var seeds []proc
		if t.rootFD >= 0 && pidfdAlive(t.rootFD) {
			seeds = append(seeds, proc{pid: t.root, fd: t.rootFD, start: t.start})
		}
		for _, o := range r.orphans {
			if o.owner == t || o.owner == nil && r.onlyCandidate(t, o.start) {
				seeds = append(seeds, o.proc)
			}
		}
		return seeds
	})
}

// member is a process found by freezeKill, with a pidfd of its own.
type member struct {
	proc
}

// freezeKill stops every process reachable from seeds() (the seeds and
// their descendants, through /proc/<pid>/task/*/children) with SIGSTOP,
// repeating the walk until it finds no new process and every one found
// is stopped (bounded by freezeBound), then SIGKILLs them all. Each
// round first scans this process's children, so members that exited
// during the freeze and left orphans behind are found through the
// orphans' attribution. t, if not nil, is the tree the members belong
// to: their sessions are recorded for it.
func (r *reaper) freezeKill(t *tree, seeds func() []proc) {
	members := map[int]*member{}
	deadline := time.Now().Add(freezeBound)
	for {
		fresh := 0
		for _, s := range seeds() {
			fresh += r.walk(t, s, members)
		}
		stopped := true
		for _, m := range members {
			if st, ok := readStat(m.pid); ok && !st.stopped() && pidfdAlive(m.fd) {
				stopped = false
				break
			}
		}
		if fresh == 0 && stopped || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Microsecond) // let SIGSTOP land
		r.scan()
	}
	for _, m := range members {
		pidfdSignal(m.fd, unix.SIGKILL)
		unix.Close(m.fd)
	}
}

// walk adds seed and its descendants to members, SIGSTOPping each new
// one, and returns how many were new. A child listed by a member is
// bound to a pidfd and kept only if, after that, it still names the
// member (or this process, having been reparented) as its parent and the
// member was not reaped meanwhile: the listing was of that member, and
// the pid was not reused.
func (r *reaper) walk(t *tree, seed proc, members map[int]*member) int {
	fresh := 0
	add := func(p proc, st procStat) {
		if old := members[p.pid]; old != nil {
			unix.Close(old.fd) // a reaped member whose pid was reused
		}
		members[p.pid] = &member{proc: p}
		pidfdSignal(p.fd, unix.SIGSTOP)
		fresh++
		if t != nil {
			t.sids[st.session] = true
			r.sidOwner[st.session] = t
		}
	}
	if m := members[seed.pid]; m == nil || m.start != seed.start {
		// A seed's pidfd belongs to the reaper's records, which scan may
		// close during the freeze: the member gets a duplicate of its own.
		st, ok := readStat(seed.pid)
		if !ok || !pidfdAlive(seed.fd) {
			return 0
		}
		fd, err := unix.FcntlInt(uintptr(seed.fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return 0
		}
		add(proc{pid: seed.pid, fd: fd, start: seed.start}, st)
	}
	queue := []proc{members[seed.pid].proc}
	visited := map[int]bool{}
	for len(queue) > 0 {
		q := queue[0]
		queue = queue[1:]
		if visited[q.pid] {
			continue
		}
		visited[q.pid] = true
		kids := childrenOf(strconv.Itoa(q.pid))
		if !pidfdAlive(q.fd) {
			continue // q was reaped: the listing may be of another process
		}
		for _, c := range kids {
			if m := members[c]; m != nil && pidfdAlive(m.fd) {
				queue = append(queue, m.proc)
				continue
			}
			fd := pidfdOpen(c)
			if fd < 0 {
				continue
			}
			st, ok := readStat(c)
			if !ok || st.ppid != q.pid && st.ppid != r.self || !pidfdAlive(fd) {
				unix.Close(fd)
				continue
			}
			p := proc{pid: c, fd: fd, start: st.start}
			add(p, st)
			queue = append(queue, p)
		}
	}
	return fresh
}
