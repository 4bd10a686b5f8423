// Package osproctest holds the fake osproc.Session that every package's
// tests use to run a process actor without a child: the test hands each
// output stream its pieces and ends, decides the exit code, and reads
// back what the actor asked of the OS (signals, stdin writes and closes,
// forced output closes).
//
// # Usage
//
//	s := osproctest.New(osproctest.Options{Stdin: true})
//	ref := sup.SpawnSession("p", argv, false, s, &sub)
//	s.Out(0) <- []byte("hi") // returns once the actor's reader took it
//	s.End(0); s.End(1)         // EOF on both streams
//	s.Exit(0)                  // Wait returns 0
//	sigs := s.Signals()
//
// # Concurrency
//
// All methods may be called from any goroutine. The recorded calls are
// guarded by one mutex, held only around their slices; the streams and
// the exit are channels.
//
// # Failure semantics
//
// Nothing fails: Write, CloseStdin and Signal are recorded and succeed;
// Resize succeeds on a TTY session and returns osproc.ErrNotPTY on a pipe
// one. A stream read after CloseOutputs fails with os.ErrClosed, as a
// closed pipe does; after End it returns io.EOF.
//
// # Backpressure
//
// Out's channel is unbuffered: a send completes only when the reader
// goroutine takes the piece, so a test knows the actor has it (or is
// blocked on a full mailbox, which is what it tests). Exit's channel holds
// one code.
package osproctest
