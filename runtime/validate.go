package runtime

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/runtimed/runtimed/actors"
	"github.com/runtimed/runtimed/actors/fsops"
	"github.com/runtimed/runtimed/actors/netproxy"
	"github.com/runtimed/runtimed/actors/policy"
	"github.com/runtimed/runtimed/wire"

	"github.com/runtimed/runtimed/actors/sandbox"
)

// Validation of every option this package takes, in one place. Each
// method or constructor calls the check of its options first, before
// anything runs or goes on the wire, so Local and a Client refuse the
// same mistakes with the same *OptionError (a Client never depends on
// the server's wording). Where a server checks the same field (process/
// start's argv, cwd, env, envPolicy, sandbox), its -32602 names the
// protocol's name of the field: argv, cwd, env, envPolicy.inherit,
// sandbox.workspaceRoots[i], sandbox...entries[i].

// OptionError is an option a function of this package refused before
// doing anything (nothing was started, nothing was sent). It matches
// ErrInvalidOption. Its text reads "runtime: invalid Spec.Size: rows and
// cols must both be positive, or both zero, got 0x80".
type OptionError struct {
	// Option is the option and field as Go spells them: "Spec.Size",
	// "Spec.Sandbox.FileSystem[2].Path", "ClientOptions.ConnectTimeout".
	Option string
	// Reason says what is wrong, what is allowed and what was given.
	Reason string
}

// Error returns "runtime: invalid OPTION: REASON".
func (e *OptionError) Error() string { return "runtime: invalid " + e.Option + ": " + e.Reason }

// Is makes errors.Is(err, ErrInvalidOption) hold.
func (e *OptionError) Is(target error) bool { return target == ErrInvalidOption }

func invalid(option, format string, args ...any) error {
	return &OptionError{Option: option, Reason: fmt.Sprintf(format, args...)}
}

// validate is called by Process.Read on both backends.
func (o ReadOptions) validate() error {
	switch {
	case o.MaxBytes < 0:
		return invalid("ReadOptions.MaxBytes", "must not be negative (0 means no limit), got %d", o.MaxBytes)
	case o.Wait < 0:
		return invalid("ReadOptions.Wait", "must not be negative (0 answers at once), got %v", o.Wait)
	}
	return nil
}

// validate is called by Start on both backends (Local.Start and
// Client.Start) before anything else.
func (spec Spec) validate() error { return spec.check("Spec") }

// check validates spec; at names it ("Spec", "Service.Spec").
func (spec Spec) check(at string) error {
	if err := text(at+".ID", spec.ID); err != nil {
		return err
	}
	if len(spec.Argv) == 0 {
		return invalid(at+".Argv", "must not be empty: Argv[0] is the command (process/start argv)")
	}
	if spec.Argv[0] == "" {
		return invalid(at+".Argv[0]", `must name the command, got ""`)
	}
	for i, a := range spec.Argv {
		if err := cstring(fmt.Sprintf("%s.Argv[%d]", at, i), a); err != nil {
			return err
		}
	}
	if err := cstring(at+".Arg0", spec.Arg0); err != nil {
		return err
	}
	if spec.Dir == "" {
		return invalid(at+".Dir", "is required: an absolute path or file: URI (process/start cwd)")
	}
	if err := absolute(at+".Dir", spec.Dir); err != nil {
		return err
	}
	if err := envMap(at+".Env", spec.Env); err != nil {
		return err
	}
	if spec.Network != nil {
		if err := spec.Network.validate(); err != nil {
			return err
		}
	}
	if err := spec.EnvPolicy.check(at + ".EnvPolicy"); err != nil {
		return err
	}
	if s := spec.Size; (s.Rows == 0) != (s.Cols == 0) {
		return invalid(at+".Size", "rows and cols must both be positive, or both zero for 24x80, got %dx%d", s.Rows, s.Cols)
	}
	if err := spec.Sandbox.check(at + ".Sandbox"); err != nil {
		return err
	}
	if err := spec.Limits.check(at + ".Limits"); err != nil {
		return err
	}
	if m := spec.Metadata; m != nil {
		if err := text(at+".Metadata.ThreadID", m.ThreadID); err != nil {
			return err
		}
		if err := text(at+".Metadata.ToolCallID", m.ToolCallID); err != nil {
			return err
		}
	}
	return nil
}

// checkCmdSpec checks the Spec a Cmd builds, naming the Cmd's fields
// ("Cmd.Args[0]", "Cmd.Env[\"A=B\"]") rather than the Spec's.
func checkCmdSpec(spec Spec) error {
	err := spec.check("Cmd")
	if oe, ok := err.(*OptionError); ok && strings.HasPrefix(oe.Option, "Cmd.Argv") {
		oe.Option = "Cmd.Args" + strings.TrimPrefix(oe.Option, "Cmd.Argv")
	}
	return err
}

// text refuses a string JSON cannot carry as it is: invalid UTF-8 would
// reach a server as U+FFFD, so Local and a Client would disagree.
func text(option, s string) error {
	if !utf8.ValidString(s) {
		return invalid(option, "must be valid UTF-8 (the protocol carries text), got %q", s)
	}
	return nil
}

// cstring is text that also goes to the kernel as a C string.
func cstring(option, s string) error {
	if strings.IndexByte(s, 0) >= 0 {
		return invalid(option, "must not contain NUL (the kernel takes C strings), got %q", s)
	}
	return text(option, s)
}

// absolute accepts an absolute path or a file: URI with no host other
// than localhost, as a server does.
func absolute(option, p string) error {
	if err := cstring(option, p); err != nil {
		return err
	}
	if _, err := policy.NativePath(p); err != nil {
		return invalid(option, "want an absolute path or file: URI: %v", err)
	}
	return nil
}

// envMap checks environment names (non-empty, without '=' or NUL, as a
// server's env and envPolicy.set) and values (without NUL), in sorted
// order so the error is stable.
func envMap(option string, env map[string]string) error {
	names := make([]string, 0, len(env))
	for k := range env {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		at := fmt.Sprintf("%s[%q]", option, k)
		if !actors.ValidEnvName(k) {
			return invalid(at, "a name must not be empty or contain '=' or NUL")
		}
		if err := cstring(at, env[k]); err != nil {
			return err
		}
		if err := text(at, k); err != nil {
			return err
		}
	}
	return nil
}

func (p *EnvPolicy) check(at string) error {
	if p == nil {
		return nil
	}
	switch p.Inherit {
	case "", "all", "core", "none":
	default:
		return invalid(at+".Inherit", `want "all" (or empty), "core" or "none", got %q (process/start envPolicy.inherit)`, p.Inherit)
	}
	for field, pats := range map[string][]string{"Exclude": p.Exclude, "IncludeOnly": p.IncludeOnly} {
		for i, pat := range pats {
			if pat == "" {
				return invalid(fmt.Sprintf("%s.%s[%d]", at, field, i), `is empty, which matches no name: want a glob of * and ? ("*TOKEN*")`)
			}
			if err := text(fmt.Sprintf("%s.%s[%d]", at, field, i), pat); err != nil {
				return err
			}
		}
	}
	return envMap(at+".Set", p.Set)
}

func (s *Sandbox) check(at string) error {
	if s == nil {
		return nil
	}
	if len(s.FileSystem) > 0 && !s.RestrictFS {
		return invalid(at+".RestrictFS", "is false, so FileSystem (%d rules) would not apply: set RestrictFS (an empty FileSystem with RestrictFS reaches nothing)", len(s.FileSystem))
	}
	for i, r := range s.WorkspaceRoots {
		if err := absolute(fmt.Sprintf("%s.WorkspaceRoots[%d]", at, i), r); err != nil {
			return err
		}
	}
	for i, r := range s.FileSystem {
		if err := r.check(fmt.Sprintf("%s.FileSystem[%d]", at, i)); err != nil {
			return err
		}
	}
	return nil
}

func (r FSRule) check(at string) error {
	set := 0
	for _, v := range []string{r.Special, r.Path, r.Glob} {
		if v != "" {
			set++
		}
	}
	if set != 1 {
		return invalid(at, "set exactly one of Special, Path and Glob, got %d", set)
	}
	switch r.Access {
	case FSRead, FSWrite, FSDeny:
	default:
		return invalid(at+".Access", "want FSRead, FSWrite or FSDeny, got %q", r.Access)
	}
	if r.Subpath != "" && r.Special == "" {
		return invalid(at+".Subpath", "only applies with Special, got %q", r.Subpath)
	}
	switch {
	case r.Special != "":
		switch r.Special {
		case FSRoot, FSProjectRoots, FSSlashTmp, FSTmpdir:
		default:
			return invalid(at+".Special", "want FSRoot, FSProjectRoots, FSSlashTmp or FSTmpdir, got %q", r.Special)
		}
		if sp := r.Subpath; sp != "" {
			if err := cstring(at+".Subpath", sp); err != nil {
				return err
			}
			if filepath.IsAbs(sp) || slices.Contains(strings.Split(filepath.ToSlash(sp), "/"), "..") {
				return invalid(at+".Subpath", "want a relative path under the special path, without '..', got %q", sp)
			}
		}
	case r.Path != "":
		return absolute(at+".Path", r.Path)
	default:
		if r.Access != FSDeny {
			return invalid(at+".Access", "a Glob rule must be FSDeny, got %q", r.Access)
		}
		if err := cstring(at+".Glob", r.Glob); err != nil {
			return err
		}
		for _, seg := range strings.Split(r.Glob, "/") {
			if _, err := path.Match(seg, ""); err != nil {
				return invalid(at+".Glob", "bad pattern %q: %v", r.Glob, err)
			}
		}
	}
	return nil
}

// check: every limit fits the kernel's signed 64-bit interfaces.
func (l Limits) check(at string) error {
	for _, f := range []struct {
		name string
		v    uint64
	}{{"MemoryBytes", l.MemoryBytes}, {"Pids", l.Pids}, {"CPUSeconds", l.CPUSeconds}, {"OpenFiles", l.OpenFiles}, {"FileSizeBytes", l.FileSizeBytes}} {
		if f.v > math.MaxInt64 {
			return invalid(at+"."+f.name, "at most %d (0 sets no limit), got %d", uint64(math.MaxInt64), f.v)
		}
	}
	return nil
}

// validate is called by Walk on both backends.
func (o WalkOptions) validate() error {
	for _, f := range []struct {
		name      string
		v, lo, hi int
	}{
		{"MaxDepth", o.MaxDepth, 0, wire.FsWalkMaxDepth},
		{"MaxDirectories", o.MaxDirectories, 1, wire.FsWalkMaxDirectories},
		{"MaxEntries", o.MaxEntries, 1, wire.FsWalkMaxEntries},
	} {
		if f.v < f.lo || f.v > f.hi {
			return invalid("WalkOptions."+f.name, "want %d to %d, got %d", f.lo, f.hi, f.v)
		}
	}
	return nil
}

// validate is called by Dial and NewClient.
func (o *ClientOptions) validate() error {
	if o == nil {
		return nil
	}
	if err := headerValue("ClientOptions.Token", o.Token); err != nil {
		return err
	}
	for name, vals := range o.Header {
		if name == "" || strings.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r >= 0x7f || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r) }) {
			return invalid(fmt.Sprintf("ClientOptions.Header[%q]", name), "not an HTTP header name (a token)")
		}
		for _, v := range vals {
			if err := headerValue(fmt.Sprintf("ClientOptions.Header[%q]", name), v); err != nil {
				return err
			}
		}
	}
	if err := text("ClientOptions.ClientName", o.ClientName); err != nil {
		return err
	}
	if err := text("ClientOptions.ResumeSessionID", o.ResumeSessionID); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"ConnectTimeout", o.ConnectTimeout}, {"InitializeTimeout", o.InitializeTimeout}, {"ReconnectWindow", o.ReconnectWindow}} {
		if f.d < 0 {
			return invalid("ClientOptions."+f.name, "must not be negative (0 means the default), got %v", f.d)
		}
	}
	if o.MaxMessageBytes < 0 {
		return invalid("ClientOptions.MaxMessageBytes", "must not be negative (0 means 64 MiB), got %d", o.MaxMessageBytes)
	}
	return nil
}

// headerValue refuses what an HTTP header cannot carry: CR, LF and other
// control characters but tab.
func headerValue(option, v string) error {
	if strings.ContainsFunc(v, func(r rune) bool { return (r < ' ' && r != '\t') || r == 0x7f }) {
		return invalid(option, "must not contain control characters (an HTTP header carries it)")
	}
	return nil
}

// check validates svc (Supervisor.Add, Config.Services); at names it.
func (svc Service) check(at string) error {
	name := fmt.Sprintf("service %q: ", svc.Name)
	if svc.Name == "" || strings.ContainsAny(svc.Name, "# /") || !utf8.ValidString(svc.Name) {
		return invalid(at+".Name", "want a non-empty name without '#', '/' or spaces (its processes are NAME#N), got %q", svc.Name)
	}
	switch svc.Restart {
	case "", RestartNever, RestartOnFailure, RestartAlways:
	default:
		return invalid(at+".Restart", name+"want RestartNever, RestartOnFailure (or empty) or RestartAlways, got %q", svc.Restart)
	}
	if err := svc.Backoff.check(at+".Backoff", name); err != nil {
		return err
	}
	if svc.Window < 0 {
		return invalid(at+".Window", name+"must not be negative (0 means 60 s), got %v", svc.Window)
	}
	if svc.StopGrace < 0 {
		return invalid(at+".StopGrace", name+"must not be negative (0 means 5 s), got %v", svc.StopGrace)
	}
	spec := svc.Spec
	spec.ID = "" // ignored: the supervisor names its processes
	if err := spec.check(at + ".Spec"); err != nil {
		err.(*OptionError).Reason = name + err.(*OptionError).Reason
		return err
	}
	return nil
}

func (b Backoff) check(at, name string) error {
	for _, f := range []struct {
		field string
		d     time.Duration
	}{{"Initial", b.Initial}, {"Max", b.Max}, {"ResetAfter", b.ResetAfter}} {
		if f.d < 0 {
			return invalid(at+"."+f.field, name+"must not be negative (0 means the default), got %v", f.d)
		}
	}
	if b.Jitter < 0 || b.Jitter >= 1 || math.IsNaN(b.Jitter) {
		return invalid(at+".Jitter", name+"want a fraction in [0, 1) (0 means 0.2), got %v", b.Jitter)
	}
	initial, most := cmp.Or(b.Initial, defaultBackoffInitial), cmp.Or(b.Max, defaultBackoffMax)
	if most < initial {
		return invalid(at+".Max", name+"must be at least Initial (%v), got %v (0 means %v)", initial, b.Max, defaultBackoffMax)
	}
	return nil
}

// validate is Config.Validate's body; NewServer and NewLocal call it on
// the Config as given (before defaults).
func (c Config) validate() error {
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"RetainBytes", int64(c.RetainBytes)}, {"RetainChunks", int64(c.RetainChunks)}, {"ShutdownGrace", int64(c.ShutdownGrace)},
		{"MaxProcesses", int64(c.MaxProcesses)}, {"MaxMessageBytes", int64(c.MaxMessageBytes)}, {"MaxHTTPBodyBytes", c.MaxHTTPBodyBytes},
	} {
		if f.v < 0 {
			return invalid("Config."+f.name, "must not be negative (0 means the default), got %d", f.v)
		}
	}
	if c.SandboxLevel != "" {
		if _, err := sandbox.ParseLevel(c.SandboxLevel); err != nil {
			return invalid("Config.SandboxLevel", "%v", err)
		}
	}
	if c.SandboxPidNamespace != "" {
		if _, err := sandbox.ParsePidMode(c.SandboxPidNamespace); err != nil {
			return invalid("Config.SandboxPidNamespace", "%v", err)
		}
	}
	msgLimit := int64(c.MaxMessageBytes)
	if msgLimit == 0 {
		msgLimit = DefaultMaxMessageBytes
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"MaxInboundBytes", c.MaxInboundBytes}, {"ConnInboundBytes", c.ConnInboundBytes}} {
		if f.v > 0 && f.v < msgLimit {
			return invalid("Config."+f.name, "must be at least MaxMessageBytes (%d): a message being read is charged that much, got %d", msgLimit, f.v)
		}
	}
	if c.MaxOpenFiles > 0 && c.FDReserve >= c.MaxOpenFiles {
		return invalid("Config.FDReserve", "must be below MaxOpenFiles (%d), got %d", c.MaxOpenFiles, c.FDReserve)
	}
	if err := headerValue("Config.AuthToken", c.AuthToken); err != nil {
		return err
	}
	for i, o := range c.AllowedOrigins {
		if o == "" {
			return invalid(fmt.Sprintf("Config.AllowedOrigins[%d]", i), `is empty: want an Origin value such as "https://app.example"`)
		}
	}
	if _, err := fsops.NewRoots(c.FsRoots); err != nil {
		return invalid("Config.FsRoots", "%v", err)
	}
	for i, p := range c.NetworkDeny {
		if err := netproxy.ParsePattern(p, false); err != nil {
			var pe *netproxy.PatternError
			errors.As(err, &pe)
			return invalid(fmt.Sprintf("Config.NetworkDeny[%d]", i), "pattern %q: %s", p, pe.Reason)
		}
	}
	switch c.DefaultSandbox {
	case actors.FloorNone, actors.FloorReadOnly, actors.FloorWorkspaceWrite:
	default:
		return invalid("Config.DefaultSandbox", "want %q, %q or empty, got %q", actors.FloorReadOnly, actors.FloorWorkspaceWrite, c.DefaultSandbox)
	}
	switch c.Containment {
	case ContainAuto, ContainSubreaper, ContainProcessGroup:
	default:
		return invalid("Config.Containment", "want ContainSubreaper (%q), ContainProcessGroup (%q) or empty, got %q", ContainSubreaper, ContainProcessGroup, c.Containment)
	}
	seen := map[string]bool{}
	for i, svc := range c.Services {
		at := fmt.Sprintf("Config.Services[%d]", i)
		if err := svc.check(at); err != nil {
			return err
		}
		if seen[svc.Name] {
			return invalid(at+".Name", "%q is used twice", svc.Name)
		}
		seen[svc.Name] = true
	}
	return nil
}
