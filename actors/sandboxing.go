package actors

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/runtimed/runtimed/actors/contain"
	"github.com/runtimed/runtimed/actors/sandbox"
	"github.com/runtimed/runtimed/wire"
)

// Sandbox floors an operator can set (runtimed serve --default-sandbox).
const (
	FloorNone           = ""
	FloorReadOnly       = "read-only"
	FloorWorkspaceWrite = "workspace-write"
)

// globScanMax bounds the expansion of one deny glob: directories deep and
// entries visited.
const (
	globMaxDepth   = 8
	globMaxVisited = 20000
)

// SandboxFor turns a start's sandbox (nil: none asked) into the policy to
// enforce, applying the operator's floor: DefaultSandbox for starts that
// carry none, RequireSandbox refusing them. dir is the start's cwd and env
// the child's environment (for tmpdir). A nil policy means unconfined.
func (s *Supervisor) SandboxFor(sb *wire.Sandbox, dir string, env []string) (*sandbox.Policy, *wire.Error) {
	if sb == nil {
		switch {
		case s.cfg.DefaultSandbox != FloorNone:
			sb = FloorSandbox(s.cfg.DefaultSandbox, dir)
		case s.cfg.RequireSandbox:
			return nil, wire.Errorf(wire.CodeInvalidParams, "this server requires a sandbox on every process (runtimed serve --require-sandbox): send process/start.sandbox with managed permissions")
		default:
			return nil, nil
		}
	}
	p, werr := ResolveSandbox(sb, dir, env)
	if werr != nil {
		return nil, werr
	}
	if err := s.cfg.Isolation.Host.Check(p); err != nil {
		return nil, wire.Errorf(wire.CodeInvalidParams, "%s", err.Error())
	}
	return p, nil
}

// FloorSandbox is the policy a floor name stands for, with dir as the
// project root: Codex's read-only and workspace-write shapes.
func FloorSandbox(floor, dir string) *wire.Sandbox {
	special := func(kind, access string) wire.SandboxEntry {
		return wire.SandboxEntry{Kind: "special", Special: kind, Access: access}
	}
	sb := &wire.Sandbox{Managed: true, Cwd: dir, WorkspaceRoots: []string{dir}, FS: &wire.SandboxFS{}}
	sb.FS.Entries = append(sb.FS.Entries, special("root", "read"))
	if floor == FloorWorkspaceWrite {
		sb.FS.Entries = append(sb.FS.Entries, special("project_roots", "write"), special("slash_tmp", "write"), special("tmpdir", "write"))
		for _, sub := range []string{".git", ".agents", ".codex", ".aws"} {
			e := special("project_roots", "read")
			e.Subpath, e.SkipMissing = sub, true
			sb.FS.Entries = append(sb.FS.Entries, e)
		}
	}
	return sb
}

// ResolveSandbox expands sb's special kinds, URIs and deny globs into
// absolute, symlink-free rules. Errors are -32602 and name the entry.
func ResolveSandbox(sb *wire.Sandbox, dir string, env []string) (*sandbox.Policy, *wire.Error) {
	if sb == nil || !sb.Managed {
		return nil, nil
	}
	p := &sandbox.Policy{Network: sb.Network}
	if sb.FS == nil {
		return p, nil
	}
	p.RestrictFS = true
	roots := sb.WorkspaceRoots
	if len(roots) == 0 {
		if sb.Cwd != "" {
			roots = []string{sb.Cwd}
		} else {
			roots = []string{dir}
		}
	}
	var rootPaths []string
	for i, r := range roots {
		rp, err := nativePath(r)
		if err != nil {
			return nil, wire.Errorf(wire.CodeInvalidParams, "invalid field `sandbox.workspaceRoots[%d]`: %v", i, err)
		}
		rootPaths = append(rootPaths, rp)
	}
	for i, e := range sb.FS.Entries {
		field := fmt.Sprintf("sandbox.permissions.file_system.entries[%d]", i)
		access := map[string]sandbox.Access{"read": sandbox.Read, "write": sandbox.Write, "deny": sandbox.Deny}[e.Access]
		var paths []string
		switch e.Kind {
		case "special":
			switch e.Special {
			case "root":
				paths = []string{"/"}
			case "project_roots":
				paths = rootPaths
			case "slash_tmp":
				paths = []string{"/tmp"}
			case "tmpdir":
				if t := envValue(env, "TMPDIR"); t != "" {
					paths = []string{t}
				}
			}
			if e.Subpath != "" {
				for j := range paths {
					paths[j] = filepath.Join(paths[j], e.Subpath)
				}
			}
		case "path":
			np, err := nativePath(e.Path)
			if err != nil {
				return nil, wire.Errorf(wire.CodeInvalidParams, "invalid field `%s.path.path`: %v", field, err)
			}
			paths = []string{np}
		case "glob_pattern":
			if e.Access != "deny" {
				return nil, wire.Errorf(wire.CodeInvalidParams, "invalid field `%s`: a glob_pattern entry must have access `deny` on this executor", field)
			}
			bases := []string{""}
			if !strings.HasPrefix(e.Pattern, "/") {
				bases = rootPaths
			}
			for _, b := range bases {
				m, err := expandGlob(path.Join(b, e.Pattern))
				if err != nil {
					return nil, wire.Errorf(wire.CodeInvalidParams, "invalid field `%s.path.pattern`: %v", field, err)
				}
				paths = append(paths, m...)
			}
			e.SkipMissing = true // a glob that matches nothing hides nothing
		}
		for _, raw := range paths {
			real, err := filepath.EvalSymlinks(raw)
			if err != nil {
				if e.SkipMissing && errors.Is(err, os.ErrNotExist) {
					continue
				}
				return nil, wire.Errorf(wire.CodeInvalidParams, "sandbox entry `%s`: %s: %v (use missing_path_behavior `skip` for optional paths)", field, raw, errUnwrapPath(err))
			}
			p.Rules = append(p.Rules, sandbox.Rule{Path: real, Access: access})
		}
	}
	return p, nil
}

// nativePath accepts an absolute path or a file: URI (empty or localhost host).
func nativePath(s string) (string, error) {
	if strings.HasPrefix(s, "file:") {
		u, err := url.Parse(s)
		if err != nil {
			return "", fmt.Errorf("not a valid file URI: %s", s)
		}
		if u.Host != "" && u.Host != "localhost" {
			return "", fmt.Errorf("file URI with foreign host %q: %s", u.Host, s)
		}
		s = u.Path
	}
	if !filepath.IsAbs(s) {
		return "", fmt.Errorf("path must be absolute: %s", s)
	}
	return filepath.Clean(s), nil
}

func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v
		}
	}
	return ""
}

// expandGlob lists the existing paths matching an absolute pattern where
// `**` matches any number of directories, bounded in depth and entries.
func expandGlob(pattern string) ([]string, error) {
	segs := strings.Split(strings.TrimPrefix(path.Clean(pattern), "/"), "/")
	for _, s := range segs {
		if _, err := path.Match(s, ""); err != nil {
			return nil, fmt.Errorf("bad pattern %q: %w", pattern, err)
		}
	}
	var out []string
	visited := 0
	var walk func(dir string, segs []string, depth int) error
	walk = func(dir string, segs []string, depth int) error {
		if len(segs) == 0 {
			out = append(out, dir)
			return nil
		}
		if depth > globMaxDepth+len(segs) {
			return nil
		}
		seg := segs[0]
		if seg == "**" {
			if err := walk(dir, segs[1:], depth); err != nil { // zero directories
				return err
			}
		} else if !strings.ContainsAny(seg, "*?[") {
			next := filepath.Join(dir, seg)
			if _, err := os.Lstat(next); err == nil {
				return walk(next, segs[1:], depth+1)
			}
			return nil
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			return nil // unreadable: nothing to hide from there
		}
		for _, ent := range ents {
			if visited++; visited > globMaxVisited {
				return fmt.Errorf("pattern %q visits more than %d entries", pattern, globMaxVisited)
			}
			next := filepath.Join(dir, ent.Name())
			if seg == "**" {
				if ent.IsDir() && depth < globMaxDepth {
					if err := walk(next, segs, depth+1); err != nil {
						return err
					}
				}
				continue
			}
			if ok, _ := path.Match(seg, ent.Name()); ok {
				if err := walk(next, segs[1:], depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk("/", segs, 0); err != nil {
		return nil, err
	}
	return dedupe(out), nil
}

func dedupe(ss []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// LimitsFrom converts process/start.limits.
func LimitsFrom(l *wire.StartLimits) contain.Limits {
	var out contain.Limits
	if l == nil {
		return out
	}
	get := func(p *uint64) uint64 {
		if p == nil {
			return 0
		}
		return *p
	}
	return contain.Limits{MemoryBytes: get(l.MemoryBytes), Pids: get(l.Pids), CPUSeconds: get(l.CPUSeconds),
		OpenFiles: get(l.OpenFiles), FileSizeBytes: get(l.FileSizeBytes)}
}

// spawnErrorCode maps a spawn failure: what the host cannot enforce for
// this request is -32602, everything else -32603.
func spawnErrorCode(err error) int {
	if errors.Is(err, sandbox.ErrUnavailable) || errors.Is(err, contain.ErrLimitUnavailable) || errors.Is(err, sandbox.ErrUnsupported) {
		return wire.CodeInvalidParams
	}
	return wire.CodeInternal
}

// SpawnErrorCode is spawnErrorCode for package runtime's Local.
func SpawnErrorCode(err error) int { return spawnErrorCode(err) }

// SandboxType is process/start's sandboxType for an enforced policy.
func SandboxType(p *sandbox.Policy) string {
	if p != nil {
		return wire.SandboxTypeLinux
	}
	return wire.SandboxTypeNone
}
