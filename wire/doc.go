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
// uri.go holds the one file: URI encoder and decoder of the project
// ([FileURI], [ParseFileURI], [NativePath]): every URI an answer carries
// and every path argument that may be a URI go through them, so a path is
// spelled one way (the Codex client's: Rust's url crate).
// environment.go holds environmentInfo and [Capabilities], the struct of
// booleans that the server fills and [Capabilities.Map] turns into the
// capabilities map (every known name present).
//
// [Client] is the one JSON-RPC 2.0 client core of the project (the
// runtime's remote client, the bench, the test harnesses): [NewClient] on
// a Transport, then [Client.Call] (or [Client.Go] and [PendingCall.Wait]
// to pipeline), [Client.Notify], [Client.WriteRaw] / [Client.WithWriter]
// for raw frames through the same write side, [Client.Close]. Inbound
// messages that are not the answer to a pending call go to the handlers
// of [ClientOptions]: Peek (the bytes, first; it may take a message
// without a decode), Handle (decoded notifications, server requests,
// answers nobody waits for) and Malformed. [ClientOptions].Inline selects
// inline mode: no reader goroutine; a call reads on the caller's
// goroutine until its own answer, handing what comes first to the
// handlers, one call at a time ([ErrInlineBusy] otherwise); [Client.Poll]
// reads one message between calls.
//
// Transports are created with [NewStdioTransport],
// [AcceptWebsocket] (a server's upgrade: byte-level write progress and a
// bounded close handshake), [NewWebsocketTransport] or [DialWebsocket];
// [CloseWithReason] ends one with a websocket close frame (the Close*
// codes) when it can, and [TransportProgress] reports the bytes a
// transport has handed to the OS, for slow-consumer detection.
//
// # Concurrency
//
// Everything except transports and the client core is pure and
// goroutine-free. A [Transport] has one reader goroutine (ReadMessage) and
// one writer goroutine (WriteMessage, Flush); Close may be called from any
// goroutine, any number of times, and unblocks both.
//
// A [Client] in reader mode has a reader and a writer goroutine (both end
// when the transport fails or Close is called); its methods may be called
// from any goroutine. Writes are serialized by a one-slot token: a caller
// that finds it free, with nothing queued before it, writes and flushes
// itself (no goroutine hop); otherwise its frame joins the writer
// goroutine's queue; frames of successive calls keep their order. The
// handlers run on the reading goroutine, one message at a time, in
// arrival order. An inline client has no goroutine: one call (or Poll) at
// a time reads on its caller's goroutine, which runs the handlers; a
// second concurrent call fails with [ErrInlineBusy] rather than wait.
//
// # Failure semantics
//
// Malformed input never panics: [Decode] returns an [*Error] and the id to
// answer it with: null for a request whose id is null (JSON-RPC 2.0), -1
// otherwise; an id is accepted only if it can be echoed byte for byte (an
// int64, or a string that is valid UTF-8). [DecodeParams] returns -32602
// naming the field. A server's budget refusals are -32011 ([ErrBudget]). An
// [*Error] may carry [ErrorData] (its data member, a runtimed extension
// other clients ignore): a failed spawn's stage and errno. An inbound message
// over the limit (64 MiB by default) is an error wrapping [ErrMessageTooBig]:
// the stdio transport discards that line and stays usable; the websocket
// transport is closed by coder/websocket with status 1009.
//
// The client core latches its first failure: the transport's end (or a
// write error) fails every pending and later call with an error wrapping
// [ErrConnectionLost] and the transport's error (errors.Is finds both);
// after Close, [ErrClientClosed]. An error answer is an [*Error]. A
// call's ctx bounds its wait for the write side and for its answer. In
// reader mode a write in progress is never interrupted (it would tear a
// frame), so a peer that stops reading blocks writers until Close, and a
// ctx that ends abandons only that call (its late answer goes to Handle).
// In inline mode the ctx bounds the write and the read too, and a ctx that
// ends during them fails the whole client, because the answer's place in
// the stream is lost (the transport is closed, as a websocket would be).
//
// # Backpressure
//
// Transports have no queues of their own beyond their write buffer: a
// WriteMessage blocks while the peer does not read (TCP or pipe
// backpressure). An accepted websocket keeps 1 KiB read and write buffers
// (larger frames bypass them), and holds the frames its WriteMessage calls
// write until the next Flush (up to 64 KiB; a write of 16 KiB or more, the
// bulk of a large frame, is not held: it leaves at once with what was held
// before it) to send them in one writev: a batch costs one system call and
// one wake-up of the peer. A held frame is buffered in a pooled buffer
// only while its batch lasts; a frame anyone else writes meanwhile (a pong,
// the answer to the peer's close) takes what is held with it; Flush is cut
// when the context of the batch's last WriteMessage ends; and CloseWith
// sends what is held before the close frame. Both transports reuse their read buffer;
// [ReleaseReadBuffer] drops it (a server calls it after a message of
// [LargeReadBytes] or more, so an idle connection holds no large buffer; a
// client streaming large notifications keeps reusing one). A websocket's
// CloseWith takes at most a second whatever the peer does. The stdio transport buffers writes until Flush, which the
// connection's writer calls whenever its queues are empty, so bursts of
// small messages share system calls.
//
// Inbound, a transport given a [ReadGate] (SetReadGate) asks it once per
// message that outgrows LargeReadBytes, before reading on; while the gate
// waits nothing is read (TCP or pipe backpressure on the peer). A refused
// message is read to its end into nothing and reported as a
// [*ReadRefusedError] holding its first bytes (ScanID finds the id); the
// transport stays usable. A read buffer grows by doubling.
//
// The client core's handlers run on the reading goroutine: a slow handler
// stops the reading, so the transport (and behind it the server's
// outbound queue and slow-consumer rule) holds what follows; no message
// is dropped, and one that no handler takes (Handle or Malformed nil) is
// counted by [Client.Ignored]. A handler that hands messages on (the
// runtime's actor mailbox) passes this backpressure along. Frames of
// callers that find the write side busy wait in a queue of
// [ClientOptions].WriteQueue (256) frames; beyond it callers wait,
// bounded by their ctx.
package wire
