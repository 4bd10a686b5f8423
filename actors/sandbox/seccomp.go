package sandbox

import (
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The network filter: socket(2) and socketpair(2) with any family but
// AF_UNIX fail with EPERM, and io_uring_setup(2) fails with EPERM (its
// IORING_OP_SOCKET would create sockets around the filter). Syscalls of a
// foreign ABI (i386 or x32 on amd64, whose socketcall multiplexes socket
// creation) fail with EPERM as a whole. Everything else is allowed.
//
// Offsets into struct seccomp_data.
const (
	offNr   = 0
	offArch = 4
	offArg0 = 16 // low 32 bits on little-endian machines
)

func bpfStmt(code uint16, k uint32) unix.SockFilter {
	return unix.SockFilter{Code: code, K: k}
}

func bpfJump(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
	return unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k}
}

// networkFilter builds the program. The jump offsets are relative to the
// next instruction; the layout is fixed, so they are spelled out.
func networkFilter() []unix.SockFilter {
	const (
		ld   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge  = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		ret  = unix.BPF_RET | unix.BPF_K
		deny = unix.SECCOMP_RET_ERRNO | uint32(syscall.EPERM)
		ok   = unix.SECCOMP_RET_ALLOW
	)
	return []unix.SockFilter{
		/* 0 */ bpfStmt(ld, offArch),
		/* 1 */ bpfJump(jeq, auditArch, 1, 0),
		/* 2 */ bpfStmt(ret, deny), // foreign ABI
		/* 3 */ bpfStmt(ld, offNr),
		/* 4 */ bpfJump(jge, x32Bit, 0, 1),
		/* 5 */ bpfStmt(ret, deny), // x32 on amd64 (x32Bit is 0xffffffff elsewhere)
		/* 6 */ bpfJump(jeq, uint32(unix.SYS_IO_URING_SETUP), 0, 1),
		/* 7 */ bpfStmt(ret, deny),
		/* 8 */ bpfJump(jeq, uint32(unix.SYS_SOCKET), 1, 0),
		/* 9 */ bpfJump(jeq, uint32(unix.SYS_SOCKETPAIR), 0, 3),
		/* 10 */ bpfStmt(ld, offArg0),
		/* 11 */ bpfJump(jeq, unix.AF_UNIX, 1, 0),
		/* 12 */ bpfStmt(ret, deny),
		/* 13 */ bpfStmt(ret, ok),
	}
}

// installNetworkFilter installs the filter on the calling thread, which
// must be the one that calls execve next (no_new_privs must be set).
func installNetworkFilter() error {
	filter := networkFilter()
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	_, _, errno := syscall.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&prog)))
	if errno != 0 {
		return fmt.Errorf("seccomp(SET_MODE_FILTER): %w", errno)
	}
	return nil
}

func uintptrOf(p *uint32) uintptr { return uintptr(unsafe.Pointer(p)) }
