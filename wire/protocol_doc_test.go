package wire

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// protocolNames returns the value of every Method* and Notify* string
// constant declared in this package (the names the server dispatches on
// and sends), keyed by constant name.
func protocolNames(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	names := map[string]string{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatalf("parse %s: %v", f, err)
		}
		for _, d := range af.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if !strings.HasPrefix(id.Name, "Method") && !strings.HasPrefix(id.Name, "Notify") {
						continue
					}
					if i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Fatalf("%s: %s is not a string literal; this test reads constants from source", f, id.Name)
					}
					v, _ := strconv.Unquote(lit.Value)
					names[id.Name] = v
				}
			}
		}
	}
	return names
}

// TestProtocolDoc fails when a method or notification the server knows is
// missing from docs/PROTOCOL.md, the wire reference: each needs a section of
// its own, a "### `name`" heading (a heading may name several, or mark an
// extension with "(ext)").
func TestProtocolDoc(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "PROTOCOL.md"))
	if err != nil {
		t.Fatalf("docs/PROTOCOL.md: %v", err)
	}
	headings := map[string]bool{}
	tick := regexp.MustCompile("`([^`]+)`")
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(line, "### ") {
			continue
		}
		for _, m := range tick.FindAllStringSubmatch(line, -1) {
			headings[m[1]] = true
		}
	}
	names := protocolNames(t)
	// The constants this package is known to have: if parsing found fewer,
	// the test itself is broken and would pass vacuously.
	for _, must := range []string{"MethodInitialize", "MethodProcessStart", "MethodFsReadFile", "MethodProcessSpawn", "NotifyProcessOutput"} {
		if _, ok := names[must]; !ok {
			t.Fatalf("constant %s not found by the source scan; found %v", must, names)
		}
	}
	var missing []string
	for c, v := range names {
		if !headings[v] {
			missing = append(missing, c+" = "+strconv.Quote(v))
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("docs/PROTOCOL.md has no \"### `name`\" section for:\n  %s\ndocument every method and notification the server handles or sends", strings.Join(missing, "\n  "))
	}
}

// TestProtocolDocErrorCodes: every JSON-RPC error code of errors.go is in
// the reference's code table.
func TestProtocolDocErrorCodes(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "PROTOCOL.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, code := range []int{CodeInvalidRequest, CodeMethodNotFound, CodeInvalidParams, CodeInternal, CodeNotFound, CodeSessionAttached} {
		if !strings.Contains(string(doc), "| "+strconv.Itoa(code)+" |") {
			t.Errorf("error code %d is not in a table of docs/PROTOCOL.md", code)
		}
	}
}
