package sandbox

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A recycled prepared sandbox's clean-up between two commands (the init's
// side, prepared_init.go): what a command left or changed in the sandbox
// and of its init, put back as the preparation made it.

// scrub makes a recycled sandbox what a fresh preparation would be (its
// command and all it left are dead and reaped by then: endTree): /dev/shm
// empty, the sandbox's own devpts instance back at /dev/pts (devpts: the
// start attached its PTY's over it), what a command owns in the
// sandbox's own file systems as made (made), the init's oom_score_adj as
// before its first start. The spawning thread makes a new IPC namespace
// for the next command (spawner.run). A start that set rlimits
// (process-wide, and the init may not raise them again) is never
// recycled.
func scrub(devpts bool, made madeAttrs, lastPid *os.File, firstPid []byte) error {
	if devpts {
		// The start's devpts, whose PTY the daemon may still hold: no
		// later command may reach it.
		if err := unix.Unmount("/dev/pts", unix.MNT_DETACH); err != nil {
			return fmt.Errorf("/dev/pts: %w", err)
		}
	}
	if err := emptyDir("/dev/shm"); err != nil {
		return err
	}
	if err := made.restore(); err != nil {
		return err
	}
	if made.ownNet {
		if err := awaitNoUnixSockets(); err != nil {
			return err
		}
	}
	if lastPid == nil {
		return errors.New("no pid counter to set back")
	}
	if _, err := lastPid.WriteAt(firstPid, 0); err != nil {
		return fmt.Errorf("ns_last_pid: %w", err)
	}
	return nil
}

// unixGCBound bounds the wait for the kernel's garbage collector of UNIX
// sockets in flight (awaitNoUnixSockets).
const unixGCBound = 50 * time.Millisecond

// awaitNoUnixSockets waits (bounded) until the sandbox's own network
// namespace holds no UNIX socket. Every socket of the last command closed
// with its processes, but one left in flight (in the queue of a socket
// that holds itself) lives on until the kernel's garbage collector, which
// runs after, asynchronously, takes it: an abstract name it was bound to
// would still be bound for the next command (same namespace, same Landlock
// domain). The init's own socket is the daemon's (another namespace).
func awaitNoUnixSockets() error {
	deadline := time.Now().Add(unixGCBound)
	for {
		b, err := os.ReadFile("/proc/self/net/unix")
		if err != nil {
			return err
		}
		if strings.Count(string(b), "\n") <= 1 { // the header alone
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("UNIX sockets left in the network namespace")
		}
		// The collector runs when a UNIX socket is released while
		// sockets are in flight: release one.
		if fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err == nil {
			unix.Close(fds[0])
			unix.Close(fds[1])
		}
		time.Sleep(time.Millisecond)
	}
}

// openLastPid opens the init's pid namespace's ns_last_pid, in a procfs
// of the init's own, mounted nowhere (the sandbox's /proc/sys is
// read-only), and reads it; nil if it cannot.
func openLastPid() (*os.File, []byte) {
	fs, err := unix.Fsopen("proc", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return nil, nil
	}
	defer unix.Close(fs)
	if unix.FsconfigCreate(fs) != nil {
		return nil, nil
	}
	m, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return nil, nil
	}
	defer unix.Close(m)
	fd, err := unix.Openat(m, "sys/kernel/ns_last_pid", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil
	}
	f := os.NewFile(uintptr(fd), "ns_last_pid")
	buf := make([]byte, 32)
	n, err := f.ReadAt(buf, 0)
	if n == 0 {
		f.Close()
		return nil, nil
	}
	_ = err // io.EOF with the value
	return f, buf[:n]
}

// madePaths are what a command with uid 0 owns in its sandbox's own file
// systems (no capability needed to change their mode, owner or times):
// the next command on a recycled sandbox would find what the first set
// there (a mode that locks it out of /proc or /dev/ptmx, times that carry
// 64 bits each).
var madePaths = []string{"/dev/shm", "/dev/pts", "/dev/pts/ptmx", "/proc"}

// madeAttrs are the mode, owner and times of madePaths as the preparation
// made them, and the init's rlimits before its first start: a command
// has the init's uid, and prlimit(2) needs no capability to lower them
// (the next command is forked with them).
type madeAttrs struct {
	paths  map[string]unix.Stat_t
	limits []unix.Rlimit
	// autogroup is the init's scheduling autogroup's nice value, as
	// /proc/self/autogroup takes it (nil: no autogroups): its owner may
	// raise it, and anyone read it.
	autogroup []byte
	// coredumpFilter is the init's /proc/self/coredump_filter (hex), which
	// its owner may write and every process it forks inherits.
	coredumpFilter string
	// oomScoreAdj is the init's oom_score_adj as its first command is
	// forked with it ("": unknown): its owner may raise it (no capability
	// needed), and every process it forks inherits it.
	oomScoreAdj string
	// ownNet: the commands run in the sandbox's own network namespace
	// (restricted), which outlives each of them.
	ownNet bool
}

func recordMade() (madeAttrs, error) {
	m := madeAttrs{paths: make(map[string]unix.Stat_t, len(madePaths))}
	for _, path := range madePaths {
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return m, err
		}
		m.paths[path] = st
	}
	if nice, err := autogroupNice(); err == nil {
		m.autogroup = nice
	}
	b, err := os.ReadFile("/proc/self/coredump_filter")
	if err != nil {
		return m, err
	}
	m.coredumpFilter = strings.TrimSpace(string(b))
	return m, nil
}

// autogroupNice is the nice value of the init's autogroup.
func autogroupNice() ([]byte, error) {
	b, err := os.ReadFile("/proc/self/autogroup")
	if err != nil {
		return nil, err
	}
	_, nice, ok := strings.Cut(strings.TrimSpace(string(b)), " nice ")
	if !ok {
		return nil, fmt.Errorf("/proc/self/autogroup: %q", b)
	}
	return []byte(nice), nil
}

// rlimitCount is RLIM_NLIMITS: the resources getrlimit(2) knows.
const rlimitCount = 16

func recordRlimits() ([]unix.Rlimit, error) {
	limits := make([]unix.Rlimit, rlimitCount)
	for r := range limits {
		if err := unix.Getrlimit(r, &limits[r]); err != nil {
			return nil, fmt.Errorf("getrlimit(%d): %w", r, err)
		}
	}
	return limits, nil
}

func (m madeAttrs) restore() error {
	// An init without CAP_SYS_RESOURCE cannot raise a hard limit a
	// command lowered: it then serves no other start.
	for r := 0; r < rlimitCount; r++ {
		l := m.limits[r]
		if err := unix.Setrlimit(r, &l); err != nil {
			return fmt.Errorf("setrlimit(%d): %w", r, err)
		}
	}
	if m.autogroup != nil {
		// Written only if changed: the write takes global locks, and
		// holds off its owner's own writes for a tenth of a second.
		nice, err := autogroupNice()
		if err != nil {
			return err
		}
		if string(nice) != string(m.autogroup) {
			if err := os.WriteFile("/proc/self/autogroup", m.autogroup, 0); err != nil {
				return err
			}
		}
	}
	if b, err := os.ReadFile("/proc/self/coredump_filter"); err != nil {
		return err
	} else if strings.TrimSpace(string(b)) != m.coredumpFilter {
		if err := os.WriteFile("/proc/self/coredump_filter", []byte("0x"+m.coredumpFilter), 0); err != nil {
			return err
		}
	}
	// Back from a raised value needs no capability (the init, if it may
	// lower it, did so while the command ran: supervise).
	if b, err := os.ReadFile("/proc/self/oom_score_adj"); err != nil {
		return err
	} else if m.oomScoreAdj == "" {
		return errors.New("oom_score_adj: unknown as made")
	} else if strings.TrimSpace(string(b)) != m.oomScoreAdj {
		if err := os.WriteFile("/proc/self/oom_score_adj", []byte(m.oomScoreAdj), 0); err != nil {
			return err
		}
	}
	for _, path := range madePaths {
		st := m.paths[path]
		if err := unix.Chmod(path, st.Mode&0o7777); err != nil {
			return err
		}
		if err := unix.Lchown(path, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, path, []unix.Timespec{st.Atim, st.Mtim}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
	}
	return nil
}

// emptyDir removes everything in dir (and the extended attributes of dir
// itself).
func emptyDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := os.RemoveAll(dir + "/" + n); err != nil {
			return err
		}
	}
	buf := make([]byte, 4096)
	if n, err := unix.Listxattr(dir, buf); err == nil && n > 0 {
		for _, a := range strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00") {
			if err := unix.Removexattr(dir, a); err != nil {
				return fmt.Errorf("%s: remove xattr %s: %w", dir, a, err)
			}
		}
	}
	return nil
}
