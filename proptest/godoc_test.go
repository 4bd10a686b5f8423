package proptest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocCommentsNameTheirFunction: the doc comment of an exported method
// or function that begins with an exported name begins with its own name
// (`go doc ProcessRef.Ack` once opened with Discard's comment, the two
// comments run together). A comment may begin otherwise ("A ...", "It
// ..."), but never with another identifier of the same package followed by
// a verb, as a displaced comment does.
func TestDocCommentsNameTheirFunction(t *testing.T) {
	root := moduleRoot(t)
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		names := map[string]bool{}
		for _, decl := range f.Decls {
			if fd, ok := decl.(*ast.FuncDecl); ok {
				names[fd.Name.Name] = true
			}
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Doc == nil || !fd.Name.IsExported() {
				continue
			}
			checked++
			first, _, _ := strings.Cut(strings.TrimSpace(fd.Doc.Text()), " ")
			if first != fd.Name.Name && names[first] && ast.IsExported(first) {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s: the doc comment of %s begins with %s, another function's name: a displaced comment?", rel, fd.Name.Name, first)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("only %d doc comments checked", checked)
	}
}
