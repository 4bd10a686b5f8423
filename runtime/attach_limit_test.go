package runtime

import (
	"strings"
	"testing"
)

// A process a memory limit ended before anyone attached keeps its limit:
// Wait on the attached handle reports it, on Local and on a Client that
// resumed the session (the exit came before its Attach, so no
// process/exited notification brings the limit).
func TestAttachKeepsLimitOfEndedProcess(t *testing.T) {
	hog := func(t *testing.T) Spec {
		spec := sh(t, `x=$(head -c 200000000 /dev/zero | tr '\0' a); echo survived`)
		spec.ID, spec.Limits = "hog", Limits{MemoryBytes: 32 << 20}
		return spec
	}
	check := func(t *testing.T, st ExitStatus, err error) {
		t.Helper()
		if err != nil || st.Code != 137 || st.Limit != LimitMemory {
			t.Fatalf("attached Wait = %+v, %v; want 137 with limit %q", st, err, LimitMemory)
		}
	}
	startHog := func(t *testing.T, b Backend) {
		ctx := ctxT(t)
		p, err := b.Start(ctx, hog(t))
		if err != nil {
			if strings.Contains(err.Error(), "cannot be enforced on this host") || strings.Contains(err.Error(), "limit") {
				t.Skipf("host: %v", err)
			}
			t.Fatal(err)
		}
		if st, err := p.Wait(ctx); err != nil || st.Limit != LimitMemory {
			t.Skipf("the host did not end the hog by its memory limit: %+v %v", st, err)
		}
	}
	t.Run("local", func(t *testing.T) {
		l := newLocalBackend(t).(*Local)
		startHog(t, l)
		ctx := ctxT(t)
		q, err := l.Attach(ctx, "hog")
		if err != nil {
			t.Fatal(err)
		}
		st, err := q.Wait(ctx)
		check(t, st, err)
	})
	t.Run("websocket", func(t *testing.T) {
		ws := startWSServer(t, Config{})
		ctx := ctxT(t)
		first, err := Dial(ctx, ws.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		startHog(t, first)
		sid := first.SessionID()
		_ = first.Close()
		second, err := Dial(ctx, ws.url, &ClientOptions{ResumeSessionID: sid}) // retries -32010
		if err != nil {
			t.Fatal(err)
		}
		defer second.Close()
		q, err := second.Attach(ctx, "hog")
		if err != nil {
			t.Fatal(err)
		}
		st, err := q.Wait(ctx)
		check(t, st, err)
	})
}
