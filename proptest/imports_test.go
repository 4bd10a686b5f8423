package proptest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

const modulePath = "github.com/runtimed/runtimed"

// moduleRoot is the directory of go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(goTool(), "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// goList lists the module's packages (go list -e -json ./... in root).
func goList(t *testing.T, root string) []listedPackage {
	t.Helper()
	cmd := exec.Command(goTool(), "list", "-e", "-json", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	var pkgs []listedPackage
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// listedPackage is the part of `go list -json` this test reads.
type listedPackage struct {
	ImportPath   string
	Dir          string
	Imports      []string
	TestImports  []string
	XTestImports []string
	Error        *struct{ Err string }
}

// layer classifies a package of the module. Lower layers may not import
// higher ones: wire (0) <- actors (1) <- runtime (2) <- cmd (3). proptest is
// test-only and importable by nobody; wire/wiretest is a test helper.
func layer(path string) (name string, rank int, ok bool) {
	rel, inModule := strings.CutPrefix(path, modulePath+"/")
	if !inModule {
		if path == modulePath {
			return "root", -1, false
		}
		return "", 0, false
	}
	top, _, _ := strings.Cut(rel, "/")
	switch top {
	case "wire":
		return "wire", 0, true
	case "actors":
		return "actors", 1, true
	case "runtime":
		return "runtime", 2, true
	case "cmd":
		return "cmd", 3, true
	case "proptest":
		return "proptest", 4, true
	}
	return top, -1, false
}

func inModule(path string) bool {
	return path == modulePath || strings.HasPrefix(path, modulePath+"/")
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// TestImportLayering: every package of the module imports only downward
// (cmd/runtimed -> runtime -> actors -> wire), nothing imports cmd/... or
// proptest, and wire/wiretest is imported only by _test files.
func TestImportLayering(t *testing.T) {
	root := moduleRoot(t)
	pkgs := goList(t, root)
	if len(pkgs) < 4 {
		t.Fatalf("go list found only %d packages in %s", len(pkgs), root)
	}
	for _, p := range pkgs {
		if p.Error != nil {
			t.Errorf("%s: go list error: %s", p.ImportPath, p.Error.Err)
		}
		from, fromRank, ok := layer(p.ImportPath)
		if !ok {
			t.Errorf("%s: package outside the known layers (wire, actors, runtime, cmd, proptest); extend TestImportLayering", p.ImportPath)
			continue
		}
		for _, imp := range p.Imports {
			if msg := checkImport(p.ImportPath, from, fromRank, imp, false); msg != "" {
				t.Errorf("%s imports %s: %s", p.ImportPath, imp, msg)
			}
		}
		for _, imp := range append(append([]string(nil), p.TestImports...), p.XTestImports...) {
			if imp == p.ImportPath {
				continue // the external test package imports its own package
			}
			if msg := checkImport(p.ImportPath, from, fromRank, imp, true); msg != "" {
				t.Errorf("%s (tests) import %s: %s", p.ImportPath, imp, msg)
			}
		}
	}
}

// osMechanism are the small packages under actors/ that wrap one OS
// mechanism; the actors call them, never the other way round. They import
// no project package but the ones osMechanismUses names.
var osMechanism = map[string]bool{
	"actors/sandbox": true, "actors/contain": true, "actors/hostenv": true, "actors/httpreq": true,
	"actors/netproxy": true,
	"actors/osproc":   true, "actors/osproc/osproctest": true, "actors/clock": true, "actors/clock/clocktest": true,
}

// osMechanismUses are the OS mechanism packages built on others: osproc
// starts children in contain's groups through sandbox; osproctest's fake
// Session is an osproc.Session.
var osMechanismUses = map[string]map[string]bool{
	"actors/osproc":            {"actors/contain": true, "actors/sandbox": true},
	"actors/osproc/osproctest": {"actors/osproc": true},
	"actors/clock/clocktest":   {"actors/clock": true},
}

// checkImport returns why importing imp from a package of layer from is
// not allowed, or "".
func checkImport(path, from string, fromRank int, imp string, test bool) string {
	if !inModule(imp) {
		return ""
	}
	to, toRank, ok := layer(imp)
	if !ok {
		return "imports a package outside the known layers"
	}
	if !test && osMechanism[strings.TrimPrefix(path, modulePath+"/")] &&
		!osMechanismUses[strings.TrimPrefix(path, modulePath+"/")][strings.TrimPrefix(imp, modulePath+"/")] {
		return "an OS mechanism package (" + path + ") knows nothing of actors or the wire: it imports no project package (but those osMechanismUses names)"
	}
	switch {
	case to == "cmd":
		return "nothing may import cmd/..."
	case to == "proptest":
		return "nothing may import proptest"
	case strings.HasSuffix(imp, "test") && strings.HasPrefix(imp, modulePath+"/actors/"):
		if !test && path != imp {
			return strings.TrimPrefix(imp, modulePath+"/") + " is a test helper: import it only from _test files"
		}
		return ""
	case strings.HasPrefix(imp, modulePath+"/wire/wiretest"):
		if !test && !strings.HasPrefix(path, modulePath+"/wire/wiretest") {
			return "wire/wiretest is a test helper: import it only from _test files"
		}
		return ""
	case test:
		// Tests may import any lower or equal layer (and wiretest, above).
		if toRank > fromRank && from != "proptest" {
			return "tests import upward"
		}
		return ""
	case from == "proptest":
		return "" // proptest's non-test code (doc.go) may use any layer
	case toRank > fromRank:
		return "imports upward (allowed: cmd/runtimed -> runtime -> actors -> wire)"
	case from == "runtime" && to == "runtime", from == "actors" && to == "actors", from == "wire" && to == "wire":
		return ""
	case from == "wire":
		return "wire imports no project package"
	case from == "actors" && to != "wire":
		return "actors imports only wire"
	}
	return ""
}

// TestImportLayeringRules: the layering checker rejects each kind of
// forbidden import and accepts the allowed ones (so TestImportLayering
// cannot pass vacuously).
func TestImportLayeringRules(t *testing.T) {
	m := func(s string) string { return modulePath + "/" + s }
	cases := []struct {
		from, imp string
		test      bool
		ok        bool
	}{
		{m("runtime"), m("actors"), false, true},
		{m("runtime"), m("wire"), false, true},
		{m("actors"), m("wire"), false, true},
		{m("cmd/runtimed"), m("runtime"), false, true},
		{m("wire/wiretest"), m("wire"), false, true},
		{m("actors"), m("wire/wiretest"), true, true},
		{m("wire"), "encoding/json", false, true},
		{m("wire"), m("actors"), false, false},
		{m("actors"), m("runtime"), false, false},
		{m("runtime"), m("cmd/runtimed"), false, false},
		{m("cmd/runtimed"), m("proptest"), true, false},
		{m("actors"), m("wire/wiretest"), false, false},
		{m("runtime"), m("wire/wiretest"), false, false},
		{m("actors"), m("runtime"), true, false},
		{m("actors"), m("actors/sandbox"), false, true},
		{m("actors/policy"), m("actors/sandbox"), false, true},
		{m("actors/sandbox"), m("wire"), false, false},
		{m("actors/contain"), m("actors/sandbox"), false, false},
		{m("actors/httpreq"), m("actors"), false, false},
		{m("actors/sandbox"), "golang.org/x/sys/unix", false, true},
		{m("actors/osproc"), m("actors/sandbox"), false, true},
		{m("actors/osproc"), m("actors"), false, false},
		{m("actors/osproc"), m("wire"), false, false},
		{m("actors/osproc"), m("actors/policy"), false, false},
		{m("actors"), m("actors/osproc/osproctest"), true, true},
		{m("actors"), m("actors/osproc/osproctest"), false, false},
		{m("runtime"), m("actors/clock/clocktest"), true, true},
		{m("runtime"), m("actors/clock/clocktest"), false, false},
		{m("actors/clock"), m("actors"), false, false},
	}
	for _, c := range cases {
		from, rank, ok := layer(c.from)
		if !ok {
			t.Fatalf("layer(%s) unknown", c.from)
		}
		msg := checkImport(c.from, from, rank, c.imp, c.test)
		if (msg == "") != c.ok {
			t.Errorf("%s -> %s (test=%v): got %q, want allowed=%v", c.from, c.imp, c.test, msg, c.ok)
		}
	}
}
