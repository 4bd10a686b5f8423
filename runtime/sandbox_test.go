package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBackendSandboxParity runs one workspace-write policy and one memory
// limit through the embedded runtime and over both transports: the same
// writes land, the same escapes fail, the same limit is reported.
func TestBackendSandboxParity(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		base := t.TempDir()
		ws, outside := filepath.Join(base, "ws"), filepath.Join(base, "outside")
		for _, d := range []string{ws, outside, filepath.Join(ws, ".git")} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		sb := &Sandbox{RestrictFS: true, WorkspaceRoots: []string{ws}, FileSystem: []FSRule{
			{Special: FSRoot, Access: FSRead}, {Special: FSProjectRoots, Access: FSWrite},
			{Special: FSProjectRoots, Subpath: ".git", Access: FSRead, SkipMissing: true}}}
		ctx := ctxT(t)
		spec := sh(t, `echo in > `+ws+`/in && echo in-ok
(echo out > `+outside+`/out) 2>/dev/null && echo out-ok || echo out-denied
(echo git > `+ws+`/.git/config) 2>/dev/null && echo git-ok || echo git-denied`)
		spec.Dir, spec.Sandbox = ws, sb
		p, err := b.Start(ctx, spec)
		if err != nil {
			if strings.Contains(err.Error(), "cannot be enforced on this host") {
				t.Skipf("host: %v", err)
			}
			t.Fatal(err)
		}
		out := readUntil(t, ctx, p, "git-")
		if !strings.Contains(out, "in-ok") || !strings.Contains(out, "out-denied") || !strings.Contains(out, "git-denied") {
			t.Errorf("sandboxed output %q", out)
		}
		if _, err := os.Stat(filepath.Join(outside, "out")); err == nil {
			t.Errorf("a write escaped the workspace")
		}
		// A bad entry is refused naming the field, on every backend.
		bad := sh(t, "true")
		bad.Sandbox = &Sandbox{RestrictFS: true, FileSystem: []FSRule{{Path: "relative/path", Access: FSRead}}}
		if _, err := b.Start(ctx, bad); optionOf(err) != "Spec.Sandbox.FileSystem[0].Path" {
			t.Errorf("relative sandbox path: %v", err)
		}
		hog := sh(t, `x=$(head -c 200000000 /dev/zero | tr '\0' a); echo survived`)
		hog.Limits = Limits{MemoryBytes: 32 << 20}
		hp, err := b.Start(ctx, hog)
		if err != nil {
			t.Fatal(err)
		}
		st, err := hp.Wait(ctx)
		if err != nil || st.Code != 137 || st.Limit != LimitMemory {
			t.Errorf("memory hog: %+v %v; want 137 memory", st, err)
		}
	})
}

func TestExitStatus(t *testing.T) {
	for _, c := range []struct {
		st     ExitStatus
		exited bool
		code   int
		sig    int
		str    string
	}{
		{ExitStatus{Code: 0}, true, 0, -1, "exit status 0"},
		{ExitStatus{Code: 3}, true, 3, -1, "exit status 3"},
		{ExitStatus{Code: 137, Limit: LimitMemory}, false, -1, 9, "signal: killed (memory limit)"},
		{ExitStatus{Code: 143}, false, -1, 15, "signal: terminated"},
		{ExitStatus{Code: 124}, true, 124, -1, "exit status 124"},
	} {
		if c.st.Exited() != c.exited || c.st.ExitCode() != c.code || int(c.st.Signal()) != c.sig || c.st.String() != c.str || c.st.Signaled() == c.exited {
			t.Errorf("%+v: exited %v code %d signal %d %q", c.st, c.st.Exited(), c.st.ExitCode(), c.st.Signal(), c.st.String())
		}
	}
}
