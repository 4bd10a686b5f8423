package fsops

import (
	"encoding/json"

	"github.com/fsnotify/fsnotify"

	"github.com/runtimed/runtimed/wire"
)

// Worker is the filesystem state of one connection: its fs/open handles
// and its fs/watchMissing watches. It is owned by one goroutine, the
// connection's fs worker, which loops over the connection's fs requests
// and the Worker's events:
//
//	w := fsops.NewWorker(roots)
//	defer w.Close() // handles, temporary files and watches end with the connection
//	for {
//		select {
//		case msg := <-requests:
//			res, werr := w.Handle(msg.Method, msg.Params)
//			reply(msg.ID, res, werr)
//		case ev, ok := <-w.Events():
//			w.Event(ev, ok)
//		case err, ok := <-w.Errors():
//			w.Error(err, ok)
//		case <-done:
//			return
//		}
//		for _, n := range w.Notifications() { // after the reply: a watch may fire at once
//			notify(wire.NotifyFsMissingChanged, n)
//		}
//	}
//
// Events and Errors are nil while no watch is armed (a nil channel never
// receives), and may change after any call: select on them afresh.
type Worker struct {
	roots   Roots
	handles Handles
	watches watches
}

// NewWorker returns the state of a new connection confined to roots.
func NewWorker(roots Roots) *Worker { return &Worker{roots: roots, watches: watches{roots: roots}} }

// Handle serves one fs/* request (see the package function Handle);
// fs/watchMissing too.
func (w *Worker) Handle(method string, params json.RawMessage) (any, *wire.Error) {
	if method == wire.MethodFsWatchMissing {
		return w.watches.watchMissing(params)
	}
	return Handle(method, params, w.roots, &w.handles)
}

// Events is the channel of filesystem events for the watches; nil while
// none is armed.
func (w *Worker) Events() <-chan fsnotify.Event {
	if w.watches.inotify == nil {
		return nil
	}
	return w.watches.inotify.Events
}

// Errors is the channel of watcher errors; nil while no watch is armed.
func (w *Worker) Errors() <-chan error {
	if w.watches.inotify == nil {
		return nil
	}
	return w.watches.inotify.Errors
}

// Event handles a receive from Events (ok false: the channel was closed).
func (w *Worker) Event(ev fsnotify.Event, ok bool) {
	if !ok {
		w.watches.broken()
		return
	}
	w.watches.event(ev)
}

// Error handles a receive from Errors: a lost event (queue overflow) or a
// watcher failure makes every watch check its paths again.
func (w *Worker) Error(err error, ok bool) {
	if !ok {
		w.watches.broken()
		return
	}
	_ = err
	w.watches.overflow()
}

// Notifications returns the fs/missingChanged notifications due (each
// watch that fired, once) and forgets them.
func (w *Worker) Notifications() []wire.FsMissingChangedParams {
	n := w.watches.fired
	w.watches.fired = nil
	return n
}

// Handles returns the connection's handle table (for tests and counts).
func (w *Worker) Handles() *Handles { return &w.handles }

// Watching returns the number of active watches.
func (w *Worker) Watching() int { return len(w.watches.byKey) }

// Close ends the connection's filesystem state: every handle is closed (a
// replace handle's temporary file removed, its destination untouched) and
// every watch ends without a notification.
func (w *Worker) Close() {
	w.handles.CloseAll()
	w.watches.closeAll()
	w.watches.fired = nil
}
