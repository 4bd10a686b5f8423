package sandbox

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// nsHost is a probed host at the namespaces level, or a skip naming what
// this host lacks.
func nsHost(t *testing.T) *Host {
	t.Helper()
	h := probeOrSkip(t)
	if !h.Namespaces {
		t.Skipf("no namespaces here: %s", h.NamespacesMissing)
	}
	h.Level = LevelNamespaces
	return h
}

// runIn runs a shell script under p in dir and returns its combined
// output and exit code.
func runIn(t *testing.T, h *Host, p *Policy, dir, script string) (string, int) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	proc, err := Start(h, Plan{Path: "/bin/sh", Argv: []string{"sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"}, Policy: p},
		&os.ProcAttr{Dir: dir, Files: []*os.File{devnull, w, w}, Sys: &syscall.SysProcAttr{Setsid: true}})
	w.Close()
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	_ = r.SetReadDeadline(time.Now().Add(30 * time.Second))
	out, rerr := io.ReadAll(r)
	st, werr := proc.Wait()
	if rerr != nil || werr != nil {
		t.Fatalf("read: %v, wait: %v", rerr, werr)
	}
	return string(out), st.ExitCode()
}

// codexWorkspaceWrite is the policy shape Codex 0.169 sends for
// workspace-write (policy.FloorSandbox resolved): / read; the root, /tmp
// and $TMPDIR write; .git/.agents/.codex/.aws read where they exist.
func codexWorkspaceWrite(ws string) *Policy {
	p := &Policy{RestrictFS: true, Rules: []Rule{{Path: "/", Access: Read}, {Path: ws, Access: Write}, {Path: "/tmp", Access: Write}}}
	for _, sub := range protectedNames {
		if _, err := os.Lstat(filepath.Join(ws, sub)); err == nil {
			p.Rules = append(p.Rules, Rule{Path: filepath.Join(ws, sub), Access: Read})
		}
	}
	return p
}

func codexReadOnly() *Policy {
	return &Policy{RestrictFS: true, Rules: []Rule{{Path: "/", Access: Read}}}
}

func TestNamespaceSmoke(t *testing.T) {
	h := nsHost(t)
	ws := t.TempDir()
	if err := os.Mkdir(filepath.Join(ws, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, code := runIn(t, h, codexWorkspaceWrite(ws), ws, `echo hi > f && cat f; echo x > .git/c || echo DENIED-git; mkdir .codex/x || echo DENIED-codex; ls /dev; ps -e 2>&1 | wc -l; echo $$; cat /proc/self/comm; echo me > /proc/self/comm && cat /proc/self/comm; touch /etc/passwd || echo DENIED-etc; exit 3`)
	t.Logf("code %d out:\n%s", code, out)
	if code != 3 || !strings.Contains(out, "hi\n") {
		t.Fatalf("code %d out %q", code, out)
	}
}
