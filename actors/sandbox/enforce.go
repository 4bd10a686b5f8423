package sandbox

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// This file runs between fork and the command's execve, on the one OS
// thread that will call execve: the helper's, or a spawning thread of the
// daemon.

// pins are the O_PATH descriptors opened by pinned. In the helper they
// close at execve (O_CLOEXEC); on a spawning thread of the daemon they
// are closed once the child has been started.
type pins []int

func (ps *pins) close() {
	for _, fd := range *ps {
		unix.Close(fd)
	}
	*ps = nil
}

// pinned opens path without following any symlink and checks that it is
// the file the daemon resolved; the returned descriptor and its
// /proc/self/fd path name exactly that file for mount(2) and Landlock.
func (ps *pins) pinned(path string, want fileID) (int, string, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS})
	if err != nil {
		return -1, "", fmt.Errorf("%s changed during the start: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, "", fmt.Errorf("stat %s: %w", path, err)
	}
	if (fileID{Dev: uint64(st.Dev), Ino: st.Ino}) != want {
		unix.Close(fd)
		return -1, "", fmt.Errorf("%s changed during the start (another file is there now): %w", path, unix.ESTALE)
	}
	*ps = append(*ps, fd)
	return fd, fmt.Sprintf("/proc/self/fd/%d", fd), nil
}

// currentSocket opens the socket at path now, without following a
// symlink (a host socket's cover: the host may unbind or rebind it while
// the start runs); ENOTSOCK when something else is there.
func (ps *pins) currentSocket(path string) (int, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS})
	if err != nil {
		return -1, fmt.Errorf("%s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		unix.Close(fd)
		return -1, fmt.Errorf("%s: %w", path, unix.ENOTSOCK)
	}
	*ps = append(*ps, fd)
	return fd, nil
}

// applyOverlays makes the mount-level changes in the child's private mount
// namespace (created by the parent with CLONE_NEWNS for the helper, by
// unshare on the spawning thread). Nothing propagates back to the host:
// the whole tree is made private first.
func applyOverlays(l layers, scratch string, ps *pins) error {
	if len(l.Overlays) == 0 {
		return nil
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	// The empty, unreadable file and directory that cover denied paths live
	// on a tmpfs of this namespace alone: mounted over the scratch
	// directory, used as bind sources, then detached, so no process on the
	// host (or in another sandbox) can reach their inodes.
	hiddenFile, hiddenDir := scratch+"/hidden", scratch+"/hidden.d"
	for _, o := range l.Overlays {
		if o.Kind != overlayHide {
			continue
		}
		if err := unix.Mount("tmpfs", scratch, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=16k,mode=700"); err != nil {
			return fmt.Errorf("scratch tmpfs: %w", err)
		}
		defer unix.Unmount(scratch, unix.MNT_DETACH) //nolint:errcheck
		if err := os.Mkdir(hiddenDir, 0); err != nil {
			return fmt.Errorf("scratch: %w", err)
		}
		f, err := os.OpenFile(hiddenFile, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0)
		if err != nil {
			return fmt.Errorf("scratch: %w", err)
		}
		f.Close()
		break
	}
	for _, o := range l.Overlays {
		_, target, err := ps.pinned(o.Path, o.ID)
		if err != nil {
			return err
		}
		src := target
		if o.Kind == overlayHide {
			src = hiddenFile
			if o.Dir {
				src = hiddenDir
			}
		}
		if err := unix.Mount(src, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s: %w", o.Path, err)
		}
		if o.Kind == overlayReadWrite {
			continue
		}
		// Keep the locked flags of the mount underneath (nosuid, nodev, ...).
		var st unix.Statfs_t
		_ = unix.Statfs(o.Path, &st)
		keep := uintptr(st.Flags) & (unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC | unix.MS_NOATIME | unix.MS_NODIRATIME | unix.MS_RELATIME)
		if err := unix.Mount("", o.Path, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|keep, ""); err != nil {
			return fmt.Errorf("make %s read-only: %w", o.Path, err)
		}
	}
	return nil
}

// dropCapabilities empties the bounding, inheritable and ambient sets, so
// that the command (even as uid 0) holds no capability after execve:
// a sandboxed child cannot mount, load modules, or bypass file modes.
// lastCap caches the kernel's highest capability number (it cannot
// change while the daemon runs); read on the first drop, before that
// thread's Landlock applies.
var lastCap = sync.OnceValue(func() int {
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			return n
		}
	}
	return unix.CAP_LAST_CAP
})

func dropCapabilities() error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(NO_NEW_PRIVS): %w", err)
	}
	_ = unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
	for c := 0; c <= lastCap(); c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
			if err == unix.EPERM && !hasCap(unix.CAP_SETPCAP) {
				break // an unprivileged daemon: there is nothing to drop
			}
			return fmt.Errorf("drop capability %d: %w", c, err)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	for i := range data {
		data[i].Inheritable = 0
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

// presets index go-landlock's configurations by ABI version (only their
// exported masks are used).
var presets = []landlock.Config{landlock.V1, landlock.V1, landlock.V2, landlock.V3, landlock.V4, landlock.V5,
	landlock.V6, landlock.V7, landlock.V8, landlock.V9, landlock.V10, landlock.V11}

// Access masks of the four kinds of grant (go-landlock's RODirs, RWDirs,
// ROFiles and RWFiles), intersected with what the ruleset handles.
const (
	llFile      = ll.AccessFSExecute | ll.AccessFSWriteFile | ll.AccessFSTruncate | ll.AccessFSReadFile
	llRead      = ll.AccessFSExecute | ll.AccessFSReadFile | ll.AccessFSReadDir
	llWrite     = ll.AccessFSWriteFile | ll.AccessFSRemoveDir | ll.AccessFSRemoveFile | ll.AccessFSMakeChar | ll.AccessFSMakeDir | ll.AccessFSMakeReg | ll.AccessFSMakeSock | ll.AccessFSMakeFifo | ll.AccessFSMakeBlock | ll.AccessFSMakeSym | ll.AccessFSTruncate
	llReadWrite = llRead | llWrite
	// llDevFiles: device files of the namespace's /dev and devpts are
	// read, written and ioctl'd (the mounts are read-only: nothing can be
	// created there); llProcFiles: /proc files are written where the
	// mounts and the kernel let a process without capabilities.
	llDevFiles  = ll.AccessFSReadFile | ll.AccessFSWriteFile | ll.AccessFSTruncate | ll.AccessFSIoctlDev
	llProcFiles = ll.AccessFSWriteFile | ll.AccessFSTruncate
)

// applyLandlock restricts the calling thread (and all it forks and
// execs, never the process's other threads) to the grants, handling every
// right the kernel's ABI knows, cutting TCP unless the policy allows the
// network, and scoping signals and abstract sockets to the sandbox's own
// domain. no_new_privs must be set on the thread (dropCapabilities does).
func applyLandlock(p *Policy, l layers, ps *pins) error {
	abi, err := ll.LandlockGetABIVersion()
	if err != nil {
		return fmt.Errorf("landlock ABI: %w", err)
	}
	if abi < MinLandlockABI {
		return fmt.Errorf("landlock ABI %d < %d", abi, MinLandlockABI)
	}
	if abi >= len(presets) {
		abi = len(presets) - 1
	}
	cfg := presets[abi]
	attr := ll.RulesetAttr{HandledAccessFS: uint64(cfg.HandledAccessFS), HandledAccessNet: uint64(cfg.HandledAccessNet), Scoped: uint64(cfg.Scoped)}
	if !p.RestrictFS {
		attr.HandledAccessFS = 0
	}
	if p.Network {
		attr.HandledAccessNet = 0
	}
	if attr.HandledAccessFS == 0 && attr.HandledAccessNet == 0 && attr.Scoped == 0 {
		return nil
	}
	rs, err := ll.LandlockCreateRuleset(&attr, 0)
	if err != nil {
		return fmt.Errorf("landlock_create_ruleset: %w", err)
	}
	defer unix.Close(rs)
	if p.RestrictFS {
		for _, g := range l.Grants {
			fd, _, err := ps.pinned(g.Path, g.ID)
			if err != nil {
				return err
			}
			var access uint64
			switch {
			case g.Write && g.Dir:
				// ResolveUnix (ABI 9+): connect to UNIX sockets inside
				// writable roots only.
				access = llReadWrite | ll.AccessFSRefer | ll.AccessFSResolveUnix
			case g.Write:
				access = llReadWrite & llFile
			case g.Dir:
				access = llRead
			default:
				access = llRead & llFile
			}
			if isDevPath(g.Path) {
				access |= ll.AccessFSIoctlDev
			}
			access |= g.Extra
			access &= attr.HandledAccessFS
			if access == 0 {
				continue
			}
			if err := ll.LandlockAddPathBeneathRule(rs, &ll.PathBeneathAttr{ParentFd: fd, AllowedAccess: access}, 0); err != nil {
				return fmt.Errorf("landlock_add_rule %s: %w", g.Path, err)
			}
		}
	}
	if err := ll.LandlockRestrictSelf(rs, 0); err != nil {
		return fmt.Errorf("landlock_restrict_self: %w", err)
	}
	return nil
}

func isDevPath(p string) bool {
	for _, d := range DevPaths {
		if p == d {
			return true
		}
	}
	return false
}
