package actors

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/runtimed/runtimed/actors/contain"
	"github.com/runtimed/runtimed/actors/osproc"
	"github.com/runtimed/runtimed/actors/sandbox"
	"github.com/runtimed/runtimed/wire"
)

var (
	isoOnce sync.Once
	isoHost *sandbox.Host
	isoMgr  *contain.Manager
)

// testIsolation probes this host once per test binary; a test that needs
// what the kernel lacks skips with the reason.
func testIsolation(t *testing.T) osproc.Isolation {
	t.Helper()
	isoOnce.Do(func() {
		h, err := sandbox.Probe(os.TempDir())
		if err == nil {
			isoHost = h
		}
		isoMgr = contain.NewManager(contain.ModeCgroup2)
	})
	if isoHost == nil || !isoHost.Enforces() {
		t.Skipf("this kernel cannot enforce a sandbox: %+v", isoHost)
	}
	return osproc.Isolation{Host: isoHost, Contain: isoMgr}
}

func newIsoSupervisor(t *testing.T) *Supervisor {
	t.Helper()
	return newIsoSupervisorWith(t, testIsolation(t))
}

// bothWays runs a sandbox test twice: with confined starts on a spawning
// thread of this process (the default) and with every start through the
// re-exec'd helper (Host.HelperOnly), the two ways package sandbox
// enforces a policy.
func bothWays(t *testing.T, test func(t *testing.T, sup *Supervisor)) {
	t.Run("namespaces", func(t *testing.T) {
		iso := testIsolation(t)
		if !iso.Host.Namespaces {
			t.Skipf("no namespaces here: %s", iso.Host.NamespacesMissing)
		}
		test(t, newIsoSupervisor(t))
	})
	t.Run("thread", func(t *testing.T) { test(t, newIsoSupervisorWith(t, landlockLevel(t, false))) })
	t.Run("helper", func(t *testing.T) { test(t, newIsoSupervisorWith(t, landlockLevel(t, true))) })
}

// landlockLevel is the test isolation at runtimed serve --sandbox-level
// landlock, on spawning threads or (helperOnly) through the helper.
func landlockLevel(t *testing.T, helperOnly bool) osproc.Isolation {
	iso := testIsolation(t)
	h := *iso.Host
	h.Level = sandbox.LevelLandlock
	h.HelperOnly = helperOnly
	iso.Host = &h
	return iso
}

func newIsoSupervisorWith(t *testing.T, iso osproc.Isolation) *Supervisor {
	t.Helper()
	sup := NewSupervisor(Config{
		Proc: ProcConfig{RetainBytes: 1 << 20, RetainChunks: 1000, ClosedRetention: time.Minute,
			DrainAfterTerminate: 50 * time.Millisecond, ShutdownGrace: time.Second},
		DetachTTL: time.Second,
		Isolation: iso,
		Logger:    zaptest.NewLogger(t),
	})
	stopAtCleanup(t, sup)
	return sup
}

type runResult struct {
	out   string // stdout and stderr, in seq order
	code  int
	limit string
}

// runConfined runs a bash script under policy p (nil: none) and limits,
// and returns its output and exit.
func runConfined(t *testing.T, sup *Supervisor, dir string, p *sandbox.Policy, lim contain.Limits, script string) runResult {
	t.Helper()
	rec := newRecorder(4096)
	spec := Spec{Argv: []string{"/usr/bin/bash", "-c", script}, Dir: dir, Env: []string{"PATH=/usr/bin:/bin", "HOME=" + dir},
		Sandbox: p, Limits: lim}
	if _, err := sup.Spawn(fmt.Sprintf("p%d", time.Now().UnixNano()), spec, rec.sub()); err != nil {
		t.Fatalf("spawn: %v", err)
	}
	var r runResult
	for _, ev := range rec.untilClosed(t, 30*time.Second) {
		switch ev.Kind {
		case EventOutput:
			r.out += string(ev.Data)
		case EventExited:
			r.code, r.limit = ev.ExitCode, ev.Limit
		}
	}
	return r
}

// workspace lays out a project root (with .git and a secret) and an
// outside directory, both outside /tmp's rules (the policies below grant
// no /tmp).
func workspace(t *testing.T) (ws, outside string) {
	base := t.TempDir()
	ws, outside = filepath.Join(base, "ws"), filepath.Join(base, "outside")
	for _, d := range []string{ws, outside, filepath.Join(ws, ".git"), filepath.Join(ws, "sub"), filepath.Join(ws, "private")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for f, body := range map[string]string{filepath.Join(ws, ".git", "HEAD"): "ref\n", filepath.Join(ws, "secret.txt"): "TOPSECRET\n",
		filepath.Join(outside, "victim"): "original\n", filepath.Join(ws, "file"): "ws file\n",
		filepath.Join(ws, "private", "key"): "PRIVATEKEY\n"} {
		if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return ws, outside
}

func wsPolicy(ws string, network bool) *sandbox.Policy {
	return &sandbox.Policy{RestrictFS: true, Network: network, Rules: []sandbox.Rule{
		{Path: "/", Access: sandbox.Read},
		{Path: ws, Access: sandbox.Write},
		{Path: filepath.Join(ws, ".git"), Access: sandbox.Read},
		{Path: filepath.Join(ws, "secret.txt"), Access: sandbox.Deny},
		{Path: filepath.Join(ws, "private"), Access: sandbox.Deny},
	}}
}

// TestSandboxEscapes tries every way out of a workspace-write sandbox that
// the issue lists; each line of the script reports OK (the write landed)
// or DENIED, and the files on disk are checked too.
func TestSandboxEscapes(t *testing.T) { bothWays(t, testSandboxEscapes) }

func testSandboxEscapes(t *testing.T, sup *Supervisor) {
	ws, outside := workspace(t)
	script := strings.Join([]string{
		`try() { if eval "$2" 2>/dev/null; then echo "$1 OK"; else echo "$1 DENIED"; fi; }`,
		`try inside 'echo in > ` + ws + `/new'`,
		`try subdir 'echo in > ` + ws + `/sub/new'`,
		`try direct 'echo pwned > ` + outside + `/direct'`,
		`try overwrite 'echo pwned > ` + outside + `/victim'`,
		`try grandchild 'bash -c "echo pwned > ` + outside + `/grandchild"'`,
		`try setsid 'setsid -w bash -c "echo pwned > ` + outside + `/setsid"'`,
		`( setsid bash -c "echo pwned > ` + outside + `/doublefork" & )`,
		`ln -s ` + outside + ` ` + ws + `/link`,
		`try symlink 'echo pwned > ` + ws + `/link/via-symlink'`,
		`try rename 'mv ` + ws + `/file ` + outside + `/moved'`,
		`try hardlink 'ln ` + outside + `/victim ` + ws + `/hl && echo pwned >> ` + ws + `/hl'`,
		`try git-write 'echo pwned > ` + ws + `/.git/HEAD'`,
		`try git-create 'echo pwned > ` + ws + `/.git/new'`,
		`try git-remove 'rm -f ` + ws + `/.git/HEAD && test ! -e ` + ws + `/.git/HEAD'`,
		`try secret-read 'cat ` + ws + `/secret.txt | grep -q TOPSECRET'`,
		`try private-list 'ls ` + ws + `/private | grep -q key'`,
		`try private-read 'grep -q PRIVATEKEY ` + ws + `/private/key'`,
		`try private-write 'echo x > ` + ws + `/private/new'`,
		`try signal-daemon 'kill -0 ` + fmt.Sprint(os.Getpid()) + `'`,
		`try mount 'mount -t tmpfs none ` + ws + `/sub'`,
		`try umount-git 'umount ` + ws + `/.git'`,
	}, "\n")
	r := runConfined(t, sup, ws, wsPolicy(ws, true), contain.Limits{}, script)
	want := map[string]string{"inside": "OK", "subdir": "OK"}
	for _, name := range []string{"direct", "overwrite", "grandchild", "setsid", "symlink", "rename", "hardlink",
		"git-write", "git-create", "git-remove", "secret-read", "private-list", "private-read", "private-write", "signal-daemon", "mount", "umount-git"} {
		want[name] = "DENIED"
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(r.out), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			got[f[0]] = f[1]
		}
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: got %q, want %s (output:\n%s)", name, got[name], w, r.out)
		}
	}
	for _, f := range []string{"direct", "grandchild", "setsid", "doublefork", "via-symlink", "moved"} {
		if _, err := os.Stat(filepath.Join(outside, f)); err == nil {
			t.Errorf("%s was written outside the workspace", f)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "victim")); string(b) != "original\n" {
		t.Errorf("outside file changed: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, ".git", "HEAD")); string(b) != "ref\n" {
		t.Errorf(".git/HEAD changed: %q", b)
	}
	// The hiding inodes lived in the child's namespace only.
	if ents, err := os.ReadDir(isoHost.Scratch); err != nil || len(ents) != 0 {
		t.Errorf("host scratch directory %s: %v %v (want empty)", isoHost.Scratch, ents, err)
	}
	// The mounts stayed inside the child's namespace.
	if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), ws) {
		t.Errorf("the sandbox's mounts leaked into the daemon's namespace")
	}
}

// TestSandboxNetwork: restricted cuts TCP and UDP to a loopback listener;
// enabled leaves them (the control that makes the first assertion mean
// something).
func TestSandboxNetwork(t *testing.T) { bothWays(t, testSandboxNetwork) }

func testSandboxNetwork(t *testing.T, sup *Supervisor) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	ws, _ := workspace(t)
	script := fmt.Sprintf(`(echo x > /dev/tcp/127.0.0.1/%d) 2>/dev/null && echo tcp OK || echo tcp DENIED
(echo x > /dev/udp/127.0.0.1/%d) 2>/dev/null && echo udp OK || echo udp DENIED
bash -c '(echo x > /dev/tcp/127.0.0.1/%d) 2>/dev/null' && echo tcp-child OK || echo tcp-child DENIED`, port, port, port)
	r := runConfined(t, sup, ws, wsPolicy(ws, false), contain.Limits{}, script)
	for _, w := range []string{"tcp DENIED", "udp DENIED", "tcp-child DENIED"} {
		if !strings.Contains(r.out, w) {
			t.Errorf("restricted network: want %q in %q", w, r.out)
		}
	}
	r = runConfined(t, sup, ws, wsPolicy(ws, true), contain.Limits{}, script)
	for _, w := range []string{"tcp OK", "udp OK", "tcp-child OK"} {
		if !strings.Contains(r.out, w) {
			t.Errorf("enabled network: want %q in %q", w, r.out)
		}
	}
}

// TestSandboxReadOnly: root read only; nothing can be written anywhere
// (but /dev/null), and reads work.
func TestSandboxReadOnly(t *testing.T) { bothWays(t, testSandboxReadOnly) }

func testSandboxReadOnly(t *testing.T, sup *Supervisor) {
	ws, _ := workspace(t)
	p := &sandbox.Policy{RestrictFS: true, Rules: []sandbox.Rule{{Path: "/", Access: sandbox.Read}}}
	r := runConfined(t, sup, ws, p, contain.Limits{}, `cat file; echo quiet > /dev/null && echo devnull OK
(echo x > `+ws+`/new) 2>/dev/null && echo write OK || echo write DENIED
(echo x > /tmp/runtimed-ro-probe-$$) 2>/dev/null && echo tmp OK || echo tmp DENIED`)
	for _, w := range []string{"ws file", "devnull OK", "write DENIED", "tmp DENIED"} {
		if !strings.Contains(r.out, w) {
			t.Errorf("want %q in %q", w, r.out)
		}
	}
}

// TestLimits: a memory hog is killed and reported as such; a fork burst
// is bounded by pids; a file-size limit is reported.
func TestLimits(t *testing.T) {
	sup := newIsoSupervisor(t)
	if isoMgr.Summary() == "" {
		t.Fatal("no summary")
	}
	dir := t.TempDir()
	r := runConfined(t, sup, dir, nil, contain.Limits{MemoryBytes: 32 << 20},
		`x=$(head -c 200000000 /dev/zero | tr '\0' a); echo survived ${#x}`)
	if r.code != 137 || r.limit != contain.LimitMemory || strings.Contains(r.out, "survived") {
		t.Errorf("memory hog: code %d limit %q out %q; want 137 memory", r.code, r.limit, r.out)
	}
	// The test binary itself is the fork bomb (see forkBurst in main_test.go).
	rec := newRecorder(64)
	spec := Spec{Argv: []string{os.Args[0]}, Dir: dir, Env: []string{"RUNTIMED_TEST_FORKS=40"}, Limits: contain.Limits{Pids: 8}}
	if _, err := sup.Spawn("burst", spec, rec.sub()); err != nil {
		t.Fatal(err)
	}
	var out string
	for _, ev := range rec.untilClosed(t, 30*time.Second) {
		if ev.Kind == EventOutput {
			out += string(ev.Data)
		} else if ev.Kind == EventExited {
			r = runResult{code: ev.ExitCode, limit: ev.Limit}
		}
	}
	var started, failed int
	if _, err := fmt.Sscanf(out, "started %d failed %d", &started, &failed); err != nil || started >= 8 || failed == 0 || started+failed != 40 {
		t.Errorf("fork burst with pids 8: %q (%v)", out, err)
	}
	if r.code != 1 || r.limit != contain.LimitPids {
		t.Errorf("fork burst: code %d limit %q, want 1 pids", r.code, r.limit)
	}
	r = runConfined(t, sup, dir, nil, contain.Limits{FileSizeBytes: 4096}, `exec head -c 100000 /dev/zero > big`)
	if r.limit != contain.LimitFileSize || r.code != 128+25 {
		t.Errorf("file size: code %d limit %q out %q", r.code, r.limit, r.out)
	}
	if st, err := os.Stat(filepath.Join(dir, "big")); err != nil || st.Size() > 4096 {
		t.Errorf("big file: %v %v", st, err)
	}
}

// TestSandboxSwapRace races the check against the enforcement: while
// sandboxed starts are granted a workspace, another goroutine keeps
// replacing that workspace with a symlink to an outside directory. Every
// start either runs confined to the real workspace or fails naming the
// change; nothing is ever written outside.
func TestSandboxSwapRace(t *testing.T) { bothWays(t, testSandboxSwapRace) }

func testSandboxSwapRace(t *testing.T, sup *Supervisor) {
	base := t.TempDir()
	ws, parked, outside := filepath.Join(base, "ws"), filepath.Join(base, "parked"), filepath.Join(base, "outside")
	for _, d := range []string{ws, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	swapped := make(chan int)
	go func() {
		n := 0
		defer func() { swapped <- n }()
		for {
			select {
			case <-stop:
				_ = os.Remove(ws)
				_ = os.Rename(parked, ws)
				return
			default:
			}
			// ws: directory -> symlink to outside -> directory again.
			if os.Rename(ws, parked) == nil {
				_ = os.Symlink(outside, ws)
				_ = os.Remove(ws)
				_ = os.Rename(parked, ws)
				n++
			}
		}
	}()
	p := &sandbox.Policy{RestrictFS: true, Rules: []sandbox.Rule{{Path: "/", Access: sandbox.Read}, {Path: ws, Access: sandbox.Write}}}
	ran, refused := 0, 0
	for i := 0; i < 40; i++ {
		rec := newRecorder(64)
		spec := Spec{Argv: []string{"/bin/sh", "-c", fmt.Sprintf("echo x > %s/f%d", ws, i)}, Dir: "/", Env: []string{"PATH=/usr/bin:/bin"}, Sandbox: p}
		if _, err := sup.Spawn(fmt.Sprintf("race%d", i), spec, rec.sub()); err != nil {
			if !strings.Contains(err.Error(), "changed during the start") && !strings.Contains(err.Error(), "no such file") && !strings.Contains(err.Error(), "symbolic link") {
				t.Errorf("start %d failed unclearly: %v", i, err)
			}
			refused++
			continue
		}
		rec.untilClosed(t, 10*time.Second)
		ran++
	}
	close(stop)
	n := <-swapped
	ents, _ := os.ReadDir(outside)
	if len(ents) != 0 {
		t.Errorf("%d files written outside the workspace during the swap race", len(ents))
	}
	t.Logf("%d swaps; %d starts ran confined, %d refused", n, ran, refused)
	if n == 0 {
		t.Errorf("the swapper never swapped: the race was not run")
	}
}

// TestSandboxPTYAndCwd: a sandboxed command on a PTY keeps its terminal
// (it is the session leader with a controlling tty, its exit code intact);
// a cwd the policy hides fails the start with a clear error.
func TestSandboxPTYAndCwd(t *testing.T) { bothWays(t, testSandboxPTYAndCwd) }

func testSandboxPTYAndCwd(t *testing.T, sup *Supervisor) {
	ws, outside := workspace(t)
	rec := newRecorder(256)
	spec := Spec{Argv: []string{"/usr/bin/bash", "-c", `tty; test -t 0 && echo stdin-is-tty; ps -o sid= -p $$ | tr -d ' '; echo pid $$; exit 5`},
		Dir: ws, Env: []string{"PATH=/usr/bin:/bin"}, TTY: true, Sandbox: wsPolicy(ws, false)}
	ref, err := sup.Spawn("pty", spec, rec.sub())
	if err != nil {
		t.Fatal(err)
	}
	var out string
	code := -1
	for _, ev := range rec.untilClosed(t, 10*time.Second) {
		switch ev.Kind {
		case EventOutput:
			out += string(ev.Data)
		case EventExited:
			code = ev.ExitCode
		}
	}
	if !strings.Contains(out, "/dev/pts/") || !strings.Contains(out, "stdin-is-tty") || code != 5 {
		t.Errorf("sandboxed PTY: code %d, output %q", code, out)
	}
	pid := ref.Pid()
	if sup.cfg.Isolation.Host.EnforcedLevel() == sandbox.LevelNamespaces {
		// Its own pid namespace: the daemon reports (and signals) its
		// init; inside, the command is not pid 1 and leads its session.
		var inner, sid int
		if _, err := fmt.Sscanf(out[strings.Index(out, "stdin-is-tty\r\n")+len("stdin-is-tty\r\n"):], "%d\r\npid %d", &sid, &inner); err != nil || inner <= 1 {
			t.Errorf("the command's pid inside its namespace: %d (%v) in %q", inner, err, out)
		}
		pid = inner
	} else if !strings.Contains(out, fmt.Sprintf("pid %d", pid)) {
		t.Errorf("the command does not have the helper's pid %d: %q", pid, out)
	}
	if !strings.Contains(out, fmt.Sprintf("%d\r\npid %d", pid, pid)) {
		t.Errorf("the command is not its own session leader (sid %d): %q", pid, out)
	}
	// cwd outside what the policy lets it read.
	hidden := &sandbox.Policy{RestrictFS: true, Rules: []sandbox.Rule{{Path: "/usr", Access: sandbox.Read}, {Path: "/etc", Access: sandbox.Read}}}
	// A rule through a symlink is refused up front (usrmerge: /lib -> usr/lib).
	if real, _ := filepath.EvalSymlinks("/lib"); real != "/lib" {
		bad := &sandbox.Policy{RestrictFS: true, Rules: []sandbox.Rule{{Path: "/lib", Access: sandbox.Read}}}
		if _, err := sup.Spawn("link", Spec{Argv: []string{"/usr/bin/true"}, Dir: "/", Sandbox: bad}, nil); err == nil || !strings.Contains(err.Error(), "symbolic link") {
			t.Errorf("rule through a symlink: %v", err)
		}
	}
	_, err = sup.Spawn("cwd", Spec{Argv: []string{"/usr/bin/bash", "-c", "true"}, Dir: outside, Env: []string{"PATH=/usr/bin:/bin"}, Sandbox: hidden}, nil)
	if err == nil || !strings.Contains(err.Error(), "working directory") || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("hidden cwd: %v", err)
	}
}

// shmemBytes is the kernel's count of shared memory (tmpfs included).
func shmemBytes(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Shmem:"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
			return kb << 10
		}
	}
	t.Fatal("no Shmem in /proc/meminfo")
	return 0
}

// shmemSettled is shmemBytes once it is back within 32 MiB of before, or
// after 5 s: the exit is reported by the tree's init before it exits
// itself, and the tmpfs goes with the init's namespace a moment later
// (the kernel signals nothing for it, so it is looked at, bounded).
func shmemSettled(t *testing.T, before int64) int64 {
	t.Helper()
	after := shmemBytes(t)
	for deadline := time.Now().Add(5 * time.Second); after-before > 32<<20 && time.Now().Before(deadline); after = shmemBytes(t) {
		time.Sleep(10 * time.Millisecond)
	}
	return after
}

// TestSandboxShmChargedAndFreed: at the namespaces level /dev/shm is the
// tree's own tmpfs: what it writes there is charged to the tree's memory
// limit (the tree is killed for it) and freed with the tree, whether it
// ended by itself or was killed.
func TestSandboxShmChargedAndFreed(t *testing.T) {
	iso := testIsolation(t)
	if !iso.Host.Namespaces {
		t.Skipf("no namespaces here: %s", iso.Host.NamespacesMissing)
	}
	sup := newIsoSupervisorWith(t, iso)
	ws := t.TempDir()
	p := &sandbox.Policy{RestrictFS: true, Rules: []sandbox.Rule{{Path: "/", Access: sandbox.Read}, {Path: ws, Access: sandbox.Write}}}
	before := shmemBytes(t)
	r := runConfined(t, sup, ws, p, contain.Limits{}, `head -c 67108864 /dev/zero > /dev/shm/big && ls -l /dev/shm/big | wc -l`)
	if r.code != 0 || !strings.Contains(r.out, "1") {
		t.Fatalf("writing /dev/shm: %+v", r)
	}
	if after := shmemSettled(t, before); after-before > 32<<20 {
		t.Errorf("/dev/shm outlived its tree: Shmem %d -> %d bytes", before, after)
	}
	if !iso.Contain.LimitsOnTree() {
		t.Skip("no memory cgroup for the limit half")
	}
	r = runConfined(t, sup, ws, p, contain.Limits{MemoryBytes: 48 << 20}, `head -c 134217728 /dev/zero > /dev/shm/big; echo survived`)
	if r.code != 137 || r.limit != "memory" || strings.Contains(r.out, "survived") {
		t.Errorf("/dev/shm beyond the tree's memory limit: %+v, want killed for memory", r)
	}
	if after := shmemSettled(t, before); after-before > 32<<20 {
		t.Errorf("/dev/shm of a killed tree outlived it: Shmem %d -> %d bytes", before, after)
	}
}

// TestLimitsCannotBeLifted: an unsandboxed tree with limits, running as
// root, tries to leave its cgroups (every hierarchy's root cgroup.procs)
// and to raise every pids.max and memory limit it can see; each write is
// refused, it still sees its own cgroups as the root of its cgroup
// namespace, and the pids limit still bites.
func TestLimitsCannotBeLifted(t *testing.T) {
	iso := testIsolation(t)
	if iso.Contain == nil || !iso.Contain.LimitsOnTree() {
		t.Skip("no cgroup limits on this host")
	}
	if os.Geteuid() != 0 {
		t.Skip("the attack is root's")
	}
	sup := newIsoSupervisorWith(t, iso)
	script := `moved=0; raised=0
for f in /sys/fs/cgroup/cgroup.procs /sys/fs/cgroup/*/cgroup.procs; do [ -e "$f" ] && (echo $$ > "$f") 2>/dev/null && moved=$((moved+1)); done
for f in $(find /sys/fs/cgroup -maxdepth 6 \( -name pids.max -o -name memory.max -o -name memory.limit_in_bytes \) 2>/dev/null); do (echo max > "$f") 2>/dev/null && raised=$((raised+1)); (echo -1 > "$f") 2>/dev/null && raised=$((raised+1)); done
(mount -o remount,rw /sys/fs/cgroup/pids) 2>/dev/null && echo REMOUNTED
echo "moved=$moved raised=$raised"
grep '^CapBnd:' /proc/self/status
grep -c ':/$' /proc/self/cgroup | sed 's/^/own-root-lines=/'
grep -vc ':/$' /proc/self/cgroup | sed 's/^/other-lines=/'
n=0; for i in $(seq 60); do (sleep 2) 2>/dev/null & done; wait; echo forked`
	r := runConfined(t, sup, t.TempDir(), nil, contain.Limits{Pids: 20, MemoryBytes: 256 << 20}, script)
	if !strings.Contains(r.out, "moved=0 raised=0") || strings.Contains(r.out, "REMOUNTED") {
		t.Errorf("a limited tree lifted its limits: %q", r.out)
	}
	// The capabilities that could undo the lock are out of the bounding
	// set (CAP_SYS_ADMIN could bind-remount the cgroup file systems
	// writable or mount them again; the others are listed in limits.go).
	var bnd uint64
	if i := strings.Index(r.out, "CapBnd:"); i < 0 {
		t.Errorf("no CapBnd line: %q", r.out)
	} else if _, err := fmt.Sscanf(r.out[i+len("CapBnd:"):], "%x", &bnd); err != nil {
		t.Errorf("CapBnd: %v in %q", err, r.out)
	} else {
		for name, bit := range map[string]uint{"CAP_SYS_ADMIN": 21, "CAP_SYS_PTRACE": 19, "CAP_SYS_MODULE": 16, "CAP_SYS_RAWIO": 17, "CAP_SYS_RESOURCE": 24} {
			if bnd&(1<<bit) != 0 {
				t.Errorf("%s still in the bounding set of a limited tree (CapBnd %x)", name, bnd)
			}
		}
		if bnd&(1<<0) == 0 { // CAP_CHOWN: root keeps what is not listed
			t.Errorf("CapBnd %x: more than the listed capabilities were dropped", bnd)
		}
	}
	if !strings.Contains(r.out, "other-lines=0") {
		t.Errorf("the tree sees cgroups outside its own (no cgroup namespace): %q", r.out)
	}
	if !strings.Contains(r.out, "bash: fork: retry") && !strings.Contains(r.out, "Resource temporarily unavailable") && r.limit != "pids" {
		t.Errorf("the pids limit no longer bites: %+v", r)
	}
}

// TestSandboxCwdIsProjectRoot: a managed sandbox with a cwd and no
// workspaceRoots, started in another directory: the confined process may
// write in the sandbox's cwd (the project root) and not in its own cwd.
func TestSandboxCwdIsProjectRoot(t *testing.T) { bothWays(t, testSandboxCwdIsProjectRoot) }

func testSandboxCwdIsProjectRoot(t *testing.T, sup *Supervisor) {
	ws, outside := workspace(t)
	sb := &wire.Sandbox{Managed: true, Cwd: ws, FS: &wire.SandboxFS{Entries: []wire.SandboxEntry{
		{Kind: "special", Special: "root", Access: "read"},
		{Kind: "special", Special: "project_roots", Access: "write"},
	}}}
	script := `pwd
(echo x > ` + ws + `/new) 2>/dev/null && echo sandbox-cwd OK || echo sandbox-cwd DENIED
(echo x > ./new) 2>/dev/null && echo process-cwd OK || echo process-cwd DENIED`
	rec := newRecorder(256)
	res, err := sup.Start(context.Background(), &ownerLog{}, StartRequest{ID: "cwd", Argv: []string{"/usr/bin/bash", "-c", script},
		Cwd: outside, Env: map[string]string{"PATH": "/usr/bin:/bin"}, Sandbox: sb, Subscriber: *rec.sub()})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Sandboxed {
		t.Fatal("the start is not sandboxed")
	}
	var r runResult
	for _, ev := range rec.untilClosed(t, 30*time.Second) {
		if ev.Kind == EventOutput {
			r.out += string(ev.Data)
		}
	}
	for _, w := range []string{outside + "\n", "sandbox-cwd OK", "process-cwd DENIED"} {
		if !strings.Contains(r.out, w) {
			t.Errorf("want %q in %q", w, r.out)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "new")); err == nil {
		t.Errorf("the process wrote in its own cwd %s, outside the project root %s", outside, ws)
	}
	if _, err := os.Stat(filepath.Join(ws, "new")); err != nil {
		t.Errorf("the process could not write in the sandbox's cwd %s: %v", ws, err)
	}
}
