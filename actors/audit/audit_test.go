package audit

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func readLines(t *testing.T, p string) []map[string]any {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

func TestWritesVersionedLinesAndReopens(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "audit.log")
	l, err := Open(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	code := 3
	l.Audit(Event{Type: ProcessExit, Token: "alice", Process: "p1", ExitCode: &code})
	// logrotate: move the file, then reopen; later events go to the new file.
	waitWritten(t, l, 1)
	if err := os.Rename(p, p+".1"); err != nil {
		t.Fatal(err)
	}
	l.Reopen()
	l.Audit(Event{Type: ConnClose, Token: "bob"})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	old, cur := readLines(t, p+".1"), readLines(t, p)
	if len(old) != 1 || old[0]["type"] != ProcessExit || old[0]["v"] != float64(Version) || old[0]["exitCode"] != float64(3) || old[0]["token"] != "alice" {
		t.Fatalf("rotated file: %v", old)
	}
	if len(cur) != 1 || cur[0]["type"] != ConnClose || cur[0]["token"] != "bob" {
		t.Fatalf("new file: %v", cur)
	}
	if _, ok := cur[0]["argv"]; ok {
		t.Error("an empty field was written")
	}
	if l.Dropped() != 0 {
		t.Errorf("dropped %d", l.Dropped())
	}
}

func waitWritten(t *testing.T, l *Log, n uint64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for l.Written() < n {
		if time.Now().After(deadline) {
			t.Fatalf("written %d of %d", l.Written(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A stalled pipe (nobody reads the FIFO) never blocks Audit: the queue
// fills, the rest is dropped and counted.
func TestStalledPipeDropsNeverBlocks(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skip("mkfifo:", err)
	}
	// A reader that opens and never reads, so the writer's open succeeds.
	r, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var drops int
	dropCh := make(chan struct{}, 1<<16)
	l, err := Open(p, Options{Queue: 8, CloseWait: 50 * time.Millisecond, OnDrop: func() { dropCh <- struct{}{} }})
	if err != nil {
		t.Fatal(err)
	}
	big := make([]string, 2000)
	for i := range big {
		big[i] = "argument-argument-argument"
	}
	done := make(chan struct{})
	go func() {
		for i := 0; i < 2000; i++ {
			l.Audit(Event{Type: ProcessStart, Argv: big})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Audit blocked on a stalled pipe")
	}
	if l.Dropped() == 0 {
		t.Fatal("nothing counted as dropped")
	}
	drops = len(dropCh)
	if uint64(drops) != l.Dropped() {
		t.Errorf("OnDrop called %d times, Dropped %d", drops, l.Dropped())
	}
	// Unblock the writer so its goroutine can end (goleak).
	go func() {
		buf := make([]byte, 1<<16)
		for {
			if _, err := r.Read(buf); err != nil && err != syscall.EAGAIN {
				if pe, ok := err.(*os.PathError); !ok || pe.Err != syscall.EAGAIN {
					return
				}
			}
			time.Sleep(time.Millisecond)
		}
	}()
	_ = l.Close()
	r.Close()
}

// A write that fails (the disk is full) drops that event, counted, and the
// log goes on.
func TestWriteFailureCounted(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	l, err := Open("/dev/full", Options{})
	if err != nil {
		t.Fatal(err)
	}
	l.Audit(Event{Type: ConnOpen})
	l.Audit(Event{Type: ConnOpen})
	deadline := time.Now().Add(5 * time.Second)
	for l.Dropped() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if l.Dropped() != 2 || l.Written() != 0 {
		t.Fatalf("dropped %d written %d", l.Dropped(), l.Written())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}
