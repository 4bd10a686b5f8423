package policy

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runtimed/runtimed/actors/sandbox"
	"github.com/runtimed/runtimed/wire"
)

// TestSandboxResolveAndFloor maps Codex's workspace-write shape (specials,
// subpaths, skip) through Resolve and refuses malformed entries.
func TestSandboxResolveAndFloor(t *testing.T) {
	ws := t.TempDir()
	for _, d := range []string{".git", ".codex", "sub"} {
		if err := os.Mkdir(filepath.Join(ws, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ws, "secret.txt"), []byte("s"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, werr := Resolve(FloorSandbox(FloorWorkspaceWrite, ws), ws, []string{"TMPDIR=" + ws + "/sub"})
	if werr != nil {
		t.Fatal(werr)
	}
	got := map[string]sandbox.Access{}
	for _, r := range p.Rules {
		got[r.Path] = r.Access
	}
	realWS, _ := filepath.EvalSymlinks(ws)
	want := map[string]sandbox.Access{"/": sandbox.Read, realWS: sandbox.Write, "/tmp": sandbox.Write,
		realWS + "/sub": sandbox.Write, realWS + "/.git": sandbox.Read,
		// .codex comes after .git and .agents among the project-root
		// subpaths: each entry's subpath joins the roots themselves.
		realWS + "/.codex": sandbox.Read}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("rule %s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	if _, ok := got[realWS+"/.agents"]; ok {
		t.Errorf("missing .agents with skip must be dropped")
	}
	missing := &wire.Sandbox{Managed: true, FS: &wire.SandboxFS{Entries: []wire.SandboxEntry{{Kind: "path", Path: ws + "/nope", Access: "read"}}}}
	if _, werr := Resolve(missing, ws, nil); werr == nil || !strings.Contains(werr.Message, "entries[0]") {
		t.Errorf("missing path without skip: %v", werr)
	}
	rel := &wire.Sandbox{Managed: true, FS: &wire.SandboxFS{Entries: []wire.SandboxEntry{{Kind: "path", Path: "rel/x", Access: "read"}}}}
	if _, werr := Resolve(rel, ws, nil); werr == nil || werr.Code != wire.CodeInvalidParams {
		t.Errorf("relative path: %v", werr)
	}
	glob := &wire.Sandbox{Managed: true, WorkspaceRoots: []string{ws}, FS: &wire.SandboxFS{Entries: []wire.SandboxEntry{
		{Kind: "special", Special: "root", Access: "read"}, {Kind: "glob_pattern", Pattern: "**/*.txt", Access: "deny"}}}}
	p, werr = Resolve(glob, ws, nil)
	if werr != nil || len(p.Rules) != 2 || p.Rules[1].Path != realWS+"/secret.txt" || p.Rules[1].Access != sandbox.Deny {
		t.Errorf("glob deny: %+v %v", p, werr)
	}
}

// TestConflictingEntries: one path given two accesses is refused naming
// both entries; the same access twice is fine (Codex may send /tmp as both
// slash_tmp and tmpdir).
func TestConflictingEntries(t *testing.T) {
	ws := t.TempDir()
	sb := &wire.Sandbox{Managed: true, WorkspaceRoots: []string{ws}, FS: &wire.SandboxFS{Entries: []wire.SandboxEntry{
		{Kind: "special", Special: "project_roots", Access: "write"}, {Kind: "path", Path: "file://" + ws, Access: "read"}}}}
	_, werr := Resolve(sb, ws, nil)
	if werr == nil || werr.Code != wire.CodeInvalidParams || !strings.Contains(werr.Message, "entries[1]") || !strings.Contains(werr.Message, "entries[0]") {
		t.Errorf("conflict: %v", werr)
	}
	sb.FS.Entries[1].Access = "write"
	if _, werr := Resolve(sb, ws, nil); werr != nil {
		t.Errorf("same access twice: %v", werr)
	}
	tmp := &wire.Sandbox{Managed: true, FS: &wire.SandboxFS{Entries: []wire.SandboxEntry{
		{Kind: "special", Special: "slash_tmp", Access: "write"}, {Kind: "special", Special: "tmpdir", Access: "write"}}}}
	if _, werr := Resolve(tmp, ws, []string{"TMPDIR=/tmp"}); werr != nil {
		t.Errorf("/tmp twice: %v", werr)
	}
	for _, bad := range []string{"http://example.com/x", "relative", "file://host.example/etc"} {
		sb := &wire.Sandbox{Managed: true, FS: &wire.SandboxFS{Entries: []wire.SandboxEntry{{Kind: "path", Path: bad, Access: "read"}}}}
		if _, werr := Resolve(sb, ws, nil); werr == nil || werr.Code != wire.CodeInvalidParams || !strings.Contains(werr.Message, "entries[0].path.path") {
			t.Errorf("path %q: %v", bad, werr)
		}
	}
}

// TestSandboxCwdIsProjectRoot: with no workspaceRoots the sandbox's cwd is
// the project root, not the process's cwd (which differs here): write
// access and the project-root subpaths and relative globs go to the
// sandbox's cwd. Without a sandbox cwd either, the process's cwd is the
// root; with workspaceRoots, neither cwd is.
func TestSandboxCwdIsProjectRoot(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sbCwd, procCwd, roots := filepath.Join(base, "project"), filepath.Join(base, "elsewhere"), filepath.Join(base, "roots")
	for _, d := range []string{sbCwd, procCwd, roots} {
		for _, sub := range []string{"", ".git"} {
			if err := os.MkdirAll(filepath.Join(d, sub), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(d, "key.pem"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	entries := []wire.SandboxEntry{
		{Kind: "special", Special: "root", Access: "read"},
		{Kind: "special", Special: "project_roots", Access: "write"},
		{Kind: "special", Special: "project_roots", Subpath: ".git", Access: "read"},
		{Kind: "glob_pattern", Pattern: "*.pem", Access: "deny"},
	}
	for _, tc := range []struct {
		name          string
		cwd           string
		wsRoots       []string
		root, notRoot string
	}{
		{"sandbox cwd", sbCwd, nil, sbCwd, procCwd},
		{"process cwd", "", nil, procCwd, sbCwd},
		{"workspaceRoots", sbCwd, []string{roots}, roots, sbCwd},
	} {
		sb := &wire.Sandbox{Managed: true, Cwd: tc.cwd, WorkspaceRoots: tc.wsRoots, FS: &wire.SandboxFS{Entries: entries}}
		p, werr := Resolve(sb, procCwd, nil)
		if werr != nil {
			t.Fatalf("%s: %v", tc.name, werr)
		}
		want := map[string]sandbox.Access{"/": sandbox.Read, tc.root: sandbox.Write,
			filepath.Join(tc.root, ".git"): sandbox.Read, filepath.Join(tc.root, "key.pem"): sandbox.Deny}
		if len(p.Rules) != len(want) {
			t.Errorf("%s: rules %+v; want %v", tc.name, p.Rules, want)
		}
		for _, r := range p.Rules {
			if want[r.Path] != r.Access {
				t.Errorf("%s: rule %s %v; want only %v", tc.name, r.Path, r.Access, want)
			}
		}
		if w := filepath.Join(tc.notRoot, "new"); p.Allows(w, true) {
			t.Errorf("%s: write access to %s; the project root is %s", tc.name, w, tc.root)
		}
		if !p.Allows(filepath.Join(tc.root, "new"), true) {
			t.Errorf("%s: no write access to the project root %s", tc.name, tc.root)
		}
	}
	// A sandbox cwd that is not a usable path is an error only when an
	// entry needs the project roots, and then it names sandbox.cwd.
	bad := &wire.Sandbox{Managed: true, Cwd: "relative/dir", FS: &wire.SandboxFS{Entries: entries[:2]}}
	if _, werr := Resolve(bad, procCwd, nil); werr == nil || werr.Code != wire.CodeInvalidParams || !strings.Contains(werr.Message, "sandbox.cwd") || !strings.Contains(werr.Message, "entries[1]") {
		t.Errorf("relative sandbox cwd with project_roots: %v", werr)
	}
	bad.FS.Entries = entries[:1]
	if _, werr := Resolve(bad, procCwd, nil); werr != nil {
		t.Errorf("relative sandbox cwd and no entry needing it: %v", werr)
	}
}

// TestSeveralWorkspaceRoots: every project-root entry applies to each
// workspace root, a subpath joined to each root itself.
func TestSeveralWorkspaceRoots(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a, b := filepath.Join(base, "a"), filepath.Join(base, "b")
	for _, d := range []string{a + "/.git", b + "/.git"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sb := &wire.Sandbox{Managed: true, WorkspaceRoots: []string{a, "file://" + b}, FS: &wire.SandboxFS{Entries: []wire.SandboxEntry{
		{Kind: "special", Special: "project_roots", Access: "write"},
		{Kind: "special", Special: "project_roots", Subpath: ".git", Access: "read"},
	}}}
	p, werr := Resolve(sb, "/", nil)
	if werr != nil {
		t.Fatal(werr)
	}
	want := []sandbox.Rule{{Path: a, Access: sandbox.Write}, {Path: b, Access: sandbox.Write},
		{Path: a + "/.git", Access: sandbox.Read}, {Path: b + "/.git", Access: sandbox.Read}}
	if fmt.Sprint(p.Rules) != fmt.Sprint(want) {
		t.Errorf("rules %v; want %v", p.Rules, want)
	}
	sb.WorkspaceRoots[1] = "relative"
	if _, werr := Resolve(sb, "/", nil); werr == nil || !strings.Contains(werr.Message, "sandbox.workspaceRoots[1]") {
		t.Errorf("a relative workspace root: %v; want an error naming it", werr)
	}
}

// TestGlobEntries: a glob_pattern entry may only deny (read and write are
// refused, naming the entry), and a match that does not resolve (a
// dangling symlink) hides nothing instead of failing the start.
func TestGlobEntries(t *testing.T) {
	ws, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "a.key"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(ws, "gone"), filepath.Join(ws, "b.key")); err != nil {
		t.Fatal(err)
	}
	glob := func(access string) *wire.Sandbox {
		return &wire.Sandbox{Managed: true, WorkspaceRoots: []string{ws}, FS: &wire.SandboxFS{Entries: []wire.SandboxEntry{
			{Kind: "special", Special: "root", Access: "read"}, {Kind: "glob_pattern", Pattern: "*.key", Access: access}}}}
	}
	for _, access := range []string{"read", "write"} {
		if _, werr := Resolve(glob(access), ws, nil); werr == nil || werr.Code != wire.CodeInvalidParams || !strings.Contains(werr.Message, "entries[1]") || !strings.Contains(werr.Message, "deny") {
			t.Errorf("a glob_pattern entry with access %s: %v; want it refused", access, werr)
		}
	}
	p, werr := Resolve(glob("deny"), ws, nil)
	if werr != nil {
		t.Fatalf("a deny glob matching a dangling symlink: %v", werr)
	}
	want := []sandbox.Rule{{Path: "/", Access: sandbox.Read}, {Path: filepath.Join(ws, "a.key"), Access: sandbox.Deny}}
	if fmt.Sprint(p.Rules) != fmt.Sprint(want) {
		t.Errorf("rules %v; want %v", p.Rules, want)
	}
}

// TestNativePath: absolute paths and file: URIs (no host, or localhost)
// come back absolute and clean; relative paths and foreign hosts are
// refused.
func TestNativePath(t *testing.T) {
	for in, want := range map[string]string{
		"/a/./b//c/../d":             "/a/b/d",
		"file:///a/b%20c/":           "/a/b c",
		"file://localhost/etc/hosts": "/etc/hosts",
		"file:/x/../y":               "/y",
	} {
		if got, err := NativePath(in); err != nil || got != want {
			t.Errorf("NativePath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"a/b", "", "file://example.com/etc", "file:rel/x"} {
		if got, err := NativePath(bad); err == nil {
			t.Errorf("NativePath(%q) = %q; want an error", bad, got)
		}
	}
}

// TestTmpdirIsTheChildsLast: the tmpdir entry takes the TMPDIR the child
// sees, the last one of its environment (as exec keeps it).
func TestTmpdirIsTheChildsLast(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sb := &wire.Sandbox{Managed: true, FS: &wire.SandboxFS{Entries: []wire.SandboxEntry{{Kind: "special", Special: "tmpdir", Access: "write"}}}}
	p, werr := Resolve(sb, "/", []string{"TMPDIR=/nonexistent-first", "HOME=/", "TMPDIR=" + dir})
	if werr != nil || len(p.Rules) != 1 || p.Rules[0].Path != dir {
		t.Errorf("rules %+v, %v; want write on %s", p, werr, dir)
	}
}

// TestGlobDepthBound: `**` descends at most globMaxDepth directories below
// /, so a deny glob cannot make a start walk a whole deep tree; matches
// down to that depth are found.
func TestGlobDepthBound(t *testing.T) {
	ws, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(ws, "/") >= globMaxDepth {
		t.Skipf("the temporary directory %s is already %d deep", ws, globMaxDepth)
	}
	d := ws
	for strings.Count(d, "/") <= globMaxDepth+4 {
		if err := os.WriteFile(filepath.Join(d, "x.pem"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		d = filepath.Join(d, "d")
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sb := &wire.Sandbox{Managed: true, WorkspaceRoots: []string{ws}, FS: &wire.SandboxFS{Entries: []wire.SandboxEntry{
		{Kind: "glob_pattern", Pattern: "**/x.pem", Access: "deny"}}}}
	p, werr := Resolve(sb, "/", nil)
	if werr != nil {
		t.Fatal(werr)
	}
	deepest := 0
	for _, r := range p.Rules {
		deepest = max(deepest, strings.Count(r.Path, "/"))
	}
	if deepest != globMaxDepth+1 {
		t.Errorf("the deepest match is %d below /; want %d (matches: %v)", deepest, globMaxDepth+1, p.Rules)
	}
}

// TestGlobVisitBound: a deny glob that would visit more than
// globMaxVisited entries is refused, naming the entry, instead of
// walking on.
func TestGlobVisitBound(t *testing.T) {
	ws, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer func(n int) { globMaxVisited = n }(globMaxVisited)
	globMaxVisited = 100
	for i := range globMaxVisited + 1 {
		f, err := os.Create(filepath.Join(ws, fmt.Sprintf("f%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	sb := &wire.Sandbox{Managed: true, WorkspaceRoots: []string{ws}, FS: &wire.SandboxFS{Entries: []wire.SandboxEntry{
		{Kind: "glob_pattern", Pattern: "*.pem", Access: "deny"}}}}
	if _, werr := Resolve(sb, "/", nil); werr == nil || !strings.Contains(werr.Message, "entries[0].path.pattern") || !strings.Contains(werr.Message, "visits more than") {
		t.Errorf("a glob over %d entries: %v; want it refused", globMaxVisited+1, werr)
	}
}

// TestResolveNetworkAndUnmanaged: the network choice is carried as sent,
// with file-system rules or without; an unmanaged sandbox is no policy.
func TestResolveNetworkAndUnmanaged(t *testing.T) {
	for _, net := range []bool{false, true} {
		for _, fs := range []*wire.SandboxFS{nil, {Entries: []wire.SandboxEntry{{Kind: "special", Special: "root", Access: "read"}}}} {
			p, werr := Resolve(&wire.Sandbox{Managed: true, Network: net, FS: fs}, "/", nil)
			if werr != nil || p == nil || p.Network != net || p.RestrictFS != (fs != nil) {
				t.Errorf("network %v, fs %v: %+v %v", net, fs != nil, p, werr)
			}
		}
	}
	if p, werr := Resolve(&wire.Sandbox{Network: false, FS: &wire.SandboxFS{}}, "/", nil); p != nil || werr != nil {
		t.Errorf("an unmanaged sandbox resolved to %+v %v; want no policy", p, werr)
	}
}

// TestBadGlobPattern: a malformed pattern is refused up front, naming the
// entry, even where nothing would be matched.
func TestBadGlobPattern(t *testing.T) {
	ws := t.TempDir()
	for _, pat := range []string{"[", "a/[b", "/nonexistent-dir-xyz/[z"} {
		sb := &wire.Sandbox{Managed: true, WorkspaceRoots: []string{ws}, FS: &wire.SandboxFS{Entries: []wire.SandboxEntry{
			{Kind: "glob_pattern", Pattern: pat, Access: "deny"}}}}
		if _, werr := Resolve(sb, "/", nil); werr == nil || !strings.Contains(werr.Message, "entries[0].path.pattern") || !strings.Contains(werr.Message, "bad pattern") {
			t.Errorf("pattern %q: %v; want it refused", pat, werr)
		}
	}
}
