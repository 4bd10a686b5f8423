// Package netns makes empty network namespaces (only a loopback
// interface, up) and opens sockets inside them, so that a command placed
// in one reaches only what was put there: its managed-network proxies'
// listeners. It knows nothing of actors or the wire.
//
// # Usage
//
//	ns, err := netns.New()              // ErrUnavailable without CAP_SYS_ADMIN
//	defer ns.Close()
//	l, err := ns.Listen("tcp", "127.0.0.1:0") // inside; served from any goroutine
//	err = ns.Do(func() error { return cmd.Start() }) // the child inherits the namespace
//	fd, err := ns.Fd()                  // or a child joins it with setns before exec
//
// # Concurrency
//
// An NS may be used from any goroutine. Do, Listen and ListenPacket run
// on a locked OS thread that enters the namespace and leaves it before it
// is unlocked; a thread that cannot leave stays locked and is retired with
// its goroutine (ErrStuckThread), so no other goroutine ever runs inside.
//
// # Failure semantics
//
// New fails with ErrUnavailable when the kernel or the privileges refuse
// a new namespace; methods of a closed NS return ErrClosed. Sockets opened
// inside keep the namespace alive after Close.
//
// # Backpressure
//
// None: every call is synchronous and short (a setns round trip).
package netns
