package actors

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/runtimed/runtimed/actors/contain"
	"github.com/runtimed/runtimed/actors/osproc"
	"github.com/runtimed/runtimed/actors/sandbox"
)

// BenchmarkRingAppend measures appending 4 KiB chunks to a full ring
// (every append evicts).
func BenchmarkRingAppend(b *testing.B) {
	r := NewRing(1<<20, 50_000)
	data := make([]byte, 4<<10)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	seq := uint64(0)
	for b.Loop() {
		seq++
		r.Append(OutputChunk{Seq: seq, Stream: Stdout, Data: data})
	}
}

// BenchmarkRingAfter measures a read of the last 64 chunks of a full ring.
func BenchmarkRingAfter(b *testing.B) {
	r := NewRing(1<<20, 50_000)
	for s := uint64(1); s <= 10_000; s++ {
		r.Append(OutputChunk{Seq: s, Stream: Stdout, Data: make([]byte, 100)})
	}
	dst := make([]OutputChunk, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		dst = r.After(dst[:0], 10_000-64, 0)
	}
}

// BenchmarkActorRoundTrip measures one request/reply through a process
// actor's mailbox (an Info request), the cost under every RPC.
func BenchmarkActorRoundTrip(b *testing.B) {
	sup := NewSupervisor(Config{
		Proc:      ProcConfig{RetainBytes: 1 << 20, RetainChunks: 50_000, ClosedRetention: time.Minute, DrainAfterTerminate: 50 * time.Millisecond, ShutdownGrace: time.Second},
		DetachTTL: time.Second,
		Logger:    zap.NewNop(),
	})
	defer func() { sup.Kill(); _ = sup.Wait(context.Background()) }()
	ref, err := sup.Spawn("p", Spec{Argv: []string{"sleep", "1000"}, Dir: "/"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ref.Read(ctx, 0, 0, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// Spawn benchmarks: /bin/true from spawn to its closed event in-process,
// the part of `runtimed bench` figure (a) that is not the protocol.
// BenchmarkSpawnBare is the floor they are compared with.

// BenchmarkSpawnBare is a bare fork/exec from Go: os.StartProcess of
// /bin/true and Wait.
func BenchmarkSpawnBare(b *testing.B) {
	for b.Loop() {
		p, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{})
		if err != nil {
			b.Fatal(err)
		}
		_, _ = p.Wait()
	}
}

// BenchmarkSpawnBarePipes is BenchmarkSpawnBare with what every runtimed
// start has besides: stdin on /dev/null, stdout and stderr on pipes read to
// end of file. The floor for the actor's path, without the actor.
func BenchmarkSpawnBarePipes(b *testing.B) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		b.Fatal(err)
	}
	defer null.Close()
	for b.Loop() {
		or, ow, err := os.Pipe()
		if err != nil {
			b.Fatal(err)
		}
		er, ew, err := os.Pipe()
		if err != nil {
			b.Fatal(err)
		}
		p, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{Files: []*os.File{null, ow, ew}})
		ow.Close()
		ew.Close()
		if err != nil {
			b.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _, _ = io.Copy(io.Discard, er); close(done) }()
		_, _ = io.Copy(io.Discard, or)
		<-done
		or.Close()
		er.Close()
		_, _ = p.Wait()
	}
}

// BenchmarkSpawnContained spawns through a supervisor with process-group
// containment and with a cgroup per process (CLONE_INTO_CGROUP, cgroup.kill).
func BenchmarkSpawnContained(b *testing.B) {
	for _, mode := range []string{contain.ModePgroup, contain.ModeSubreaper, contain.ModeCgroup2} {
		b.Run(mode, func(b *testing.B) { benchSpawn(b, mode, nil, nil) })
	}
}

// BenchmarkSpawnSandboxed spawns with a cgroup per process and a sandbox:
// read-only, workspace-write (/ read, the temp dir writable: Landlock and
// seccomp only) and workspace-write with a .git kept read-only (a private
// mount namespace too); each on a spawning thread (the default) and
// through the re-exec'd helper.
func BenchmarkSpawnSandboxed(b *testing.B) {
	h, err := sandbox.Probe(os.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	if !h.Enforces() {
		b.Skip("no sandbox on this host")
	}
	git := b.TempDir()
	if err := os.Mkdir(git+"/.git", 0o755); err != nil {
		b.Fatal(err)
	}
	policies := []struct {
		name   string
		policy *sandbox.Policy
	}{
		{"read-only", &sandbox.Policy{RestrictFS: true, Rules: []sandbox.Rule{{Path: "/", Access: sandbox.Read}}}},
		{"workspace-write", &sandbox.Policy{RestrictFS: true, Rules: []sandbox.Rule{{Path: "/", Access: sandbox.Read}, {Path: os.TempDir(), Access: sandbox.Write}}}},
		{"workspace-write-git", &sandbox.Policy{RestrictFS: true, Rules: []sandbox.Rule{{Path: "/", Access: sandbox.Read}, {Path: git, Access: sandbox.Write}, {Path: git + "/.git", Access: sandbox.Read}}}},
	}
	for _, p := range policies {
		for _, way := range []string{"thread", "helper"} {
			b.Run(p.name+"/"+way, func(b *testing.B) {
				if p.name == "workspace-write-git" && !h.MountNS {
					b.Skip("no CAP_SYS_ADMIN for the mount namespace")
				}
				hw := *h
				hw.HelperOnly = way == "helper"
				benchSpawn(b, contain.ModeCgroup2, &hw, p.policy)
			})
		}
	}
}

func benchSpawn(b *testing.B, mode string, h *sandbox.Host, policy *sandbox.Policy) {
	m := contain.NewManager(mode)
	if m.Mode() != mode {
		b.Skipf("host offers %s", m.Mode())
	}
	sup := NewSupervisor(Config{
		Proc:      ProcConfig{RetainBytes: 1 << 20, RetainChunks: 50_000, ClosedRetention: time.Minute, DrainAfterTerminate: 50 * time.Millisecond, ShutdownGrace: time.Second},
		DetachTTL: time.Second,
		Isolation: osproc.Isolation{Host: h, Contain: m},
		Logger:    zap.NewNop(),
	})
	defer func() { sup.Kill(); _ = sup.Wait(context.Background()); _ = m.Close() }()
	env := osproc.BuildEnv(osproc.ServerEnv(), nil, map[string]string{"PATH": "/usr/bin:/bin"})
	i := 0
	for b.Loop() {
		i++
		ref, err := sup.Spawn(fmt.Sprintf("p%d", i), Spec{Argv: []string{"/bin/true"}, Dir: "/", Env: env, Sandbox: policy}, nil)
		if err != nil {
			b.Fatal(err)
		}
		<-ref.Closed()
		_ = ref.Discard(context.Background())
	}
}

// BenchmarkStreamThroughActor measures output from a child through the
// process actor to a subscriber that drains it: reads, chunking (at most
// maxReadChunk), ring, delivery. b.N is in bytes (SetBytes per 64 MiB run).
func BenchmarkStreamThroughActor(b *testing.B) {
	sup := NewSupervisor(Config{
		Proc:      ProcConfig{RetainBytes: 1 << 20, RetainChunks: 50_000, ClosedRetention: time.Minute, DrainAfterTerminate: 50 * time.Millisecond, ShutdownGrace: time.Second},
		DetachTTL: time.Second,
		Logger:    zap.NewNop(),
	})
	defer func() { sup.Kill(); _ = sup.Wait(context.Background()) }()
	const total = 64 << 20
	b.SetBytes(total)
	i := 0
	for b.Loop() {
		i++
		events := make(chan Event, 256)
		done := make(chan struct{})
		ref, err := sup.Spawn("s"+time.Now().String(), Spec{Argv: []string{"head", "-c", "67108864", "/dev/zero"}, Dir: "/", Env: []string{"PATH=/usr/bin:/bin"}}, &Subscriber{Out: events, Done: done})
		if err != nil {
			b.Fatal(err)
		}
		n, chunks := 0, 0
		for ev := range events {
			n += len(ev.Data)
			if ev.Kind == EventOutput {
				chunks++
			}
			if ev.Kind == EventClosed {
				break
			}
		}
		close(done)
		if n != total {
			b.Fatalf("%d bytes", n)
		}
		b.ReportMetric(float64(total)/float64(chunks), "B/chunk")
		_ = ref.Discard(context.Background())
	}
}

// BenchmarkConnRequest measures one small request through a connection
// actor over an in-memory transport (no network): decode, dispatch, the
// process actor's hop for process/read, encode. It is the server's part of
// figure (d) of runtimed bench.
func BenchmarkConnRequest(b *testing.B) {
	sup := NewSupervisor(Config{
		Proc:      ProcConfig{RetainBytes: 1 << 20, RetainChunks: 50_000, ClosedRetention: time.Minute, DrainAfterTerminate: 50 * time.Millisecond, ShutdownGrace: time.Second},
		DetachTTL: time.Second,
		Logger:    zap.NewNop(),
	})
	defer func() { sup.Kill(); _ = sup.Wait(context.Background()) }()
	client, server := memPipe()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { defer close(served); _ = sup.ServeConn(ctx, server, ConnOptions{}) }()
	defer func() { cancel(); client.Close(); <-served }()
	call := func(req string) []byte {
		if err := client.WriteMessage(ctx, []byte(req)); err != nil {
			b.Fatal(err)
		}
		for {
			m, err := client.ReadMessage(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if !bytes.Contains(m, []byte(`"method"`)) {
				return m
			}
		}
	}
	call(`{"id":1,"method":"initialize","params":{"clientName":"bench"}}`)
	if err := client.WriteMessage(ctx, []byte(`{"method":"initialized","params":{}}`)); err != nil {
		b.Fatal(err)
	}
	if r := call(`{"id":2,"method":"process/start","params":{"processId":"p","argv":["sleep","1000"],"cwd":"/"}}`); !bytes.Contains(r, []byte(`"result"`)) {
		b.Fatalf("start: %s", r)
	}
	for _, c := range []struct{ name, req string }{
		{"status", `{"id":3,"method":"environment/status","params":{}}`},
		{"read", `{"id":4,"method":"process/read","params":{"processId":"p","afterSeq":0,"waitMs":0}}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if r := call(c.req); !bytes.Contains(r, []byte(`"result"`)) {
					b.Fatalf("%s", r)
				}
			}
		})
	}
}
