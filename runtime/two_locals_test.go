package runtime

import (
	"testing"

	"go.uber.org/zap/zaptest"
)

// Two embedded runtimes in one process are independent: closing one
// leaves the other starting processes, with limits and without (each has
// its own cgroup directories; the second used to lose its directory when
// the first closed and refuse every start).
func TestTwoLocalsCloseOne(t *testing.T) {
	first := NewLocal(Config{Logger: zaptest.NewLogger(t)})
	second := NewLocal(Config{Logger: zaptest.NewLogger(t)})
	t.Cleanup(func() { _ = second.Close() })
	ctx := ctxT(t)
	p, err := first.Start(ctx, sh(t, "exit 0"))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := p.Wait(ctx); err != nil || st.Code != 0 {
		t.Fatalf("first runtime's process: %+v %v", st, err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	for _, lim := range []Limits{{}, {Pids: 64}} {
		if lim.Pids > 0 && !second.iso.Contain.LimitsOnTree() {
			continue // no pids controller here: such a start is refused, as documented
		}
		spec := sh(t, "exit 3")
		spec.Limits = lim
		p, err := second.Start(ctx, spec)
		if err != nil {
			t.Fatalf("start (limits %+v) after the other runtime closed: %v", lim, err)
		}
		if st, err := p.Wait(ctx); err != nil || st.Code != 3 {
			t.Fatalf("second runtime's process (limits %+v): %+v %v; want exit 3", lim, st, err)
		}
	}
}
