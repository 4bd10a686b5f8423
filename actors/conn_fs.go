package actors

import (
	"time"

	"github.com/runtimed/runtimed/actors/fsops"
	"github.com/runtimed/runtimed/wire"
)

// The fs/* requests of the connection actor: its fs worker.

// fsItem is an fs request for the fs worker and the inbound bytes it holds
// until it is answered.
type fsItem struct {
	msg     wire.Message
	inbound int64
}

// fs hands an fs/* request to the connection's fs worker. The worker runs
// them one at a time in arrival order (a client may pipeline a write and a
// read of one file) and owns the connection's fs/open handles, so a large
// copy or read never holds up the reader, process requests or long polls.
func (c *conn) fs(msg wire.Message) {
	c.cur.deferred = true // the fs worker observes it and returns its inbound bytes
	if c.fsq == nil {
		c.outbound()
		c.fsq = make(chan fsItem, connFsQueueCap)
		c.wg.Go(c.fsWorker)
	}
	select {
	case c.fsq <- fsItem{msg: msg, inbound: c.cur.inbound}:
	case <-c.ctx.Done():
	}
}

// fsWorker is the fs worker goroutine. It owns the connection's
// fsops.Worker (fs/open handles and fs/watchMissing watches), closed when
// it ends, and sends each fs/missingChanged after the answer that armed it.
func (c *conn) fsWorker() {
	w := fsops.NewWorker(c.sup.cfg.FsRoots)
	defer w.Close()
	for {
		select {
		case it := <-c.fsq:
			ok := c.fsRequest(it.msg, w)
			c.releaseInbound(it.inbound)
			if !ok {
				return
			}
		case ev, ok := <-w.Events():
			w.Event(ev, ok)
		case err, ok := <-w.Errors():
			w.Error(err, ok)
		case <-c.ctx.Done():
			return
		}
		for _, n := range w.Notifications() {
			c.notify(wire.NotifyFsMissingChanged, n)
		}
	}
}

// fsRequest runs one fs request; false when it panicked (the connection
// then fails: the handles may be in any state).
func (c *conn) fsRequest(msg wire.Message, w *fsops.Worker) (ok bool) {
	defer c.recoverPanic("fs worker", msg.ID)
	runTestHook(&hookFsRequest, msg.Method)
	start := time.Now()
	var res any
	var ferr *wire.Error
	if isCodexHomeMethod(msg.Method) {
		res, ferr = c.codexHomeRequest(msg)
	} else {
		res, ferr = w.Handle(msg.Method, msg.Params)
	}
	c.reply(msg.ID, res, ferr)
	c.observeRequest(msg.Method, msg.ID, start)
	if ferr == nil {
		c.auditFs(msg)
	}
	return true
}
