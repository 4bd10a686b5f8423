package runtime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/runtimed/runtimed/actors/sandbox"
)

// readAllStreams reads p's output until it is closed, by stream.
func readAllStreams(t *testing.T, ctx context.Context, p Process) map[Stream]string {
	t.Helper()
	out := map[Stream]*strings.Builder{Stdout: {}, Stderr: {}, PTY: {}}
	after := uint64(0)
	for {
		r, err := p.Read(ctx, ReadOptions{After: after, Wait: 5 * time.Second})
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		for _, c := range r.Chunks {
			out[c.Stream].Write(c.Data)
		}
		after = r.NextSeq - 1
		if r.Closed {
			return map[Stream]string{Stdout: out[Stdout].String(), Stderr: out[Stderr].String(), PTY: out[PTY].String()}
		}
	}
}

// TestPreparedSandboxBackends: the embedded runtime and a Server over a
// websocket take prepared sandboxes for repeated starts of one
// workspace-write policy (the Host's counters say so), and each such start
// behaves as a fresh one: exact output by stream, exit 3 and 137, this
// process's nice value (sandboxes are prepared at nice 10), a PTY of the
// asked size, Terminate of a shell trapping TERM (its own exit) and a
// SIGKILL of a tree with a background child leaving nothing.
func TestPreparedSandboxBackends(t *testing.T) {
	for _, bc := range []struct {
		name string
		make func(t *testing.T) (Backend, *sandbox.Host)
	}{
		{"local", func(t *testing.T) (Backend, *sandbox.Host) {
			l := NewLocal(Config{Logger: zaptest.NewLogger(t)})
			t.Cleanup(func() { _ = l.Close() })
			return l, l.iso.Host
		}},
		{"websocket", func(t *testing.T) (Backend, *sandbox.Host) {
			c, ws := newWSBackend(t, Config{}, nil)
			return c, ws.srv.iso.Host
		}},
	} {
		t.Run(bc.name, func(t *testing.T) {
			b, h := bc.make(t)
			if h == nil || h.EnforcedLevel() != sandbox.LevelNamespaces {
				t.Skip("no namespaces level on this host: nothing is prepared")
			}
			testPreparedSandbox(t, b, h)
		})
	}
}

func testPreparedSandbox(t *testing.T, b Backend, h *sandbox.Host) {
	ctx := ctxT(t)
	ws := t.TempDir()
	for _, d := range []string{".git", ".agents", ".codex"} { // see TestSandboxPreparedOverTheWire in cmd/runtimed
		if err := os.Mkdir(filepath.Join(ws, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sb := &Sandbox{RestrictFS: true, WorkspaceRoots: []string{ws}, FileSystem: []FSRule{
		{Special: FSRoot, Access: FSRead}, {Special: FSProjectRoots, Access: FSWrite},
		{Special: FSProjectRoots, Subpath: ".git", Access: FSRead, SkipMissing: true}}}
	stat, err := os.ReadFile("/proc/thread-self/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	ownNice := f[16] // field 19

	start := func(script string, tty bool) Process {
		t.Helper()
		spec := Spec{Argv: []string{"/usr/bin/bash", "-c", script}, Dir: ws, Env: map[string]string{"PATH": "/usr/bin:/bin"}, Sandbox: sb, TTY: tty}
		if tty {
			spec.Size = Size{Rows: 33, Cols: 91}
		}
		p, err := b.Start(ctx, spec)
		if err != nil {
			if strings.Contains(err.Error(), "cannot be enforced on this host") {
				t.Skipf("host: %v", err)
			}
			t.Fatal(err)
		}
		return p
	}
	// waitReady waits (bounded) until a sandbox is prepared (one plan in
	// this test: for it).
	waitReady := func() {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for h.PreparedReady() == 0 {
			if time.Now().After(deadline) {
				t.Fatal("no sandbox prepared after 20s")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	prepared := func(name string, probe func()) {
		t.Helper()
		for try := 0; ; try++ {
			waitReady()
			used, _, missed := h.PreparedStats()
			probe()
			used2, _, missed2 := h.PreparedStats()
			if used2 == used+1 && missed2 == missed {
				return
			}
			if try == 1 {
				t.Errorf("%s: not served by a prepared sandbox twice (used %d->%d, missed %d->%d)", name, used, used2, missed, missed2)
				return
			}
			t.Logf("%s: missed the prepared sandbox; again", name)
		}
	}
	output := func(name, script string, tty bool, wantCode int, want map[Stream]string) {
		p := start(script, tty)
		st, err := p.Wait(ctx)
		got := readAllStreams(t, ctx, p)
		if err != nil || st.Code != wantCode {
			t.Errorf("%s: exit %+v %v, want %d", name, st, err, wantCode)
		}
		for _, s := range []Stream{Stdout, Stderr, PTY} {
			if got[s] != want[s] {
				t.Errorf("%s: %s %q, want %q", name, s, got[s], want[s])
			}
		}
	}

	// The first start finds nothing prepared.
	output("fresh", `printf out; printf err >&2; exit 3`, false, 3, map[Stream]string{Stdout: "out", Stderr: "err"})
	if used, _, missed := h.PreparedStats(); used != 0 || missed != 1 {
		t.Errorf("after the first start: used %d missed %d, want 0 and 1", used, missed)
	}
	prepared("output", func() {
		output("output", `printf 'out\n'; printf 'e r r\n' >&2; printf more; exit 3`, false, 3, map[Stream]string{Stdout: "out\nmore", Stderr: "e r r\n"})
	})
	prepared("signal", func() {
		output("signal", `echo before; kill -9 $$; echo after`, false, 137, map[Stream]string{Stdout: "before\n"})
	})
	prepared("cwd and nice", func() {
		output("cwd and nice", `pwd; cut -d' ' -f19 /proc/self/stat`, false, 0, map[Stream]string{Stdout: ws + "\n" + ownNice + "\n"})
	})
	prepared("pty", func() {
		output("pty", `tty -s && echo is-tty; stty size; exit 4`, true, 4, map[Stream]string{PTY: "is-tty\r\n33 91\r\n"})
	})
	prepared("terminate a trapping shell", func() {
		p := start(`trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.01; done`, false)
		readUntil(t, ctx, p, "ready\n")
		if running, err := p.Terminate(ctx, 10*time.Second); err != nil || !running {
			t.Errorf("terminate: %v %v", running, err)
		}
		st, err := p.Wait(ctx)
		if got := readAllStreams(t, ctx, p); err != nil || st.Code != 7 || got[Stdout] != "ready\ngot-term\n" {
			t.Errorf("trapping shell: %+v %v stdout %q", st, err, got[Stdout])
		}
	})
	prepared("kill a tree", func() {
		marker := fmt.Sprintf("6%d.%d", os.Getpid()%1000, time.Now().UnixNano()%100000)
		p := start(`sleep `+marker+` & echo bg; wait`, false)
		readUntil(t, ctx, p, "bg\n")
		mark := "sleep\x00" + marker
		if !pollFor(20*time.Second, func() bool { return len(procsHolding(mark)) == 1 }) {
			t.Fatalf("the background sleep never ran: %q", procsHolding(mark))
		}
		if running, err := p.Terminate(ctx, 0); err != nil || !running {
			t.Errorf("kill: %v %v", running, err)
		}
		if st, err := p.Wait(ctx); err != nil || st.Code != 137 {
			t.Errorf("killed tree: %+v %v, want 137", st, err)
		}
		if !pollFor(20*time.Second, func() bool { return len(procsHolding(mark)) == 0 }) {
			t.Errorf("the killed tree left its background child: %q", procsHolding(mark))
		}
	})
	if _, failed, _ := h.PreparedStats(); failed != 0 {
		t.Errorf("%d preparations failed", failed)
	}
}

// procsHolding lists the live processes whose command line holds marker.
func procsHolding(marker string) []string {
	var found []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		if b, err := os.ReadFile(d + "/cmdline"); err == nil && strings.Contains(string(b), marker) {
			found = append(found, d+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return found
}

// pollFor polls cond every 5 ms until it holds or d elapses.
func pollFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}
