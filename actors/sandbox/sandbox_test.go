package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// runHelper runs plan through the helper of this test binary with no
// policy host (plans without a policy need none).
func runHelper(t *testing.T, plan Plan) (*os.ProcessState, error) {
	t.Helper()
	l, err := NewLaunch(nil, plan)
	if err != nil {
		t.Fatal(err)
	}
	l.Exe = "/proc/self/exe"
	devnull, _ := os.Open(os.DevNull)
	defer devnull.Close()
	proc, err := os.StartProcess(l.Exe, l.Argv, &os.ProcAttr{Env: l.Env, Files: []*os.File{devnull, devnull, devnull, l.Files[0], l.Files[1]}})
	if err != nil {
		l.Abort()
		t.Fatal(err)
	}
	serr := l.Started()
	st, werr := proc.Wait()
	if werr != nil {
		t.Fatal(werr)
	}
	return st, serr
}

func TestHelperReportsEachStage(t *testing.T) {
	// A stage that fails before exec is reported with its name, and the
	// helper exits HelperExitCode (never running the command).
	marker := filepath.Join(t.TempDir(), "ran")
	st, err := runHelper(t, Plan{Path: "/bin/sh", Argv: []string{"sh", "-c", "touch " + marker},
		JoinCgroups: []string{"/nonexistent/cgroup.procs"}})
	var ee *ExecError
	if !errors.As(err, &ee) || ee.Stage != "cgroup" || st.ExitCode() != HelperExitCode {
		t.Fatalf("cgroup stage: err %v exit %d", err, st.ExitCode())
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran although the helper failed")
	}
	// The command's own execve failure keeps its errno.
	_, err = runHelper(t, Plan{Path: "/nonexistent/prog", Argv: []string{"prog"}})
	if !errors.As(err, &ee) || ee.Stage != "exec" || !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("exec stage: %v", err)
	}
	// Success: EOF on the status pipe, the command's exit code.
	st, err = runHelper(t, Plan{Path: "/bin/sh", Argv: []string{"sh", "-c", "touch " + marker + "; exit 7"}})
	if err != nil || st.ExitCode() != 7 {
		t.Fatalf("success: %v exit %d", err, st.ExitCode())
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatal("the command did not run")
	}
}

// TestPlanLayers pins down how rules become Landlock grants and mount
// overlays: narrower rules under broader ones need an overlay, wider ones
// do not; a rule under a deny is refused.
func TestPlanLayers(t *testing.T) {
	base := t.TempDir()
	mk := func(p string) string {
		p = filepath.Join(base, p)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ws, git, gitHooks, other, secret := mk("ws"), mk("ws/.git"), mk("ws/.git/hooks"), mk("other"), mk("ws/secret")
	cases := []struct {
		name     string
		rules    []Rule
		overlays map[string]overlayKind
		err      string
	}{
		{"write under read: union, no overlay", []Rule{{"/", Read}, {ws, Write}}, map[string]overlayKind{}, ""},
		{"read under write: read-only bind", []Rule{{"/", Read}, {ws, Write}, {git, Read}}, map[string]overlayKind{git: overlayReadOnly}, ""},
		{"write under read under write: rebind writable", []Rule{{ws, Write}, {git, Read}, {gitHooks, Write}},
			map[string]overlayKind{git: overlayReadOnly, gitHooks: overlayReadWrite}, ""},
		{"deny under read: hidden", []Rule{{"/", Read}, {secret, Deny}}, map[string]overlayKind{secret: overlayHide}, ""},
		{"deny outside every grant: nothing to do", []Rule{{ws, Write}, {other, Deny}}, map[string]overlayKind{}, ""},
		{"read under deny: refused", []Rule{{"/", Read}, {ws, Deny}, {git, Read}}, nil, "under deny"},
		{"later duplicate wins", []Rule{{"/", Read}, {ws, Write}, {ws, Read}}, map[string]overlayKind{}, ""},
	}
	for _, c := range cases {
		p := &Policy{RestrictFS: true, Rules: c.rules}
		l, err := p.plan()
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) || !errors.Is(err, ErrUnsupported) {
				t.Errorf("%s: err %v, want %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		got := map[string]overlayKind{}
		for _, o := range l.Overlays {
			got[o.Path] = o.Kind
		}
		if len(got) != len(c.overlays) {
			t.Errorf("%s: overlays %v, want %v", c.name, got, c.overlays)
		}
		for k, v := range c.overlays {
			if got[k] != v {
				t.Errorf("%s: overlay %s = %v, want %v", c.name, k, got[k], v)
			}
		}
	}
	// The duplicate case ended read-only: no write grant on ws is left.
	l, _ := (&Policy{RestrictFS: true, Rules: []Rule{{"/", Read}, {ws, Write}, {ws, Read}}}).plan()
	for _, g := range l.Grants {
		if g.Path == ws && g.Write {
			t.Errorf("a later read entry for the same path must replace the write")
		}
	}
	// Checks name what is missing on a host without the features.
	weak := &Host{LandlockABI: 4, Seccomp: true, Level: LevelLandlock}
	if err := weak.Check(&Policy{RestrictFS: true}); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "Landlock ABI 6") {
		t.Errorf("old kernel: %v", err)
	}
	noMount := &Host{LandlockABI: 7, Seccomp: true, Level: LevelLandlock}
	if err := noMount.Check(&Policy{RestrictFS: true, Network: true, Rules: []Rule{{"/", Read}, {secret, Deny}}}); err == nil || !strings.Contains(err.Error(), "mount namespace") {
		t.Errorf("no mount namespace: %v", err)
	}
	noSeccomp := &Host{LandlockABI: 7, Level: LevelLandlock}
	if err := noSeccomp.Check(&Policy{}); err == nil || !strings.Contains(err.Error(), "seccomp") {
		t.Errorf("no seccomp: %v", err)
	}
	if err := noSeccomp.Check(&Policy{Network: true}); err != nil {
		t.Errorf("network enabled needs no seccomp: %v", err)
	}
	// The namespaces level where they cannot be made: refused, naming
	// what is missing and how to check, and the operator's way out.
	noNS := &Host{LandlockABI: 7, Seccomp: true, NamespacesMissing: "CAP_SYS_ADMIN in the daemon (run runtimed as root)"}
	err := noNS.Check(&Policy{RestrictFS: true, Rules: []Rule{{"/", Read}}})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "CAP_SYS_ADMIN") || !strings.Contains(err.Error(), "unshare --mount") ||
		!strings.Contains(err.Error(), "--sandbox-level landlock") {
		t.Errorf("no namespaces: %v", err)
	}
	if noNS.Enforces() {
		t.Errorf("a host without namespaces does not enforce the namespaces level")
	}
}
