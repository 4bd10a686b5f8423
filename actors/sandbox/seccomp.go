package sandbox

import (
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The filter. With the network restricted: socket(2) and socketpair(2)
// with any family but AF_UNIX fail with EPERM, io_uring_setup(2) fails
// with EPERM (its IORING_OP_SOCKET would create sockets around the
// filter), and so does ptrace(2), as in the reference's sandbox with the
// network restricted (Codex 0.171 refuses PTRACE_TRACEME and an attach to
// the command's own child there, and allows both with the network on). With keyrings cut (every start of the namespaces level, see
// ns.go): add_key(2), request_key(2) and keyctl(2) fail with EPERM, so
// the host's keyrings (the user keyring of the command's uid is reachable
// by name from any session) are out of reach; and setns(2) fails with
// EPERM, so a command (whose network namespace may be the managed
// network's, inet sockets allowed) cannot join another namespace even
// where capabilities would let it. Syscalls of a foreign ABI
// (i386 or x32 on amd64, whose socketcall multiplexes socket creation)
// fail with EPERM as a whole. Everything else is allowed.
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

// filterSpec is what one filter refuses.
type filterSpec struct {
	network  bool // false: only AF_UNIX sockets, no io_uring, no ptrace
	keyrings bool // true: no keyring syscalls
	setns    bool // true: no setns(2), so a command cannot leave its namespaces
}

// networkFilter is the landlock level's filter: the network cut only.
func networkFilter() []unix.SockFilter { return buildFilter(filterSpec{}) }

// buildFilter builds the program. Jump offsets are relative to the next
// instruction.
func buildFilter(f filterSpec) []unix.SockFilter {
	const (
		ld   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge  = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		ret  = unix.BPF_RET | unix.BPF_K
		deny = unix.SECCOMP_RET_ERRNO | uint32(syscall.EPERM)
		ok   = unix.SECCOMP_RET_ALLOW
	)
	prog := []unix.SockFilter{
		bpfStmt(ld, offArch),
		bpfJump(jeq, auditArch, 1, 0),
		bpfStmt(ret, deny), // foreign ABI
		bpfStmt(ld, offNr),
		bpfJump(jge, x32Bit, 0, 1),
		bpfStmt(ret, deny), // x32 on amd64 (x32Bit is 0xffffffff elsewhere)
	}
	var denied []uint32
	if !f.network {
		denied = append(denied, uint32(unix.SYS_IO_URING_SETUP), uint32(unix.SYS_PTRACE))
	}
	if f.keyrings {
		denied = append(denied, uint32(unix.SYS_ADD_KEY), uint32(unix.SYS_REQUEST_KEY), uint32(unix.SYS_KEYCTL))
	}
	if f.setns {
		denied = append(denied, uint32(unix.SYS_SETNS))
	}
	for _, nr := range denied {
		prog = append(prog, bpfJump(jeq, nr, 0, 1), bpfStmt(ret, deny))
	}
	if !f.network {
		prog = append(prog,
			bpfJump(jeq, uint32(unix.SYS_SOCKET), 1, 0),
			bpfJump(jeq, uint32(unix.SYS_SOCKETPAIR), 0, 3),
			bpfStmt(ld, offArg0),
			bpfJump(jeq, unix.AF_UNIX, 1, 0),
			bpfStmt(ret, deny))
	}
	return append(prog, bpfStmt(ret, ok))
}

// installNetworkFilter installs the landlock level's filter on the calling
// thread, which must be the one that calls execve next (no_new_privs must
// be set).
func installNetworkFilter() error { return installFilter(filterSpec{}) }

func installFilter(f filterSpec) error {
	filter := buildFilter(f)
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	_, _, errno := syscall.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&prog)))
	if errno != 0 {
		return fmt.Errorf("seccomp(SET_MODE_FILTER): %w", errno)
	}
	return nil
}

func uintptrOf(p *uint32) uintptr { return uintptr(unsafe.Pointer(p)) }
