package sandbox

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// stageDir is a fresh directory outside /tmp (Codex's workspace-write
// opens /tmp to writes).
func stageDir(t *testing.T) string {
	t.Helper()
	base, err := os.MkdirTemp("/var/tmp", "runtimed-prepared-")
	if err != nil {
		t.Skipf("no directory outside /tmp: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	return base
}

// stagedWS makes a directory ws in a fresh stageDir.
func stagedWS(t *testing.T) string {
	t.Helper()
	ws := filepath.Join(stageDir(t), "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	return ws
}

// stageDirs makes directories a and b in a fresh stageDir.
func stageDirs(t *testing.T, a, b string) (string, string) {
	t.Helper()
	base := stageDir(t)
	da, db := filepath.Join(base, a), filepath.Join(base, b)
	for _, d := range []string{da, db} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return da, db
}

// TestPreparedStaleSocket: UNIX sockets the host binds after the sandbox
// was prepared (outside the writable roots) are out of reach, as from a
// sandbox built for the start: a new one, and one that existed at the
// preparation and was bound again since (another inode at the same path).
// Host sockets come and go on a busy host, so they are not part of the
// plan's key: the prepared sandbox is used, and its start covers them
// before the fork. A socket unbound since, replaced by a regular file, is
// readable (its cover went with it).
func TestPreparedStaleSocket(t *testing.T) {
	h := preparedHost(t)
	needPython(t)
	dir := stageDir(t)
	p := codexReadOnly()
	listen := func(path string) *net.UnixListener {
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		ln.SetUnlinkOnClose(true)
		t.Cleanup(func() { ln.Close() })
		return ln
	}
	rebound, gone := filepath.Join(dir, "rebound.sock"), filepath.Join(dir, "gone.sock")
	lr, lg := listen(rebound), listen(gone)
	used := primePrepared(t, h, Plan{Policy: p}, dir)
	late := listen(filepath.Join(dir, "late.sock"))
	lr.Close()
	lr2 := listen(rebound)
	lg.Close()
	if err := os.WriteFile(gone, []byte("plain file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code, err := runPlan(h, shPlan(p, `for s in late.sock rebound.sock; do /usr/bin/python3 -c 'import socket,sys
s=socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1]); print("CONNECTED")
except OSError as e:
    print("REFUSED")' $s; done; cat gone.sock; exit 5`), dir)
	if err != nil {
		t.Fatal(err)
	}
	wantUsed(t, h, used, 1, "a start after host sockets were bound")
	if code != 5 || out != "REFUSED\nREFUSED\nplain file\n" {
		t.Errorf("sockets bound after the preparation, and a file where one was: exit %d, %q", code, out)
	}
	for _, ln := range []*net.UnixListener{late, lr2} {
		_ = ln.SetDeadline(time.Now())
		if c, err := ln.Accept(); err == nil {
			c.Close()
			t.Errorf("a sandboxed process connected to %s, bound after the preparation", ln.Addr())
		}
	}
}

// TestPreparedStaleWorkspace: the workspace removed and made again at the
// same path after the preparation: the command's writes land in the new
// directory (a sandbox prepared with the old one is not used).
func TestPreparedStaleWorkspace(t *testing.T) {
	h := preparedHost(t)
	ws := stagedWS(t)
	p := codexWorkspaceWrite(ws)
	used := primePrepared(t, h, Plan{Policy: p}, ws)
	if err := os.RemoveAll(ws); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	out, code, err := runPlan(h, shPlan(p, `echo new > f && cat f; exit 5`), ws)
	if err != nil {
		t.Fatal(err)
	}
	wantUsed(t, h, used, 0, "a start after the workspace was made again")
	if code != 5 || out != "new\n" {
		t.Errorf("exit %d, output %q", code, out)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "f")); err != nil || string(b) != "new\n" {
		t.Errorf("the write did not land in the new workspace: %q %v", b, err)
	}
}

// TestPreparedStaleGitSymlink: the workspace's .git (the stub a start
// made) replaced, after the preparation, by a symlink to a host directory
// the policy lets the command write (/tmp): the command cannot write
// through it (the start's plan protects the target, which the prepared
// one did not: it is not used).
func TestPreparedStaleGitSymlink(t *testing.T) {
	h := preparedHost(t)
	ws := stagedWS(t)
	target := t.TempDir() // under /tmp: writable by the policy itself
	p := codexWorkspaceWrite(ws)
	used := primePrepared(t, h, Plan{Policy: p}, ws)
	git := filepath.Join(ws, ".git")
	if st, err := os.Lstat(git); err != nil || !st.IsDir() {
		t.Fatalf("no .git stub after the priming start: %v", err)
	}
	if err := os.Remove(git); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, git); err != nil {
		t.Fatal(err)
	}
	out, code, err := runPlan(h, shPlan(p, `{ echo pwn > .git/config; } 2>/dev/null && echo WROTE || echo DENIED; mkdir .git/hooks 2>/dev/null && echo MKDIR || echo DENIED-mkdir; exit 5`), ws)
	if err != nil {
		t.Fatal(err)
	}
	wantUsed(t, h, used, 0, "a start after .git became a symlink")
	if code != 5 || out != "DENIED\nDENIED-mkdir\n" {
		t.Errorf("exit %d, output %q", code, out)
	}
	if ents, _ := os.ReadDir(target); len(ents) != 0 {
		t.Errorf("written through the .git symlink: %v", ents)
	}
}

// TestPreparedStaleRuleSymlink: a rule's path (a writable root) replaced
// by a symlink to another directory after the preparation: the start
// behaves as a start on a sandbox built for it does (compared with one),
// and does not use the prepared sandbox.
func TestPreparedStaleRuleSymlink(t *testing.T) {
	h := preparedHost(t)
	fresh := *h
	fresh.NoPrepare = true
	base := stageDir(t)
	ws, elsewhere := filepath.Join(base, "ws"), filepath.Join(base, "elsewhere")
	for _, d := range []string{ws, elsewhere} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p := codexWorkspaceWrite(ws)
	used := primePrepared(t, h, Plan{Policy: p}, ws)
	if err := os.Rename(ws, ws+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, ws); err != nil {
		t.Fatal(err)
	}
	script := `{ echo x > f; } 2>/dev/null && echo WROTE-f || echo DENIED-f; pwd -P; ls -a | tr '\n' ' '; exit 5`
	got, gcode, gerr := runPlan(h, shPlan(p, script), ws)
	wantUsed(t, h, used, 0, "a start after a rule's path became a symlink")
	gotFiles := dirNames(t, elsewhere, ws+".old")
	for _, d := range []string{elsewhere, ws + ".old"} {
		os.Remove(filepath.Join(d, "f"))
	}
	want, wcode, werr := runPlan(&fresh, shPlan(p, script), ws)
	wantFiles := dirNames(t, elsewhere, ws+".old")
	t.Logf("prepared: exit %d %v %q; fresh: exit %d %v %q; files %v / %v", gcode, gerr, got, wcode, werr, want, gotFiles, wantFiles)
	if got != want || gcode != wcode || (gerr == nil) != (werr == nil) || gotFiles != wantFiles {
		t.Errorf("prepared: exit %d %v %q, files %s; fresh: exit %d %v %q, files %s", gcode, gerr, got, gotFiles, wcode, werr, want, wantFiles)
	}
}

func dirNames(t *testing.T, dirs ...string) string {
	t.Helper()
	var out []string
	for _, d := range dirs {
		ents, _ := os.ReadDir(d)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		out = append(out, filepath.Base(d)+":"+strings.Join(names, ","))
	}
	return strings.Join(out, " ")
}

// TestPreparedStaleMount: the host makes a directory of the workspace
// read-only with a bind mount after the preparation (a mount, not a file:
// no rule names it, so the plan does not change). A sandbox built for the
// start clones the workspace with its mounts and the command cannot write
// there; the prepared sandbox's mount namespace was copied before the
// mount existed.
//
// Failed at 6edc830: the plan (prepKey) did not change with the host's
// mount table, so the prepared sandbox was used and the command wrote
// under the host's read-only mount (a prepared sandbox's view is fresh
// for files but frozen for mounts: a private copy of the mount table made
// at preparation). prepKey now carries a digest of the daemon's mount
// table (mountTable), and waiting sandboxes end on a change
// (TestPreparedEndedOnMountChange).
func TestPreparedStaleMount(t *testing.T) {
	h, fresh, ws, sub := mountStage(t)
	p := codexWorkspaceWrite(ws)
	used := primePrepared(t, h, Plan{Policy: p}, ws)
	if err := unix.Mount(sub, sub, "", unix.MS_BIND, ""); err != nil {
		t.Skipf("bind mount: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(sub, unix.MNT_DETACH) })
	if err := unix.Mount("", sub, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	script := `{ echo x > sub/f; } 2>/dev/null && echo WROTE || echo DENIED; exit 5`
	got, gcode, err := runPlan(h, shPlan(p, script), ws)
	if err != nil {
		t.Fatal(err)
	}
	usedNow := h.prepared.usedCount() - used
	want, wcode, err := runPlan(fresh, shPlan(p, script), ws)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("prepared sandbox used: %d; prepared %q (exit %d), fresh %q (exit %d)", usedNow, got, gcode, want, wcode)
	if want != "DENIED\n" {
		t.Fatalf("a fresh sandbox wrote under the host's read-only mount: %q", want)
	}
	if got != want || gcode != wcode {
		t.Errorf("a host mount made after the preparation: prepared sandbox (used %d) %q, fresh %q", usedNow, got, want)
	}
}

// TestPreparedStaleUnmount: the reverse of TestPreparedStaleMount: a file
// system mounted in the workspace when the sandbox was prepared and
// unmounted by the host before the start. A sandbox built for the start
// writes into the directory the host sees; the prepared one still has the
// old mount (and keeps that file system alive).
//
// Failed at 6edc830 (the command's write went to the detached tmpfs and was
// lost): the same cause and fix as TestPreparedStaleMount.
func TestPreparedStaleUnmount(t *testing.T) {
	h, fresh, ws, sub := mountStage(t)
	if err := unix.Mount("tmpfs", sub, "tmpfs", 0, "size=64k"); err != nil {
		t.Skipf("tmpfs: %v", err)
	}
	mounted := true
	t.Cleanup(func() {
		if mounted {
			_ = unix.Unmount(sub, unix.MNT_DETACH)
		}
	})
	p := codexWorkspaceWrite(ws)
	used := primePrepared(t, h, Plan{Policy: p}, ws)
	if err := unix.Unmount(sub, 0); err != nil {
		t.Fatalf("unmount: %v", err)
	}
	mounted = false
	script := `echo x > sub/f && echo WROTE; exit 5`
	if out, code, err := runPlan(h, shPlan(p, script), ws); err != nil || code != 5 || out != "WROTE\n" {
		t.Fatalf("prepared: exit %d %q %v", code, out, err)
	}
	usedNow := h.prepared.usedCount() - used
	_, gotErr := os.Stat(filepath.Join(sub, "f"))
	os.Remove(filepath.Join(sub, "f"))
	if out, code, err := runPlan(fresh, shPlan(p, script), ws); err != nil || code != 5 || out != "WROTE\n" {
		t.Fatalf("fresh: exit %d %q %v", code, out, err)
	}
	_, wantErr := os.Stat(filepath.Join(sub, "f"))
	t.Logf("prepared sandbox used: %d; the file on the host after the prepared start: %v, after the fresh one: %v", usedNow, gotErr, wantErr)
	if wantErr != nil {
		t.Fatalf("a fresh sandbox's write is not on the host: %v", wantErr)
	}
	if gotErr != nil {
		t.Errorf("a file system unmounted after the preparation: the prepared sandbox (used %d) wrote into it, not into the host's directory (%v)", usedNow, gotErr)
	}
}

// TestPreparedEndedOnMountChange: a waiting sandbox is ended as soon as
// the daemon's mount table changes (its copy of the table would keep
// every file system mounted at its preparation busy while it waits, and
// no start could take it any more): a bind mount on the host, and the
// waiting helper is gone, reaped, without any start.
func TestPreparedEndedOnMountChange(t *testing.T) {
	h := preparedHost(t)
	ws := t.TempDir()
	p := codexWorkspaceWrite(ws)
	primePrepared(t, h, Plan{Policy: p}, ws)
	pids := h.prepared.readyPids()
	if len(pids) == 0 {
		t.Fatal("no sandbox waiting after the prime")
	}
	dropped := h.prepared.dropped.Load()
	sub := filepath.Join(t.TempDir(), "m")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(sub, sub, "", unix.MS_BIND, ""); err != nil {
		t.Skipf("bind mount: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(sub, unix.MNT_DETACH) })
	// The watch ends it on its own goroutine: looked at, bounded.
	deadline := time.Now().Add(10 * time.Second)
	for h.prepared.dropped.Load() == dropped || len(h.prepared.readyPids()) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("a sandbox still waits %v after the mount table changed", h.prepared.readyPids())
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, pid := range pids {
		if err := unix.Kill(pid, 0); err != unix.ESRCH {
			t.Errorf("the ended helper %d is still there (%v)", pid, err)
		}
	}
}

// mountStage is the set-up of the stale-mount tests: a host that
// prepares sandboxes, the same host that does not (for the fresh answer),
// and a workspace ws, staged where the tests may mount, with a
// directory sub for the host to mount on.
func mountStage(t *testing.T) (h, fresh *Host, ws, sub string) {
	t.Helper()
	h = preparedHost(t)
	f := *h
	f.NoPrepare = true
	ws = filepath.Join(stageDir(t), "ws")
	sub = filepath.Join(ws, "sub")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	return h, &f, ws, sub
}
