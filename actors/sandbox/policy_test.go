package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPlanMoreLayers: a read rule under a path that is already bound
// read-only needs no bind of its own; a rule path that is not clean or
// goes through a symbolic link is refused (ErrUnsupported), naming it.
func TestPlanMoreLayers(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ws, git, hooks := filepath.Join(base, "ws"), filepath.Join(base, "ws/.git"), filepath.Join(base, "ws/.git/hooks")
	if err := os.MkdirAll(hooks, 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := (&Policy{RestrictFS: true, Rules: []Rule{{ws, Write}, {git, Read}, {hooks, Read}}}).plan()
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Overlays) != 1 || l.Overlays[0].Path != git || l.Overlays[0].Kind != overlayReadOnly {
		t.Errorf("overlays %+v; want only %s bound read-only", l.Overlays, git)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(ws, link); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct{ path, want string }{
		{ws + "/../ws", "not absolute and clean"},
		{"ws", "not absolute and clean"},
		{link, "symbolic link"},
		{link + "/.git", "symbolic link"},
	} {
		_, err := (&Policy{RestrictFS: true, Rules: []Rule{{"/", Read}, {bad.path, Write}}}).plan()
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), bad.path) {
			t.Errorf("rule %s: %v; want ErrUnsupported, %q", bad.path, err, bad.want)
		}
	}
}

// TestAllows: the daemon's own check for fs requests under a sandbox. The
// most specific rule containing a path decides (for one path, the last);
// read allows no write, deny allows nothing, no rule means no access; a
// path only sharing a prefix with a rule is not under it; the terminal
// devices stay usable.
func TestAllows(t *testing.T) {
	ws := "/work/ws"
	p := &Policy{RestrictFS: true, Rules: []Rule{
		{"/", Read}, {ws, Write}, {ws + "/.git", Read}, {ws + "/secret", Deny}, {ws + "/twice", Write}, {ws + "/twice", Read},
	}}
	for _, c := range []struct {
		path        string
		read, write bool
	}{
		{"/etc/passwd", true, false},
		{ws, true, true},
		{ws + "/src/main.go", true, true},
		{ws + "/.git/HEAD", true, false},
		{ws + "/.gitignore", true, true},
		{ws + "/secret", false, false},
		{ws + "/secret/key", false, false},
		{ws + "/twice/x", true, false},
		{ws + "2/x", true, false},
		{"/dev/null", true, true},
		{"/dev/pts/3", true, true},
	} {
		if got := p.Allows(c.path, false); got != c.read {
			t.Errorf("read %s: %v; want %v", c.path, got, c.read)
		}
		if got := p.Allows(c.path, true); got != c.write {
			t.Errorf("write %s: %v; want %v", c.path, got, c.write)
		}
	}
	narrow := &Policy{RestrictFS: true, Rules: []Rule{{ws, Read}}}
	if narrow.Allows("/etc/passwd", false) || narrow.Allows("/work", false) {
		t.Errorf("a path no rule contains is allowed")
	}
	for _, open := range []*Policy{nil, {RestrictFS: false, Rules: []Rule{{ws, Deny}}}} {
		if !open.Allows(ws+"/x", true) {
			t.Errorf("policy %+v does not restrict the file system, yet refuses", open)
		}
	}
}
