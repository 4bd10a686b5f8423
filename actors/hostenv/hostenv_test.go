package hostenv

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
)

// exe writes an executable file named name under dir and returns its path.
func exe(t *testing.T, dir, name string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoginShell(t *testing.T) {
	dir := t.TempDir()
	zsh := exe(t, dir, "zsh", 0o755)
	fish := exe(t, dir, "fish", 0o755)
	notExec := exe(t, dir, "ksh", 0o644)
	nologin := exe(t, dir, "nologin", 0o755)
	passwd := filepath.Join(dir, "passwd")
	content := strings.Join([]string{
		"# comment",
		"root:x:0:0:root:/root:" + zsh,
		"svc:x:100:100::/var/svc:" + nologin,
		"odd:x:101:101::/home/odd:" + notExec,
		"rel:x:102:102::/home/rel:zsh",
		"short:x:103",
		"dup:x:104:104::/h:" + fish,
		"dup2:x:104:104::/h:" + zsh,
		"",
	}, "\n")
	if err := os.WriteFile(passwd, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		uid      int
		envShell string
		want     string
	}{
		{"passwd entry wins over $SHELL", 0, fish, zsh},
		{"nologin account falls back to $SHELL", 100, fish, fish},
		{"non-executable passwd shell falls back to $SHELL", 101, fish, fish},
		{"relative passwd shell falls back to $SHELL", 102, fish, fish},
		{"truncated entry falls back to $SHELL", 103, fish, fish},
		{"first entry of a uid wins", 104, "", fish},
		{"unknown uid uses $SHELL", 999, zsh, zsh},
		{"nothing usable gives /bin/sh", 999, "", FallbackShell},
		{"relative $SHELL is not used", 999, "bash", FallbackShell},
		{"nologin $SHELL is not used", 100, nologin, FallbackShell},
	}
	for _, c := range cases {
		name, path := LoginShell(passwd, c.uid, c.envShell)
		if path != c.want || name != filepath.Base(c.want) {
			t.Errorf("%s: got (%q, %q), want (%q, %q)", c.name, name, path, filepath.Base(c.want), c.want)
		}
	}
	// A missing passwd file behaves like a missing entry.
	if _, path := LoginShell(filepath.Join(dir, "nope"), 0, fish); path != fish {
		t.Errorf("missing passwd file: got %q, want $SHELL %q", path, fish)
	}
}

func TestVersion(t *testing.T) {
	cases := []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"no build info", nil, "0.0.0-devel"},
		{"module version", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.2"}}, "1.4.2"},
		{"pseudo-version", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20260101120000-abcdef123456"}}, "0.0.0-20260101120000-abcdef123456"},
		{"checkout without vcs stamp", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "0.0.0-devel"},
		{"checkout", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "1483a391932511cc27ffcebd3e17b95b475a1657"}, {Key: "vcs.modified", Value: "false"},
		}}, "0.0.0-devel+1483a3919325"},
		{"dirty checkout", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.modified", Value: "true"}, {Key: "vcs.revision", Value: "abc"},
		}}, "0.0.0-devel+abc.dirty"},
	}
	semver := regexp.MustCompile(`^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)
	for _, c := range cases {
		got := Version(c.bi)
		if got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
		if !semver.MatchString(got) {
			t.Errorf("%s: %q is not a semver string", c.name, got)
		}
	}
}

func TestProviderID(t *testing.T) {
	base := ProviderID("host", "/usr/local/bin/runtimed", 1000)
	if !regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(base) {
		t.Fatalf("providerId %q is not sha256:<64 hex>", base)
	}
	if again := ProviderID("host", "/usr/local/bin/runtimed", 1000); again != base {
		t.Errorf("same inputs gave %q then %q", base, again)
	}
	for _, other := range []string{
		ProviderID("other", "/usr/local/bin/runtimed", 1000),
		ProviderID("host", "/opt/runtimed", 1000),
		ProviderID("host", "/usr/local/bin/runtimed", 0),
		ProviderID("hos", "t/usr/local/bin/runtimed", 1000), // field boundaries matter
	} {
		if other == base {
			t.Errorf("different installation got the same providerId %q", base)
		}
	}
}

func TestCollectDirectories(t *testing.T) {
	tmp := t.TempDir()
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("TMPDIR", tmp+"/")
	info := Collect()
	cwd, _ := os.Getwd()
	if info.Cwd != cwd || info.Home != home || info.OS == "" {
		t.Errorf("cwd %q home %q os %q, want %q %q and an OS", info.Cwd, info.Home, info.OS, cwd, home)
	}
	if info.TempDir != tmp || len(info.TempDirs) != 1 || info.TempDirs[0] != tmp {
		t.Errorf("TMPDIR=%s/: tempDir %q tempDirs %q, want %q both", tmp, info.TempDir, info.TempDirs, tmp)
	}
	if info.ShellPath == "" || info.ShellName != filepath.Base(info.ShellPath) {
		t.Errorf("shell (%q, %q)", info.ShellName, info.ShellPath)
	}
	if exe, _ := os.Executable(); exe != "" {
		exe, _ = filepath.EvalSymlinks(exe)
		host, _ := os.Hostname()
		if want := ProviderID(host, exe, os.Getuid()); info.ProviderID != want {
			t.Errorf("providerId %q, want %q", info.ProviderID, want)
		}
	}

	t.Setenv("TMPDIR", "")
	info = Collect()
	if info.TempDir != "/tmp" || len(info.TempDirs) != 0 {
		t.Errorf("no TMPDIR: tempDir %q tempDirs %q, want /tmp and none", info.TempDir, info.TempDirs)
	}
	t.Setenv("TMPDIR", "rel")
	info = Collect()
	if want := filepath.Join(cwd, "rel"); info.TempDir != want {
		t.Errorf("relative TMPDIR: tempDir %q, want %q", info.TempDir, want)
	}
}
