package proptest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestStartIsTheOnlyAdmission: outside tests, a process is started only
// through actors.Supervisor.Start (actors/admission.go): nothing else
// calls the supervisor's spawn functions or osproc.Start, so a check added
// to admission covers process/start, process/spawn and runtime.Local
// alike.
func TestStartIsTheOnlyAdmission(t *testing.T) {
	root := filepath.Join("..")
	allowed := map[string]map[string]bool{ // function name → files that may call it
		"spawnCharged": {"actors/admission.go": true, "actors/supervisor.go": true},
		"SpawnCharged": {"actors/supervisor.go": true},
		"Spawn":        {},
		"SpawnSession": {},
		// startNetworked (the managed network's proxies, then startOS) is
		// the spawn's only way to startOS besides its own.
		"startNetworked": {"actors/supervisor.go": true},
		"startOS":        {"actors/supervisor.go": true, "actors/managednet.go": true},
	}
	var calls int
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == "deploy" || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			var name, pkg string
			switch fn := call.Fun.(type) {
			case *ast.SelectorExpr:
				name = fn.Sel.Name
				if id, ok := fn.X.(*ast.Ident); ok {
					pkg = id.Name
				}
			case *ast.Ident:
				name = fn.Name
			}
			if pkg == "osproc" && name == "Start" {
				calls++
				if rel != "actors/supervisor.go" {
					t.Errorf("%s calls osproc.Start: only the supervisor's startOS, after admission, may", rel)
				}
				return true
			}
			if files, ok := allowed[name]; ok && pkg != "osproc" {
				calls++
				if !files[rel] {
					t.Errorf("%s calls %s: processes are admitted only by actors.Supervisor.Start", rel, name)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls == 0 {
		t.Fatal("no spawn call found at all: the walk is broken")
	}
}
