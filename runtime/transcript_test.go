package runtime

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"go.uber.org/zap/zaptest"

	"github.com/runtimed/runtimed/actors/sandbox"
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
	t.Setenv("TMPDIR", t.TempDir()) // environment/info reports it: $TEMPDIR
	wiretest.RunTranscripts(t, "testdata/transcripts", transcriptConfig(t))
}

// TestProtocolDocExamples runs the exchanges of docs/PROTOCOL.md (its
// "→"/"←" blocks) against a real Server, and checks that every JSON example
// there has the shape of a frame of the transcripts, which the server
// answers: a renamed, added or removed field fails one or the other.
func TestProtocolDocExamples(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	wiretest.CheckDocExamples(t, "../docs/PROTOCOL.md", "testdata/transcripts", transcriptConfig(t))
}

// transcriptConfig: the host's values become variables ($HOME, $CWD,
// $TEMPDIR, $CODEX_HOME; $HTTP is a local HTTP server answering "hello"
// to any request) and what differs between hosts or runs (the shell, the
// version, the provider id, which capabilities are true, Date headers) is
// normalised.
func transcriptConfig(t *testing.T) wiretest.TranscriptConfig {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "hello")
	}))
	t.Cleanup(hs.Close)
	cwd, _ := os.Getwd()
	home, _ := os.UserHomeDir()
	// The executor's Codex home (PROTOCOL.md section 7.6), empty until a
	// transcript writes into it; a token for http/request's valueEnvVar.
	codexHome := t.TempDir()
	t.Setenv("CODEX_HOME", codexHome)
	t.Setenv("DOCS_TOKEN", "transcript-token")
	return wiretest.TranscriptConfig{
		Start: transcriptServer,
		Vars:  map[string]string{"HTTP": hs.URL, "CWD": cwd, "HOME": home, "TEMPDIR": os.TempDir(), "CODEX_HOME": codexHome},
		Normalize: []wiretest.Rewrite{
			// The handshake's copy of environmentInfo (environment.txt pins its fields).
			{Re: regexp.MustCompile(`"environmentInfo":\{.*\}\}\}$`), With: `"environmentInfo":{…}}}`},
			{Re: regexp.MustCompile(`"shell":\{"name":"[^"]*","path":"[^"]*"\}`), With: `"shell":{"name":"<shell>","path":"<shell>"}`},
			{Re: regexp.MustCompile(`"executorVersion":"[^"]*"`), With: `"executorVersion":"<version>"`},
			{Re: regexp.MustCompile(`"providerId":"sha256:[0-9a-f]+"`), With: `"providerId":"sha256:<id>"`},
			{Re: regexp.MustCompile(`"capabilities":\{[^}]*\}`), Func: func(m string) string {
				return regexp.MustCompile(`:(true|false)`).ReplaceAllString(m, ":<bool>")
			}},
			{Re: regexp.MustCompile(`\{"name":"date","value":"[^"]*"\}`), With: `{"name":"date","value":"<date>"}`},
			{Re: regexp.MustCompile(`"hostname":"[^"]*"`), With: `"hostname":"<hostname>"`},
		},
		Commands: map[string]func(*testing.T, *wiretest.Transcript, *datadriven.TestData) string{"pid-gone": pidGoneCmd, "skip-unless-sandbox": skipUnlessSandbox},
	}
}

// transcriptServer starts a Server of its own for one transcript file;
// each connection is a MemPipe it serves (resumable, as a websocket is).
func transcriptServer(t *testing.T) func() wire.Transport {
	srv := NewServer(Config{Logger: zaptest.NewLogger(t), DetachTTL: 5 * time.Second})
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
		if !wiretest.PidGone(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	deadline := time.Now().Add(bound)
	for !wiretest.PidGone(pid) {
		if time.Now().After(deadline) {
			d.Fatalf(t, "pid %d (from %s) still alive after %v", pid, file, bound)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return ""
}

// skip-unless-sandbox: skips the rest of the file on a host that cannot
// confine a process's file system and network (no Landlock, no seccomp),
// where a sandboxed process/start is refused (-32602, saying so).
func skipUnlessSandbox(t *testing.T, _ *wiretest.Transcript, d *datadriven.TestData) string {
	h, err := sandbox.Probe(t.TempDir())
	if err == nil {
		err = h.Check(&sandbox.Policy{RestrictFS: true, Rules: []sandbox.Rule{{Path: "/", Access: sandbox.Read}}})
	}
	if err != nil {
		t.Skipf("%s: %v", d.Pos, err)
	}
	return ""
}
