package sandbox

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestNamespaceMountPlanEdges pins down what the namespace's mounts do
// on their own, where Landlock (the second wall) would hide a missing
// mount from every read/write probe (a sampled mutation pass, issue 29,
// found these unguarded): a denied path under a read-only parent is
// covered (its size and entries are not visible, which Landlock does not
// mediate); a protected name that is a symlink into the writable
// workspace protects its target; a denied protected name is hidden, not
// re-exposed read-only; /proc's dangerous parts and /dev are read-only
// mounts (a part of /proc this kernel lacks is skipped); the device
// nodes are the right ones.
func TestNamespaceMountPlanEdges(t *testing.T) {
	h := nsHost(t)
	ws, od := t.TempDir(), t.TempDir()
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(od, "secret"), "topsecret\n")
	write(filepath.Join(od, "sdir", "inner"), "x")
	write(filepath.Join(ws, "gitdir", "config"), "[core]\n")
	write(filepath.Join(ws, ".codex", "config.toml"), "model = 1\n")
	if err := os.Symlink("gitdir", filepath.Join(ws, ".git")); err != nil {
		t.Fatal(err)
	}
	p := &Policy{RestrictFS: true, Rules: []Rule{
		{Path: "/", Access: Read}, {Path: ws, Access: Write},
		{Path: filepath.Join(od, "secret"), Access: Deny}, {Path: filepath.Join(od, "sdir"), Access: Deny},
		{Path: filepath.Join(ws, ".codex"), Access: Deny},
	}}
	script := `cd ` + ws + `
echo "secret-size:$(stat -c %s ` + od + `/secret 2>&1)"
echo "sdir-entries:$(ls -A ` + od + `/sdir 2>/dev/null | wc -l)"
(echo x > gitdir/hook) 2>/dev/null && echo GITDIR-WRITTEN
(echo x > .git/hook2) 2>/dev/null && echo GIT-WRITTEN
ls -A .codex 2>/dev/null | grep -q config && echo CODEX-LISTED
cat .codex/config.toml 2>/dev/null && echo CODEX-READ
echo wrote > plain && echo ws-ok
for m in /proc/sys /proc/sysrq-trigger /proc/irq /proc/bus /dev; do [ -e $m ] || { echo "mnt $m ro"; continue; }; awk -v m=$m '$5==m{split($6,o,","); print "mnt", m, o[1]}' /proc/self/mountinfo | tail -1; done
for d in null zero full random urandom tty; do echo "dev $d $(stat -c '%t:%T' /dev/$d)"; done
echo "null-bytes:$(head -c 4 /dev/null | wc -c)"`
	out, code := runIn(t, h, p, ws, script)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	for _, want := range []string{
		"secret-size:0\n", "sdir-entries:0\n", "ws-ok\n",
		"mnt /proc/sys ro\n", "mnt /proc/sysrq-trigger ro\n", "mnt /proc/irq ro\n", "mnt /proc/bus ro\n", "mnt /dev ro\n",
		"dev null 1:3\n", "dev zero 1:5\n", "dev full 1:7\n", "dev random 1:8\n", "dev urandom 1:9\n", "dev tty 5:0\n",
		"null-bytes:0\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	for _, bad := range []string{"GITDIR-WRITTEN", "GIT-WRITTEN", "CODEX-LISTED", "CODEX-READ", "model = 1"} {
		if strings.Contains(out, bad) {
			t.Errorf("%s in:\n%s", bad, out)
		}
	}
}

// TestPlanNamespaceNoRedundantMounts: a path whose parent already gives
// it the same access gets no mount of its own (every mount is made at
// each start), and one whose parent does not gets exactly one.
func TestPlanNamespaceNoRedundantMounts(t *testing.T) {
	ws := t.TempDir()
	for _, d := range []string{"sub", "ro", filepath.Join("ro", "rw")} {
		if err := os.Mkdir(filepath.Join(ws, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ops := func(p *Policy) string {
		t.Helper()
		np, err := planNamespace(p)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range np.Mounts {
			if within(m.Path, ws) && m.Op != opStub { // stubs: the protected names
				out = append(out, m.Op+" "+strings.TrimPrefix(m.Path, ws))
			}
		}
		return strings.Join(out, ", ")
	}
	j := func(s string) string { return filepath.Join(ws, s) }
	for _, c := range []struct {
		name  string
		rules []Rule
		want  string
	}{
		{"write under a writable root", []Rule{{"/", Write}, {ws, Write}}, ""},
		{"read under a read-only root", []Rule{{"/", Read}, {j("sub"), Read}}, ""},
		{"write under read", []Rule{{"/", Read}, {ws, Write}}, "rw "},
		{"read under write under read", []Rule{{"/", Read}, {ws, Write}, {j("ro"), Read}, {j("ro/rw"), Write}}, "rw , ro /ro, rw /ro/rw"},
	} {
		if got := ops(&Policy{RestrictFS: true, Rules: c.rules}); got != c.want {
			t.Errorf("%s: mounts under the workspace %q, want %q", c.name, got, c.want)
		}
	}
}

// TestNamespaceCgroupNS: the command runs in a cgroup namespace of its
// own, with and without a pid namespace (with one, the command is forked
// by the init from another thread than the one that unshared in the
// helper: unshare(CLONE_NEWCGROUP) moves only the calling thread).
func TestNamespaceCgroupNS(t *testing.T) {
	h := nsHost(t)
	own, err := os.Readlink("/proc/self/ns/cgroup")
	if err != nil {
		t.Skipf("no cgroup namespaces: %v", err)
	}
	for _, pid := range []PidMode{PidIsolate, PidInherit} {
		hh := *h
		hh.PidNamespace = pid
		ws := t.TempDir()
		out, code := runIn(t, &hh, codexWorkspaceWrite(ws), ws, `readlink /proc/self/ns/cgroup`)
		if got := strings.TrimSpace(out); code != 0 || !strings.HasPrefix(got, "cgroup:[") || got == own {
			t.Errorf("%s: the command's cgroup namespace %q (exit %d), the test's %s: want one of its own", pid, got, code, own)
		}
	}
}

// TestHostSockets: a pathname socket bound now is listed (its name may
// hold spaces), an abstract one is not.
func TestHostSockets(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a socket")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	abstract, err := net.Listen("unix", "@runtimed-test-"+filepath.Base(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer abstract.Close()
	got := hostSockets()
	if !slices.Contains(got, path) {
		t.Fatalf("hostSockets() = %q, lacks %q", got, path)
	}
	for _, s := range got {
		if !strings.HasPrefix(s, "/") {
			t.Errorf("hostSockets() lists %q, not a path", s)
		}
	}
}
