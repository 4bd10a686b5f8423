package actors

import (
	"context"
	"errors"
)

// ErrStopped is returned when a message is sent to an actor that has exited.
var ErrStopped = errors.New("actors: stopped")

// send delivers m to mbox, giving up when ctx ends or the actor has stopped.
// It is the only way into a mailbox.
func send[M any](ctx context.Context, mbox chan<- M, m M, done <-chan struct{}) error {
	select {
	case mbox <- m:
		return nil
	case <-done:
		return ErrStopped
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// await waits for a reply sent on a capacity-1 channel.
func await[R any](ctx context.Context, reply <-chan R, done <-chan struct{}) (R, error) {
	var zero R
	select {
	case r := <-reply:
		return r, nil
	case <-done:
		// The actor may have replied just before it exited.
		select {
		case r := <-reply:
			return r, nil
		default:
		}
		return zero, ErrStopped
	case <-ctx.Done():
		return zero, context.Cause(ctx)
	}
}

// ask sends a request built around a fresh capacity-1 reply channel and waits for the reply.
func ask[M any, R any](ctx context.Context, mbox chan<- M, done <-chan struct{}, build func(chan<- R) M) (R, error) {
	reply := make(chan R, 1)
	if err := send(ctx, mbox, build(reply), done); err != nil {
		var zero R
		return zero, err
	}
	return await(ctx, reply, done)
}
