package sandbox

import (
	"math"

	"golang.org/x/sys/unix"
)

// SealDescriptors marks every descriptor of this process above 2
// close-on-exec (close_range(2) with CLOSE_RANGE_CLOEXEC, Linux 5.11+;
// one syscall). Go opens every descriptor of its own close-on-exec, and
// os.StartProcess hands a child exactly the files of its ProcAttr, so
// what would otherwise reach a child is what the process inherited
// without close-on-exec (or a library opened without it). runtimed calls
// it when a Server or Local is made and before each start, so every
// child, sandboxed or not, gets only its stdio (and the pipes or PTY made
// for it). A kernel without close_range leaves descriptors as they are.
func SealDescriptors() {
	_ = unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
}
