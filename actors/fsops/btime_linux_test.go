package fsops

import "golang.org/x/sys/unix"

// reportsBirthTime says whether statx reports a birth time for path.
func reportsBirthTime(path string) bool {
	var stx unix.Statx_t
	return unix.Statx(unix.AT_FDCWD, path, 0, unix.STATX_BTIME, &stx) == nil && stx.Mask&unix.STATX_BTIME != 0
}
