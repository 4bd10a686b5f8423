package runtime

import (
	"errors"
	"testing"

	"github.com/runtimed/runtimed/wire"
)

// A resume of a session the server no longer has is ErrSessionGone, and an
// *RPCError (-32600); one that cannot reach the server is not.
func TestResumeOfAGoneSession(t *testing.T) {
	ws := startWSServer(t, Config{DetachTTL: -1}) // a dropped connection's session is discarded at once
	ctx := ctxT(t)

	_, err := Dial(ctx, ws.url, &ClientOptions{ResumeSessionID: "no-such-session"})
	var re *RPCError
	if !errors.Is(err, ErrSessionGone) || !errors.As(err, &re) || re.Code != wire.CodeInvalidRequest {
		t.Fatalf("Dial resuming an unknown session: %v; want ErrSessionGone and a -32600 *RPCError", err)
	}
	if errors.Is(err, ErrDisconnected) {
		t.Fatalf("Dial resuming an unknown session matches ErrDisconnected: %v", err)
	}

	// A reconnect whose resume finds the session gone latches with both.
	dial, nth := cuttableDials(ws.url)
	c, err := Dial(ctx, ws.url, &ClientOptions{Reconnect: true, DialTransport: dial})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	p, err := c.Start(ctx, Spec{Argv: []string{"sleep", "30"}, Dir: "/"})
	if err != nil {
		t.Fatal(err)
	}
	nth(0).cut()
	_, err = p.Wait(ctx)
	if !errors.Is(err, ErrSessionGone) || !errors.As(err, &re) || !errors.Is(err, ErrDisconnected) {
		t.Fatalf("Wait after a reconnect found the session gone: %v; want ErrSessionGone, an *RPCError and ErrDisconnected", err)
	}

	// Unreachable is not gone.
	ws.stop()
	_, err = Dial(ctx, ws.url, &ClientOptions{ResumeSessionID: c.SessionID()})
	if err == nil || errors.Is(err, ErrSessionGone) || errors.As(err, &re) {
		t.Fatalf("Dial of a stopped server: %v; want an error that is neither ErrSessionGone nor an *RPCError", err)
	}
}
