package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/runtimed/runtimed/wire"
)

// badStart is one start request, as every front end can say it.
type badStart struct {
	id   string
	argv []string
	cwd  string
	env  map[string]string
}

// admitted is how one front end answered a start: the server's error
// (code and message) or, for Local, an *OptionError's field when the
// runtime's own validation refused it first.
type admitted struct {
	ok      bool
	code    int
	message string
	option  string // Local only: the *OptionError's Option
	data    *wire.ErrorData
}

// startFrontEnd starts processes through one front end of one server.
type startFrontEnd struct {
	name  string
	start func(t *testing.T, r badStart) admitted
}

// wireStarter is a raw JSON-RPC connection after the handshake.
func wireStarter(t *testing.T, tr wire.Transport) *wire.Client {
	t.Helper()
	c := wire.NewClient(tr, wire.ClientOptions{})
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.Call(ctxT(t), wire.MethodInitialize, map[string]any{"clientName": "admission-test"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Notify(ctxT(t), wire.MethodInitialized, struct{}{}); err != nil {
		t.Fatal(err)
	}
	return c
}

func answer(err error) admitted {
	if err == nil {
		return admitted{ok: true}
	}
	var we *wire.Error
	if errors.As(err, &we) {
		return admitted{code: we.Code, message: we.Message, data: we.Data}
	}
	return admitted{code: -1, message: err.Error()}
}

// wireStart starts through method, naming its fields as the dialect
// does: process/start (processId, argv), process/spawn (processHandle,
// command).
func wireStart(c *wire.Client, method, idField, argvField string) func(t *testing.T, r badStart) admitted {
	return func(t *testing.T, r badStart) admitted {
		argv := r.argv
		if argv == nil {
			argv = []string{}
		}
		_, err := c.Call(ctxT(t), method, map[string]any{idField: r.id, argvField: argv, "cwd": r.cwd, "env": r.env})
		return answer(err)
	}
}

func processStart(c *wire.Client) func(t *testing.T, r badStart) admitted {
	return wireStart(c, wire.MethodProcessStart, "processId", "argv")
}

func processSpawn(c *wire.Client) func(t *testing.T, r badStart) admitted {
	return wireStart(c, wire.MethodProcessSpawn, "processHandle", "command")
}

func localStart(l *Local) func(t *testing.T, r badStart) admitted {
	return func(t *testing.T, r badStart) admitted {
		_, err := l.Start(ctxT(t), Spec{ID: r.id, Argv: r.argv, Dir: r.cwd, Env: r.env})
		if err == nil {
			return admitted{ok: true} // Local.Close kills it
		}
		var oe *OptionError
		if errors.As(err, &oe) {
			return admitted{code: -1, option: oe.Option}
		}
		var re *RPCError
		if errors.As(err, &re) {
			return admitted{code: re.Code, message: re.Message}
		}
		return admitted{code: -1, message: err.Error()}
	}
}

// admissionFrontEnds serves cfg on a websocket (process/start and the
// app-server's process/spawn, each on its own connection: one session
// each), over stdio, and embedded (Local).
func admissionFrontEnds(t *testing.T, cfg Config) []startFrontEnd {
	cfg.Logger = zaptest.NewLogger(t)
	ws := startWSServer(t, cfg)
	dial := func() *wire.Client {
		tr, err := wire.DialWebsocket(ctxT(t), ws.url, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		return wireStarter(t, tr)
	}
	srv := NewServer(cfg)
	toServerR, toServerW, _ := os.Pipe()
	toClientR, toClientW, _ := os.Pipe()
	served := make(chan struct{})
	go func() {
		_ = srv.ServeTransport(wire.NewStdioTransport(toServerR, toClientW, 0), false)
		close(served)
	}()
	stdio := wireStarter(t, wire.NewStdioTransport(toClientR, toServerW, 0))
	t.Cleanup(func() {
		_ = stdio.Close()
		_ = toServerW.Close()
		<-served
		_ = srv.Close()
	})
	l := NewLocal(cfg)
	t.Cleanup(func() { _ = l.Close() })
	return []startFrontEnd{
		{"websocket", processStart(dial())},
		{"stdio", processStart(stdio)},
		{"app-server", processSpawn(dial())},
		{"local", localStart(l)},
	}
}

// TestAdmissionSameEverywhere: Supervisor.Start is the only place a
// process is admitted, so the same bad request gets the same refusal
// (code, message naming the field) through every front end, and a request
// bad in several ways gets the first in Start's order. The app-server
// dialect words two of them its own way (command, processHandle); Local
// refuses what its Spec validation catches first with an *OptionError
// naming the same field, and answers the rest as the server does.
func TestAdmissionSameEverywhere(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	fronts := admissionFrontEnds(t, Config{MaxProcesses: 1, FsRoots: []string{root}})
	keep := badStart{id: "keep", argv: []string{"sleep", "600"}, cwd: root}
	fresh := badStart{id: "fresh", argv: []string{"true"}, cwd: root}
	with := func(r badStart, edit func(*badStart)) badStart { edit(&r); return r }

	type want struct {
		code    int
		message string // the exec-server's wording (and Local's, unless option is set)
		app     string // the app-server's, when it differs
		option  string // Local: the *OptionError's field, when its validation refuses it first
	}
	outsideMsg := "path " + outside + " is outside the allowed roots"
	cases := []struct {
		name string
		req  badStart
		want want
	}{
		{"argv", with(fresh, func(r *badStart) { r.argv = nil }),
			want{wire.CodeInvalidParams, "argv must not be empty", "command must not be empty", "Spec.Argv"}},
		{"cwd", with(fresh, func(r *badStart) { r.cwd = "rel" }),
			want{wire.CodeInvalidParams, "cwd must be absolute: rel", "", "Spec.Dir"}},
		{"cwd uri", with(fresh, func(r *badStart) { r.cwd = "file://elsewhere/tmp" }),
			want{wire.CodeInvalidParams, `cwd is a file URI with a foreign host "elsewhere": file://elsewhere/tmp`, "", "Spec.Dir"}},
		{"fs-root", with(fresh, func(r *badStart) { r.cwd = outside }),
			want{wire.CodeInvalidRequest, outsideMsg, "", ""}},
		{"id", keep, want{wire.CodeInvalidRequest, "process keep already exists", `duplicate active process handle: "keep"`, ""}},
		{"env", with(fresh, func(r *badStart) { r.env = map[string]string{"A=B": "x"} }),
			want{wire.CodeInvalidParams, "invalid environment variable name \"A=B\" in `env`: a name must not be empty or contain '=' or NUL", "", `Spec.Env["A=B"]`}},
		{"cap", fresh, want{wire.CodeBudgetExceeded, "", "", ""}},
		// Several faults: the first in Start's order wins everywhere.
		{"argv before cwd", with(fresh, func(r *badStart) { r.argv, r.cwd = nil, "rel" }),
			want{wire.CodeInvalidParams, "argv must not be empty", "command must not be empty", "Spec.Argv"}},
		{"fs-root before id, env and cap", with(keep, func(r *badStart) { r.cwd, r.env = outside, map[string]string{"A=B": "x"} }),
			want{wire.CodeInvalidRequest, outsideMsg, "", `Spec.Env["A=B"]`}},
		{"id before env and cap", with(keep, func(r *badStart) { r.env = map[string]string{"=": "x"} }),
			want{wire.CodeInvalidRequest, "process keep already exists", `duplicate active process handle: "keep"`, `Spec.Env["="]`}},
		{"env before cap", with(fresh, func(r *badStart) { r.env = map[string]string{"": "x"} }),
			want{wire.CodeInvalidParams, "invalid environment variable name \"\" in `env`: a name must not be empty or contain '=' or NUL", "", `Spec.Env[""]`}},
	}
	var capMsg string // the same on every front end
	for _, fe := range fronts {
		t.Run(fe.name, func(t *testing.T) {
			if got := fe.start(t, keep); !got.ok {
				t.Fatalf("the first start: %+v", got)
			}
			for _, c := range cases {
				got := fe.start(t, c.req)
				w := c.want
				if fe.name == "local" && w.option != "" {
					if got.option != w.option {
						t.Errorf("%s: %+v; want an *OptionError naming %s", c.name, got, w.option)
					}
					continue
				}
				msg := w.message
				if fe.name == "app-server" && w.app != "" {
					msg = w.app
				}
				if c.name == "cap" {
					if capMsg == "" {
						capMsg = got.message
					}
					msg = capMsg
					if !strings.Contains(got.message, "processes per session") {
						t.Errorf("cap: %q; want the processes-per-session budget", got.message)
					}
				}
				if got.ok || got.code != w.code || got.message != msg {
					t.Errorf("%s: got %+v; want %d %q", c.name, got, w.code, msg)
				}
			}
		})
	}
}

// TestStartFailuresTyped: a start whose child cannot be started answers
// -32603 with the OS's text on every backend, and the error matches what
// the OS said through errors.Is: a missing command exec.ErrNotFound and
// fs.ErrNotExist, a missing cwd fs.ErrNotExist only, a file without
// execute permission fs.ErrPermission. Over the wire the match is rebuilt
// from the error's data (wire.SpawnFailure), which is checked too.
func TestStartFailuresTyped(t *testing.T) {
	dir := t.TempDir()
	noexec := filepath.Join(dir, "noexec")
	if err := os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name         string
		spec         Spec
		text         string // in the message
		notFound     bool
		notExist     bool
		permission   bool
		op, errno    string
		wantSentinel syscall.Errno
	}{
		{"missing command", Spec{Argv: []string{"runtimed-no-such-command"}, Dir: dir}, "failed to spawn runtimed-no-such-command: no such file or directory",
			true, true, false, "lookup", "ENOENT", syscall.ENOENT},
		{"missing path", Spec{Argv: []string{filepath.Join(dir, "absent")}, Dir: dir}, "no such file or directory",
			true, true, false, "exec", "ENOENT", syscall.ENOENT},
		{"missing cwd", Spec{Argv: []string{"true"}, Dir: filepath.Join(dir, "gone")}, "cwd " + filepath.Join(dir, "gone") + ": no such file or directory",
			false, true, false, "cwd", "ENOENT", syscall.ENOENT},
		{"permission", Spec{Argv: []string{noexec}, Dir: dir}, "permission denied",
			false, false, true, "exec", "EACCES", syscall.EACCES},
	}
	forEachBackend(t, func(t *testing.T, b Backend) {
		for _, c := range cases {
			_, err := b.Start(ctxT(t), c.spec)
			var re *RPCError
			if !errors.As(err, &re) || re.Code != wire.CodeInternal || !strings.Contains(re.Message, c.text) {
				t.Errorf("%s: %v; want -32603 containing %q", c.name, err, c.text)
				continue
			}
			if got := errors.Is(err, exec.ErrNotFound); got != c.notFound {
				t.Errorf("%s: errors.Is(exec.ErrNotFound) = %v", c.name, got)
			}
			if got := errors.Is(err, fs.ErrNotExist); got != c.notExist {
				t.Errorf("%s: errors.Is(fs.ErrNotExist) = %v", c.name, got)
			}
			if got := errors.Is(err, fs.ErrPermission); got != c.permission {
				t.Errorf("%s: errors.Is(fs.ErrPermission) = %v", c.name, got)
			}
			if !errors.Is(err, c.wantSentinel) {
				t.Errorf("%s: does not match %v", c.name, c.wantSentinel)
			}
		}
	})
	// The data a server sends: the stage and the errno's name.
	cfg := Config{Logger: zaptest.NewLogger(t)}
	ws := startWSServer(t, cfg)
	tr, err := wire.DialWebsocket(ctxT(t), ws.url, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := wireStarter(t, tr)
	for i, tc := range cases {
		_, err := c.Call(ctxT(t), wire.MethodProcessStart, map[string]any{"processId": "d" + string(rune('a'+i)), "argv": tc.spec.Argv, "cwd": tc.spec.Dir, "env": map[string]string{"PATH": "/usr/bin:/bin"}})
		var we *wire.Error
		if !errors.As(err, &we) || we.Data == nil || we.Data.Spawn == nil || we.Data.Spawn.Op != tc.op || we.Data.Spawn.Errno != tc.errno {
			b, _ := json.Marshal(we)
			t.Errorf("%s: error %s; want data.spawn {op: %s, errno: %s}", tc.name, b, tc.op, tc.errno)
		}
	}
	// A refusal by a rule carries no data.
	_, err = c.Call(context.Background(), wire.MethodProcessStart, map[string]any{"processId": "x", "argv": []string{}, "cwd": dir})
	var we *wire.Error
	if !errors.As(err, &we) || we.Data != nil {
		t.Errorf("empty argv: %+v; want an error without data", err)
	}
}
