// Package wire is the runtimed protocol schema and its transports: method
// names, params/results/notifications, the JSON-RPC envelope (ids echoed
// byte for byte), the mapping of errors to JSON-RPC codes and messages
// (errors.go, the only place codes are chosen), and two framings of whole
// messages: stdio (one message per line) and websocket (one per frame, via
// github.com/coder/websocket). It knows nothing of processes.
//
// The protocol itself is specified in docs/PROTOCOL.md at the root of the
// repository: every method, field, default, limit, notification and error
// message. "PROTOCOL.md section N" in comments throughout the code means
// that file. TestProtocolDoc fails when a Method* or Notify* constant of
// this package has no section there.
//
// # Usage
//
// A server decodes each inbound message with [Decode], decodes params with
// [DecodeParams] into the typed structs of schema.go, and encodes answers
// with [AppendResult] / [AppendError]. process/output notifications are
// encoded with [AppendOutputNotification], which base64-encodes the chunk
// straight into the destination buffer (the hot path: no reflection, one
// copy); http/request/bodyDelta likewise with [AppendHTTPBodyDelta].
// [AppendFailedClosedNotification] is the process/closed of a
// process the server failed (ext "failure"; requests about it then get
// [ErrProcessFailed], -32603).
// environment.go holds environmentInfo and [Capabilities], the struct of
// booleans that the server fills and [Capabilities.Map] turns into the
// capabilities map (every known name present). Transports are created with [NewStdioTransport],
// [NewWebsocketTransport] or [DialWebsocket].
//
// # Concurrency
//
// Everything except transports is pure and goroutine-free. A [Transport]
// has one reader goroutine (ReadMessage) and one writer goroutine
// (WriteMessage, Flush); Close may be called from any goroutine, any number
// of times, and unblocks both.
//
// # Failure semantics
//
// Malformed input never panics: [Decode] returns an [*Error] answered with
// id -1, [DecodeParams] returns -32602 naming the field. An inbound message
// over the limit (64 MiB by default) is an error wrapping [ErrMessageTooBig]:
// the stdio transport discards that line and stays usable; the websocket
// transport is closed by coder/websocket with status 1009.
//
// # Backpressure
//
// Transports have no queues of their own beyond their write buffer: a
// WriteMessage blocks while the peer does not read (TCP or pipe
// backpressure). The stdio transport buffers writes until Flush, which the
// connection's writer calls whenever its queues are empty, so bursts of
// small messages share system calls.
package wire
