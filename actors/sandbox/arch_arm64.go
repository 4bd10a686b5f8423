package sandbox

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_AARCH64
	// x32Bit: arm64 has no second ABI sharing the arch value; no number reaches it.
	x32Bit = 0xffffffff
)
