package codexhome

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func decode(t *testing.T, s string) map[string]any {
	t.Helper()
	m := map[string]any{}
	if _, err := toml.Decode(s, &m); err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return m
}

func TestValidateSelectors(t *testing.T) {
	long := make([]string, MaxSelectorSegments+1)
	for _, tc := range []struct {
		cfg, req [][]string
		want     string
	}{
		{nil, nil, "at least one config or requirements path is required"},
		{[][]string{{"a"}, {}}, nil, "TOML paths must contain at least one key segment"},
		{nil, [][]string{{}}, "TOML paths must contain at least one key segment"},
		{make([][]string, 40), make([][]string, 25), "at most 64 TOML selectors are allowed"},
		{[][]string{long}, nil, "TOML paths may contain at most 32 key segments"},
		{[][]string{{strings.Repeat("k", MaxSelectorBytes+1)}}, nil, "TOML selector input may contain at most 65536 bytes"},
	} {
		err := ValidateSelectors(tc.cfg, tc.req)
		if err == nil || err.Error() != tc.want || !errors.Is(err, ErrInvalidSelectors) {
			t.Errorf("ValidateSelectors(%d, %d paths) = %v, want %q", len(tc.cfg), len(tc.req), err, tc.want)
		}
	}
	if err := ValidateSelectors([][]string{{"a", "b"}}, nil); err != nil {
		t.Errorf("one path: %v", err)
	}
}

func TestReadConfigProjection(t *testing.T) {
	dir := t.TempDir()
	sys, home := filepath.Join(dir, "sys"), filepath.Join(dir, "home")
	write(t, filepath.Join(home, ConfigFile), "a = 1\nb = \"s\"\n[t.u]\nv = [1, 2]\nw = { x = true }\n[[arr]]\nk = 1\n[[arr]]\nk = 2\n")
	for _, tc := range []struct {
		paths [][]string
		want  map[string]any // nil: no layer
	}{
		{[][]string{{"a"}}, map[string]any{"a": int64(1)}},
		{[][]string{{"t"}}, map[string]any{"t": map[string]any{"u": map[string]any{"v": []any{int64(1), int64(2)}, "w": map[string]any{"x": true}}}}},
		{[][]string{{"t", "u", "w"}, {"t", "u"}}, map[string]any{"t": map[string]any{"u": map[string]any{"v": []any{int64(1), int64(2)}, "w": map[string]any{"x": true}}}}},
		{[][]string{{"t", "u", "w", "x"}}, map[string]any{"t": map[string]any{"u": map[string]any{"w": map[string]any{"x": true}}}}},
		{[][]string{{"b", "deeper"}}, map[string]any{"b": "s"}}, // a non-table on the path is kept whole
		{[][]string{{"t", "nope"}}, map[string]any{"t": map[string]any{}}},
		{[][]string{{"arr"}}, map[string]any{"arr": []map[string]any{{"k": int64(1)}, {"k": int64(2)}}}},
		{[][]string{{"nope"}}, nil},
	} {
		c := ReadConfig(sys, home, tc.paths, nil)
		if len(c.Config.Errors) != 0 {
			t.Fatalf("%v: errors %v", tc.paths, c.Config.Errors)
		}
		if tc.want == nil {
			if len(c.Config.Layers) != 0 {
				t.Errorf("%v: want no layer, got %+v", tc.paths, c.Config.Layers)
			}
			continue
		}
		if len(c.Config.Layers) != 1 || c.Config.CloudInsertionIndex != 0 {
			t.Fatalf("%v: layers %+v", tc.paths, c.Config.Layers)
		}
		got := decode(t, c.Config.Layers[0].TOML)
		if arr, ok := got["arr"].([]map[string]any); ok {
			got["arr"] = arr
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%v: got %#v, want %#v", tc.paths, got, tc.want)
		}
	}
	if c := ReadConfig(sys, home, nil, [][]string{{"a"}}); len(c.Config.Layers) != 0 || len(c.Requirements.Layers) != 0 {
		t.Errorf("no config paths and no requirements file: %+v", c)
	}
}

func TestReadConfigLayerErrors(t *testing.T) {
	dir := t.TempDir()
	sys, home := filepath.Join(dir, "sys"), filepath.Join(dir, "home")
	write(t, filepath.Join(sys, ConfigFile), "a = 1\n")
	write(t, filepath.Join(home, ConfigFile), "a = 1\na = 2\n")
	write(t, filepath.Join(sys, RequirementsFile), strings.Repeat("#", MaxConfigBytes+1))
	c := ReadConfig(sys, home, [][]string{{"a"}}, [][]string{{"a"}})
	if len(c.Config.Layers) != 1 || c.Config.CloudInsertionIndex != 1 || len(c.Config.Errors) != 1 ||
		!strings.HasPrefix(c.Config.Errors[0].Message, filepath.Join(home, ConfigFile)+":2:") {
		t.Errorf("a duplicate key in the user layer: %+v", c.Config)
	}
	if len(c.Requirements.Layers) != 0 || len(c.Requirements.Errors) != 1 || !strings.Contains(c.Requirements.Errors[0].Message, "larger than") {
		t.Errorf("an oversized requirements file: %+v", c.Requirements)
	}
	if err := os.Chmod(filepath.Join(sys, ConfigFile), 0); err == nil && os.Getuid() != 0 {
		c = ReadConfig(sys, home, [][]string{{"a"}}, nil)
		if len(c.Config.Errors) != 2 {
			t.Errorf("an unreadable system layer: %+v", c.Config)
		}
	}
}

func TestCodexHome(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if got, err := CodexHome(Env{"CODEX_HOME=" + link}); err != nil || got != real {
		t.Errorf("CODEX_HOME through a symlink: %q, %v; want %q", got, err, real)
	}
	missing := filepath.Join(dir, "missing")
	if _, err := CodexHome(Env{"CODEX_HOME=" + missing}); err == nil || err.Error() != `CODEX_HOME points to "`+missing+`", but that path does not exist` {
		t.Errorf("a missing CODEX_HOME: %v", err)
	}
	if got, err := CodexHome(Env{"CODEX_HOME=", "HOME=/home/x"}); err != nil || got != "/home/x/.codex" {
		t.Errorf("an empty CODEX_HOME: %q, %v; want ~/.codex", got, err)
	}
	if got, _ := (Env{"A=1", "A=2"}).Get("A"); got != "2" {
		t.Errorf("Env.Get: last wins, got %q", got)
	}
}

func TestFrontmatter(t *testing.T) {
	for _, tc := range []struct {
		in        string
		name, ok  string
		wantError bool
	}{
		{"---\nname: a\ndescription: d\n---\nbody", "a", "d", false},
		{"---\r\nname: a\r\ndescription: \"quoted: d\"\r\n---\r\n", "a", "quoted: d", false},
		{"\ufeff---\ndescription: >\n  folded\n  text\n---\n", "", "folded text\n", false},
		{"# none\n", "", "", true},
		{"---\nname: a\n", "", "", true},       // never closed
		{"---\nname: [x\n---\n", "", "", true}, // not YAML
	} {
		fm, err := parseFrontmatter(tc.in)
		if (err != nil) != tc.wantError || (err == nil && (fm.Name != tc.name || fm.Description != tc.ok)) {
			t.Errorf("%q: %+v, %v", tc.in, fm, err)
		}
	}
}

func TestScannerBoundsAndLoops(t *testing.T) {
	dir := t.TempDir()
	skills := filepath.Join(dir, "skills")
	for i := 0; i < 5; i++ {
		write(t, filepath.Join(skills, "s"+string(rune('a'+i)), SkillFile), "---\ndescription: d\n---\n")
	}
	write(t, filepath.Join(skills, "deep", "a", "b", "c", "d", "e", "f", "g", SkillFile), "---\ndescription: too deep\n---\n")
	// A symlink loop and a link back to the root are walked once, not forever.
	if err := os.Symlink(skills, filepath.Join(skills, "loop")); err != nil {
		t.Fatal(err)
	}
	inv := Scanner{}.Discover(filepath.Dir(skills), "", filepath.Join(dir, "nosys"))
	var names []string
	for _, s := range inv.Skills {
		names = append(names, s.Name)
	}
	if want := []string{"sa", "sb", "sc", "sd", "se"}; !reflect.DeepEqual(names, want) {
		t.Errorf("skills %v, want %v (depth bound 6, the loop walked once)", names, want)
	}
	inv = Scanner{MaxSkills: 2}.Discover(filepath.Dir(skills), "", filepath.Join(dir, "nosys"))
	if len(inv.Skills) != 2 {
		t.Errorf("MaxSkills 2: %d skills", len(inv.Skills))
	}
	inv = Scanner{MaxEntries: 3}.Discover(filepath.Dir(skills), "", filepath.Join(dir, "nosys"))
	if len(inv.Skills) > 3 {
		t.Errorf("MaxEntries 3: %d skills", len(inv.Skills))
	}
	denied := filepath.Join(skills, "sb")
	inv = Scanner{MayRead: func(p string) bool { return p != denied && !strings.HasPrefix(p, denied+"/") }}.Discover(filepath.Dir(skills), "", filepath.Join(dir, "nosys"))
	for _, s := range inv.Skills {
		if s.Name == "sb" {
			t.Errorf("a denied skill was read")
		}
	}
	if len(inv.Warnings) != 1 || inv.Warnings[0] != IncompleteWarning {
		t.Errorf("warnings %q", inv.Warnings)
	}
	// A plugin manifest path that leaves the plugin root is ignored.
	plug := filepath.Join(dir, "plug")
	write(t, filepath.Join(plug, PluginManifest), `{"name":"p","skills":"../skills","mcpServers":"/etc/passwd"}`)
	rs := Scanner{}.ScanRoot(plug)
	if rs.Err != "" || rs.Plugin == nil || rs.Plugin.MCPConfig != nil || len(rs.Skills) != 0 {
		t.Errorf("escaping manifest paths: %+v", rs)
	}
}
