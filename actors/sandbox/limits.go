package sandbox

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// lockedCaps are dropped from the bounding set of an unsandboxed command
// with limits: CAP_SYS_ADMIN (remount the cgroup file systems writable,
// mount them again, setns out), CAP_SYS_PTRACE (a host process's
// /proc/PID/root, where they are writable), CAP_SYS_MODULE and
// CAP_SYS_RAWIO (the kernel itself), CAP_SYS_RESOURCE (the rlimits it was
// given). Everything else of root stays.
var lockedCaps = []int{unix.CAP_SYS_ADMIN, unix.CAP_SYS_PTRACE, unix.CAP_SYS_MODULE, unix.CAP_SYS_RAWIO, unix.CAP_SYS_RESOURCE}

// lockLimits runs in the helper, cloned into a mount namespace of its own,
// after it joined its cgroups: a cgroup namespace rooted at them, every
// cgroup file system read-only in this mount namespace (writing
// cgroup.procs or a limit file fails with EROFS), and lockedCaps dropped.
func lockLimits() (string, error) {
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return "limits", fmt.Errorf("unshare(CLONE_NEWCGROUP): %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return "limits", fmt.Errorf("make mounts private: %w", err)
	}
	if _, err := os.Stat("/sys/fs/cgroup"); err == nil {
		if err := unix.MountSetattr(unix.AT_FDCWD, "/sys/fs/cgroup", unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
			return "limits", fmt.Errorf("make /sys/fs/cgroup read-only: %w", err)
		}
	}
	for _, c := range lockedCaps {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
			return "capabilities", fmt.Errorf("drop capability %d: %w", c, err)
		}
	}
	return "", nil
}
