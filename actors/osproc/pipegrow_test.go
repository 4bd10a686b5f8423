package osproc

import (
	"testing"

	"golang.org/x/sys/unix"
)

// An output pipe starts at the kernel's default size and is enlarged to
// PipeSize by its reader only once a child fills half of it: most
// children never need the megabyte, and a start is quicker without it.
func TestOutputPipeGrowsWhenFilled(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script string
		grown  bool
	}{
		{"small", "printf hi", false},
		{"filled", "head -c 60000 /dev/zero", true}, // fits the default pipe: written whole before the first read
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _, err := start(Spec{Argv: []string{"/bin/sh", "-c", tc.script}, Dir: "/"}, Isolation{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.CloseOutputs()
			s.Wait() // the child wrote everything before anything is read
			size := func() int {
				rc, err := s.outputs[0].SyscallConn()
				if err != nil {
					t.Fatal(err)
				}
				n := -1
				_ = rc.Control(func(fd uintptr) { n, _ = unix.FcntlInt(fd, unix.F_GETPIPE_SZ, 0) })
				return n
			}
			initial := size()
			if initial >= PipeSize {
				t.Fatalf("a new output pipe is %d bytes; want the default, below %d", initial, PipeSize)
			}
			r := s.Output(0).(ChunkReader)
			for {
				_, err := r.ReadChunk(MaxChunk)
				if err != nil {
					break
				}
			}
			if got := size(); (got == PipeSize) != tc.grown {
				t.Fatalf("pipe size %d after the child's output (initial %d); want grown=%v", got, initial, tc.grown)
			}
		})
	}
}
