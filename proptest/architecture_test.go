package proptest

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// moduleGraph lists the module's packages (relative paths) and each one's
// non-test imports of the module.
func moduleGraph(t *testing.T, root string) map[string][]string {
	t.Helper()
	graph := map[string][]string{}
	for _, p := range goList(t, root) {
		from := strings.TrimPrefix(p.ImportPath, modulePath+"/")
		graph[from] = []string{}
		for _, imp := range p.Imports {
			if rel, ok := strings.CutPrefix(imp, modulePath+"/"); ok {
				graph[from] = append(graph[from], rel)
			}
		}
	}
	return graph
}

// diagramGraph parses the package graph of ARCHITECTURE.md: the first
// fenced block after "Imports point down only", one line per package,
// "pkg ──▶ a, b (commentary)" or "pkg ──▶ - (commentary)".
func diagramGraph(doc string) (map[string][]string, error) {
	i := strings.Index(doc, "Imports point down only")
	if i < 0 {
		return nil, errors.New(`no "Imports point down only" section`)
	}
	rest := doc[i:]
	open := strings.Index(rest, "```\n")
	if open < 0 {
		return nil, errors.New("no fenced block after the section's first line")
	}
	rest = rest[open+4:]
	end := strings.Index(rest, "```")
	if end < 0 {
		return nil, errors.New("the package graph's block is not closed")
	}
	graph := map[string][]string{}
	for n, line := range strings.Split(strings.TrimSpace(rest[:end]), "\n") {
		from, to, ok := strings.Cut(line, "──▶")
		if !ok {
			return nil, fmt.Errorf("line %d %q: want `pkg ──▶ imports`", n+1, line)
		}
		from = strings.TrimSpace(from)
		if _, dup := graph[from]; dup || from == "" || strings.ContainsAny(from, " ,") {
			return nil, fmt.Errorf("line %d %q: one package per line, each once", n+1, line)
		}
		if c := strings.Index(to, "("); c >= 0 {
			to = to[:c]
		}
		graph[from] = []string{}
		if to = strings.TrimSpace(to); to == "-" {
			continue
		}
		for _, imp := range strings.Split(to, ",") {
			if imp = strings.TrimSpace(imp); imp == "" || strings.Contains(imp, " ") {
				return nil, fmt.Errorf("line %d %q: imports are a comma-separated list of packages or -", n+1, line)
			}
			graph[from] = append(graph[from], imp)
		}
	}
	return graph, nil
}

// graphDiff lists what one graph has that the other lacks.
func graphDiff(code, drawn map[string][]string) (missing, extra []string) {
	edges := func(g map[string][]string) map[string]bool {
		m := map[string]bool{}
		for from, tos := range g {
			m["package "+from] = true
			for _, to := range tos {
				m["import "+from+" -> "+to] = true
			}
		}
		return m
	}
	c, d := edges(code), edges(drawn)
	for e := range c {
		if !d[e] {
			missing = append(missing, e)
		}
	}
	for e := range d {
		if !c[e] {
			extra = append(extra, e)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	return missing, extra
}

// TestArchitectureDiagram: ARCHITECTURE.md's package graph is the code's:
// every package and every import between packages of the module is drawn,
// and nothing drawn is absent from the code. Each package also has a row in
// the package table.
func TestArchitectureDiagram(t *testing.T) {
	root := moduleRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	drawn, err := diagramGraph(string(doc))
	if err != nil {
		t.Fatalf("ARCHITECTURE.md: %v", err)
	}
	code := moduleGraph(t, root)
	if len(code) < 8 {
		t.Fatalf("go list found only %d packages", len(code))
	}
	missing, extra := graphDiff(code, drawn)
	for _, m := range missing {
		t.Errorf("ARCHITECTURE.md's package graph lacks the code's %s", m)
	}
	for _, e := range extra {
		t.Errorf("ARCHITECTURE.md's package graph draws %s, which the code does not have", e)
	}
	for pkg := range code {
		if !strings.Contains(string(doc), "\n| `"+pkg+"` |") {
			t.Errorf("ARCHITECTURE.md's package table has no row for `%s`", pkg)
		}
	}
}

// TestArchitectureDiagramCheck: the comparison catches a package, an
// import and a stale edge (so TestArchitectureDiagram cannot pass
// vacuously), and the parser refuses lines it cannot read.
func TestArchitectureDiagramCheck(t *testing.T) {
	drawn, err := diagramGraph("Imports point down only.\n\n```\na ──▶ b, c (why)\nb ──▶ c\nc ──▶ -   (leaf)\n```\n")
	if err != nil {
		t.Fatal(err)
	}
	same := map[string][]string{"a": {"c", "b"}, "b": {"c"}, "c": {}}
	if m, e := graphDiff(same, drawn); len(m)+len(e) != 0 {
		t.Fatalf("equal graphs differ: %v %v", m, e)
	}
	for _, tc := range []struct {
		code           map[string][]string
		missing, extra string
	}{
		{map[string][]string{"a": {"b", "c"}, "b": {"c"}, "c": {}, "d": {}}, "package d", ""},
		{map[string][]string{"a": {"b", "c"}, "b": {"c"}, "c": {"a"}}, "import c -> a", ""},
		{map[string][]string{"a": {"b"}, "b": {"c"}, "c": {}}, "", "import a -> c"},
	} {
		m, e := graphDiff(tc.code, drawn)
		if fmt.Sprint(m) != fmt.Sprint(nonEmpty(tc.missing)) || fmt.Sprint(e) != fmt.Sprint(nonEmpty(tc.extra)) {
			t.Errorf("diff(%v) = missing %v extra %v; want %q %q", tc.code, m, e, tc.missing, tc.extra)
		}
	}
	for _, bad := range []string{"a -> b", "a b ──▶ c", "a ──▶ b c", "a ──▶ -\na ──▶ b"} {
		if _, err := diagramGraph("Imports point down only\n```\n" + bad + "\n```\n"); err == nil {
			t.Errorf("diagramGraph accepted %q", bad)
		}
	}
}

// notGo are backticked names in ARCHITECTURE.md that are not Go: kernel
// files and constants.
var notGo = map[string]bool{"cgroup.kill": true, "PR_SET_CHILD_SUBREAPER": true}

// stdPackages are the standard packages ARCHITECTURE.md quotes names of.
var stdPackages = map[string]bool{"os": true, "syscall": true, "unix": true, "exec": true, "fs": true, "io": true, "errors": true, "context": true, "time": true, "http": true, "net": true}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// TestArchitectureNamesExist: every Go name ARCHITECTURE.md quotes in
// backticks (`Name`, `pkg.Name`, `Type.Method`, `fn()`) is declared
// somewhere in the module, so a renamed or removed function (the document
// once named ResolveSandbox, long gone) fails here.
func TestArchitectureNamesExist(t *testing.T) {
	root := moduleRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]bool{}
	pkgs := map[string]bool{}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkgs[f.Name.Name] = true
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				declared[n.Name.Name] = true
			case *ast.TypeSpec:
				declared[n.Name.Name] = true
			case *ast.ValueSpec:
				for _, id := range n.Names {
					declared[id.Name] = true
				}
			case *ast.Field:
				for _, id := range n.Names {
					declared[id.Name] = true
				}
			case *ast.AssignStmt:
				if n.Tok == token.DEFINE {
					for _, l := range n.Lhs {
						if id, ok := l.(*ast.Ident); ok {
							declared[id.Name] = true
						}
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A Go name: an exported identifier, or a dotted one (pkg.Name,
	// Type.method), optionally called.
	goName := regexp.MustCompile("`((?:[A-Za-z_][A-Za-z0-9_]*\\.)*[A-Za-z_][A-Za-z0-9_]*)(?:\\(\\))?`")
	checked := 0
	for _, m := range goName.FindAllStringSubmatch(string(doc), -1) {
		parts := strings.Split(m[1], ".")
		if notGo[m[1]] || strings.HasSuffix(m[1], ".go") || stdPackages[parts[0]] {
			continue
		}
		if len(parts) == 1 && !ast.IsExported(parts[0]) {
			continue // a lowercase word: a flag value, a field of the protocol, a kind
		}
		for i, p := range parts {
			if i == 0 && len(parts) > 1 && pkgs[p] {
				continue
			}
			if (ast.IsExported(p) || len(parts) > 1) && !declared[p] {
				t.Errorf("ARCHITECTURE.md names `%s`: %s is declared nowhere in the module", m[1], p)
			}
		}
		checked++
	}
	if checked < 50 {
		t.Errorf("only %d Go names found in ARCHITECTURE.md; the pattern is broken", checked)
	}
}
