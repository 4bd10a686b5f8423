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
