package fsops

import (
	"io/fs"

	"golang.org/x/sys/unix"
)

// birthMs returns the creation time of phys in Unix milliseconds from
// statx(2), or fi's modification time where the filesystem (or kernel)
// does not report a birth time. phys is physical, so the final component
// is not followed. With roots it is opened (O_PATH) beneath them and
// statx asks about that descriptor, not about the path.
func birthMs(roots Roots, phys string, fi fs.FileInfo) int64 {
	const flags = unix.AT_SYMLINK_NOFOLLOW | unix.AT_STATX_SYNC_AS_STAT
	var stx unix.Statx_t
	var err error
	if len(roots.dirs) == 0 {
		err = unix.Statx(unix.AT_FDCWD, phys, flags, unix.STATX_BTIME, &stx)
	} else {
		err = statxBeneath(roots, phys, flags, &stx)
	}
	if err != nil || stx.Mask&unix.STATX_BTIME == 0 {
		return fi.ModTime().UnixMilli()
	}
	return stx.Btime.Sec*1000 + int64(stx.Btime.Nsec)/1_000_000
}

func statxBeneath(roots Roots, phys string, flags int, stx *unix.Statx_t) error {
	f, err := roots.openFile(phys, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	if cerr := rc.Control(func(fd uintptr) {
		err = unix.Statx(int(fd), "", flags|unix.AT_EMPTY_PATH, unix.STATX_BTIME, stx)
	}); cerr != nil {
		return cerr
	}
	return err
}
