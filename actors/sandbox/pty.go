package sandbox

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// OpenPTY opens a pseudo-terminal pair for a sandboxed start at the
// namespaces level, in a devpts instance of its own: fsopen("devpts"),
// fsmount to a detached mount (never attached anywhere on the host), its
// ptmx opened through the mount's descriptor, the peer by TIOCGPTPEER
// (no path lookup). Hand devpts to Start in Plan.DevPts: the helper
// attaches that instance at the namespace's /dev/pts, so the command's
// terminal is /dev/pts/0 there (ttyname, tty(1) and ssh work) and the
// command sees no other terminal; the caller keeps master as it keeps the
// master of pty.Open (reads, writes, resizes), and closes slave and devpts
// once the start returned. ok is false (and the caller opens its PTY as
// for an unsandboxed start) when h does not start sandboxes with
// namespaces.
func (h *Host) OpenPTY(rows, cols uint16) (master, slave, devpts *os.File, ok bool, err error) {
	if !h.namespaces() || !h.Namespaces {
		return nil, nil, nil, false, nil
	}
	fs, err := unix.Fsopen("devpts", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return nil, nil, nil, true, fmt.Errorf("fsopen(devpts): %w", err)
	}
	defer unix.Close(fs)
	for k, v := range map[string]string{"ptmxmode": "0666", "mode": "0620"} {
		if err := unix.FsconfigSetString(fs, k, v); err != nil {
			return nil, nil, nil, true, fmt.Errorf("devpts %s: %w", k, err)
		}
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return nil, nil, nil, true, fmt.Errorf("devpts: %w", err)
	}
	mnt, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return nil, nil, nil, true, fmt.Errorf("fsmount(devpts): %w", err)
	}
	devpts = os.NewFile(uintptr(mnt), "devpts")
	fail := func(err error) (*os.File, *os.File, *os.File, bool, error) {
		if master != nil {
			master.Close()
		}
		devpts.Close()
		return nil, nil, nil, true, err
	}
	m, err := unix.Openat(mnt, "ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(fmt.Errorf("open ptmx: %w", err))
	}
	master = os.NewFile(uintptr(m), "ptmx")
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		return fail(fmt.Errorf("unlockpt: %w", err))
	}
	s, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(m), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
	if errno != 0 {
		return fail(fmt.Errorf("TIOCGPTPEER: %w", errno))
	}
	slave = os.NewFile(s, "/dev/pts/0")
	if rows > 0 && cols > 0 {
		_ = unix.IoctlSetWinsize(m, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	}
	return master, slave, devpts, true, nil
}
