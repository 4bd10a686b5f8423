package hostenv

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
)

// Info describes the host as runtimed's clients see it. Paths are native
// absolute paths; an empty string means unknown.
type Info struct {
	ShellName string // base name of ShellPath
	ShellPath string
	// Version is runtimed's version (see [Version]).
	Version string
	// ProviderID identifies this installation (see [ProviderID]).
	ProviderID string
	Cwd        string
	Home       string
	OS         string // runtime.GOOS
	// TempDirs is $TMPDIR when it is set (a relative value is taken from
	// Cwd), else empty; TempDir is the directory temporary files go to
	// ($TMPDIR, else /tmp).
	TempDirs []string
	TempDir  string
	// PrependPathDirs are directories clients should put first on a
	// command's PATH. Collect leaves it empty: runtimed installs no helper
	// binaries; an embedder may set it.
	PrependPathDirs []string
}

// Collect reads the daemon's environment: its user's login shell, build
// version, provider id, working directory, home and temporary directories.
// It reads /etc/passwd and the executable's path; it never fails (unknown
// values stay empty, see Info).
func Collect() Info {
	uid := os.Getuid()
	cwd, _ := os.Getwd()
	shellName, shellPath := LoginShell(PasswdPath, uid, os.Getenv("SHELL"))
	host, _ := os.Hostname()
	exe, _ := os.Executable()
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved
	}
	bi, _ := debug.ReadBuildInfo()
	info := Info{
		ShellName:  shellName,
		ShellPath:  shellPath,
		Version:    Version(bi),
		ProviderID: ProviderID(host, exe, uid),
		Cwd:        cwd,
		OS:         runtime.GOOS,
		TempDir:    "/tmp",
	}
	if home, err := os.UserHomeDir(); err == nil && filepath.IsAbs(home) {
		info.Home = filepath.Clean(home)
	}
	if tmp := os.Getenv("TMPDIR"); tmp != "" {
		if !filepath.IsAbs(tmp) && cwd != "" {
			tmp = filepath.Join(cwd, tmp)
		}
		if filepath.IsAbs(tmp) {
			info.TempDirs = []string{filepath.Clean(tmp)}
			info.TempDir = filepath.Clean(tmp)
		}
	}
	return info
}

// PasswdPath is the passwd database LoginShell reads.
const PasswdPath = "/etc/passwd"

// FallbackShell is the shell used when neither the passwd entry nor $SHELL
// names a usable one.
const FallbackShell = "/bin/sh"

// LoginShell finds the shell a login of uid would get: the shell field of
// uid's entry in the passwd file at passwdPath, else envShell ($SHELL), else
// /bin/sh. A candidate is used only if it is an absolute path to an
// executable file that is not a "no login" placeholder (nologin, false):
// a service account's daemon still needs a shell to run commands with.
// It returns the shell's base name and path.
func LoginShell(passwdPath string, uid int, envShell string) (name, path string) {
	for _, cand := range []string{passwdShell(passwdPath, uid), envShell} {
		if usableShell(cand) {
			return filepath.Base(cand), cand
		}
	}
	return filepath.Base(FallbackShell), FallbackShell
}

func passwdShell(path string, uid int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	return passwdShellFrom(f, uid)
}

// passwdShellFrom returns the shell field of uid's first entry.
func passwdShellFrom(r io.Reader, uid int) string {
	want := strconv.Itoa(uid)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		// name:password:uid:gid:gecos:home:shell
		f := strings.Split(line, ":")
		if len(f) >= 7 && f[2] == want {
			return strings.TrimSpace(f[6])
		}
	}
	return ""
}

func usableShell(p string) bool {
	if p == "" || !filepath.IsAbs(p) {
		return false
	}
	switch filepath.Base(p) {
	case "nologin", "false":
		return false
	}
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}

// Version is runtimed's version from its build info, as a semver string: the
// main module's version without its "v" ("1.2.3", or a Go pseudo-version)
// when it was built as a module; "0.0.0-devel+<revision>" (12 hex digits,
// ".dirty" when the checkout had changes) when built from a checkout; and
// "0.0.0-devel" when there is no build info. Codex uses the executor version
// for version-based decisions, so it stays parseable.
func Version(bi *debug.BuildInfo) string {
	if bi == nil {
		return "0.0.0-devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return strings.TrimPrefix(v, "v")
	}
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "0.0.0-devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	v := "0.0.0-devel+" + rev
	if dirty {
		v += ".dirty"
	}
	return v
}

// ProviderID identifies an executor installation: "sha256:" and the hex
// SHA-256 of the host name, the executable's resolved path and the uid it
// runs as (NUL-separated). It is the same across restarts of the same
// binary by the same user on the same host, whatever the working directory
// or environment, and differs between hosts, installs and users.
func ProviderID(hostname, executable string, uid int) string {
	h := sha256.New()
	io.WriteString(h, "runtimed\x00")
	io.WriteString(h, hostname)
	io.WriteString(h, "\x00")
	io.WriteString(h, executable)
	io.WriteString(h, "\x00")
	io.WriteString(h, strconv.Itoa(uid))
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}
