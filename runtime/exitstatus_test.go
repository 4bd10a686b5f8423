package runtime

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// ExitStatus tells an exit code from a signal on every backend: `exit 130`
// is "exit status 130" (ExitCode 130), a SIGINT death "signal: interrupt"
// (ExitCode -1); both are Code 130, the protocol's reading. Wait, the
// exited event and a read agree.
func TestExitStatusTruthful(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		ctx := ctxT(t)
		cases := []struct {
			name     string
			script   string
			signal   Signal // sent once the process is ready, if set
			str      string
			exitCode int
			sig      syscall.Signal
		}{
			{"exit 0", "exit 0", "", "exit status 0", 0, -1},
			{"exit 130", "exit 130", "", "exit status 130", 130, -1},
			{"exit 137", "exit 137", "", "exit status 137", 137, -1},
			{"SIGINT death", "exec sleep 30", SigInterrupt, "signal: interrupt", -1, syscall.SIGINT},
			{"SIGKILL death", "exec sleep 30", SigKill, "signal: killed", -1, syscall.SIGKILL},
		}
		for _, tc := range cases {
			dir := t.TempDir()
			ready := filepath.Join(dir, "ready")
			spec := Spec{Argv: []string{"/bin/sh", "-c", ": > ready; " + tc.script}, Dir: dir, Env: map[string]string{"PATH": "/usr/bin:/bin"}}
			p, err := b.Start(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			events, err := p.Events(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if tc.signal != "" {
				// The signal finds the shell or the sleep it execs: either dies of it.
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
					if _, err := os.Stat(ready); err == nil {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s: the process never got ready", tc.name)
					}
				}
				if err := p.Signal(ctx, tc.signal); err != nil {
					t.Fatal(err)
				}
			}
			st, err := p.Wait(ctx)
			if err != nil {
				t.Fatal(err)
			}
			wantCode := tc.exitCode
			if tc.sig > 0 {
				wantCode = 128 + int(tc.sig)
			}
			if st.String() != tc.str || st.ExitCode() != tc.exitCode || st.Signal() != tc.sig || st.Signaled() != (tc.sig > 0) || st.Code != wantCode {
				t.Errorf("%s: Wait = %q ExitCode %d Signal %d Signaled %v Code %d; want %q %d %d %v %d",
					tc.name, st, st.ExitCode(), st.Signal(), st.Signaled(), st.Code, tc.str, tc.exitCode, tc.sig, tc.sig > 0, wantCode)
			}
			var exited *Event
			for {
				ev, err := events.Next(ctx)
				if err != nil {
					break
				}
				if ev.Kind == EventExited {
					exited = &ev
				}
			}
			if exited == nil || exited.Status != st {
				t.Errorf("%s: exited event %+v; want its Status %q", tc.name, exited, st)
			}
			r, err := p.Read(ctx, ReadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !r.Exited || r.Status != st {
				t.Errorf("%s: Read status %q (exited %v); want %q", tc.name, r.Status, r.Exited, st)
			}
		}
	})
}

// From a server that does not report exitSignal (or an ExitStatus made of
// a Code alone) a code in 129..192 reads as a signal, as before.
func TestExitStatusWithoutTheSignal(t *testing.T) {
	for _, tc := range []struct {
		st   ExitStatus
		want string
	}{
		{ExitStatus{Code: 130}, "signal: interrupt"},
		{exitStatus(130, wireSignal(nil), ""), "signal: interrupt"},
		{exitStatus(130, 0, ""), "exit status 130"},
		{exitStatus(137, 9, "memory"), "signal: killed (memory limit)"},
		{ExitStatus{Code: 3}, "exit status 3"},
	} {
		if got := tc.st.String(); got != tc.want {
			t.Errorf("%+v: %q; want %q", tc.st, got, tc.want)
		}
	}
}
