package main_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runtimed/runtimed/wire/wiretest"
)

// Params that do not decode: runtime/testdata/transcripts/invalid_params.txt.

// PROTOCOL.md §2: unknown fields are ignored; optional fields may be omitted or null.
func TestOptionalAndUnknownFields(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		c := session(t, tr)
		ctx := tctx(t, wait)
		dir := t.TempDir()
		start := map[string]any{
			"processId": "opt", "argv": []string{"/bin/sh", "-c", "printf optional"}, "cwd": dir, "env": baseEnv(), "tty": false,
			"envPolicy": nil, "pipeStdin": nil, "arg0": nil, "size": nil, "sandbox": nil,
			"someFutureField": map[string]any{"x": 1},
		}
		if _, err := call(ctx, c, "process/start", start); err != nil {
			t.Fatalf("process/start with null optional fields and an unknown field: %v", err)
		}
		l := mustCollect(t, c, "opt")
		if got := string(l.Output()); got != "optional" {
			t.Errorf("output %q", got)
		}
		res, err := call(ctx, c, "process/read", map[string]any{"processId": "opt", "afterSeq": nil, "maxBytes": nil, "waitMs": nil, "extra": true})
		if err != nil {
			t.Fatalf("process/read with null optional fields: %v", err)
		}
		var r wiretest.ReadResult
		if err := json.Unmarshal(res, &r); err != nil || string(r.Bytes()) != "optional" || !r.Closed {
			t.Errorf("process/read with null optional fields = %s", res)
		}
		var term struct {
			Running *bool `json:"running"`
		}
		if err := c.CallResult(ctx, "process/terminate", map[string]any{"processId": "opt", "graceMs": nil}, &term); err != nil || term.Running == nil || *term.Running {
			t.Errorf("process/terminate with graceMs null: %+v %v", term, err)
		}
		// writeId null is the same as no writeId.
		mustStart(t, c, wiretest.StartParams{ProcessID: "cat", Argv: []string{"cat"}, Cwd: dir, Env: baseEnv(), PipeStdin: true})
		w := c.Watch("cat")
		var wr struct {
			Status string `json:"status"`
		}
		if err := c.CallResult(ctx, "process/write", map[string]any{"processId": "cat", "chunk": wiretest.B64("n\n"), "writeId": nil}, &wr); err != nil || wr.Status != "accepted" {
			t.Errorf("process/write with writeId null: %+v %v", wr, err)
		}
		if err := w.WaitOutput(ctx, "n\n"); err != nil {
			t.Error(err)
		}
		if _, err := c.Terminate(ctx, "cat"); err != nil {
			t.Fatal(err)
		}
		if _, err := w.WaitClosed(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// Exit codes: runtime/testdata/transcripts/exit_codes.txt.

func randomBytes(n int, seed byte) []byte {
	b := make([]byte, n)
	_, _ = rand.NewChaCha8([32]byte{seed}).Read(b)
	return b
}

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

// PROTOCOL.md §4: stdout and stderr are separate streams; one seq counter shared by output, exit and
// close; notifications and process/read describe the same history.
func TestStdoutStderrSeparation(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		t.Run("gated", func(t *testing.T) {
			t.Parallel()
			c := session(t, tr)
			ctx := tctx(t, wait)
			dir := t.TempDir()
			r1, r2 := filepath.Join(dir, "r1"), filepath.Join(dir, "r2")
			// Each step waits for the test to have seen the previous one, so the order is certain.
			script := fmt.Sprintf(`printf 'event output\n'; gate %s; printf 'event err\n' >&2; gate %s; exit 7`, shq(r1), shq(r2))
			w := c.Watch("sep")
			mustStart(t, c, shProc("sep", dir, script))
			if err := w.WaitOutput(ctx, "event output\n"); err != nil {
				t.Fatal(err)
			}
			release(t, r1)
			if err := w.WaitOutput(ctx, "event err\n"); err != nil {
				t.Fatal(err)
			}
			release(t, r2)
			l, err := w.WaitClosed(ctx)
			if err != nil {
				t.Fatal(err)
			}
			checkSeparation(t, c, l, true)
		})
		t.Run("free running", func(t *testing.T) {
			t.Parallel()
			// The child paces itself (its sleeps are its own behaviour, not the test's synchronisation,
			// and order nothing between its two pipes under load); output written before the exit must
			// be numbered before it.
			c := session(t, tr)
			mustStart(t, c, wiretest.StartParams{ProcessID: "sep", Cwd: t.TempDir(), Env: baseEnv(), Argv: []string{"/bin/sh", "-c",
				`printf 'event output\n'; sleep 0.1; printf 'event err\n' >&2; sleep 0.1; exit 7`}})
			l, err := c.CollectProcess(tctx(t, wait), "sep")
			if err != nil {
				t.Fatal(err)
			}
			checkSeparation(t, c, l, false)
		})
	})
}

// checkSeparation checks the history of process "sep" via notifications (l) and process/read.
// ordered says the child's two writes were ordered by the test (gated); a free-running child's two pipes
// have no order between them (each has its own reader), so either may take seq 1.
func checkSeparation(t *testing.T, c *wiretest.Client, l *wiretest.ProcessLog, ordered bool) {
	t.Helper()
	ctx := tctx(t, wait)
	ev := l.Sorted()
	type out struct{ stream, text string }
	first, second := out{"stdout", "event output\n"}, out{"stderr", "event err\n"}
	if !ordered && len(ev) == 4 && ev[0].Stream == "stderr" {
		first, second = second, first
	}
	ok := len(ev) == 4 &&
		ev[0].Method == "process/output" && ev[0].Seq == 1 && ev[0].Stream == first.stream && string(ev[0].Chunk) == first.text &&
		ev[1].Method == "process/output" && ev[1].Seq == 2 && ev[1].Stream == second.stream && string(ev[1].Chunk) == second.text &&
		ev[2].Method == "process/exited" && ev[2].Seq == 3 && ev[2].ExitCode != nil && *ev[2].ExitCode == 7 &&
		ev[3].Method == "process/closed" && ev[3].Seq == 4
	if !ok {
		t.Fatalf("want output(1,%s) output(2,%s) exited(3,7) closed(4), got\n%s", first.stream, second.stream, l.Summary())
	}
	var exited struct {
		SandboxDenied *bool `json:"sandboxDenied"`
	}
	if err := json.Unmarshal(ev[2].Params, &exited); err != nil || exited.SandboxDenied == nil || *exited.SandboxDenied {
		t.Errorf("process/exited params %s: want sandboxDenied false", ev[2].Params)
	}

	r, err := c.Read(ctx, wiretest.ReadParams{ProcessID: "sep"})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Chunks) != 2 ||
		r.Chunks[0].Seq != 1 || r.Chunks[0].Stream != first.stream || string(r.Chunks[0].Chunk) != first.text ||
		r.Chunks[1].Seq != 2 || r.Chunks[1].Stream != second.stream || string(r.Chunks[1].Chunk) != second.text {
		t.Errorf("read chunks = %+v, want the same two chunks as the notifications", r.Chunks)
	}
	if r.NextSeq != 5 || !r.Exited || r.ExitCode == nil || *r.ExitCode != 7 || !r.Closed || r.SandboxDenied {
		t.Errorf("read = nextSeq %d exited %v exitCode %v closed %v sandboxDenied %v; want 5 true 7 true false",
			r.NextSeq, r.Exited, deref(r.ExitCode), r.Closed, r.SandboxDenied)
	}
	if string(r.Failure) != "null" {
		t.Errorf("read failure = %q, want null", r.Failure)
	}
	r, err = c.Read(ctx, wiretest.ReadParams{ProcessID: "sep", AfterSeq: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Chunks) != 1 || r.Chunks[0].Seq != 2 || r.NextSeq != 5 {
		t.Errorf("read afterSeq 1 = %+v nextSeq %d, want only seq 2 and nextSeq 5", r.Chunks, r.NextSeq)
	}
	r, err = c.Read(ctx, wiretest.ReadParams{ProcessID: "sep", AfterSeq: 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Chunks) != 0 || r.NextSeq != 5 || !r.Closed {
		t.Errorf("read afterSeq 4 = %+v nextSeq %d closed %v, want no chunks, 5, closed", r.Chunks, r.NextSeq, r.Closed)
	}
}

// process/read paging: runtime/testdata/transcripts/read_paging.txt.

// PROTOCOL.md §4 process/read long poll and process/terminate: the
// transcripts runtime/testdata/transcripts/read_longpoll.txt and terminate*.txt.

// PROTOCOL.md §4 process/write: statuses and writeId dedupe are in
// runtime/testdata/transcripts/stdin.txt. Here, on both real transports:
// pipelined writes (not waiting for answers) are applied in the order they
// were sent (the output's chunking varies, so this is no transcript).
func TestStdinPipelinedWrites(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		c := session(t, tr)
		ctx := tctx(t, wait)
		dir := t.TempDir()
		w := c.Watch("cat")
		mustStart(t, c, wiretest.StartParams{ProcessID: "cat", Argv: []string{"cat"}, Cwd: dir, Env: baseEnv(), PipeStdin: true})
		var pend []*wiretest.Pending
		var want strings.Builder
		for i := range 200 {
			line := fmt.Sprintf("pipelined %03d\n", i)
			want.WriteString(line)
			p, err := c.CallAsync(ctx, "process/write", map[string]any{"processId": "cat", "chunk": wiretest.B64(line)})
			if err != nil {
				t.Fatal(err)
			}
			pend = append(pend, p)
		}
		for _, p := range pend {
			res, rpcErr, err := p.Wait(ctx)
			if err != nil || rpcErr != nil || !strings.Contains(string(res), `"accepted"`) {
				t.Fatalf("pipelined write: %s %v %v", res, rpcErr, err)
			}
		}
		if err := w.WaitOutput(ctx, "pipelined 199\n"); err != nil {
			t.Fatal(err)
		}
		if got := string(w.Log.Output("stdout")); got != want.String() {
			t.Errorf("pipelined writes arrived out of order or incomplete:\n%q\nwant\n%q", got, want.String())
		}
		if running, err := c.Terminate(ctx, "cat"); err != nil || !running {
			t.Errorf("terminate cat: %v %v", running, err)
		}
		if l, err := w.WaitClosed(ctx); err != nil {
			t.Error(err)
		} else if err := l.CheckSequence(); err != nil {
			t.Error(err)
		}
	})
}

// PROTOCOL.md §4 process/write: at least the last 4096 writeIds per process are remembered.
func TestWriteIDWindow(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		c := session(t, tr)
		ctx := tctx(t, 60*time.Second)
		w := c.Watch("cat")
		mustStart(t, c, wiretest.StartParams{ProcessID: "cat", Argv: []string{"cat"}, Cwd: t.TempDir(), Env: baseEnv(), PipeStdin: true})
		const n = 4096
		var pend []*wiretest.Pending
		send := func(data, writeID string) {
			p := map[string]any{"processId": "cat", "chunk": wiretest.B64(data)}
			if writeID != "" {
				p["writeId"] = writeID
			}
			pr, err := c.CallAsync(ctx, "process/write", p)
			if err != nil {
				t.Fatal(err)
			}
			pend = append(pend, pr)
		}
		for i := range n {
			send("x", fmt.Sprintf("id-%d", i))
		}
		for i := range n { // the same ids again: accepted, nothing written
			send("y", fmt.Sprintf("id-%d", i))
		}
		send("END\n", "")
		for _, p := range pend {
			res, rpcErr, err := p.Wait(ctx)
			if err != nil || rpcErr != nil || !strings.Contains(string(res), `"accepted"`) {
				t.Fatalf("write: %s %v %v", res, rpcErr, err)
			}
		}
		if err := w.WaitOutput(ctx, "END\n"); err != nil {
			t.Fatal(err)
		}
		if got, want := string(w.Log.Output()), strings.Repeat("x", n)+"END\n"; got != want {
			t.Errorf("output has %d x, %d y (len %d); want %d x and no y", strings.Count(got, "x"), strings.Count(got, "y"), len(got), n)
		}
		if _, err := c.Terminate(ctx, "cat"); err != nil {
			t.Fatal(err)
		}
		if _, err := w.WaitClosed(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// PROTOCOL.md §4: tty processes get a PTY (24x80 by default, or size); output arrives on stream pty.
func TestTTY(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		c := session(t, tr)
		ctx := tctx(t, wait)
		dir := t.TempDir()

		w := c.Watch("tty-cat")
		mustStart(t, c, wiretest.StartParams{ProcessID: "tty-cat", Argv: []string{"cat"}, Cwd: dir, Env: baseEnv(), TTY: true})
		if st, err := c.Write(ctx, "tty-cat", []byte("ping\n"), ""); err != nil || st != "accepted" {
			t.Fatalf("write to tty: %q %v", st, err)
		}
		if err := w.WaitOutput(ctx, "ping"); err != nil {
			t.Fatal(err)
		}
		if running, err := c.Terminate(ctx, "tty-cat"); err != nil || !running {
			t.Errorf("terminate: %v %v", running, err)
		}
		l, err := w.WaitClosed(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range l.Events {
			if e.Method == "process/output" && e.Stream != "pty" {
				t.Errorf("tty output on stream %q, want pty", e.Stream)
			}
		}

		script := `[ -t 0 ] && [ -t 1 ] && [ -t 2 ] && echo is-a-tty; echo to-stderr >&2; stty size`
		for _, tc := range []struct {
			size *wiretest.Size
			want string
		}{{nil, "24 80"}, {&wiretest.Size{Rows: 40, Cols: 100}, "40 100"}} {
			id := "tty-" + tc.want
			p := shProc(id, dir, script)
			p.TTY = true
			p.Size = tc.size
			mustStart(t, c, p)
			l := mustCollect(t, c, id)
			out := string(l.Output())
			for _, want := range []string{"is-a-tty", "to-stderr", tc.want} {
				if !strings.Contains(out, want) {
					t.Errorf("tty %s: output %q lacks %q", id, out, want)
				}
			}
			if len(l.Output("pty")) != len(l.Output()) {
				t.Errorf("tty %s: output on a stream other than pty:\n%s", id, l.Summary())
			}
			if code := exitCodeOf(t, l); code != 0 {
				t.Errorf("tty %s: exit code %d", id, code)
			}
		}
	})
}

// process/signal: runtime/testdata/transcripts/signal.txt.

// process/start refusals and ids: runtime/testdata/transcripts/start_errors.txt.

// PROTOCOL.md §4: without envPolicy the environment is exactly env; envPolicy builds a base from the
// server's environment.
func TestEnvironment(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		c := session(t, tr)
		dir := t.TempDir()
		hasPath := os.Getenv("PATH") != ""
		cases := []struct {
			name    string
			env     map[string]string
			policy  any
			exactly map[string]string // if set, the whole environment
			has     map[string]string
			hasNot  []string
		}{
			{name: "exact env", env: map[string]string{"PATH": "/usr/bin:/bin", "FOO": "bar baz"},
				exactly: map[string]string{"PATH": "/usr/bin:/bin", "FOO": "bar baz"}},
			{name: "inherit all", env: map[string]string{"FOO": "1"}, policy: map[string]any{"inherit": "all"},
				has: map[string]string{plainVarName: plainVarValue, "FOO": "1"}, hasNot: []string{keyVarName}},
			{name: "empty policy", env: map[string]string{}, policy: map[string]any{},
				has: map[string]string{plainVarName: plainVarValue}, hasNot: []string{keyVarName}},
			{name: "ignoreDefaultExcludes", env: map[string]string{}, policy: map[string]any{"inherit": "all", "ignoreDefaultExcludes": true},
				has: map[string]string{plainVarName: plainVarValue, keyVarName: keyVarValue}},
			{name: "inherit none", env: map[string]string{"B": "2", "A": "0"}, policy: map[string]any{"inherit": "none", "set": map[string]string{"A": "1"}},
				exactly: map[string]string{"A": "0", "B": "2"}},
			{name: "inherit core", env: map[string]string{}, policy: map[string]any{"inherit": "core"},
				hasNot: []string{plainVarName, keyVarName}},
			{name: "includeOnly", env: map[string]string{}, policy: map[string]any{"includeOnly": []string{"runtimed_e2e_*"}},
				exactly: map[string]string{plainVarName: plainVarValue}},
			{name: "exclude", env: map[string]string{}, policy: map[string]any{"exclude": []string{"RUNTIMED_E2E_PL?IN"}},
				hasNot: []string{plainVarName, keyVarName}},
		}
		var wg sync.WaitGroup
		for i, tc := range cases {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := fmt.Sprintf("env-%d", i)
				ctx := tctx(t, wait)
				p := wiretest.StartParams{ProcessID: id, Argv: []string{"env"}, Cwd: dir, Env: tc.env, EnvPolicy: tc.policy}
				if err := c.Start(ctx, p); err != nil {
					t.Errorf("%s: start: %v", tc.name, err)
					return
				}
				l, err := c.CollectProcess(ctx, id)
				if err != nil {
					t.Errorf("%s: %v", tc.name, err)
					return
				}
				got := envLines(l.Output())
				if tc.exactly != nil && fmt.Sprint(got) != fmt.Sprint(tc.exactly) {
					t.Errorf("%s: environment %v, want exactly %v", tc.name, got, tc.exactly)
				}
				for k, v := range tc.has {
					if got[k] != v {
						t.Errorf("%s: %s=%q, want %q (env: %v)", tc.name, k, got[k], v, sortedKeys(got))
					}
				}
				for _, k := range tc.hasNot {
					if _, ok := got[k]; ok {
						t.Errorf("%s: %s is set, want it dropped", tc.name, k)
					}
				}
				if tc.name == "inherit core" {
					core := map[string]bool{"PATH": true, "SHELL": true, "TMPDIR": true, "TEMP": true, "TMP": true, "HOME": true,
						"LANG": true, "LC_ALL": true, "LC_CTYPE": true, "LOGNAME": true, "USER": true}
					for k := range got {
						if !core[k] {
							t.Errorf("inherit core: unexpected %s", k)
						}
					}
					if hasPath && got["PATH"] != os.Getenv("PATH") {
						t.Errorf("inherit core: PATH=%q, want the server's %q", got["PATH"], os.Getenv("PATH"))
					}
				}
			}()
		}
		wg.Wait()
	})
}

// PROTOCOL.md §4: 8 MiB of output arrives complete and in order.
func TestLargeOutput(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		c := session(t, tr)
		ctx := tctx(t, 90*time.Second)
		dir := t.TempDir()
		data := randomBytes(8<<20, 1)
		file, rel := filepath.Join(dir, "big"), filepath.Join(dir, "rel")
		if err := os.WriteFile(file, data, 0o644); err != nil {
			t.Fatal(err)
		}
		// The child stays alive (gated) after the output, so the retention check below cannot race with
		// the expiry of a closed process however slow this machine is.
		w := c.Watch("big")
		mustStart(t, c, shProc("big", dir, fmt.Sprintf(`cat %s; gate %s`, shq(file), shq(rel))))
		if err := w.WaitFor(ctx, func(l *wiretest.ProcessLog) bool { return l.OutputLen() >= len(data) }); err != nil {
			t.Fatalf("%d bytes expected: %v", len(data), err)
		}

		// Retention (§4): process/read returns only the newest ~1 MiB, contiguous up to the newest
		// output, and it is exactly the tail of what the child wrote.
		r, err := c.Read(ctx, wiretest.ReadParams{ProcessID: "big"})
		if err != nil {
			t.Fatal(err)
		}
		var lastOut uint64
		for _, e := range w.Log.Events {
			lastOut = max(lastOut, e.Seq)
		}
		var seqs []uint64
		for _, ch := range r.Chunks {
			seqs = append(seqs, ch.Seq)
		}
		if len(seqs) == 0 || seqs[0] <= 1 || seqs[len(seqs)-1] != lastOut || r.NextSeq != lastOut+1 || r.Exited {
			t.Errorf("retained chunks: seqs %v nextSeq %d exited %v, want the newest ones ending at seq %d (first seq > 1), nextSeq %d, running",
				seqs, r.NextSeq, r.Exited, lastOut, lastOut+1)
		}
		for i := 1; i < len(seqs); i++ {
			if seqs[i] != seqs[i-1]+1 {
				t.Errorf("retained chunks have a gap between seq %d and %d", seqs[i-1], seqs[i])
				break
			}
		}
		tail := r.Bytes()
		if len(tail) > 1<<20 || len(tail) < 512<<10 {
			t.Errorf("retained %d bytes, want the last 1 MiB (at most 1048576, and not much less)", len(tail))
		}
		if !bytes.HasSuffix(data, tail) {
			t.Errorf("retained bytes are not the tail of the output")
		}

		release(t, rel)
		l, err := w.WaitClosed(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.CheckSequence(); err != nil {
			t.Error(err)
		}
		out := l.Output("stdout")
		if !bytes.Equal(out, data) {
			t.Errorf("got %d bytes (sha256 %x), want the file's %d bytes (sha256 %x)", len(out), sha256.Sum256(out), len(data), sha256.Sum256(data))
		}
		if len(l.Output()) != len(out) {
			t.Errorf("output on streams other than stdout")
		}
		if code := exitCodeOf(t, l); code != 0 {
			t.Errorf("exit code %d", code)
		}
	})
}

// PROTOCOL.md §1: large inbound messages (well under the 64 MiB limit) are accepted on both
// transports, and a big write reaches the child intact.
func TestLargeInput(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		c := session(t, tr)
		dir := t.TempDir()
		const size = 2 << 20 // 2.7 MiB of base64 in one message
		data := randomBytes(size, 2)
		ctx := tctx(t, 90*time.Second)
		mustStart(t, c, wiretest.StartParams{ProcessID: "head", Argv: []string{"head", "-c", fmt.Sprint(size)}, Cwd: dir, Env: baseEnv(), PipeStdin: true})
		if st, err := c.Write(ctx, "head", data, "big-write"); err != nil || st != "accepted" {
			t.Fatalf("write of %d bytes: %q %v", size, st, err)
		}
		l, err := c.CollectProcess(ctx, "head")
		if err != nil {
			t.Fatal(err)
		}
		if out := l.Output("stdout"); !bytes.Equal(out, data) {
			t.Errorf("echoed %d bytes (sha256 %x), want %d (sha256 %x)", len(out), sha256.Sum256(out), len(data), sha256.Sum256(data))
		}
		if code := exitCodeOf(t, l); code != 0 {
			t.Errorf("exit code %d", code)
		}
	})
}

// PROTOCOL.md §4 sequencing: output may follow exited (a descendant still writing); closed comes only
// after the exit and the end of every output stream, and carries the highest seq.
func TestOutputAfterExit(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		c := session(t, tr)
		ctx := tctx(t, wait)
		dir := t.TempDir()
		rel := filepath.Join(dir, "rel")
		w := c.Watch("late")
		mustStart(t, c, shProc("late", dir, fmt.Sprintf(`(gate %s; echo late-output; echo late-err >&2) & exit 5`, shq(rel))))
		if err := w.WaitFor(ctx, func(l *wiretest.ProcessLog) bool { return l.Exited() != nil }); err != nil {
			t.Fatal(err)
		}
		// The background subshell still holds stdout and stderr: the process cannot be closed yet.
		r, err := c.Read(ctx, wiretest.ReadParams{ProcessID: "late"})
		if err != nil {
			t.Fatal(err)
		}
		if !r.Exited || r.Closed || r.ExitCode == nil || *r.ExitCode != 5 {
			t.Errorf("read after exit, before the streams end: exited %v closed %v exitCode %v; want true false 5", r.Exited, r.Closed, deref(r.ExitCode))
		}
		if w.Log.Closed() != nil {
			t.Errorf("closed arrived while a descendant still holds the output pipes\n%s", w.Log.Summary())
		}
		// A long poll after the exit has nothing new to report: it waits, and returns with the late
		// output once it arrives.
		exitSeq := w.Log.Exited().Seq
		poll, err := c.CallAsync(ctx, "process/read", wiretest.ReadParams{ProcessID: "late", AfterSeq: exitSeq, WaitMs: 5000})
		if err != nil {
			t.Fatal(err)
		}
		res, err := call(ctx, c, "environment/status", nil) // answered while the poll waits
		wantStatusReady(t, "environment/status during a long poll", res, err)
		release(t, rel)
		released := time.Now()
		res, rpcErr, err := poll.Wait(ctx)
		if err != nil || rpcErr != nil {
			t.Fatalf("long poll after exit: %v %v", rpcErr, err)
		}
		var pr wiretest.ReadResult
		if err := json.Unmarshal(res, &pr); err != nil {
			t.Fatal(err)
		}
		if len(pr.Chunks) == 0 || pr.Chunks[0].Seq <= exitSeq {
			t.Errorf("long poll afterSeq %d (the exit) returned %+v; want it to wait for the late output", exitSeq, pr.Chunks)
		}
		if d := time.Since(released); d > 3*time.Second {
			t.Errorf("long poll returned %v after the late output was released", d)
		}
		l, err := w.WaitClosed(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.CheckSequence(); err != nil {
			t.Error(err)
		}
		if string(l.Output("stdout")) != "late-output\n" || string(l.Output("stderr")) != "late-err\n" {
			t.Errorf("late output missing:\n%s", l.Summary())
		}
		for _, e := range l.Events {
			if e.Method == "process/output" && e.Seq < exitSeq {
				t.Errorf("output seq %d precedes exited seq %d although it was written after the exit\n%s", e.Seq, exitSeq, l.Summary())
			}
		}
		if code := exitCodeOf(t, l); code != 5 {
			t.Errorf("exit code %d, want 5", code)
		}
	})
}

// PROTOCOL.md §4: each child runs in its own session and process group; arg0 replaces argv[0].
func TestProcessGroupAndArg0(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		c := session(t, tr)
		dir := t.TempDir()
		for _, tty := range []bool{false, true} {
			id := fmt.Sprintf("pg-%v", tty)
			p := shProc(id, dir, `read -r stat < /proc/$$/stat; echo "$$ ${stat##*) }"`)
			p.TTY = tty
			mustStart(t, c, p)
			out := strings.Fields(string(mustCollect(t, c, id).Output()))
			// out: pid state ppid pgrp session ...
			if len(out) < 5 || out[0] != out[3] || out[0] != out[4] {
				t.Errorf("tty %v: pid/state/ppid/pgrp/session = %v, want pgrp and session equal to the pid", tty, out)
			}
		}
		arg0 := "my-arg0"
		mustStart(t, c, wiretest.StartParams{ProcessID: "arg0", Argv: []string{"cat", "/proc/self/cmdline"}, Cwd: dir, Env: baseEnv(), Arg0: &arg0})
		if got := string(mustCollect(t, c, "arg0").Output()); got != "my-arg0\x00/proc/self/cmdline\x00" {
			t.Errorf("cmdline with arg0: %q", got)
		}
	})
}

// Many concurrent processes on one connection.
func TestManyConcurrentProcesses(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		c := session(t, tr)
		dir := t.TempDir()
		const n = 50
		var wg sync.WaitGroup
		for k := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx := tctx(t, 60*time.Second)
				id := fmt.Sprintf("many-%02d", k)
				script := fmt.Sprintf(`i=0; while [ $i -lt 20 ]; do echo "proc %d line $i"; i=$((i+1)); done; exit %d`, k, k%5)
				if err := c.Start(ctx, shProc(id, dir, script)); err != nil {
					t.Errorf("start %s: %v", id, err)
					return
				}
				l, err := c.CollectProcess(ctx, id)
				if err != nil {
					t.Errorf("%s: %v", id, err)
					return
				}
				if err := l.CheckSequence(); err != nil {
					t.Error(err)
				}
				var want strings.Builder
				for i := range 20 {
					fmt.Fprintf(&want, "proc %d line %d\n", k, i)
				}
				if got := string(l.Output("stdout")); got != want.String() {
					t.Errorf("%s: output %q, want %q", id, got, want.String())
				}
				if e := l.Exited(); e == nil || e.ExitCode == nil || *e.ExitCode != k%5 {
					t.Errorf("%s: want exit code %d\n%s", id, k%5, l.Summary())
				}
			}()
		}
		wg.Wait()
	})
}
