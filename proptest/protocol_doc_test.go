package proptest

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	rtd "github.com/runtimed/runtimed/runtime"
	"github.com/runtimed/runtimed/wire"
)

// wireMethods scans ../wire for Method* string constants (requests the
// server may dispatch; wire's own TestProtocolDoc checks the reference
// documents each).
func wireMethods(t *testing.T) []string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join("..", "wire", "*.go"))
	var out []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(af, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, id := range vs.Names {
				if !strings.HasPrefix(id.Name, "Method") || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					v, _ := strconv.Unquote(lit.Value)
					out = append(out, v)
				}
			}
			return true
		})
	}
	return out
}

// TestProtocolDocMatchesServer asks a real server about every method the
// wire package names: each is served (anything but -32601), and each method
// docs/PROTOCOL.md section 8 lists as not served answers -32601. Together
// with wire's TestProtocolDoc, a method added to the dispatch table without
// documentation, or documented but not dispatched, fails a test.
func TestProtocolDocMatchesServer(t *testing.T) {
	srv := rtd.NewServer(rtd.Config{Logger: zap.NewNop(), DetachTTL: -1})
	hs := httptestServer(srv.Handler())
	t.Cleanup(func() { _ = srv.Close(); hs.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := dialWS(ctx, "ws"+strings.TrimPrefix(hs.URL, "http"))
	if err != nil {
		t.Fatal(err)
	}
	c := newRPCClient(tr, 1)
	defer c.Close()
	if _, err := c.handshake(""); err != nil {
		t.Fatal(err)
	}
	methods := wireMethods(t)
	if len(methods) < 20 {
		t.Fatalf("found only %d Method constants in ../wire: %v", len(methods), methods)
	}
	for _, m := range methods {
		if m == wire.MethodInitialized || m == wire.MethodInitialize {
			continue // a notification; initialize is answered "only once" after the handshake
		}
		rerr, err := c.Call(m, map[string]any{}, nil, 10*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		if rerr != nil && rerr.Code == wire.CodeMethodNotFound {
			t.Errorf("%s is a wire method but the server answers -32601: %s", m, rerr.Message)
		}
	}
	doc, err := os.ReadFile(filepath.Join("..", "docs", "PROTOCOL.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec9, ok := strings.Cut(string(doc), "## 8. Methods runtimed does not serve")
	if !ok {
		t.Fatal("docs/PROTOCOL.md has no section 8")
	}
	sec9, _, _ = strings.Cut(sec9, "\n## ")
	unserved := regexp.MustCompile("`([a-zA-Z]+/[a-zA-Z0-9]+)`").FindAllStringSubmatch(sec9, -1)
	// Section 8 may name none: every method Codex sends is served today.
	for _, u := range unserved {
		rerr, err := c.Call(u[1], map[string]any{}, nil, 10*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", u[1], err)
		}
		if rerr == nil || rerr.Code != wire.CodeMethodNotFound {
			t.Errorf("%s is documented as not served but answers %v", u[1], rerr)
		}
	}
}
