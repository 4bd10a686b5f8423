package policy

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/runtimed/runtimed/actors/sandbox"
	"github.com/runtimed/runtimed/wire"
)

// Sandbox floors an operator can set (runtimed serve --default-sandbox).
const (
	FloorNone           = ""
	FloorReadOnly       = "read-only"
	FloorWorkspaceWrite = "workspace-write"
)

// globMaxDepth and globMaxVisited bound the expansion of one deny glob:
// directories deep and entries visited (a variable so that a test can
// reach it without making 20000 files).
const globMaxDepth = 8

var globMaxVisited = 20000

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

// Resolve expands sb's special kinds, URIs and deny globs into
// absolute, symlink-free rules. Errors are -32602 and name the entry.
func Resolve(sb *wire.Sandbox, dir string, env []string) (*sandbox.Policy, *wire.Error) {
	return resolve(sb, dir, env, false)
}

// ResolveForCheck is Resolve for a path check in the daemon (fs requests),
// where no kernel object is made from the rules: a missing path is kept
// (its existing prefix resolved, the rest appended), so it governs what
// may be created there, instead of refusing the request.
func ResolveForCheck(sb *wire.Sandbox, dir string, env []string) (*sandbox.Policy, *wire.Error) {
	return resolve(sb, dir, env, true)
}

func resolve(sb *wire.Sandbox, dir string, env []string, keepMissing bool) (*sandbox.Policy, *wire.Error) {
	if sb == nil || !sb.Managed {
		return nil, nil
	}
	p := &sandbox.Policy{Network: sb.Network}
	if sb.FS == nil {
		return p, nil
	}
	p.RestrictFS = true
	// Project roots: workspaceRoots, else the sandbox's cwd, else dir (the
	// process's cwd; "" for a caller that has none).
	roots, rootsField := sb.WorkspaceRoots, "sandbox.workspaceRoots"
	if len(roots) == 0 {
		roots, rootsField = []string{sb.Cwd}, "sandbox.cwd"
		if sb.Cwd == "" {
			roots, rootsField = []string{dir}, "sandbox.workspaceRoots (none given, and no cwd)"
		}
	}
	var rootPaths []string
	for i, r := range roots {
		rp, err := NativePath(r)
		if err != nil {
			if len(sb.WorkspaceRoots) == 0 {
				rootPaths = nil // an error only if an entry needs the project roots
				break
			}
			return nil, wire.Errorf(wire.CodeInvalidParams, "invalid field `sandbox.workspaceRoots[%d]`: %v", i, err)
		}
		rootPaths = append(rootPaths, rp)
	}
	needRoots := func(field string) *wire.Error {
		if rootPaths == nil {
			return wire.Errorf(wire.CodeInvalidParams, "invalid field `%s`: project roots are needed but `%s` is empty", field, rootsField)
		}
		return nil
	}
	// Two entries that give one path different access conflict.
	seen, origin := map[string]int{}, []string(nil)
	var res sandbox.Resolver // the entries' shared ancestors looked at once
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
				if werr := needRoots(field); werr != nil {
					return nil, werr
				}
				paths = slices.Clone(rootPaths) // the subpath below is joined in place
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
			np, err := NativePath(e.Path)
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
				if werr := needRoots(field); werr != nil {
					return nil, werr
				}
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
			real, err := res.EvalSymlinks(raw)
			if err != nil && keepMissing && errors.Is(err, os.ErrNotExist) && e.Kind != "glob_pattern" {
				real, err = resolveExistingPrefix(raw)
			}
			if err != nil {
				if e.SkipMissing && errors.Is(err, os.ErrNotExist) {
					continue
				}
				return nil, wire.Errorf(wire.CodeInvalidParams, "sandbox entry `%s`: %s: %v (use missing_path_behavior `skip` for optional paths)", field, raw, unwrapPath(err))
			}
			if j, ok := seen[real]; ok && p.Rules[j].Access != access {
				return nil, wire.Errorf(wire.CodeInvalidParams, "invalid field `%s`: it gives %s `%s` access, and `%s` gave it `%s`",
					field, real, e.Access, origin[j], p.Rules[j].Access)
			}
			seen[real], origin = len(p.Rules), append(origin, field)
			p.Rules = append(p.Rules, sandbox.Rule{Path: real, Access: access})
		}
	}
	return p, nil
}

// NativePath accepts an absolute path or a file: URI (empty or localhost
// host). A refusal is a *PathError.
func NativePath(s string) (string, error) {
	if wire.IsFileURI(s) {
		p, err := wire.ParseFileURI(s)
		if ue := (*wire.FileURIError)(nil); errors.As(err, &ue) && ue.Host != "" {
			return "", &PathError{Kind: PathForeignHost, Path: s, Host: ue.Host}
		}
		if err != nil {
			return "", &PathError{Kind: PathBadURI, Path: s}
		}
		s = p
	}
	if !filepath.IsAbs(s) {
		return "", &PathError{Kind: PathRelative, Path: s}
	}
	return filepath.Clean(s), nil
}

// PathKind is why NativePath refused a path.
type PathKind uint8

const (
	PathRelative    PathKind = iota + 1 // neither absolute nor a file: URI
	PathBadURI                          // a file: URI that does not parse
	PathForeignHost                     // a file: URI naming a host other than localhost
)

// PathError is a path NativePath refused: Path as given (the URI's path
// for PathRelative), Host for PathForeignHost.
type PathError struct {
	Kind PathKind
	Path string
	Host string
}

func (e *PathError) Error() string {
	switch e.Kind {
	case PathBadURI:
		return fmt.Sprintf("not a valid file URI: %s", e.Path)
	case PathForeignHost:
		return fmt.Sprintf("file URI with foreign host %q: %s", e.Host, e.Path)
	}
	return fmt.Sprintf("path must be absolute: %s", e.Path)
}

// Predicate words the refusal after the name of the field that held the
// path: "must be absolute: {path}", "is not a valid file URI: {path}",
// "is a file URI with a foreign host \"{host}\": {path}" (PROTOCOL.md's
// cwd errors: "cwd " + Predicate).
func (e *PathError) Predicate() string {
	switch e.Kind {
	case PathBadURI:
		return fmt.Sprintf("is not a valid file URI: %s", e.Path)
	case PathForeignHost:
		return fmt.Sprintf("is a file URI with a foreign host %q: %s", e.Host, e.Path)
	}
	return fmt.Sprintf("must be absolute: %s", e.Path)
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

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// resolveExistingPrefix resolves the symlinks of the longest existing
// prefix of p and appends the missing rest.
func resolveExistingPrefix(p string) (string, error) {
	rest := ""
	for cur := p; ; {
		real, err := filepath.EvalSymlinks(cur)
		if err == nil {
			return filepath.Join(real, rest), nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return "", err
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}
