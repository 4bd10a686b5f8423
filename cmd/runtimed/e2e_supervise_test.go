package main_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeSupervise: `runtimed serve --supervise FILE` keeps a service
// running (restarted as NAME#2 after it is killed from outside), lets a
// crash-looping one give up, shows both in process/list, and stops the
// service on shutdown.
func TestServeSupervise(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	file := filepath.Join(dir, "services.json")
	services := fmt.Sprintf(`{"services": [
  {"name": "keeper", "argv": ["/bin/sh", "-c", "echo $$ > %s.tmp; mv %s.tmp %s; exec sleep 300"], "cwd": %q,
   "restart": "always", "backoff": {"initial": "50ms", "max": "100ms"}},
  {"name": "crasher", "argv": ["/bin/sh", "-c", "exit 4"], "cwd": %q,
   "backoff": {"initial": "10ms", "max": "20ms"}, "maxRestarts": 2, "window": "1m"}
]}`, pidFile, pidFile, pidFile, dir, dir)
	if err := os.WriteFile(file, []byte(services), 0o644); err != nil {
		t.Fatal(err)
	}
	c := session(t, transports[0], "--supervise", file)
	ctx := tctx(t, wait)
	first := mustAtoiE2E(t, waitForFile(t, pidFile))
	list := func() map[string]string {
		raw, err := call(ctx, c, "process/list", map[string]any{})
		if err != nil {
			t.Fatal(err)
		}
		var res struct {
			Processes []struct {
				ProcessID string `json:"processId"`
				State     string `json:"state"`
			} `json:"processes"`
		}
		if err := json.Unmarshal(raw, &res); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, p := range res.Processes {
			out[p.ProcessID] = p.State
		}
		return out
	}
	if !pollUntil(10*time.Second, func() bool { l := list(); return l["keeper#1"] == "running" && l["crasher#3"] != "" }) {
		t.Fatalf("process/list %v: want keeper#1 running and crasher restarted twice", list())
	}
	// Killed from outside: restarted.
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !pollUntil(10*time.Second, func() bool { return list()["keeper#2"] == "running" }) {
		t.Fatalf("keeper was not restarted: %v", list())
	}
	if l := list(); l["crasher#4"] != "" {
		t.Errorf("crasher restarted past its intensity limit: %v", l)
	}
	if !pollUntil(10*time.Second, func() bool { return waitForFile(t, pidFile) != strconv.Itoa(first) }) {
		t.Fatalf("the restarted service never ran (pid file still %d)", first)
	}
}

// TestServeSuperviseStopsOnShutdown: SIGTERM to the daemon stops its
// services; a bad services file is refused naming the field.
func TestServeSuperviseStopsOnShutdown(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	file := filepath.Join(dir, "services.json")
	svc := fmt.Sprintf(`{"services":[{"name":"s","argv":["/bin/sh","-c","echo $$ > %s.tmp; mv %s.tmp %s; exec sleep 300"],"cwd":%q}]}`, pidFile, pidFile, pidFile, dir)
	if err := os.WriteFile(file, []byte(svc), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--supervise", file)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := mustAtoiE2E(t, waitForFile(t, pidFile))
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("daemon exit: %v", err)
		}
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("daemon did not exit on SIGTERM")
	}
	waitPidGone(t, "supervised service after shutdown", pid, 5*time.Second)

	bad := filepath.Join(dir, "bad.json")
	_ = os.WriteFile(bad, []byte(`{"services":[{"name":"x","argv":["true"],"cwd":"/","restart":"sometimes"}]}`), 0o644)
	out, err := exec.Command(bin, "serve", "--supervise", bad).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "services[0] (x)") || !strings.Contains(string(out), "sometimes") {
		t.Errorf("bad services file: %v %s", err, out)
	}
}

func waitForFile(t *testing.T, path string) string {
	t.Helper()
	var s string
	if !pollUntil(10*time.Second, func() bool {
		b, err := os.ReadFile(path)
		s = strings.TrimSpace(string(b))
		return err == nil && s != ""
	}) {
		t.Fatalf("%s never written", path)
	}
	return s
}

func mustAtoiE2E(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return n
}
