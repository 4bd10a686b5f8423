package actors

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/runtimed/runtimed/actors/contain"
	"github.com/runtimed/runtimed/actors/osproc"
	"github.com/runtimed/runtimed/actors/sandbox"
	"github.com/runtimed/runtimed/wire"
)

// ownerLog is an Owner that records what Start asked of it.
type ownerLog struct {
	active int
	taken  map[string]bool
	calls  []string
}

func (o *ownerLog) Reserve(id string) (int, bool) {
	o.calls = append(o.calls, "reserve "+id)
	return o.active, o.taken[id]
}

func (o *ownerLog) Spawning() { o.calls = append(o.calls, "spawning") }

func (o *ownerLog) Started(id string, ref *ProcessRef) {
	o.calls = append(o.calls, fmt.Sprintf("started %s %v", id, ref != nil))
}

// TestStartOwnerContract: Start reserves the id only after the checks
// that need no owner, gives it back on every later refusal, says
// Spawning only once every check passed, and reports the started
// process; each refusal names its step and field.
func TestStartOwnerContract(t *testing.T) {
	sup := NewSupervisor(Config{
		Proc:         ProcConfig{RetainBytes: 1 << 20, RetainChunks: 1000, ClosedRetention: time.Minute, DrainAfterTerminate: 50 * time.Millisecond, ShutdownGrace: time.Second},
		DetachTTL:    time.Second,
		MaxProcesses: 2,
		Logger:       zaptest.NewLogger(t),
	})
	stopAtCleanup(t, sup)
	dir := t.TempDir()
	ok := StartRequest{ID: "p", Argv: []string{"true"}, Cwd: dir, Env: map[string]string{"PATH": "/usr/bin:/bin"}}
	with := func(edit func(r *StartRequest)) StartRequest { r := ok; edit(&r); return r }
	cases := []struct {
		name   string
		req    StartRequest
		active int
		taken  bool
		check  Check
		field  string
		calls  []string
	}{
		{"argv", with(func(r *StartRequest) { r.Argv = nil }), 0, false, CheckArgv, "argv", nil},
		{"cwd", with(func(r *StartRequest) { r.Cwd = "rel" }), 0, false, CheckCwd, "cwd", nil},
		{"id", ok, 0, true, CheckID, "processId", []string{"reserve p"}},
		{"env", with(func(r *StartRequest) { r.Env = map[string]string{"A=B": ""} }), 0, false, CheckEnv, "env", []string{"reserve p", "started p false"}},
		{"inherit", with(func(r *StartRequest) { r.EnvPolicy = &osproc.EnvPolicy{Inherit: "most"} }), 0, false, CheckEnv, "envPolicy.inherit", []string{"reserve p", "started p false"}},
		{"cap", ok, 2, false, CheckCap, "", []string{"reserve p", "started p false"}},
		{"host", with(func(r *StartRequest) { r.Sandbox = &wire.Sandbox{Managed: true} }), 0, false, CheckHost, "sandbox", []string{"reserve p", "started p false"}},
		{"network", with(func(r *StartRequest) { r.Network.LaunchProxy = true }), 0, false, CheckNetwork, "networkProxy", []string{"reserve p", "started p false"}},
		{"spawn", with(func(r *StartRequest) { r.Argv = []string{"runtimed-no-such-command"} }), 0, false, CheckSpawn, "", []string{"reserve p", "spawning", "started p false"}},
		{"limits", with(func(r *StartRequest) { r.Limits = contain.Limits{Pids: 4} }), 0, false, CheckSpawn, "", []string{"reserve p", "spawning", "started p false"}},
		{"started", ok, 1, false, 0, "", []string{"reserve p", "spawning", "started p true"}},
	}
	for _, c := range cases {
		o := &ownerLog{active: c.active, taken: map[string]bool{"p": c.taken}}
		res, err := sup.Start(context.Background(), o, c.req)
		if !slices.Equal(o.calls, c.calls) {
			t.Errorf("%s: owner calls %q; want %q", c.name, o.calls, c.calls)
		}
		if c.check == 0 {
			if err != nil || res.Ref == nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			<-res.Ref.Closed()
			continue
		}
		var se *StartError
		if !errors.As(err, &se) || se.Check != c.check || se.Field != c.field {
			t.Errorf("%s: %v; want a *StartError at %v naming %q", c.name, err, c.check, c.field)
		}
	}
}

// TestStartErrorWire: StartError.Wire is the one mapping of a start's
// failures to JSON-RPC errors.
func TestStartErrorWire(t *testing.T) {
	spawnErr := &osproc.SpawnError{Argv0: "x", Op: osproc.OpLookup, Err: syscall.ENOENT}
	cases := []struct {
		err   error
		code  int
		msg   string
		spawn *wire.SpawnFailure
	}{
		{wire.ErrEmptyArgv(), wire.CodeInvalidParams, "argv must not be empty", nil},
		{&BudgetError{Limit: "processes", Value: "1", Flag: "--max-processes-total", Detail: "d"}, wire.CodeBudgetExceeded, "", nil},
		{fmt.Errorf("%w: no cgroup manager configured", contain.ErrLimitUnavailable), wire.CodeInvalidParams, "", nil},
		{&sandbox.UnavailableError{What: "a sandbox", Missing: "m", Check: "c"}, wire.CodeInvalidParams, "", nil},
		{spawnErr, wire.CodeInternal, "failed to spawn x: no such file or directory", &wire.SpawnFailure{Op: "lookup", Errno: "ENOENT"}},
		{ErrStopped, wire.CodeInternal, ErrStopped.Error(), nil},
	}
	// The host check's refusal is -32602 whatever the error (a plan's stat
	// error too), with its text.
	if w := (&StartError{Check: CheckHost, Err: errors.New("sandbox path /x: stat /x: no such file")}).Wire(); w.Code != wire.CodeInvalidParams || w.Message != "sandbox path /x: stat /x: no such file" {
		t.Errorf("host check: %d %q", w.Code, w.Message)
	}
	for _, c := range cases {
		w := (&StartError{Check: CheckSpawn, Err: c.err}).Wire()
		if w.Code != c.code || (c.msg != "" && w.Message != c.msg) {
			t.Errorf("%v: %d %q; want %d %q", c.err, w.Code, w.Message, c.code, c.msg)
		}
		var got *wire.SpawnFailure
		if w.Data != nil {
			got = w.Data.Spawn
		}
		if (got == nil) != (c.spawn == nil) || got != nil && *got != *c.spawn {
			t.Errorf("%v: data %+v; want %+v", c.err, got, c.spawn)
		}
	}
}
