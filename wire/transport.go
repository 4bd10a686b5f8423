package wire

import "context"

// DefaultMaxMessageBytes is the default inbound message limit of both transports (64 MiB).
const DefaultMaxMessageBytes = 64 << 20

// Transport moves whole JSON messages. It knows nothing of their content.
//
// ReadMessage and WriteMessage may be called concurrently with each other,
// but each from one goroutine at a time: the connection's reader calls
// ReadMessage and its writer calls WriteMessage and Flush. Close may be
// called from anywhere, any number of times, and unblocks both.
type Transport interface {
	// ReadMessage returns the next inbound message; the slice is valid only
	// until the next call. An inbound message over the limit yields an error
	// wrapping ErrMessageTooBig: stdio discards that line and stays usable,
	// websocket closes the connection with status 1009.
	ReadMessage(ctx context.Context) ([]byte, error)
	// WriteMessage sends one message; it may buffer until Flush.
	WriteMessage(ctx context.Context, msg []byte) error
	// Flush sends anything WriteMessage buffered. The writer calls it when
	// its queue is empty, so bursts share system calls.
	Flush() error
	// Close ends the transport.
	Close() error
}

// ReadGate admits large inbound messages: a server's inbound memory budget.
// A transport given one (SetReadGate) calls AdmitRead once per message, when
// the message has outgrown LargeReadBytes and before its buffer grows
// further. AdmitRead blocks while the budget is spent (the transport reads
// nothing meanwhile: backpressure through the socket or pipe) and returns
// nil once the rest of the message may be read. An error refuses the
// message: the transport reads and discards the rest of it without keeping
// it, and ReadMessage returns a *ReadRefusedError; the transport stays
// usable.
type ReadGate interface {
	AdmitRead(ctx context.Context) error
}

// ReadRefusedError is a message its ReadGate refused. Prefix holds the
// first bytes of it (at most LargeReadBytes; a request's id is usually
// there: see ScanID); Err is the gate's error.
type ReadRefusedError struct {
	Prefix []byte
	Size   int // the message's size, as far as it was read
	Err    error
}

func (e *ReadRefusedError) Error() string {
	return "inbound message refused: " + e.Err.Error()
}

func (e *ReadRefusedError) Unwrap() error { return e.Err }

// SetReadGate installs g on t when t takes one (both transports do); only
// the ReadMessage caller may call it, before reading.
func SetReadGate(t Transport, g ReadGate) {
	if s, ok := t.(interface{ SetReadGate(ReadGate) }); ok {
		s.SetReadGate(g)
	}
}
