package actors

import (
	"encoding/json"
	"os"
	"path/filepath"

	"github.com/runtimed/runtimed/actors/codexhome"
	"github.com/runtimed/runtimed/actors/fsops"
	"github.com/runtimed/runtimed/actors/policy"
	"github.com/runtimed/runtimed/wire"
)

// Executor configuration and discovery (PROTOCOL.md section 7.6). The three
// methods read the disk, so they run on the connection's fs worker, in
// arrival order with the fs/* requests, never on the reader.

// isCodexHomeMethod reports whether method is served by codexHomeRequest.
func isCodexHomeMethod(method string) bool {
	switch method {
	case wire.MethodEnvironmentConfigRead, wire.MethodCapabilitiesDiscoverV2, wire.MethodCapabilityRootsDiscoverV1:
		return true
	}
	return false
}

// codexHomeRequest answers one of the three methods (on the fs worker).
func (c *conn) codexHomeRequest(msg wire.Message) (any, *wire.Error) {
	switch msg.Method {
	case wire.MethodEnvironmentConfigRead:
		return EnvironmentConfigRead(msg.Params, c.sup.cfg.CodexSystemDir, os.Environ())
	case wire.MethodCapabilitiesDiscoverV2:
		return DiscoverV2(msg.Params, c.sup.cfg.CodexSystemDir, os.Environ())
	default:
		return DiscoverV1(msg.Params, c.sup.cfg.FsRoots)
	}
}

// cwdParam checks a request's cwd: an absolute path or a file: URI.
func cwdParam(cwd string) *wire.Error {
	if _, err := policy.NativePath(cwd); err != nil {
		return cwdError(cwd, err)
	}
	return nil
}

// EnvironmentConfigRead answers environmentConfig/read from the executor
// environment env (its CODEX_HOME and HOME) and the system directory
// systemDir ("" is /etc/codex).
func EnvironmentConfigRead(raw json.RawMessage, systemDir string, env []string) (any, *wire.Error) {
	var p wire.EnvironmentConfigReadParams
	if e := wire.DecodeParams(raw, &p); e != nil {
		return nil, e
	}
	if err := codexhome.ValidateSelectors(p.ConfigPaths, p.RequirementsPaths); err != nil {
		return nil, wire.Errorf(wire.CodeInvalidParams, "%s", err.Error())
	}
	if e := cwdParam(p.Cwd); e != nil {
		return nil, e
	}
	home, err := codexhome.CodexHome(env)
	if err != nil {
		return nil, wire.Errorf(wire.CodeInternal, "failed to find Codex home: %v", err)
	}
	cfg := codexhome.ReadConfig(systemDir, home, p.ConfigPaths, p.RequirementsPaths)
	res := wire.EnvironmentConfigReadResult{
		CodexHomeDir: fileURI(cfg.CodexHome),
		Config:       wireStack(cfg.Config),
		Requirements: wireStack(cfg.Requirements),
	}
	if h := codexhome.HomeDir(env); h != "" {
		u := fileURI(h)
		res.UserHomeDir = &u
	}
	if cfg.Hostname != "" {
		res.Hostname = &cfg.Hostname
	}
	return res, nil
}

func wireStack(s codexhome.Stack) wire.EnvironmentConfigLayerStack {
	out := wire.EnvironmentConfigLayerStack{Layers: []wire.EnvironmentConfigLayer{}, CloudInsertionIndex: s.CloudInsertionIndex}
	for _, l := range s.Layers {
		out.Layers = append(out.Layers, wire.EnvironmentConfigLayer{Source: l.Source, BaseDir: fileURI(l.BaseDir), TOML: l.TOML})
	}
	for _, e := range s.Errors {
		out.Errors = append(out.Errors, wire.EnvironmentConfigLayerError{Source: e.Source, Message: e.Message})
	}
	return out
}

// DiscoverV2 answers capabilities/discoverV2: the skills and plugins
// installed on the executor, every read held to the request's sandbox.
func DiscoverV2(raw json.RawMessage, systemDir string, env []string) (any, *wire.Error) {
	var p wire.DiscoverV2Params
	if e := wire.DecodeParams(raw, &p); e != nil {
		return nil, e
	}
	if e := cwdParam(p.Cwd); e != nil {
		return nil, e
	}
	may, werr := fsops.ReadCheck(p.Sandbox)
	if werr != nil {
		return nil, werr
	}
	home, err := codexhome.CodexHome(env)
	if err != nil {
		return nil, wire.Errorf(wire.CodeInternal, "failed to find Codex home: %v", err)
	}
	inv := codexhome.Scanner{MayRead: physical(may, fsops.Roots{})}.Discover(home, codexhome.HomeDir(env), systemDir)
	res := wire.DiscoverV2Result{Plugins: []wire.ExecutorPlugin{}, Skills: wireSkills(inv.Skills), Warnings: inv.Warnings}
	for _, pl := range inv.Plugins {
		res.Plugins = append(res.Plugins, wire.ExecutorPlugin{
			ID: pl.ID, DisplayName: pl.DisplayName, Version: pl.Version, Root: pl.Root,
			Files: wirePluginFiles(pl.Files), Skills: wireSkills(pl.Skills),
		})
	}
	return res, nil
}

func wireSkills(ss []codexhome.Skill) []wire.ExecutorSkill {
	out := make([]wire.ExecutorSkill, 0, len(ss))
	for _, s := range ss {
		w := wire.ExecutorSkill{Name: s.Name, Description: s.Description, ShortDescription: s.ShortDescription, Path: s.Path}
		if s.Root != nil {
			w.DiscoveryRoot = &wire.DiscoveryRoot{ID: s.Root.ID, Path: s.Root.Path}
		}
		if s.HasDependencies {
			w.Dependencies = &wire.SkillDependencies{Tools: []wire.SkillToolDependency{}}
			for _, t := range s.Dependencies {
				w.Dependencies.Tools = append(w.Dependencies.Tools, wire.SkillToolDependency{
					Type: t.Type, Value: t.Value, Description: t.Description, Transport: t.Transport,
					Command: t.Command, URL: t.URL, OAuthCallbackPort: t.OAuthCallbackPort,
				})
			}
		}
		if s.Policy != nil {
			w.Policy = &wire.SkillPolicy{AllowImplicitInvocation: s.Policy.AllowImplicitInvocation, Products: s.Policy.Products}
		}
		out = append(out, w)
	}
	return out
}

func wireText(f *codexhome.TextFile) *wire.CapabilityTextFile {
	if f == nil {
		return nil
	}
	return &wire.CapabilityTextFile{Path: f.Path, Contents: f.Contents}
}

func wirePluginFiles(f codexhome.PluginFiles) wire.PluginFiles {
	return wire.PluginFiles{Manifest: *wireText(&f.Manifest), MCPConfig: wireText(f.MCPConfig), AppsConfig: wireText(f.AppsConfig)}
}

// physical checks the path a discovery read would reach: its symlinks
// resolved (as fs/* requests check their physical targets), so a link
// inside an allowed directory does not lead the walk into a denied one.
// The path must pass the request's sandbox both as named and as resolved,
// and lie within the server's fs roots (zero Roots: anywhere).
func physical(may func(string) bool, roots fsops.Roots) func(string) bool {
	return func(p string) bool {
		if !may(p) {
			return false
		}
		if resolved, err := filepath.EvalSymlinks(p); err == nil && resolved != p {
			if !may(resolved) {
				return false
			}
			p = resolved
		}
		return roots.Contains(p)
	}
}

// maxDiscoverRoots bounds the roots of one capabilityRoots/discoverV1 (each
// walk is itself bounded by codexhome's Scanner limits).
const maxDiscoverRoots = 256

// DiscoverV1 answers capabilityRoots/discoverV1: what each requested root
// holds, with its files' contents. Each root's reads are held to its own
// sandbox and to the server's fs roots; a root that cannot be read is that
// root's error, never the request's.
func DiscoverV1(raw json.RawMessage, roots fsops.Roots) (any, *wire.Error) {
	var p wire.DiscoverV1Params
	if e := wire.DecodeParams(raw, &p); e != nil {
		return nil, e
	}
	if len(p.Roots) > maxDiscoverRoots {
		return nil, wire.Errorf(wire.CodeInvalidParams, "at most %d capability roots are allowed", maxDiscoverRoots)
	}
	res := wire.DiscoverV1Result{Roots: make([]wire.CapabilityRootResult, 0, len(p.Roots))}
	for _, r := range p.Roots {
		out := wire.CapabilityRootResult{ID: r.ID, Path: r.Path, Skills: []wire.DiscoveredSkillFiles{}, NamespaceManifests: []wire.CapabilityTextFile{}, Warnings: []string{}}
		fail := func(msg string) {
			out.Error = &msg
			res.Roots = append(res.Roots, out)
		}
		path, err := policy.NativePath(r.Path)
		if err != nil {
			fail("capability root " + pathPredicate(err))
			continue
		}
		may, werr := fsops.ReadCheck(r.Sandbox)
		if werr != nil {
			fail(werr.Message)
			continue
		}
		scan := codexhome.Scanner{MayRead: physical(may, roots)}.ScanRoot(path)
		if scan.Err != "" {
			fail(scan.Err)
			continue
		}
		if scan.Plugin != nil {
			pf := wirePluginFiles(*scan.Plugin)
			out.Plugin = &pf
		}
		for _, s := range scan.Skills {
			out.Skills = append(out.Skills, wire.DiscoveredSkillFiles{Instructions: *wireText(&s.Instructions), Metadata: wireText(s.Metadata)})
		}
		for _, m := range scan.NamespaceManifests {
			out.NamespaceManifests = append(out.NamespaceManifests, *wireText(&m))
		}
		out.Warnings = append(out.Warnings, scan.Warnings...)
		res.Roots = append(res.Roots, out)
	}
	return res, nil
}
