package fsops

import (
	"io/fs"

	"golang.org/x/sys/unix"
)

// birthMs returns the creation time of phys in Unix milliseconds from
// statx(2), or fi's modification time where the filesystem (or kernel)
// does not report a birth time. phys is physical, so the final component
// is not followed.
func birthMs(phys string, fi fs.FileInfo) int64 {
	var stx unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, phys, unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_SYNC_AS_STAT, unix.STATX_BTIME, &stx)
	if err != nil || stx.Mask&unix.STATX_BTIME == 0 {
		return fi.ModTime().UnixMilli()
	}
	return stx.Btime.Sec*1000 + int64(stx.Btime.Nsec)/1_000_000
}
