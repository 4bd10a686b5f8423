package main

import (
	"io"
	"os"
	"strconv"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// pollableStdin returns stdin in a form whose Close interrupts a pending
// read, and a function that releases it. The os.Stdin a process starts
// with is read in blocking mode (a pipe or terminal is not registered with
// the runtime poller), and closing it does not end a read that is already
// waiting: a server blocked reading its client could not stop on a signal.
//
// A pipe or terminal is opened again through /proc/self/fd/0, non-blocking.
// That is a new open file description of the same pipe or terminal, so the
// flags of the one shared with the parent are left alone. Anything else
// (a regular file, a socket, a non-*os.File reader) is returned as it is.
func pollableStdin(r io.Reader, log *zap.Logger) (io.Reader, func()) {
	f, ok := r.(*os.File)
	if !ok {
		return r, func() {}
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return r, func() {}
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFIFO, unix.S_IFCHR:
	default:
		return r, func() {}
	}
	nf, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(f.Fd())), os.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		log.Debug("stdin stays blocking; a signal cannot interrupt a pending read", zap.Error(err))
		return r, func() {}
	}
	return nf, func() { nf.Close() }
}
