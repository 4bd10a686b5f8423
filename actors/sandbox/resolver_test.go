package sandbox

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// TestResolverMatchesEvalSymlinks: one Resolver answers every path of a
// tree with links on the way, at the end, dangling, through a file, missing
// and unclean exactly as filepath.EvalSymlinks does, whatever the order
// (what it remembers from one path must not change another's answer), and
// looks at each directory once.
func TestResolverMatchesEvalSymlinks(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	mk := func(p string) {
		if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mk("proj/.git")
	mk("proj/src/deep")
	mk("other")
	if err := os.WriteFile(filepath.Join(root, "proj/file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for link, to := range map[string]string{
		"proj/.codex":   filepath.Join(root, "other"), // a link at the end
		"via":           "proj",                       // a link on the way
		"proj/dangling": "nowhere",
		"proj/self":     ".",
	} {
		if err := os.Symlink(to, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	rel := []string{"", "proj", "proj/.git", "proj/src/deep", "proj/file", "proj/.codex", "via/.git",
		"via/src/deep", "proj/dangling", "proj/self/.git", "proj/missing", "proj/missing/x", "proj/file/x",
		"proj/.agents", "other"}
	var paths []string
	for _, r := range rel {
		paths = append(paths, filepath.Join(root, r))
	}
	paths = append(paths, "/", root+"/proj/../proj/.git", root+"/proj/", "relative/path", "")
	for round := 0; round < 20; round++ {
		var res Resolver
		for _, i := range rand.Perm(len(paths)) {
			p := paths[i]
			got, gerr := res.EvalSymlinks(p)
			want, werr := filepath.EvalSymlinks(p)
			if got != want || (gerr == nil) != (werr == nil) || (gerr != nil && gerr.Error() != werr.Error()) {
				t.Fatalf("EvalSymlinks(%q) = %q, %v; filepath.EvalSymlinks: %q, %v", p, got, gerr, want, werr)
			}
			if fi, ok, _ := res.freeOf(p); ok {
				st, err := os.Stat(p)
				if err != nil || !os.SameFile(fi, st) || want != p {
					t.Fatalf("freeOf(%q) = %v, a path with a link on the way or not its stat (%v, %v)", p, fi.Name(), st, err)
				}
			}
		}
		if _, ok := res.free[filepath.Join(root, "proj")]; !ok {
			t.Fatalf("the shared ancestor %s/proj was not remembered", root)
		}
		for p := range res.free {
			if real, err := filepath.EvalSymlinks(p); err != nil || real != p {
				t.Fatalf("remembered %q as free of links, it resolves to %q (%v)", p, real, err)
			}
		}
	}
}
