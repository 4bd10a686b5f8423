package actors

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"go.uber.org/zap"

	"github.com/runtimed/runtimed/wire"
)

// writeLoop is the connection's only writer. It encodes events itself (once
// each, straight into a reused buffer) and flushes when both queues are
// empty. When the latch fires it flushes, for the last time and within
// connFlushTimeout, what is already queued (the ending of processes that
// finished during a shutdown, answers to requests), then closes the
// transport, which ends the reader.
func (c *conn) writeLoop() {
	defer c.t.Close()
	defer c.recoverPanic("writer", nil)
	// Writes are cut connFlushTimeout after the latch fires, not at once:
	// that is the last flush's time.
	wctx, cancel := context.WithCancel(context.WithoutCancel(c.ctx))
	defer cancel()
	stop := context.AfterFunc(c.ctx, func() { time.AfterFunc(connFlushTimeout, cancel) })
	defer stop()
	var buf []byte
	for {
		var msg []byte
		select {
		case ev := <-c.events:
			buf = encodeEvent(buf[:0], ev)
			msg = buf
		case msg = <-c.responses:
		case <-c.ctx.Done():
			c.lastFlush(wctx, buf, nil)
			return
		}
		// Own the write side for this burst: everything queued, then flush.
		select {
		case <-c.wtok:
		case <-c.ctx.Done():
			c.lastFlush(wctx, buf, msg)
			return
		}
		ok := c.writeOwned(wctx, msg)
		for ok {
			select {
			case ev := <-c.events:
				buf = encodeEvent(buf[:0], ev)
				ok = c.writeOwned(wctx, buf)
				continue
			case b := <-c.responses:
				ok = c.writeOwned(wctx, b)
				continue
			default:
			}
			if err := c.t.Flush(); err != nil {
				c.latch(ReasonTransportLost, err)
				ok = false
			}
			break
		}
		c.wtok <- struct{}{}
		if !ok {
			return
		}
	}
}

// lastFlush writes first (a message already taken from a queue, if any)
// and what is queued when the connection ends, without waiting for
// anything new, until ctx is cut (connFlushTimeout after the latch): a
// peer that does not read gets nothing more. buf is the encode buffer,
// free once first is written.
func (c *conn) lastFlush(ctx context.Context, buf, first []byte) {
	select {
	case <-c.wtok: // kept: nobody writes after this
	case <-ctx.Done():
		return
	}
	if first != nil && c.t.WriteMessage(ctx, first) != nil {
		return
	}
	for {
		var b []byte
		select {
		case ev := <-c.events:
			buf = encodeEvent(buf[:0], ev)
			b = buf
		case r := <-c.responses:
			b = r
		default:
			_ = c.t.Flush()
			return
		}
		if c.t.WriteMessage(ctx, b) != nil {
			return
		}
	}
}

// writeOwned writes one message; the caller holds the write token.
func (c *conn) writeOwned(ctx context.Context, b []byte) bool {
	if err := c.t.WriteMessage(ctx, b); err != nil {
		c.latch(ReasonTransportLost, err)
		return false
	}
	return true
}

func encodeEvent(dst []byte, ev Event) []byte {
	switch ev.Kind {
	case EventOutput:
		return wire.AppendOutputNotification(dst, ev.ProcessID, ev.Seq, ev.Stream.String(), ev.Data)
	case EventExited:
		return wire.AppendExitedNotification(dst, ev.ProcessID, ev.Seq, ev.ExitCode, ev.Limit)
	case EventMessage:
		return append(dst, ev.Data...)
	case EventFailed:
		return wire.AppendFailedClosedNotification(dst, ev.ProcessID, ev.Seq, ev.Failure)
	default:
		return wire.AppendClosedNotification(dst, ev.ProcessID, ev.Seq)
	}
}

// safeRequest handles one request; a panic answers it -32603 and fails the
// connection (its state may be inconsistent), nothing else.
func (c *conn) safeRequest(msg wire.Message) {
	defer c.recoverPanic("request "+msg.Method, msg.ID)
	runTestHook(&hookConnRequest, msg.Method)
	c.request(msg)
}

// recoverPanic runs deferred in each of the connection's goroutines: it
// recovers a panic, logs it with its stack, answers the request being
// handled (id, if any) with -32603 and latches the connection's failure
// (ReasonInternal). The other connections and every process go on.
func (c *conn) recoverPanic(where string, id wire.ID) {
	v := recover()
	if v == nil {
		return
	}
	reason := fmt.Sprint(v)
	c.log.Error("panic in a connection goroutine; failing the connection",
		zap.String("where", where), zap.String("panic", reason), zap.ByteString("stack", debug.Stack()))
	if id != nil {
		c.reply(id, nil, wire.ErrInternal(reason))
	}
	c.latch(ReasonInternal, fmt.Errorf("panic in %s: %s", where, reason))
}
