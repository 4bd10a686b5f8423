package runtime

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"sort"
	"strings"
	"testing"
)

// Every exported identifier of the package has a doc comment: types,
// functions, methods of exported types, constants and variables (a
// comment on their block counts, as golint has it) and the exported
// fields of exported structs (a line comment counts). go doc must read
// like a standard library package.
func TestEveryExportedIdentifierIsDocumented(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	miss := func(pos token.Pos, what string) {
		p := fset.Position(pos)
		missing = append(missing, p.Filename+":"+itoa(p.Line)+": "+what)
	}
	fields := func(typeName string, st *ast.StructType) {
		for _, f := range st.Fields.List {
			for _, n := range f.Names {
				if n.IsExported() && f.Doc == nil && f.Comment == nil {
					miss(n.Pos(), "field "+typeName+"."+n.Name)
				}
			}
		}
	}
	methods := func(typeName string, it *ast.InterfaceType) {
		for _, m := range it.Methods.List {
			for _, n := range m.Names {
				if n.IsExported() && m.Doc == nil && m.Comment == nil {
					miss(n.Pos(), "method "+typeName+"."+n.Name)
				}
			}
		}
	}
	for _, pkg := range pkgs {
		for _, file := range pkg.Files {
			for _, decl := range file.Decls {
				switch d := decl.(type) {
				case *ast.FuncDecl:
					if !d.Name.IsExported() {
						continue
					}
					name := d.Name.Name
					if d.Recv != nil {
						recv := receiverName(d.Recv.List[0].Type)
						if !ast.IsExported(recv) {
							continue // not in go doc
						}
						name = recv + "." + name
					}
					if d.Doc == nil {
						miss(d.Pos(), "func "+name)
					}
				case *ast.GenDecl:
					for _, spec := range d.Specs {
						switch s := spec.(type) {
						case *ast.TypeSpec:
							if !s.Name.IsExported() {
								continue
							}
							if s.Doc == nil && d.Doc == nil {
								miss(s.Pos(), "type "+s.Name.Name)
							}
							switch tt := s.Type.(type) {
							case *ast.StructType:
								fields(s.Name.Name, tt)
							case *ast.InterfaceType:
								methods(s.Name.Name, tt)
							}
						case *ast.ValueSpec:
							for _, n := range s.Names {
								if n.IsExported() && s.Doc == nil && s.Comment == nil && d.Doc == nil {
									miss(n.Pos(), d.Tok.String()+" "+n.Name)
								}
							}
						}
					}
				}
			}
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("undocumented: %s", m)
	}
}

func receiverName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return receiverName(x.X)
	case *ast.IndexExpr:
		return receiverName(x.X)
	case *ast.Ident:
		return x.Name
	}
	return ""
}
