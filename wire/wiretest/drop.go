package wiretest

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/runtimed/runtimed/wire"
)

// DropPlan says how often the OutputDropper transports sharing it drop:
// each one after Every bytes of process/output it received, Drops times in
// all. Done counts the drops made.
type DropPlan struct {
	Every, Drops int64
	Done         atomic.Int64
}

// ErrDropped is what a dropped transport's ReadMessage returns.
var ErrDropped = errors.New("wiretest: connection dropped (test)")

// OutputDropper wraps a client transport and drops it abruptly (closes it:
// no close frame, whatever is in flight is lost) once it has received
// Plan.Every bytes of process/output after its handshake answer, while the
// plan has drops left: every drop falls mid-stream, among notifications.
// The message that crossed the mark is lost with the connection.
// ReadMessage must be called from one goroutine (the client's reader).
type OutputDropper struct {
	wire.Transport
	Plan *DropPlan

	once sync.Once
	live bool  // the handshake was answered (owned by the reader)
	recv int64 // output bytes received since (owned by the reader)
}

func (d *OutputDropper) ReadMessage(ctx context.Context) ([]byte, error) {
	msg, err := d.Transport.ReadMessage(ctx)
	if err != nil {
		return msg, err
	}
	if !d.live {
		d.live = bytes.Contains(msg, []byte(`"sessionId"`))
		return msg, err
	}
	if !bytes.Contains(msg[:min(len(msg), 64)], []byte(`"process/output"`)) {
		return msg, err
	}
	d.recv += int64(len(msg))
	if n := d.Plan.Done.Load(); n < d.Plan.Drops && d.recv >= d.Plan.Every && d.Plan.Done.CompareAndSwap(n, n+1) {
		d.once.Do(func() { d.Transport.Close() })
		return nil, ErrDropped
	}
	return msg, err
}

// SeqOutput is what `seq 1 n` writes.
func SeqOutput(n int) []byte {
	var b []byte
	for i := 1; i <= n; i++ {
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, '\n')
	}
	return b
}
