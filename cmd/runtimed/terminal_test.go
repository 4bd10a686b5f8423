package main_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// terminal is the screen of a PTY the CLI runs on: a goroutine reads the
// master until it fails (the test closes it); the test goroutine owns
// screen and reads into it only through waitFor and drain.
type terminal struct {
	out    chan []byte
	screen bytes.Buffer
}

func readTerminal(master *os.File) *terminal {
	tm := &terminal{out: make(chan []byte, 64)}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			if n > 0 {
				tm.out <- append([]byte(nil), buf[:n]...)
			}
			if err != nil {
				close(tm.out)
				return
			}
		}
	}()
	return tm
}

// waitFor reads the terminal until want is on the screen, or fails when
// ctx ends or the terminal closes first; poke, if not nil, runs every 50 ms
// meanwhile (to make a program print again).
func (tm *terminal) waitFor(ctx context.Context, t *testing.T, want string, poke func()) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !strings.Contains(tm.screen.String(), want) {
		select {
		case b, ok := <-tm.out:
			if !ok {
				t.Fatalf("terminal closed before %q; screen %q", want, tm.screen.String())
			}
			tm.screen.Write(b)
		case <-tick.C:
			if poke != nil {
				poke()
			}
		case <-ctx.Done():
			t.Fatalf("no %q on the terminal; screen %q", want, tm.screen.String())
		}
	}
}

// drain adds what the terminal has already delivered to the screen.
func (tm *terminal) drain() {
	for len(tm.out) > 0 {
		tm.screen.Write(<-tm.out)
	}
}

// checkRestored fails unless the terminal's modes are back to before.
func checkRestored(t *testing.T, slave *os.File, before *unix.Termios) {
	t.Helper()
	after, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if after.Lflag != before.Lflag || after.Iflag != before.Iflag || after.Oflag != before.Oflag {
		t.Fatalf("terminal not restored: before lflag %#x iflag %#x oflag %#x, after %#x %#x %#x", before.Lflag, before.Iflag, before.Oflag, after.Lflag, after.Iflag, after.Oflag)
	}
}
