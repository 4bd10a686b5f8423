package proptest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"

	rtd "github.com/runtimed/runtimed/runtime"
)

// TestREADMEGoExample compiles the README's Go program and runs it twice:
// embedded, and against a real server over websocket (RUNTIMED_URL). A
// newcomer copies it first; it must work as printed.
func TestREADMEGoExample(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "```go\npackage main\n")
	if !ok {
		t.Fatal("README has no ```go block with a main package")
	}
	src, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("unterminated ```go block")
	}
	// Inside the module (a dot directory, so ./... never sees it), so the
	// program builds against this checkout.
	dir, err := os.MkdirTemp("..", ".readme-example-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n"+src), 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "example")
	build := exec.Command("go", "build", "-o", exe, ".")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("the README example does not build: %v\n%s", err, out)
	}
	const want = "stdout: \"hello\\n\"\nexit code 3\n"
	out, err := exec.Command(exe).CombinedOutput()
	if err != nil || string(out) != want {
		t.Fatalf("embedded: %v\n%q, want %q", err, out, want)
	}
	srv := rtd.NewServer(rtd.Config{Logger: zap.NewNop(), DetachTTL: -1})
	hs := httptestServer(srv.Handler())
	defer func() { _ = srv.Close(); hs.Close() }()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), "RUNTIMED_URL=ws"+strings.TrimPrefix(hs.URL, "http"))
	out, err = cmd.CombinedOutput()
	if err != nil || string(out) != want {
		t.Fatalf("remote: %v\n%q, want %q", err, out, want)
	}
}
