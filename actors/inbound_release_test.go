package actors

import (
	"context"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"github.com/runtimed/runtimed/wire"
)

func heapObjectBytes() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// A large request of any method is garbage once it is answered: nothing of
// the connection (the current-request record kept the id, which points
// into the decoded copy of the message) pins it until the next request
// (issue 26: 20 x 60 MB environment/status kept 1.16 GiB).
func TestAnsweredLargeMessageIsNotRetained(t *testing.T) {
	sup := newTestSupervisor(t, 1<<20, 100)
	c := startConn(t, sup, true)
	mustOK(t, c.call(wire.MethodEnvironmentStatus, nil))
	runtime.GC()
	base := heapObjectBytes()

	const size = 16 << 20
	// The frame is spelled out (encoding/json would take seconds under -race).
	frame := []byte(`{"id":"big","method":"environment/status","params":{"padding":"` + strings.Repeat("x", size) + `"}}`)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := c.core.GoFrame(ctx, wire.StringID("big"), frame)
	if err != nil {
		t.Fatal(err)
	}
	frame = nil
	if resp, err := p.Wait(ctx); err != nil || resp.Error != nil {
		t.Fatalf("the large request: %v %s", err, resp.Error)
	}
	var held uint64
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		runtime.GC()
		if held = heapObjectBytes() - min(base, heapObjectBytes()); held < size/4 {
			return
		}
	}
	t.Fatalf("%d MiB of the heap still held 5 s after a 16 MiB request was answered (the connection pins its last message)", held>>20)
}
