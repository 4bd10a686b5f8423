package fsops

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runtimed/runtimed/wire"
)

// call runs one request with params marshalled to JSON, as the connection
// actor would.
func call(t *testing.T, roots Roots, h *Handles, method string, params any) (any, *wire.Error) {
	t.Helper()
	var raw json.RawMessage
	if params != nil {
		b, err := json.Marshal(params)
		if err != nil {
			t.Fatal(err)
		}
		raw = b
	}
	res, werr := Handle(method, raw, roots, h)
	if werr == nil {
		// Every result must encode; {} results must encode as {}.
		if _, err := json.Marshal(res); err != nil {
			t.Fatalf("%s: result does not encode: %v", method, err)
		}
	}
	return res, werr
}

func mustCall(t *testing.T, roots Roots, h *Handles, method string, params any) any {
	t.Helper()
	res, werr := call(t, roots, h, method, params)
	if werr != nil {
		t.Fatalf("%s %v: unexpected error %d %q", method, params, werr.Code, werr.Message)
	}
	return res
}

// wantErr asserts the code and that the message contains want (or equals
// it when exact).
func wantErr(t *testing.T, werr *wire.Error, code int, want string, exact bool) {
	t.Helper()
	if werr == nil {
		t.Fatalf("want error %d %q, got success", code, want)
	}
	if werr.Code != code {
		t.Fatalf("want code %d, got %d (%q)", code, werr.Code, werr.Message)
	}
	if exact && werr.Message != want || !exact && !strings.Contains(werr.Message, want) {
		t.Fatalf("want message %q (exact=%v), got %q", want, exact, werr.Message)
	}
}

type obj = map[string]any

// tmp returns a physical temporary directory (t.TempDir may sit under a
// symlinked /tmp on some systems).
func tmp(t *testing.T) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func writeTestFile(t *testing.T, path string, data string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func readTestFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func mustMkdir(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
}
