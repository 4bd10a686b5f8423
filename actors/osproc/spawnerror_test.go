package osproc

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestSpawnErrorMatches: a failed Start is one *SpawnError naming the
// stage, and errors.Is tells a missing command (exec.ErrNotFound and
// fs.ErrNotExist), a missing cwd (fs.ErrNotExist only) and a command
// without execute permission (fs.ErrPermission) apart.
func TestSpawnErrorMatches(t *testing.T) {
	dir := t.TempDir()
	noexec := filepath.Join(dir, "noexec")
	if err := os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name                           string
		spec                           Spec
		op                             string
		notFound, notExist, permission bool
	}{
		{"not on the PATH", Spec{Argv: []string{"runtimed-no-such-command"}, Dir: dir, Env: []string{"PATH=" + dir}}, OpLookup, true, true, false},
		{"no such file", Spec{Argv: []string{filepath.Join(dir, "absent")}, Dir: dir}, OpExec, true, true, false},
		{"no such cwd", Spec{Argv: []string{"true"}, Dir: filepath.Join(dir, "gone")}, OpCwd, false, true, false},
		{"cwd is a file", Spec{Argv: []string{"true"}, Dir: noexec}, OpCwd, false, false, false},
		{"not executable", Spec{Argv: []string{noexec}, Dir: dir}, OpExec, false, false, true},
		{"empty argv", Spec{Dir: dir}, OpSetup, false, false, false},
	}
	for _, c := range cases {
		s, err := Start(c.spec, Isolation{})
		if err == nil {
			Discard(s)
			t.Errorf("%s: started", c.name)
			continue
		}
		var se *SpawnError
		if !errors.As(err, &se) || se.Op != c.op {
			t.Errorf("%s: %v; want a *SpawnError at %s", c.name, err, c.op)
			continue
		}
		if got := errors.Is(err, exec.ErrNotFound); got != c.notFound {
			t.Errorf("%s: errors.Is(exec.ErrNotFound) = %v", c.name, got)
		}
		if got := errors.Is(err, fs.ErrNotExist); got != c.notExist {
			t.Errorf("%s: errors.Is(fs.ErrNotExist) = %v", c.name, got)
		}
		if got := errors.Is(err, fs.ErrPermission); got != c.permission {
			t.Errorf("%s: errors.Is(fs.ErrPermission) = %v", c.name, got)
		}
	}
}
