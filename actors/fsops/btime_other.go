//go:build !linux

package fsops

import "io/fs"

// birthMs returns fi's modification time: birth times are read only on
// Linux (statx).
func birthMs(_ Roots, _ string, fi fs.FileInfo) int64 { return fi.ModTime().UnixMilli() }
