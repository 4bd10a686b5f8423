package actors

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"
)

// BenchmarkConnStart measures process/start through the connection actor
// over an in-memory transport: "refused" is decoding and admission up to
// a refusal (an env name: after the cwd, fs-root, id and env checks);
// "true" a whole start of /bin/true until its process/closed.
func BenchmarkConnStart(b *testing.B) {
	sup := NewSupervisor(Config{
		Proc:      ProcConfig{RetainBytes: 1 << 20, RetainChunks: 50_000, ClosedRetention: 0, DrainAfterTerminate: 50 * time.Millisecond, ShutdownGrace: time.Second},
		DetachTTL: time.Second,
		Logger:    zap.NewNop(),
	})
	defer func() { sup.Kill(); _ = sup.Wait(context.Background()) }()
	client, server := memPipe()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { defer close(served); _ = sup.ServeConn(ctx, server, ConnOptions{}) }()
	defer func() { cancel(); client.Close(); <-served }()
	// until reads until a message containing want.
	until := func(want string) []byte {
		for {
			m, err := client.ReadMessage(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if bytes.Contains(m, []byte(want)) {
				return m
			}
		}
	}
	send := func(req string) {
		if err := client.WriteMessage(ctx, []byte(req)); err != nil {
			b.Fatal(err)
		}
	}
	send(`{"id":1,"method":"initialize","params":{"clientName":"bench"}}`)
	until(`"id":1`)
	send(`{"method":"initialized","params":{}}`)
	b.Run("refused", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			send(`{"id":2,"method":"process/start","params":{"processId":"r","argv":["true"],"cwd":"/","env":{"A=B":"x"}}}`)
			if r := until(`"id":2`); !bytes.Contains(r, []byte(`"error"`)) {
				b.Fatalf("%s", r)
			}
		}
	})
	b.Run("true", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			send(fmt.Sprintf(`{"id":3,"method":"process/start","params":{"processId":"t%d","argv":["/bin/true"],"cwd":"/","env":{"PATH":"/usr/bin:/bin"}}}`, i))
			until(fmt.Sprintf(`"process/closed","params":{"processId":"t%d"`, i))
		}
	})
}
