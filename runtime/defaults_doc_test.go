package runtime

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runtimed/runtimed/actors"
	"github.com/runtimed/runtimed/actors/contain"
	"github.com/runtimed/runtimed/wire"
)

// Every exported constant of the package shows its value in go doc: one
// defined as another package's constant (LimitMemory = contain.LimitMemory)
// shows only that name. Such constants are spelled out here, and a test
// checks they still equal the other package's.
func TestExportedConstantsShowTheirValues(t *testing.T) {
	fset := token.NewFileSet()
	files, _ := filepath.Glob("*.go")
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !name.IsExported() || i >= len(vs.Values) {
						continue
					}
					found := false
					ast.Inspect(vs.Values[i], func(n ast.Node) bool {
						if sel, ok := n.(*ast.SelectorExpr); ok {
							if id, ok := sel.X.(*ast.Ident); ok && id.Obj == nil && id.Name != "time" {
								found = true
							}
						}
						return true
					})
					if found {
						t.Errorf("%s: const %s is defined by another package's constant: go doc shows no value", fset.Position(name.Pos()), name.Name)
					}
				}
			}
		}
	}
}

// The constants spelled out for go doc equal the ones they stand for.
func TestSpelledOutConstantsAgree(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"LimitMemory", LimitMemory, contain.LimitMemory},
		{"LimitPids", LimitPids, contain.LimitPids},
		{"LimitCPU", LimitCPU, contain.LimitCPU},
		{"LimitOpenFile", LimitOpenFile, contain.LimitOpenFile},
		{"LimitFileSize", LimitFileSize, contain.LimitFileSize},
		{"DefaultOutboundQueueBytes", DefaultOutboundQueueBytes, actors.DefaultOutboundQueueBytes},
		{"DefaultMaxMessageBytes", DefaultMaxMessageBytes, wire.DefaultMaxMessageBytes},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v; the constant it stands for is %v", c.name, c.got, c.want)
		}
	}
}
