package actors

import (
	"fmt"
	"runtime/debug"

	"go.uber.org/zap"

	"github.com/runtimed/runtimed/wire"
)

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
