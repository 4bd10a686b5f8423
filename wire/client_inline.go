package wire

import "context"

// Inline mode: the caller's goroutine reads. No goroutine of the client's
// own, one call at a time (busy), and what arrives before a call's answer
// goes to the handlers on the caller's goroutine, in order.

// readUntil reads (inline mode) until the answer whose key is want; with
// want "" it reads and dispatches one message. A ctx that ends during the
// read fails the client: the transport may have torn a frame (a websocket
// closes itself) and the answer's place in the stream is lost.
func (c *Client) readUntil(ctx context.Context, want string) (Response, error) {
	if err := c.Err(); err != nil {
		return Response{}, err
	}
	stop := context.AfterFunc(ctx, func() { c.fail(lost(context.Cause(ctx))) })
	defer stop()
	for {
		data, err := c.t.ReadMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				c.fail(lost(context.Cause(ctx)))
				return Response{}, ctx.Err()
			}
			c.fail(lost(err))
			return Response{}, c.Err()
		}
		if ctx.Err() != nil {
			// The latch fired while this message was read: the client is done.
			return Response{}, ctx.Err()
		}
		r, ok := c.dispatch(data, want)
		if ok || want == "" {
			return r, nil
		}
		if err := c.Err(); err != nil {
			return Response{}, err
		}
	}
}

// Poll reads one inbound message on the caller's goroutine and hands it to
// the handlers (inline mode only: a test that waits for a notification
// between calls). It counts as a call: it fails with ErrInlineBusy while
// one is in progress, and a ctx that ends during the read fails the client.
func (c *Client) Poll(ctx context.Context) error {
	if !c.opts.Inline {
		return ErrNotInline
	}
	if !c.busy.CompareAndSwap(false, true) {
		return ErrInlineBusy
	}
	defer c.busy.Store(false)
	_, err := c.readUntil(ctx, "")
	return err
}
