package proptest

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"
	"pgregory.net/rapid"

	rtd "github.com/runtimed/runtimed/runtime"
	"github.com/runtimed/runtimed/wire"
)

// script is a /bin/sh -c program from a small grammar, with the output it
// must produce: foreground printfs of lowercase strings (in order), optional
// background children printing one uppercase string each (atomically,
// interleaved anywhere, possibly after the shell has exited), short sleeps,
// and an exit code.
type script struct {
	text     string
	fg       map[string]string   // stream -> foreground bytes, in order
	bg       map[string][]string // stream -> background pieces
	exitCode int
}

func genScript(t *rapid.T, label string) script {
	s := script{fg: map[string]string{}, bg: map[string][]string{}}
	var parts []string
	nbg := 0
	n := rapid.IntRange(1, 6).Draw(t, label+"stmts")
	for range n {
		switch rapid.IntRange(0, 5).Draw(t, label+"stmt") {
		case 0, 1:
			v := rapid.StringMatching(`[a-z]{0,8}`).Draw(t, label+"out")
			parts = append(parts, fmt.Sprintf("printf '%%s' '%s'", v))
			s.fg["stdout"] += v
		case 2:
			v := rapid.StringMatching(`[a-z]{0,8}`).Draw(t, label+"err")
			parts = append(parts, fmt.Sprintf("printf '%%s' '%s' >&2", v))
			s.fg["stderr"] += v
		case 3:
			parts = append(parts, "sleep 0.01")
		case 4:
			nbg++
			v := strings.Repeat(string(rune('A'+nbg%26)), rapid.IntRange(1, 4).Draw(t, label+"bglen"))
			stream, redirect := "stdout", ""
			if rapid.Bool().Draw(t, label+"bgstderr") {
				stream, redirect = "stderr", " >&2"
			}
			delay := rapid.SampledFrom([]string{"", "sleep 0.01; "}).Draw(t, label+"bgdelay")
			parts = append(parts, fmt.Sprintf("(%sprintf '%%s' '%s'%s; ) &", delay, v, redirect))
			s.bg[stream] = append(s.bg[stream], v)
		case 5:
			parts = append(parts, "true")
		}
	}
	if nbg > 0 && rapid.Bool().Draw(t, label+"wait") {
		parts = append(parts, "wait")
	}
	s.exitCode = rapid.IntRange(0, 3).Draw(t, label+"exit")
	parts = append(parts, fmt.Sprintf("exit %d", s.exitCode))
	s.text = strings.Join(parts, "; ")
	s.text = strings.ReplaceAll(s.text, "&;", "&")
	return s
}

// check reports whether got is a valid output of the stream: its lowercase
// letters are the foreground bytes in order, and each background piece
// occurs whole, once (pieces are distinct letters).
func (s script) check(stream, got string) error {
	var fg, other strings.Builder
	for _, r := range got {
		if r >= 'a' && r <= 'z' {
			fg.WriteRune(r)
		} else {
			other.WriteRune(r)
		}
	}
	if fg.String() != s.fg[stream] {
		return fmt.Errorf("%s: foreground %q, want %q (all: %q)", stream, fg.String(), s.fg[stream], got)
	}
	want := 0
	for _, p := range s.bg[stream] {
		want += len(p)
		if !strings.Contains(got, p) {
			return fmt.Errorf("%s: background piece %q missing or split in %q", stream, p, got)
		}
	}
	if other.Len() != want {
		return fmt.Errorf("%s: %d background bytes in %q, want %d", stream, other.Len(), got, want)
	}
	return nil
}

// dialWS connects to the test server with an HTTP client that keeps no
// idle connections (and so no goroutines) behind.
func dialWS(ctx context.Context, url string) (wire.Transport, error) {
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	defer hc.CloseIdleConnections()
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: hc})
	if err != nil {
		return nil, err
	}
	return wire.NewWebsocketTransport(c, 0), nil
}

// TestRealChildren: for random /bin/sh scripts run through runtime.Server
// over a real websocket, the notifications and process/read (with random
// maxBytes, interleaved with the notifications) describe the same gap-free
// (seq, stream, bytes) history from seq 1, with one exited and one closed
// carrying the highest seq; each stream's bytes are what the script
// printed; and the exit code is the script's.
func TestRealChildren(t *testing.T) {
	capChecks(t, 150)
	srv := rtd.NewServer(rtd.Config{Logger: zap.NewNop(), DetachTTL: -1})
	hs := httptestServer(srv.Handler())
	url := "ws" + strings.TrimPrefix(hs.URL, "http")
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("server close: %v", err)
		}
		hs.Close()
	})

	rapid.Check(t, func(t *rapid.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		tr, err := dialWS(ctx, url)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		c := newRPCClient(tr, 1)
		defer c.Close()
		if _, err := c.handshake(""); err != nil {
			t.Fatalf("initialize: %v", err)
		}
		n := rapid.IntRange(1, 3).Draw(t, "processes")
		scripts := make([]script, n)
		for i := range scripts {
			scripts[i] = genScript(t, fmt.Sprintf("p%d.", i))
			params := map[string]any{"processId": fmt.Sprintf("p%d", i), "argv": []string{"/bin/sh", "-c", scripts[i].text}, "cwd": "/", "env": map[string]string{"PATH": "/bin:/usr/bin"}}
			if rerr, err := c.Call(wire.MethodProcessStart, params, nil, stepWait); err != nil || rerr != nil {
				t.Fatalf("start %q: %v %v", scripts[i].text, err, rerr)
			}
		}
		for i, sc := range scripts {
			pid := fmt.Sprintf("p%d", i)
			h := newHistory()
			cursor := uint64(0)
			deadline := time.Now().Add(15 * time.Second)
			for {
				if time.Now().After(deadline) {
					t.Fatalf("%s %q: not closed in time\n%s", pid, sc.text, h.dump())
				}
				params := map[string]any{"processId": pid, "afterSeq": cursor, "waitMs": rapid.SampledFrom([]int{0, 50, 1000}).Draw(t, "waitMs")}
				var mb *uint64
				if rapid.Bool().Draw(t, "withMaxBytes") {
					u := uint64(rapid.IntRange(0, 12).Draw(t, "maxBytes"))
					mb = &u
					params["maxBytes"] = u
				}
				var rr wire.ReadResult
				rerr, err := c.Call(wire.MethodProcessRead, params, &rr, 5*time.Second)
				if err != nil || rerr != nil {
					t.Fatalf("read %s: %v %v", pid, err, rerr)
				}
				if rr.NextSeq <= cursor {
					t.Fatalf("read %s after %d: nextSeq %d", pid, cursor, rr.NextSeq)
				}
				if err := h.addRead(cursor, mb, rr); err != nil {
					t.Fatalf("%s %q: %v\n%s", pid, sc.text, err, h.dump())
				}
				cursor = rr.NextSeq - 1
				if rr.Closed && len(rr.Chunks) == 0 {
					break
				}
			}
			// The connection was attached from the start: it is notified of everything.
			if !c.WaitNotes(pid, stepWait, func(ns []note) bool { return len(ns) > 0 && ns[len(ns)-1].Method == wire.NotifyProcessClosed }) {
				t.Fatalf("%s: no closed notification: %+v", pid, c.Notes(pid))
			}
			notes := c.Notes(pid)
			for j, nt := range notes {
				if nt.Seq != uint64(j+1) {
					t.Fatalf("%s: notification %d has seq %d: notifications are not gap-free from 1 in arrival order", pid, j, nt.Seq)
				}
			}
			if err := h.addNotes(notes); err != nil {
				t.Fatalf("%s %q notifications: %v\n%s", pid, sc.text, err, h.dump())
			}
			streams, err := h.complete()
			if err != nil {
				t.Fatalf("%s %q: %v\n%s", pid, sc.text, err, h.dump())
			}
			for st := range streams {
				if st != "stdout" && st != "stderr" {
					t.Fatalf("%s: output on stream %q", pid, st)
				}
			}
			for _, st := range []string{"stdout", "stderr"} {
				if err := sc.check(st, string(streams[st])); err != nil {
					t.Fatalf("%s %q: %v", pid, sc.text, err)
				}
			}
			if h.exitCode == nil || *h.exitCode != sc.exitCode {
				t.Fatalf("%s %q: exit code %v, want %d", pid, sc.text, h.exitCode, sc.exitCode)
			}
		}
		if probs := c.Problems(); len(probs) > 0 {
			t.Fatalf("connection: %v", probs)
		}
	})
}
