package actors

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/runtimed/runtimed/wire"
)

// The outbound path of a connection (see doc.go, Backpressure):
//
//	process actors ──Event──▶ events (unbuffered) ─┐
//	replies, notifications ─▶ responses (unbuffered)┼─▶ QUEUE goroutine ──batch──▶ WRITER goroutine ──▶ transport
//	                                               ┘   (fifo, queued bytes)  ◀──written──┘
//
// The queue goroutine owns the fifo and its byte count: it takes a new item
// only while the count is under the connection's budget, so a client that
// stops reading stops its process actors (they stop reading their pipes)
// once the budget is full, and nothing else grows. The writer goroutine
// encodes and writes one batch at a time and reports its bytes back.

// outItem is one message waiting for the writer: an event (encoded by the
// writer), an encoded message, or a response the writer encodes (large
// results, so that producers waiting for room hold no encoded copy).
type outItem struct {
	ev     Event
	b      []byte
	lazy   bool // id, result, rerr: a response encoded by the writer
	id     wire.ID
	result any
	rerr   *wire.Error
	size   int // what it charges to the queue's budget
}

// writtenMsg reports a finished batch to the queue goroutine: its budget
// bytes and its (cleared) slice for reuse.
type writtenMsg struct {
	batch []outItem
	n     int
}

// encBufs holds the writer's encode buffers between batches, so an idle
// connection holds none; buffers over maxPooledEncode are dropped.
var encBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

const maxPooledEncode = 1 << 20

// eventSize is what an event charges: about its encoded size.
func eventSize(ev Event) int {
	switch ev.Kind {
	case EventOutput:
		return len(ev.Data)/3*4 + 128 + len(ev.ProcessID)
	case EventMessage:
		return len(ev.Data)
	}
	return 160 + len(ev.ProcessID) + len(ev.Limit)
}

// lazyResponse reports whether a result is large enough to be encoded by
// the writer, and its estimated encoded size.
func lazyResponse(result any) (int, bool) {
	switch r := result.(type) {
	case wire.ReadResult:
		n := 160
		for _, ch := range r.Chunks {
			n += len(ch.Chunk)/3*4 + 64
		}
		return n, true
	case wire.HTTPResponse:
		n := 128 + len(r.BodyBase64)/3*4
		for _, h := range r.Headers {
			n += len(h.Name) + len(h.Value) + 32
		}
		return n, true
	}
	return 0, false
}

// reply answers a request. When nobody holds the write side it writes the
// response at once (no hop to the writer); otherwise it queues it, waiting
// while the outbound queue is over budget. After the latch it writes only
// if the write side is free (the last flush may hold it) and within the
// last flush's time.
func (c *conn) reply(id wire.ID, result any, rerr *wire.Error) {
	if rerr != nil {
		c.sup.metrics.RequestError(rerr)
	}
	if c.ctx.Err() != nil {
		if rerr != nil && rerr.Code == wire.CodeInternal && rerr.Message == context.Cause(c.ctx).Error() {
			return // "the connection ended" is not an answer: the client sees the end itself
		}
		select {
		case <-c.wtok:
			if c.t.WriteMessage(c.final, encodeResponse(nil, id, result, rerr)) == nil {
				_ = c.t.Flush()
			}
			c.wtok <- struct{}{}
		default:
		}
		return
	}
	select {
	case <-c.wtok:
		b := encodeResponse(nil, id, result, rerr)
		err := c.t.WriteMessage(c.ctx, b)
		if err == nil {
			err = c.t.Flush()
		}
		if err == nil {
			c.msgsOut.Add(1)
		}
		c.wtok <- struct{}{}
		if err != nil {
			c.latch(ReasonTransportLost, err)
			c.t.Close()
		}
		return
	default:
	}
	if rerr == nil {
		if size, ok := lazyResponse(result); ok {
			c.enqueue(outItem{lazy: true, id: id, result: result, size: size})
			return
		}
	}
	b := encodeResponse(nil, id, result, rerr)
	c.enqueue(outItem{b: b, size: len(b)})
}

// notify queues a notification (app-server dialect, fs/missingChanged).
func (c *conn) notify(method string, params any) {
	b, err := wire.AppendNotification(nil, method, params)
	if err != nil {
		c.log.Error("encoding notification", zap.String("method", method), zap.Error(err))
		return
	}
	c.enqueue(outItem{b: b, size: len(b)})
}

// enqueue hands an item to the queue goroutine, waiting while the queue is
// over budget. It is reached only when the write token is taken, so the
// queue goroutine runs (see outbound).
func (c *conn) enqueue(it outItem) {
	select {
	case c.responses <- it:
	case <-c.ctx.Done():
	}
}

func encodeResponse(dst []byte, id wire.ID, result any, rerr *wire.Error) []byte {
	if rerr != nil {
		return wire.AppendError(dst, id, rerr)
	}
	b, err := wire.AppendResult(dst, id, result)
	if err != nil {
		return wire.AppendError(dst[:0], id, wire.AsError(err))
	}
	return b
}

func encodeEvent(dst []byte, ev Event) []byte {
	switch ev.Kind {
	case EventOutput:
		return wire.AppendOutputNotification(dst, ev.ProcessID, ev.Seq, ev.Stream.String(), ev.Data)
	case EventExited:
		return wire.AppendExitedNotification(dst, ev.ProcessID, ev.Seq, ev.ExitCode, ev.ExitSignal, ev.Limit)
	case EventMessage:
		return append(dst, ev.Data...)
	case EventFailed:
		return wire.AppendFailedClosedNotification(dst, ev.ProcessID, ev.Seq, ev.Failure)
	default:
		return wire.AppendClosedNotification(dst, ev.ProcessID, ev.Seq)
	}
}

// progress is what the slow-consumer watchdog compares: messages written,
// plus bytes handed to the operating system when the transport can tell.
func (c *conn) progress() uint64 {
	n := c.msgsOut.Load()
	if b, ok := wire.TransportProgress(c.t); ok {
		n += b
	}
	return n
}

// outbound starts the queue goroutine unless it runs. Only the reader
// calls it, before the first request that lets another goroutine produce
// output (a process, a deferred reply, the fs worker, the http manager, an
// app-server adapter, a resumed session): until then nobody but the reader
// writes, and the reader always finds the write token free.
func (c *conn) outbound() {
	if !c.queueing {
		c.queueing = true
		c.queued.Store(true)
		c.wg.Go(c.queueLoop)
	}
}

// queueLoop is the queue goroutine: it owns fifo, queued, writing and the
// write token while it holds it.
func (c *conn) queueLoop() {
	var fifo, spare []outItem
	queued := 0
	writing, holding, writer := false, false, false
	defer func() {
		close(c.batches) // the writer ends after the last batch
		if !writer {
			close(c.outDone) // (otherwise the writer closes it)
		}
	}()
	defer c.recoverPanic("outbound queue", nil)
	timeout := c.sup.cfg.Budgets.SlowConsumerTimeout
	if !c.opts.Resumable {
		timeout = 0 // stdio: its one client is the server's reason to exist
	}
	tick := max(timeout/4, 10*time.Millisecond)
	clock := c.sup.cfg.Clock
	if clock == nil {
		clock = RealClock{}
	}
	var watch Timer // made on the first batch: an idle connection has none
	var watchC <-chan time.Time
	var mark uint64
	var markAt time.Time
	defer func() {
		if watch != nil {
			watch.Stop()
		}
	}()
	for {
		var evCh <-chan Event
		var respCh <-chan outItem
		if queued < c.budget {
			evCh, respCh = c.events, c.responses
		}
		var tokCh <-chan struct{}
		if len(fifo) > 0 && !holding {
			tokCh = c.wtok
		}
		select {
		case ev := <-evCh:
			it := outItem{ev: ev, size: eventSize(ev)}
			fifo, queued = c.takeReady(append(fifo, it), queued+it.size)
		case it := <-respCh:
			fifo, queued = c.takeReady(append(fifo, it), queued+it.size)
		case <-tokCh:
			holding = true
		case w := <-c.written:
			writing = false
			queued -= w.n
			spare = w.batch
		case now := <-watchC:
			watchC = nil
			if !writing {
				// Idle: the watchdog sleeps until the next batch. (A no-op
				// on a timer that just fired; a test's clock sees the tick
				// handled.)
				watch.Stop()
				break
			}
			if p := c.progress(); p != mark {
				mark, markAt = p, now
			} else if now.Sub(markAt) >= timeout {
				c.latch(ReasonSlowConsumer, fmt.Errorf("the outbound queue made no progress for %v with %s queued", timeout, FormatBytes(int64(queued))))
				c.t.Close()
				break
			}
			watch.Reset(tick)
			watchC = watch.C()
		case <-c.ctx.Done():
			writer = c.flushLast(fifo, holding, writer)
			return
		}
		if holding && !writing {
			if len(fifo) == 0 {
				holding = false
				c.wtok <- struct{}{}
				continue
			}
			if !writer {
				writer = true // started on the first batch: an idle connection has no writer goroutine
				c.wg.Go(c.writeLoop)
			}
			c.batches <- fifo // never blocks: the writer took the last batch and reported it
			fifo, spare = spare[:0], nil
			writing = true
			if timeout > 0 && watchC == nil {
				mark, markAt = c.progress(), clock.Now()
				if watch == nil {
					watch = clock.NewTimer()
				}
				watch.Reset(tick)
				watchC = watch.C()
			}
		}
	}
}

// takeReady appends to fifo the events and answers whose senders are
// already waiting (within the budget), so that what a process actor hands
// over back to back (an exited and a closed event, a run of output) leaves
// in one batch and one write rather than racing the write token.
func (c *conn) takeReady(fifo []outItem, queued int) ([]outItem, int) {
	for queued < c.budget {
		select {
		case ev := <-c.events:
			it := outItem{ev: ev, size: eventSize(ev)}
			fifo, queued = append(fifo, it), queued+it.size
		case it := <-c.responses:
			fifo, queued = append(fifo, it), queued+it.size
		default:
			return fifo, queued
		}
	}
	return fifo, queued
}

// flushLast hands what is still queued to the writer for a last write when
// the connection ends, within connFlushTimeout of the latch (c.final): the
// answers a client is owed (stdio's EOF leaves stdout usable; a protocol
// violation is answered before the close frame) and the endings of
// processes that finished during a shutdown. A client that resumes later
// catches up by sequence number, so an event written here is never lost
// nor doubled. It reports whether a writer goroutine runs.
func (c *conn) flushLast(fifo []outItem, holding, writer bool) bool {
	if len(fifo) == 0 {
		return writer
	}
	if !holding {
		select {
		case <-c.wtok:
		case <-c.final.Done():
			return writer
		}
	}
	if !writer {
		writer = true
		c.wg.Go(c.writeLoop)
	}
	select {
	case c.batches <- fifo:
	default: // the writer has not taken its current batch: it is gone
	}
	return writer
}

// writeLoop is the writer goroutine: the only writer of the transport while
// the queue goroutine holds the write token. It encodes each event once,
// straight into a pooled buffer, and flushes once per batch.
func (c *conn) writeLoop() {
	defer close(c.outDone)
	defer c.recoverPanic("writer", nil)
	for batch := range c.batches {
		final := c.ctx.Err() != nil
		// Writes are cut connFlushTimeout after the latch, not at once:
		// that is the last flush's time.
		ctx := c.final
		bp := encBufs.Get().(*[]byte)
		buf := (*bp)[:0]
		n, ok := 0, true
		for i := range batch {
			it := &batch[i]
			n += it.size
			if !ok {
				continue
			}
			var msg []byte
			switch {
			case it.ev.Kind != 0:
				buf = encodeEvent(buf[:0], it.ev)
				msg = buf
			case it.lazy:
				buf = encodeResponse(buf[:0], it.id, it.result, it.rerr)
				msg = buf
			default:
				msg = it.b
			}
			if err := c.t.WriteMessage(ctx, msg); err != nil {
				c.latch(ReasonTransportLost, err)
				c.t.Close()
				ok = false
				continue
			}
			c.msgsOut.Add(1)
		}
		if ok {
			if err := c.t.Flush(); err != nil {
				c.latch(ReasonTransportLost, err)
				c.t.Close()
			}
		}
		if cap(buf) <= maxPooledEncode {
			*bp = buf[:0]
			encBufs.Put(bp)
		}
		clear(batch)
		if final {
			continue
		}
		select {
		case c.written <- writtenMsg{batch: batch[:0], n: n}:
		case <-c.ctx.Done():
		}
	}
}

// How a connection ends (see ServeConn).

func isReason(err error, r Reason) bool {
	var ce *ConnError
	return errors.As(err, &ce) && ce.Reason == r
}

// closeFor ends the transport as the cause says: a protocol violation with
// a close frame 1002 and its reason, a shutdown with 1001, a slow consumer
// with 1008 (its receive window is full, so the frame rarely arrives);
// anything else at once.
func closeFor(t wire.Transport, cause error) {
	var ce *ConnError
	if !errors.As(cause, &ce) {
		t.Close()
		return
	}
	switch ce.Reason {
	case ReasonProtocol:
		reason := "protocol violation"
		if ce.Err != nil {
			reason += ": " + ce.Err.Error()
		}
		_ = wire.CloseWithReason(t, wire.CloseProtocolError, reason)
	case ReasonShutdown:
		_ = wire.CloseWithReason(t, wire.CloseGoingAway, "server shutting down")
	case ReasonSlowConsumer:
		_ = wire.CloseWithReason(t, wire.ClosePolicy, "slow consumer: the outbound queue made no progress")
	default:
		t.Close()
	}
}

// refuse tells a connection the budgets refused it why, then ends it.
func refuse(ctx context.Context, t wire.Transport, err error) {
	var be *BudgetError
	if errors.As(err, &be) {
		wctx, cancel := context.WithTimeout(ctx, closeWriteTimeout)
		b := wire.AppendError(nil, wire.NullID, be.Wire())
		if t.WriteMessage(wctx, b) == nil {
			_ = t.Flush()
		}
		cancel()
		_ = wire.CloseWithReason(t, wire.ClosePolicy, be.Error()) // (cut to a close frame's 123 bytes)
		return
	}
	t.Close()
}

// closeWriteTimeout bounds the error written to a refused connection.
const closeWriteTimeout = time.Second
