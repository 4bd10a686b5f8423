package wiretest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"syscall"
)

// PidGone reports whether process pid is gone: no such process, or a
// zombie (it died and its parent, maybe not this test, has not reaped it).
// Tests use it to check that a tree was killed.
func PidGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	state := b[i+2]
	return state == 'Z' || state == 'X'
}
