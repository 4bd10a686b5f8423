package main_test

// Installing the real Codex CLI for e2e_codex_test.go: a pinned version from npm into a cache
// directory outside the repository, reused when present. The npm package @openai/codex is a small
// Node launcher; the native binary comes in the platform package it lists as an optional dependency
// (@openai/codex-linux-x64 -> vendor/x86_64-unknown-linux-musl/bin/codex), and the tests run that
// binary directly (the launcher only execs it).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	// codexCacheEnv overrides where installed Codex versions are kept.
	codexCacheEnv = "RUNTIMED_CODEX_CACHE"
	// npmInstallTimeout bounds one `npm install` (two packages, ~100 MB download).
	npmInstallTimeout = 5 * time.Minute
)

// codexCacheRoot is $RUNTIMED_CODEX_CACHE, else <user cache dir>/runtimed-test ($XDG_CACHE_HOME or
// ~/.cache on Linux).
func codexCacheRoot() (string, error) {
	if dir := os.Getenv(codexCacheEnv); dir != "" {
		return filepath.Abs(dir)
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory (set %s): %w", codexCacheEnv, err)
	}
	return filepath.Join(base, "runtimed-test"), nil
}

// codexPlatform names the npm platform package and target directory for this machine.
func codexPlatform() (pkg, target string, ok bool) {
	if runtime.GOOS != "linux" {
		return "", "", false
	}
	switch runtime.GOARCH {
	case "amd64":
		return "@openai/codex-linux-x64", "x86_64-unknown-linux-musl", true
	case "arm64":
		return "@openai/codex-linux-arm64", "aarch64-unknown-linux-musl", true
	}
	return "", "", false
}

// codexInstalls memoises one install attempt per version for the whole test binary.
var codexInstalls sync.Map // version -> *codexInstall

type codexInstall struct {
	once sync.Once
	bin  string
	skip string // why the tests cannot run, when bin is ""
}

// codexBinary returns the native codex binary of version, installing it into the cache if needed.
// It skips the test, with the reason, when the binary cannot be had here.
func codexBinary(t *testing.T, version string) string {
	t.Helper()
	v, _ := codexInstalls.LoadOrStore(version, &codexInstall{})
	in := v.(*codexInstall)
	in.once.Do(func() { in.bin, in.skip = installCodex(t, version) })
	if in.bin == "" {
		t.Skipf("codex %s unavailable: %s", version, in.skip)
	}
	return in.bin
}

func installCodex(t *testing.T, version string) (bin, skip string) {
	pkg, target, ok := codexPlatform()
	if !ok {
		return "", fmt.Sprintf("no published codex binary for %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	root, err := codexCacheRoot()
	if err != nil {
		return "", err.Error()
	}
	dir := filepath.Join(root, "codex-"+version)
	binIn := func(d string) string {
		return filepath.Join(d, "node_modules", filepath.FromSlash(pkg), "vendor", target, "bin", "codex")
	}
	if err := checkCodexVersion(binIn(dir), version); err == nil {
		return binIn(dir), ""
	}
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", fmt.Sprintf("%s is not installed (needed once to fetch @openai/codex@%s into %s)", tool, version, dir)
		}
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", err.Error()
	}
	staging, err := os.MkdirTemp(root, "codex-"+version+".staging-")
	if err != nil {
		return "", err.Error()
	}
	defer os.RemoveAll(staging)
	t.Logf("installing @openai/codex@%s into %s (once; later runs reuse it)", version, dir)
	ctx, cancel := context.WithTimeout(context.Background(), npmInstallTimeout)
	defer cancel()
	// --ignore-scripts: the package needs no install scripts; the platform binary is a plain file of
	// the optional dependency, pinned by the launcher's own package.json.
	cmd := exec.CommandContext(ctx, "npm", "install", "--prefix", staging, "--no-save", "--no-audit",
		"--no-fund", "--ignore-scripts", "--loglevel=error", "@openai/codex@"+version)
	cmd.Dir = staging
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Sprintf("npm install @openai/codex@%s failed (%v): %s", version, err, trunc(strings.TrimSpace(out.String()), 800))
	}
	if err := checkCodexVersion(binIn(staging), version); err != nil {
		return "", fmt.Sprintf("npm installed @openai/codex@%s but not a working %s binary: %v", version, pkg, err)
	}
	// Publish atomically; a concurrent installer (another test binary) may have won the race.
	_ = os.RemoveAll(dir)
	if err := os.Rename(staging, dir); err != nil && checkCodexVersion(binIn(dir), version) != nil {
		return "", fmt.Sprintf("moving the install into %s: %v", dir, err)
	}
	if err := checkCodexVersion(binIn(dir), version); err != nil {
		return "", err.Error()
	}
	return binIn(dir), ""
}

// checkCodexVersion runs `bin --version` and wants "codex-cli <version>".
func checkCodexVersion(bin, version string) error {
	if _, err := os.Stat(bin); err != nil {
		return err
	}
	home, err := os.MkdirTemp("", "codex-version-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(home)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--version")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "CODEX_HOME=" + home}
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("%s --version: %w", bin, err)
	}
	if got := strings.TrimSpace(string(out)); got != "codex-cli "+version {
		return errors.New(bin + " --version says " + got)
	}
	return nil
}
