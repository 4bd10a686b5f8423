package runtime

import (
	"context"
	"errors"
	"math"
	"net"
	"strings"
	"testing"
	"time"
)

// optionOf returns the field an *OptionError matching ErrInvalidOption
// names, or what err is instead.
func optionOf(err error) string {
	var oe *OptionError
	if errors.As(err, &oe) && errors.Is(err, ErrInvalidOption) && strings.HasPrefix(err.Error(), "runtime: invalid "+oe.Option+": ") {
		return oe.Option
	}
	return "not an option error: " + errName(err)
}

// badSpecs holds one case per check of Spec: each starts from a spec
// that runs and breaks one field. Removing a check makes its case start
// a process (or fail differently) and the test fails.
var badSpecs = []struct {
	option string
	wire   string // what the server's -32602 names for the same mistake, if it checks it
	edit   func(s *Spec)
}{
	{"Spec.ID", "", func(s *Spec) { s.ID = "bad\xff" }},
	{"Spec.Argv", "argv", func(s *Spec) { s.Argv = nil }},
	{"Spec.Argv[0]", "", func(s *Spec) { s.Argv = []string{""} }},
	{"Spec.Argv[2]", "", func(s *Spec) { s.Argv[2] = "a\x00b" }},
	{"Spec.Arg0", "", func(s *Spec) { s.Arg0 = "x\x00" }},
	{"Spec.Dir", "", func(s *Spec) { s.Dir = "" }},
	{"Spec.Dir", "cwd", func(s *Spec) { s.Dir = "relative" }},
	{"Spec.Dir", "cwd", func(s *Spec) { s.Dir = "file://elsewhere/tmp" }},
	{`Spec.Env["A=B"]`, "`env`", func(s *Spec) { s.Env["A=B"] = "x" }},
	{`Spec.Env[""]`, "`env`", func(s *Spec) { s.Env[""] = "x" }},
	{`Spec.Env["V"]`, "", func(s *Spec) { s.Env["V"] = "a\x00b" }},
	{"Spec.EnvPolicy.Inherit", "envPolicy.inherit", func(s *Spec) { s.EnvPolicy = &EnvPolicy{Inherit: "some"} }},
	{`Spec.EnvPolicy.Set["A=B"]`, "envPolicy.set", func(s *Spec) { s.EnvPolicy = &EnvPolicy{Set: map[string]string{"A=B": "x"}} }},
	{"Spec.EnvPolicy.Exclude[1]", "", func(s *Spec) { s.EnvPolicy = &EnvPolicy{Exclude: []string{"*KEY*", ""}} }},
	{"Spec.EnvPolicy.IncludeOnly[0]", "", func(s *Spec) { s.EnvPolicy = &EnvPolicy{IncludeOnly: []string{""}} }},
	{"Spec.Size", "", func(s *Spec) { s.TTY, s.Size = true, Size{Rows: 0, Cols: 80} }},
	{"Spec.Size", "", func(s *Spec) { s.TTY, s.Size = true, Size{Rows: 24} }},
	{"Spec.Network.Allow[1]", "", func(s *Spec) { s.Network = &Network{Allow: []string{"ok.test", "a.*.test"}} }},
	{"Spec.Network.Deny[0]", "", func(s *Spec) { s.Network = &Network{Deny: []string{"*"}} }},
	{"Spec.Network.SOCKS5UDP", "", func(s *Spec) { s.Network = &Network{SOCKS5UDP: true} }},
	{"Spec.Metadata.ThreadID", "", func(s *Spec) { s.Metadata = &Metadata{ThreadID: "\xff"} }},
	{"Spec.Metadata.ToolCallID", "", func(s *Spec) { s.Metadata = &Metadata{ToolCallID: "\xfe"} }},
	{"Spec.Limits.MemoryBytes", "", func(s *Spec) { s.Limits.MemoryBytes = math.MaxInt64 + 1 }},
	{"Spec.Limits.Pids", "", func(s *Spec) { s.Limits.Pids = math.MaxUint64 }},
	{"Spec.Limits.CPUSeconds", "", func(s *Spec) { s.Limits.CPUSeconds = math.MaxUint64 }},
	{"Spec.Limits.OpenFiles", "", func(s *Spec) { s.Limits.OpenFiles = math.MaxUint64 }},
	{"Spec.Limits.FileSizeBytes", "", func(s *Spec) { s.Limits.FileSizeBytes = math.MaxUint64 }},
	{"Spec.Sandbox.RestrictFS", "", func(s *Spec) { s.Sandbox = &Sandbox{FileSystem: []FSRule{{Special: FSRoot, Access: FSRead}}} }},
	{"Spec.Sandbox.WorkspaceRoots[1]", "sandbox.workspaceRoots[1]", func(s *Spec) {
		s.Sandbox = &Sandbox{RestrictFS: true, WorkspaceRoots: []string{"/", "rel"}, FileSystem: []FSRule{{Special: FSProjectRoots, Access: FSRead}}}
	}},
	{"Spec.Sandbox.FileSystem[0]", "", fsRule(FSRule{Access: FSRead})},
	{"Spec.Sandbox.FileSystem[0]", "", fsRule(FSRule{Special: FSRoot, Path: "/", Access: FSRead})},
	{"Spec.Sandbox.FileSystem[0].Access", "", fsRule(FSRule{Special: FSRoot})},
	{"Spec.Sandbox.FileSystem[0].Access", "", fsRule(FSRule{Special: FSRoot, Access: "rw"})},
	{"Spec.Sandbox.FileSystem[0].Special", "", fsRule(FSRule{Special: "home", Access: FSRead})},
	{"Spec.Sandbox.FileSystem[0].Subpath", "", fsRule(FSRule{Path: "/tmp", Subpath: "x", Access: FSRead})},
	{"Spec.Sandbox.FileSystem[0].Subpath", "", fsRule(FSRule{Special: FSSlashTmp, Subpath: "../etc", Access: FSRead})},
	{"Spec.Sandbox.FileSystem[0].Subpath", "", fsRule(FSRule{Special: FSSlashTmp, Subpath: "/etc", Access: FSRead})},
	{"Spec.Sandbox.FileSystem[0].Path", "entries[0]", fsRule(FSRule{Path: "relative/path", Access: FSRead})},
	{"Spec.Sandbox.FileSystem[0].Access", "entries[0]", fsRule(FSRule{Glob: "/tmp/*.key", Access: FSRead})},
	{"Spec.Sandbox.FileSystem[0].Glob", "entries[0]", fsRule(FSRule{Glob: "/tmp/[", Access: FSDeny})},
}

func fsRule(r FSRule) func(s *Spec) {
	return func(s *Spec) { s.Sandbox = &Sandbox{RestrictFS: true, FileSystem: []FSRule{r}} }
}

// goodSpec runs; each bad case breaks one field of it.
func goodSpec(t *testing.T) Spec {
	s := sh(t, "exit 0")
	s.Argv = append(s.Argv, "arg")
	return s
}

// Every Spec check refuses its case with the same *OptionError on Local
// and on a Client over websocket and stdio, before anything runs (the
// Client sends nothing: its server never sees the process).
func TestSpecValidated(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		ctx := ctxT(t)
		if p, err := b.Start(ctx, goodSpec(t)); err != nil {
			t.Fatalf("the good spec: %v", err)
		} else if st, err := p.Wait(ctx); err != nil || st.Code != 0 {
			t.Fatalf("the good spec: %v %v", st, err)
		}
		for i, c := range badSpecs {
			spec := goodSpec(t)
			spec.ID = "bad-" + itoa(i)
			c.edit(&spec)
			p, err := b.Start(ctx, spec)
			if got := optionOf(err); got != c.option {
				t.Errorf("case %d: Start = %v; want an *OptionError naming %s", i, err, c.option)
				if p != nil {
					_, _ = p.Terminate(ctx, 0)
				}
			}
		}
		// Two checks name Spec.Dir: an empty one says it is required.
		spec := goodSpec(t)
		spec.Dir = ""
		if _, err := b.Start(ctx, spec); err == nil || !strings.Contains(err.Error(), "Spec.Dir: is required") {
			t.Errorf("empty Dir: %v; want it called required", err)
		}
		if l, ok := b.(interface {
			List(context.Context) ([]ProcessInfo, error)
		}); ok {
			procs, err := l.List(ctx)
			if err != nil || len(procs) != 1 {
				t.Errorf("List after the refused starts = %d processes, %v; want only the good one", len(procs), err)
			}
		}
	})
}

// A Cmd's fields are checked as Spec's and named as the Cmd's, on every
// backend, before anything starts.
func TestCmdFieldsValidated(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		for _, c := range []struct {
			option string
			edit   func(c *Cmd)
		}{
			{"Cmd.Args[0]", func(c *Cmd) { c.Args = []string{""} }},
			{"Cmd.Args[1]", func(c *Cmd) { c.Args = []string{"true", "a\x00"} }},
			{"Cmd.Dir", func(c *Cmd) { c.Dir = "rel" }},
			{`Cmd.Env["A=B"]`, func(c *Cmd) { c.Env = map[string]string{"A=B": "x"} }},
			{"Cmd.EnvPolicy.Inherit", func(c *Cmd) { c.EnvPolicy = &EnvPolicy{Inherit: "most"} }},
			{"Cmd.Size", func(c *Cmd) { c.TTY, c.Size = true, Size{Cols: 80} }},
			{"Cmd.Sandbox.FileSystem[0].Access", func(c *Cmd) { c.Sandbox = &Sandbox{RestrictFS: true, FileSystem: []FSRule{{Special: FSRoot}}} }},
			{"Cmd.Limits.Pids", func(c *Cmd) { c.Limits.Pids = math.MaxUint64 }},
			{"Cmd.Metadata.ThreadID", func(c *Cmd) { c.Metadata = &Metadata{ThreadID: "\xff"} }},
		} {
			cmd := CommandContext(ctxT(t), b, "true")
			cmd.Dir = t.TempDir()
			c.edit(cmd)
			if err := cmd.Run(); optionOf(err) != c.option || cmd.Process != nil {
				t.Errorf("Run = %v (process %v); want an *OptionError naming %s and nothing started", err, cmd.Process, c.option)
			}
		}
	})
}

// Where the server checks a Spec field too, its -32602 names the same
// field in the protocol's words: the spec is sent raw, past the client's
// own check.
func TestServerNamesTheSameField(t *testing.T) {
	c, _ := newWSBackend(t, Config{}, nil)
	ctx := ctxT(t)
	for i, bc := range badSpecs {
		if bc.wire == "" {
			continue
		}
		spec := goodSpec(t)
		spec.ID = "raw-" + itoa(i)
		bc.edit(&spec)
		params, err := startParams(spec)
		if err != nil {
			t.Fatal(err)
		}
		err = c.call(ctx, "process/start", params, nil)
		var re *RPCError
		if !errors.As(err, &re) || re.Code != -32602 || !strings.Contains(re.Message, bc.wire) {
			t.Errorf("%s: the server answered %v; want -32602 naming %s", bc.option, err, bc.wire)
		}
	}
}

// WalkOptions are checked on both backends' FileSystem before fs/walk.
func TestWalkOptionsValidated(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		ctx, dir := ctxT(t), t.TempDir()
		fsys := b.(FileSystem)
		if _, err := fsys.Walk(ctx, dir, WalkOptions{MaxDirectories: 1, MaxEntries: 1}); err != nil {
			t.Fatalf("a good walk: %v", err)
		}
		for _, c := range []struct {
			option string
			opts   WalkOptions
		}{
			{"WalkOptions.MaxDirectories", WalkOptions{MaxEntries: 1}},
			{"WalkOptions.MaxEntries", WalkOptions{MaxDirectories: 1}},
			{"WalkOptions.MaxDepth", WalkOptions{MaxDepth: -1, MaxDirectories: 1, MaxEntries: 1}},
			{"WalkOptions.MaxDepth", WalkOptions{MaxDepth: 65, MaxDirectories: 1, MaxEntries: 1}},
			{"WalkOptions.MaxDirectories", WalkOptions{MaxDirectories: 10_001, MaxEntries: 1}},
			{"WalkOptions.MaxEntries", WalkOptions{MaxDirectories: 1, MaxEntries: 50_001}},
		} {
			if _, err := fsys.Walk(ctx, dir, c.opts); optionOf(err) != c.option {
				t.Errorf("Walk(%+v) = %v; want an *OptionError naming %s", c.opts, err, c.option)
			}
		}
	})
}

// ClientOptions are checked by Dial and NewClient before connecting: a
// server that would accept the connection never sees one.
func TestClientOptionsValidated(t *testing.T) {
	ctx := ctxT(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	url := "ws://" + ln.Addr().String()
	for _, c := range []struct {
		option string
		opts   ClientOptions
	}{
		{"ClientOptions.Token", ClientOptions{Token: "abc\r\nX-Injected: 1"}},
		{`ClientOptions.Header["X-Ok"]`, ClientOptions{Header: map[string][]string{"X-Ok": {"a\nb"}}}},
		{`ClientOptions.Header["Bad Name"]`, ClientOptions{Header: map[string][]string{"Bad Name": {"x"}}}},
		{"ClientOptions.ClientName", ClientOptions{ClientName: "\xff"}},
		{"ClientOptions.ResumeSessionID", ClientOptions{ResumeSessionID: "\xff"}},
		{"ClientOptions.ConnectTimeout", ClientOptions{ConnectTimeout: -time.Second}},
		{"ClientOptions.InitializeTimeout", ClientOptions{InitializeTimeout: -1}},
		{"ClientOptions.ReconnectWindow", ClientOptions{ReconnectWindow: -1}},
		{"ClientOptions.MaxMessageBytes", ClientOptions{MaxMessageBytes: -1}},
	} {
		if _, err := Dial(ctx, url, &c.opts); optionOf(err) != c.option {
			t.Errorf("Dial with %s: %v; want an *OptionError naming it", c.option, err)
		}
		if _, err := NewClient(ctx, nil, &c.opts); optionOf(err) != c.option {
			t.Errorf("NewClient with %s: %v; want an *OptionError naming it", c.option, err)
		}
	}
	select {
	case <-accepted:
		t.Errorf("a Dial with bad options connected")
	default:
	}
}

// badServices: one case per check of Service and Backoff.
var badServices = []struct {
	option string // under "Service."
	edit   func(s *Service)
}{
	{"Name", func(s *Service) { s.Name = "" }},
	{"Name", func(s *Service) { s.Name = "a#1" }},
	{"Restart", func(s *Service) { s.Restart = "sometimes" }},
	{"Backoff.Initial", func(s *Service) { s.Backoff.Initial = -1 }},
	{"Backoff.Max", func(s *Service) { s.Backoff.Max = -1 }},
	{"Backoff.Max", func(s *Service) { s.Backoff.Initial, s.Backoff.Max = time.Minute, time.Second }},
	{"Backoff.Max", func(s *Service) { s.Backoff.Initial = time.Minute }}, // above the default Max, 30 s
	{"Backoff.ResetAfter", func(s *Service) { s.Backoff.ResetAfter = -1 }},
	{"Backoff.Jitter", func(s *Service) { s.Backoff.Jitter = 1 }},
	{"Backoff.Jitter", func(s *Service) { s.Backoff.Jitter = -0.1 }},
	{"Backoff.Jitter", func(s *Service) { s.Backoff.Jitter = math.NaN() }},
	{"Window", func(s *Service) { s.Window = -1 }},
	{"StopGrace", func(s *Service) { s.StopGrace = -1 }},
	{"Spec.Dir", func(s *Service) { s.Spec.Dir = "rel" }},
	{"Spec.Argv", func(s *Service) { s.Spec.Argv = nil }},
}

// A Service is checked the same by Supervisor.Add and Config.Validate
// (Config.Services[i]); the error names the service too.
func TestServiceValidated(t *testing.T) {
	good := Service{Name: "web", Spec: Spec{Argv: []string{"true"}, Dir: "/"}}
	if err := NewSupervisor(nil, nil).Add(good); err != nil {
		t.Fatalf("a good service: %v", err)
	}
	for _, c := range badServices {
		svc := good
		c.edit(&svc)
		err := NewSupervisor(nil, nil).Add(svc)
		if got := optionOf(err); got != "Service."+c.option {
			t.Errorf("Add: %v; want an *OptionError naming Service.%s", err, c.option)
		}
		if svc.Name != "" && err != nil && !strings.Contains(err.Error(), `"`+svc.Name+`"`) {
			t.Errorf("Add: %v does not name the service %q", err, svc.Name)
		}
		err = Config{Services: []Service{good, svc}}.Validate()
		if got := optionOf(err); got != "Config.Services[1]."+c.option {
			t.Errorf("Config.Validate: %v; want an *OptionError naming Config.Services[1].%s", err, c.option)
		}
	}
	err := Config{Services: []Service{good, good}}.Validate()
	if optionOf(err) != "Config.Services[1].Name" {
		t.Errorf("a name used twice: %v", err)
	}
}

// A Config is checked by Validate; NewLocal's Starts and a Server's Serve
// return the same error, so embedded and served agree.
func TestConfigValidated(t *testing.T) {
	for _, c := range []struct {
		option string
		cfg    Config
	}{
		{"Config.RetainBytes", Config{RetainBytes: -1}},
		{"Config.RetainChunks", Config{RetainChunks: -1}},
		{"Config.ShutdownGrace", Config{ShutdownGrace: -1}},
		{"Config.MaxProcesses", Config{MaxProcesses: -1}},
		{"Config.MaxMessageBytes", Config{MaxMessageBytes: -1}},
		{"Config.MaxHTTPBodyBytes", Config{MaxHTTPBodyBytes: -1}},
		{"Config.FDReserve", Config{MaxOpenFiles: 100, FDReserve: 100}},
		{"Config.AuthToken", Config{AuthToken: "tok\n"}},
		{"Config.AllowedOrigins[0]", Config{AllowedOrigins: []string{""}}},
		{"Config.FsRoots", Config{FsRoots: []string{"/no/such/dir/at/all"}}},
		{"Config.DefaultSandbox", Config{DefaultSandbox: "tight"}},
		{"Config.Containment", Config{Containment: "jail"}},
		{"Config.NetworkDeny[1]", Config{NetworkDeny: []string{"**.ok.test", "*"}}},
		{"Config.NetworkDeny[0]", Config{NetworkDeny: []string{"a.*.test"}}},
	} {
		if err := c.cfg.Validate(); optionOf(err) != c.option {
			t.Errorf("Validate: %v; want an *OptionError naming %s", err, c.option)
			continue
		}
		l := NewLocal(c.cfg)
		_, err := l.Start(ctxT(t), Spec{Argv: []string{"true"}, Dir: "/"})
		_ = l.Close()
		if optionOf(err) != c.option {
			t.Errorf("Local.Start with %s: %v; want the Validate error", c.option, err)
		}
		srv := NewServer(c.cfg)
		ln, lerr := net.Listen("tcp", "127.0.0.1:0")
		if lerr != nil {
			t.Fatal(lerr)
		}
		err = srv.Serve(ln)
		_ = srv.Close()
		_ = ln.Close()
		if optionOf(err) != c.option {
			t.Errorf("Server.Serve with %s: %v; want the Validate error", c.option, err)
		}
	}
	// What is documented as meaningful stays valid.
	if err := (Config{DetachTTL: -1, ClosedRetention: -1, MaxConnections: -1, SlowConsumerTimeout: -1, NetworkDeny: []string{"evil.test", "*.evil.test", "**.evil.test", "10.0.0.1"}}).Validate(); err != nil {
		t.Errorf("documented negatives: %v", err)
	}
}
