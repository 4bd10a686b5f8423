package actors

import (
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Returning memory after large messages. A large inbound message (a 60 MB
// process/write or fs/writeFile) allocates its buffer, the decoded envelope
// and the decoded bytes; once answered they are garbage, but the Go runtime
// collects only when the heap grows again (or after two minutes) and
// returns freed pages to the OS only gradually, so an idle server would
// keep gigabytes. The reclaimer goroutine collects and returns them.

const (
	// LargeMessageBytes is the inbound size from which a connection pokes
	// the reclaimer.
	LargeMessageBytes = 8 << 20
	// reclaimEvery is how often the reclaimer collects while it is active:
	// from the first poke until the heap is back within reclaimSlack of
	// what it was then (twice in a row), or reclaimMax after the last poke.
	reclaimEvery = time.Second
	reclaimSlack = 32 << 20
	reclaimMax   = 2 * time.Minute
)

// reclaimLoop is the reclaimer goroutine; it owns its timer and state.
// pokes is its mailbox (capacity 1: a poke while one is pending is merged).
func reclaimLoop(pokes <-chan struct{}, stop <-chan struct{}) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	heap := func() uint64 {
		metrics.Read(sample)
		if sample[0].Value.Kind() == metrics.KindUint64 {
			return sample[0].Value.Uint64()
		}
		return 0
	}
	active := false
	var base uint64
	var until time.Time
	quiet := 0
	for {
		select {
		case <-pokes:
			if !active {
				active, base = true, heap()
				timer.Reset(reclaimEvery)
			}
			until, quiet = time.Now().Add(reclaimMax), 0
		case now := <-timer.C:
			debug.FreeOSMemory() // a full collection, then every free page back to the OS
			if heap() <= base+reclaimSlack {
				quiet++
			} else {
				quiet = 0
			}
			if quiet >= 2 || now.After(until) {
				active = false
				continue
			}
			timer.Reset(reclaimEvery)
		case <-stop:
			return
		}
	}
}

// largeMessage tells the reclaimer a large inbound message arrived; it
// never blocks.
func (s *Supervisor) largeMessage() {
	select {
	case s.reclaim <- struct{}{}:
	default:
	}
}
