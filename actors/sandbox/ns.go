package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"

	"golang.org/x/sys/unix"
)

// The namespaces level (the default): every sandboxed start runs in fresh
// mount, IPC, cgroup and (unless the operator chose
// --sandbox-pid-namespace inherit) pid namespaces, and with the network
// restricted in an empty network namespace; Landlock and seccomp are the
// second wall inside. The helper (helper.go) is cloned into the new
// namespaces and builds the command's view there before anything of the
// command runs:
//
//   - mounts: the whole tree private and read-only at the mount level
//     (mount_setattr AT_RECURSIVE MOUNT_ATTR_RDONLY), each `write` entry a
//     clone of itself taken before that (open_tree OPEN_TREE_CLONE, so it
//     keeps the host's flags) moved back on top, each `read` entry under a
//     writable one a read-only clone, each `deny` entry under a readable
//     one covered; .git, .agents, .codex and .aws under every writable
//     directory read-only clones whether the policy lists them or not, and
//     where they are missing, an empty directory created as a mount point
//     and covered read-only (an empty directory is what git and Codex
//     treat as absent; it stays on the host after the start);
//   - a fresh /dev (tmpfs, read-only once made): null zero full random
//     urandom tty, fd/stdin/stdout/stderr links, a new devpts instance
//     (ptmx a link into it), and /dev/shm a tmpfs of this namespace alone,
//     charged to the tree's memory cgroup and gone with the namespace;
//   - a /proc of its own (the new pid namespace's), writable as the
//     reference has it (comm, oom_score_adj) with sys, sysrq-trigger, irq
//     and bus read-only;
//   - its own cgroup namespace rooted at the tree's cgroup, an anonymous
//     session keyring, the keyring syscalls refused by seccomp;
//   - loopback up in the empty network namespace.
//
// With a pid namespace the helper stays as its init (pid 1): it starts the
// command (not pid 1: the init's own threads take the first numbers) in a session of its own, with the terminal as its
// controlling terminal, from a throwaway confined thread, forwards every
// signal the daemon sends it to the command's process group, reaps
// orphans, and exits with the command's status (128+N for a signal) as
// soon as the command has exited, which makes the kernel kill what is
// left of the namespace. Without one it execs the command in place.

// protectedNames are kept read-only under every writable directory.
var protectedNames = []string{".git", ".agents", ".codex", ".aws"}

// Mount operations of the namespace plan.
const (
	opWritable = "rw"   // a clone of the path taken before the tree went read-only
	opReadOnly = "ro"   // a read-only clone of the path onto itself
	opHide     = "hide" // an empty, unreadable file or directory over it
	opStub     = "stub" // create an empty directory (ID: its parent's) and cover it read-only
)

type mountOp struct {
	Op   string `json:"op"`
	Path string `json:"path"`
	Dir  bool   `json:"dir"`
	ID   fileID `json:"id"`
	// Socket marks the cover of a host UNIX socket: the host may remove or
	// rebind it while the start runs, so a socket gone by then (or replaced
	// by something that is no socket) is skipped and a socket bound anew
	// there is covered instead (a changed identity fails every other
	// operation).
	Socket bool `json:"socket,omitempty"`
}

// nsPlan is what the helper builds in the new namespaces.
type nsPlan struct {
	PidNS    bool `json:"pidNS"`
	NetNS    bool `json:"netNS"`
	Ctty     bool `json:"ctty"`     // the command takes fd 0 as its controlling terminal
	DevPtsFD int  `json:"devptsFD"` // the devpts instance of the command's PTY (0: none)
	NetNSFD  int  `json:"netnsFD"`  // the network namespace to enter (0: NetNS says)
	// Stdio, on a prepared sandbox, are the command's stdin, stdout and
	// stderr as the start brought them (else they are the helper's 0-2).
	Stdio [3]int `json:"-"`
	// CgroupFD, on a prepared sandbox, is the tree's cgroup (v2), which
	// the command is cloned into (0: none, or the helper was).
	CgroupFD int `json:"-"`
	// Nice, on a prepared sandbox, is the command's nice value: the
	// daemon's when it was prepared (its spawning thread waits at it, so
	// that the start wakes it at the daemon's priority), then the start's
	// (preparedStart.Nice).
	Nice int `json:"nice,omitempty"`
	// GivenNetNS: a prepared sandbox's starts bring a network namespace
	// of the caller's (NetNSFD, known at the start only).
	GivenNetNS   bool      `json:"givenNetNS,omitempty"`
	Dir          string    `json:"dir"`
	ReadOnlyRoot bool      `json:"readOnlyRoot"`
	Mounts       []mountOp `json:"mounts"`
}

// planNamespace turns a checked policy into its mounts.
func planNamespace(p *Policy) (nsPlan, error) {
	np := nsPlan{ReadOnlyRoot: true}
	if !p.RestrictFS {
		np.ReadOnlyRoot = false
		return np, nil
	}
	rules := sortedRules(p.Rules)
	state := func(path string, upto int) Access { // nearest ancestor's access, 0: none
		var a Access
		for j := 0; j < upto; j++ {
			if within(path, rules[j].Path) {
				a = rules[j].Access
			}
		}
		return a
	}
	for _, r := range rules {
		if r.Path == "/" && r.Access == Write {
			np.ReadOnlyRoot = false
		}
	}
	var writableDirs []Rule
	ids := map[string]fileID{} // each rule path's, as stat'ed here
	for i, r := range rules {
		st, err := os.Stat(r.Path)
		if err != nil {
			return np, fmt.Errorf("sandbox path %s: %w", r.Path, err)
		}
		dir, id := st.IsDir(), idOf(st)
		ids[r.Path] = id
		parent := state(r.Path, i)
		parentRW := parent == Write || (parent == 0 && !np.ReadOnlyRoot)
		switch r.Access {
		case Write:
			if dir {
				writableDirs = append(writableDirs, r)
			}
			if !parentRW && r.Path != "/" {
				np.Mounts = append(np.Mounts, mountOp{Op: opWritable, Path: r.Path, Dir: dir, ID: id})
			}
		case Read:
			if parentRW {
				np.Mounts = append(np.Mounts, mountOp{Op: opReadOnly, Path: r.Path, Dir: dir, ID: id})
			}
		case Deny:
			if parent == Read || parent == Write {
				np.Mounts = append(np.Mounts, mountOp{Op: opHide, Path: r.Path, Dir: dir, ID: id})
			}
		}
	}
	covered := map[string]bool{}
	for _, m := range np.Mounts {
		if m.Op != opWritable {
			covered[m.Path] = true
		}
	}
	for _, w := range writableDirs {
		for _, name := range protectedNames {
			path := filepath.Join(w.Path, name)
			if covered[path] {
				continue
			}
			covered[path] = true
			lst, err := os.Lstat(path)
			switch {
			case os.IsNotExist(err):
				// The stub's identity is its writable root's, stat'ed above.
				np.Mounts = append(np.Mounts, mountOp{Op: opStub, Path: path, Dir: true, ID: ids[w.Path]})
			case err != nil:
				return np, fmt.Errorf("protected path %s: %w", path, err)
			case lst.Mode()&os.ModeSymlink != 0:
				// Protect what it points to, if that exists.
				real, rerr := filepath.EvalSymlinks(path)
				if rerr != nil || covered[real] {
					continue
				}
				st, serr := os.Stat(real)
				if serr != nil {
					continue
				}
				covered[real] = true
				np.Mounts = append(np.Mounts, mountOp{Op: opReadOnly, Path: real, Dir: st.IsDir(), ID: idOf(st)})
			default:
				np.Mounts = append(np.Mounts, mountOp{Op: opReadOnly, Path: path, Dir: lst.IsDir(), ID: idOf(lst)})
			}
		}
	}
	// UNIX sockets bound on the host: connect(2) needs only write
	// permission on the socket file, which a read-only mount does not
	// take away and Landlock below ABI 9 does not mediate. Each socket
	// bound in the daemon's network namespace when the start is planned
	// is covered with an empty, unreadable file (connect: ECONNREFUSED or
	// EACCES). Sockets bound later, or by another network namespace, are
	// not (docs/sandbox.md).
	for _, sock := range hostSockets() {
		if covered[sock] || underDeny(rules, sock) {
			continue
		}
		st, err := os.Lstat(sock)
		if err != nil || st.Mode()&os.ModeSocket == 0 {
			continue
		}
		if real, err := filepath.EvalSymlinks(sock); err != nil || real != sock {
			continue
		}
		covered[sock] = true
		np.Mounts = append(np.Mounts, mountOp{Op: opHide, Path: sock, ID: idOf(st), Socket: true})
	}
	return np, nil
}

// hostSockets lists the pathname UNIX sockets of this network namespace.
// /proc/net/unix stays open (opening it walks /proc each time) and is read
// in one pread from its start: a sequence file reads afresh at offset 0,
// and serializes concurrent readers itself.
func hostSockets() []string {
	netUnix.once.Do(func() {
		netUnix.fd = -1
		if fd, err := unix.Open("/proc/net/unix", unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
			netUnix.fd = fd
		}
	})
	if netUnix.fd < 0 {
		return nil
	}
	bp := netUnixBufs.Get().(*[]byte)
	defer netUnixBufs.Put(bp)
	var n int
	for {
		var err error
		n, err = unix.Pread(netUnix.fd, *bp, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil
		}
		if n < len(*bp) {
			break
		}
		*bp = make([]byte, 2*len(*bp)) // it may have been cut: read it whole
	}
	var out []string
	b := (*bp)[:n]
	for first := true; len(b) > 0; first = false {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		// The path is the eighth field, the last: it may hold spaces.
		f := 0
		for i := 0; i < len(line) && f < 7; {
			for i < len(line) && line[i] == ' ' {
				i++
			}
			for i < len(line) && line[i] != ' ' {
				i++
			}
			f++
			if f == 7 {
				line = bytes.TrimLeft(line[i:], " ")
			}
		}
		if first || f < 7 || len(line) == 0 || line[0] != '/' {
			continue
		}
		out = append(out, filepath.Clean(string(line)))
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// netUnix is hostSockets' open /proc/net/unix (-1: unreadable).
var netUnix struct {
	once sync.Once
	fd   int
}

var netUnixBufs = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

func underDeny(rules []Rule, path string) bool {
	for _, r := range rules {
		if r.Access == Deny && within(path, r.Path) {
			return true
		}
	}
	return false
}

// sortedRules orders rules shallow first; a later duplicate of a path
// replaces an earlier one (plan and the namespace plan both use it).
func sortedRules(in []Rule) []Rule {
	rules := append([]Rule(nil), in...)
	sort.SliceStable(rules, func(i, j int) bool { return depth(rules[i].Path) < depth(rules[j].Path) })
	byPath := map[string]int{}
	var uniq []Rule
	for _, r := range rules {
		if i, ok := byPath[r.Path]; ok {
			uniq[i] = r
			continue
		}
		byPath[r.Path] = len(uniq)
		uniq = append(uniq, r)
	}
	return uniq
}

// nsGrants are the Landlock grants inside the namespace: the policy's
// own, but the host's device files (the namespace has its own /dev), plus
// the new /dev (device files read, written and ioctl'd; /dev/shm
// writable) and /proc (files writable: the mounts keep its dangerous
// parts read-only).
func nsGrants(l layers) []grant {
	var out []grant
	for _, g := range l.Grants {
		if !isDevPath(g.Path) {
			out = append(out, g)
		}
	}
	return out
}

// The extra grants are made in the namespace, where their identities are
// read (they did not exist before).
func nsExtraGrants(p *Policy) ([]grant, error) {
	if !p.RestrictFS {
		return nil, nil
	}
	var out []grant
	for _, e := range []struct {
		path  string
		write bool
		extra uint64
	}{{"/dev", false, llDevFiles}, {"/dev/shm", true, 0}, {"/dev/pts", false, llDevFiles}, {"/proc", false, llProcFiles}} {
		st, err := os.Stat(e.path)
		if err != nil {
			return nil, err
		}
		out = append(out, grant{Path: e.path, Dir: true, Write: e.write, ID: idOf(st), Extra: e.extra})
	}
	return out, nil
}

// setupMounts builds the command's file system view in the helper's new
// mount namespace.
func setupMounts(np *nsPlan, scratch string, ps *pins) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	// Mount points and stubs with exact modes; the command gets the
	// daemon's umask back.
	defer unix.Umask(unix.Umask(0))
	// Clones of the writable entries, taken while the tree still has the
	// host's flags; stubs' mount points, created while their parent is
	// still writable.
	clones := map[int]int{}
	for i, m := range np.Mounts {
		switch m.Op {
		case opWritable:
			fd, _, err := ps.pinned(m.Path, m.ID)
			if err != nil {
				return err
			}
			t, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_EMPTY_PATH)
			if err != nil {
				return fmt.Errorf("clone %s: %w", m.Path, err)
			}
			*ps = append(*ps, t)
			clones[i] = t
		case opStub:
			pfd, _, err := ps.pinned(filepath.Dir(m.Path), m.ID)
			if err != nil {
				return err
			}
			if err := unix.Mkdirat(pfd, filepath.Base(m.Path), 0o755); err != nil && err != unix.EEXIST {
				// Where root cannot create it (a read-only or root-squashed
				// file system), neither can the command: no stub needed.
				np.Mounts[i].Op = ""
				continue
			}
			fd, err := unix.Openat2(pfd, filepath.Base(m.Path), &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC | unix.O_DIRECTORY, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_BENEATH})
			if err != nil {
				return fmt.Errorf("stub %s changed during the start: %w", m.Path, err)
			}
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				unix.Close(fd)
				return err
			}
			np.Mounts[i].ID = fileID{Dev: uint64(st.Dev), Ino: st.Ino}
			unix.Close(fd)
		}
	}
	if np.ReadOnlyRoot {
		if err := unix.MountSetattr(unix.AT_FDCWD, "/", unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
			return fmt.Errorf("make the tree read-only: %w", err)
		}
	}
	var hidden *hiddenFiles
	defer func() { hidden.release() }()
	for i, m := range np.Mounts {
		if m.Op == "" {
			continue
		}
		var target int
		var err error
		if m.Socket {
			target, err = ps.currentSocket(m.Path)
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTSOCK) {
				continue // unbound since the plan: nothing left to connect to
			}
		} else {
			target, _, err = ps.pinned(m.Path, m.ID)
		}
		if err != nil {
			return err
		}
		var src int
		switch m.Op {
		case opWritable:
			src = clones[i]
		case opReadOnly, opStub:
			src, err = unix.OpenTree(target, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_EMPTY_PATH)
			if err != nil {
				return fmt.Errorf("clone %s: %w", m.Path, err)
			}
			*ps = append(*ps, src)
			if err := unix.MountSetattr(src, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
				return fmt.Errorf("make %s read-only: %w", m.Path, err)
			}
		case opHide:
			if hidden == nil {
				if hidden, err = makeHidden(scratch); err != nil {
					return err
				}
			}
			name := hidden.file
			if m.Dir {
				name = hidden.dir
			}
			src, err = unix.OpenTree(unix.AT_FDCWD, name, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
			if err != nil {
				return fmt.Errorf("hide %s: %w", m.Path, err)
			}
			*ps = append(*ps, src)
			if err := unix.MountSetattr(src, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
				return fmt.Errorf("hide %s: %w", m.Path, err)
			}
		}
		if err := unix.MoveMount(src, "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
			return fmt.Errorf("mount over %s: %w", m.Path, err)
		}
	}
	if err := setupDev(np.DevPtsFD); err != nil {
		return fmt.Errorf("/dev: %w", err)
	}
	if err := setupProc(); err != nil {
		return fmt.Errorf("/proc: %w", err)
	}
	return nil
}

// hiddenFiles are the empty, unreadable file and directory that cover
// denied paths, on a tmpfs of this namespace alone mounted over the
// scratch directory and detached again once used.
type hiddenFiles struct{ scratch, file, dir string }

func makeHidden(scratch string) (*hiddenFiles, error) {
	if err := unix.Mount("tmpfs", scratch, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=16k,mode=700"); err != nil {
		return nil, fmt.Errorf("scratch tmpfs: %w", err)
	}
	h := &hiddenFiles{scratch: scratch, file: scratch + "/hidden", dir: scratch + "/hidden.d"}
	if err := os.Mkdir(h.dir, 0); err != nil {
		return h, fmt.Errorf("scratch: %w", err)
	}
	f, err := os.OpenFile(h.file, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0)
	if err != nil {
		return h, fmt.Errorf("scratch: %w", err)
	}
	f.Close()
	return h, nil
}

func (h *hiddenFiles) release() {
	if h != nil {
		_ = unix.Unmount(h.scratch, unix.MNT_DETACH)
	}
}

// devNodes are the device files of the namespace's /dev.
var devNodes = []struct {
	name         string
	major, minor uint32
}{{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}}

// shmSize bounds the namespace's /dev/shm (a tmpfs: its pages are charged
// to the memory cgroup of the process that writes them, the tree's).
const shmSize = "25%"

func setupDev(devptsFD int) error {
	if err := unix.Mount("tmpfs", "/dev", "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k,nr_inodes=64"); err != nil {
		return err
	}
	for _, d := range devNodes {
		if err := unix.Mknod("/dev/"+d.name, unix.S_IFCHR|0o666, int(unix.Mkdev(d.major, d.minor))); err != nil {
			return fmt.Errorf("mknod %s: %w", d.name, err)
		}
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
		"stderr": "/proc/self/fd/2", "ptmx": "pts/ptmx", "core": "/proc/kcore"} {
		if name == "core" {
			continue
		}
		if err := unix.Symlink(target, "/dev/"+name); err != nil {
			return err
		}
	}
	for _, d := range []string{"pts", "shm"} {
		if err := unix.Mkdir("/dev/"+d, 0o755); err != nil {
			return err
		}
	}
	if devptsFD > 0 {
		// The instance the daemon opened the command's PTY in.
		err := unix.MoveMount(devptsFD, "", unix.AT_FDCWD, "/dev/pts", unix.MOVE_MOUNT_F_EMPTY_PATH)
		unix.Close(devptsFD)
		if err != nil {
			return fmt.Errorf("attach the PTY's devpts: %w", err)
		}
	} else if err := unix.Mount("devpts", "/dev/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return fmt.Errorf("devpts: %w", err)
	}
	if err := unix.Mount("tmpfs", "/dev/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777,size="+shmSize); err != nil {
		return fmt.Errorf("shm: %w", err)
	}
	return unix.Mount("", "/dev", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, "")
}

// setupProc mounts the pid namespace's own /proc. hidepid=2: a process
// sees in it only the processes it could ptrace, which is its own tree: not
// the init, whose capabilities the command lacks and which is outside its
// Landlock domain. The command shares the init's uid, which owns most of
// /proc/1 (autogroup, coredump filter, ...): a recycled init must keep
// nothing a command set there for the next one. gid: the group that sees
// every process, by default 0, the command's own; the spawner's id is no
// command's group.
func setupProc() error {
	opts := fmt.Sprintf("hidepid=2,gid=%d", spawnerUID)
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		return err
	}
	// Every entry but the processes' own read-only. A process with uid 0
	// and no capability may still write most of the kernel's entries
	// (bubblewrap keeps sys, sysrq-trigger, irq and bus read-only), and it
	// owns them all: a chmod of one (/proc/meminfo, /proc/slabinfo) sets
	// the mode the kernel keeps for the entry itself, which every procfs
	// mounted later has (other sandboxes, containers, the host's once its
	// inode is evicted). On a read-only mount chmod fails (EROFS). The
	// processes' own entries refuse a mode change themselves, and stay
	// writable (/proc/self/comm, oom_score_adj).
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	for _, e := range ents {
		name := e.Name()
		if e.Type()&os.ModeSymlink != 0 || name[0] >= '0' && name[0] <= '9' {
			continue // self, thread-self, mounts, net: into a process's own
		}
		p := "/proc/" + name
		if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s: %w", p, err)
		}
		if err := unix.MountSetattr(unix.AT_FDCWD, p, unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
			return fmt.Errorf("make %s read-only: %w", p, err)
		}
	}
	return nil
}

// coverSockets covers, in a prepared sandbox's namespace, host UNIX
// sockets bound since it was built (its start's plan lists them), as
// setupMounts covered the others: each with the empty, unreadable file
// (connect: ECONNREFUSED or EACCES); one unbound meanwhile is skipped.
// On the helper's main thread, before the command's fork.
func coverSockets(ops []mountOp, scratch string) error {
	var ps pins
	defer ps.close()
	hidden, err := makeHidden(scratch)
	defer hidden.release()
	if err != nil {
		return err
	}
	for _, m := range ops {
		target, err := ps.currentSocket(m.Path)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTSOCK) {
			continue // unbound since the plan: nothing left to connect to
		}
		if err != nil {
			return err
		}
		src, err := unix.OpenTree(unix.AT_FDCWD, hidden.file, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			return fmt.Errorf("hide %s: %w", m.Path, err)
		}
		ps = append(ps, src)
		if err := unix.MountSetattr(src, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
			return fmt.Errorf("hide %s: %w", m.Path, err)
		}
		if err := unix.MoveMount(src, "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
			return fmt.Errorf("mount over %s: %w", m.Path, err)
		}
	}
	return nil
}
