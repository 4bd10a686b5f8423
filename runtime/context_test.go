package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/runtimed/runtimed/wire"
)

// A Start whose ctx has ended returns ctx's error and leaves nothing
// running, on every backend; the backend stays usable.
func TestStartHonoursContext(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		ctx := ctxT(t)
		dead, cancel := context.WithCancel(ctx)
		cancel()
		spec := sh(t, "exec sleep 1000")
		spec.ID = "never"
		if p, err := b.Start(dead, spec); !errors.Is(err, context.Canceled) || p != nil {
			t.Fatalf("Start with an ended ctx = %v, %v; want context.Canceled", p, err)
		}
		procs, err := b.(lister).List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range procs {
			if p.ID == "never" {
				t.Fatalf("a Start that failed left %+v behind", p)
			}
		}
		p, err := b.Start(ctx, spec) // the id was not taken
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Terminate(ctx, 0); err != nil {
			t.Fatal(err)
		}
	})
}

// Options out of range are refused before anything is sent, with an error
// naming the option.
func TestOptionsValidated(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		ctx := ctxT(t)
		p, err := b.Start(ctx, sh(t, "true"))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			opts ReadOptions
			name string
		}{{ReadOptions{MaxBytes: -1}, "ReadOptions.MaxBytes"}, {ReadOptions{Wait: -time.Second}, "ReadOptions.Wait"}} {
			if _, err := p.Read(ctx, c.opts); !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), c.name) {
				t.Errorf("Read(%+v) = %v; want ErrInvalidOption naming %s", c.opts, err, c.name)
			}
		}
		if _, err := Pipe(ctx, p, PipeOptions{Stderr: io.Discard, Logger: zap.NewNop()}); !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), "PipeOptions.Logger") {
			t.Errorf("Pipe with Stderr and Logger = %v", err)
		}
		if _, err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// A Start whose ctx ends while the server is starting the process
// returns ctx's error, and the process the server started anyway is
// terminated once its answer comes: nothing is left running.
func TestClientStartGivenUpTerminates(t *testing.T) {
	c, s, _ := fakeClient(t, false)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Start(ctx, fakeSpec("p"))
		errc <- err
	}()
	m := s.request(wire.MethodProcessStart)
	cancel()
	if err := <-errc; err != context.Canceled {
		t.Fatalf("Start = %v; want context.Canceled", err)
	}
	s.reply(m.ID, map[string]any{"processId": "p"})
	term := s.request(wire.MethodProcessTerminate)
	var p wire.TerminateParams
	_ = json.Unmarshal(term.Params, &p)
	if p.ProcessID != "p" || p.GraceMs != nil {
		t.Fatalf("terminate %+v; want p with grace 0", p)
	}
	s.reply(term.ID, wire.TerminateResult{Running: true})
}
