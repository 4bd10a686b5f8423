package sandbox

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSealDescriptors: a descriptor this process holds without
// close-on-exec, the lowest one a child could inherit (3) and a high one
// (past 1023, where a bounded loop would stop), is close-on-exec after
// SealDescriptors, and a child started afterwards does not hold it.
func TestSealDescriptors(t *testing.T) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur <= 1500 {
		t.Skipf("RLIMIT_NOFILE %d: no room for a descriptor past 1023", rl.Cur)
	}
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const high = 1500
	if err := unix.Dup2(int(f.Fd()), high); err != nil { // dup2: no close-on-exec
		t.Fatal(err)
	}
	defer unix.Close(high)
	fds := []int{high}
	// fd 3 is whatever this process has there (Go opens its own
	// close-on-exec); take the flag off for the test.
	if fl, err := unix.FcntlInt(3, unix.F_GETFD, 0); err == nil {
		if _, err := unix.FcntlInt(3, unix.F_SETFD, fl&^unix.FD_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		defer unix.FcntlInt(3, unix.F_SETFD, fl|unix.FD_CLOEXEC)
		fds = append(fds, 3)
	}
	for _, fd := range fds {
		if fl, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); fl&unix.FD_CLOEXEC != 0 {
			t.Fatalf("fixture: fd %d is already close-on-exec", fd)
		}
	}
	SealDescriptors()
	for _, fd := range fds {
		if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || fl&unix.FD_CLOEXEC == 0 {
			t.Errorf("fd %d after SealDescriptors: flags %d, %v; want close-on-exec", fd, fl, err)
		}
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p, err := os.StartProcess("/bin/sh", []string{"sh", "-c", "[ -e /proc/$$/fd/" + strconv.Itoa(high) + " ] && echo LEAKED; echo done"},
		&os.ProcAttr{Files: []*os.File{nil, w, w}})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	_ = r.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 64)
	n, _ := r.Read(buf)
	if _, err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	if out := string(buf[:n]); out != "done\n" || strings.Contains(out, "LEAKED") {
		t.Errorf("child: %q, want only done", out)
	}
}
