package wiretest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/runtimed/runtimed/wire"
)

// The document's ellipses and placeholders match what they stand for, and
// nothing else: each case is a pattern, a frame, and whether it matches.
func TestDocPatternMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, frame string
		ok             bool
	}{
		{`{"id":1,"result":{"sessionId":"4f1c8a6e-2a9b-4d0e-9a55-1f0f3c2b7e10","environmentInfo":{…}}}`,
			`{"id":1,"result":{"sessionId":"0a0b0c0d-0000-4000-8000-000000000001","environmentInfo":{"shell":{}}}}`, true},
		{`{"id":1,"result":{"sessionId":"4f1c8a6e-2a9b-4d0e-9a55-1f0f3c2b7e10"}}`, `{"id":1,"result":{"sessionId":"not-a-uuid"}}`, false},
		{`{"id":1,"result":{"a":1}}`, `{"id":1,"result":{"a":1,"b":2}}`, false}, // an undocumented field
		{`{"id":1,"result":{"a":1, …}}`, `{"id":1,"result":{"a":1,"b":2}}`, true},
		{`{"id":1,"result":{"a":1,"b":2}}`, `{"id":1,"result":{"a":1}}`, false}, // a missing field
		{`{"a":["x", …]}`, `{"a":["x","y","z"]}`, true},
		{`{"a":["x", …]}`, `{"a":["y"]}`, false},
		{`{"a":["x"]}`, `{"a":["x","y"]}`, false},
		{`{"p":"sha256:6c1f…"}`, `{"p":"sha256:0000"}`, true},
		{`{"seq":2,"exitCode":7}`, `{"seq":2,"exitCode":8}`, false},
		{`{"n":null}`, `{"n":null}`, true},
		{`{"n":null}`, `{"n":0}`, false},
	} {
		p, err := parsePattern(c.pattern)
		if err != nil {
			t.Fatalf("parsePattern(%s): %v", c.pattern, err)
		}
		var v any
		if err := json.Unmarshal([]byte(c.frame), &v); err != nil {
			t.Fatal(err)
		}
		if got := valueMatch(p, v); got != c.ok {
			t.Errorf("valueMatch(%s, %s) = %v, want %v", c.pattern, c.frame, got, c.ok)
		}
	}
}

// A JSON example's shape: its keys, recursively; values ignored.
func TestDocShapeMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, object string
		ok              bool
	}{
		{`{"chunks": [{"seq": 1, "chunk": "aGkK"}], "nextSeq": 4}`, `{"chunks":[],"nextSeq":1}`, true},
		{`{"chunks": [{"seq": 1, "chunk": "aGkK"}], "nextSeq": 4}`, `{"chunks":[{"seq":5,"chunk":""}],"nextSeq":9}`, true},
		{`{"chunks": [{"seq": 1, "chunk": "aGkK"}], "nextSeq": 4}`, `{"chunks":[{"seq":5}],"nextSeq":9}`, false},
		{`{"chunks": [], "nextSeq": 4}`, `{"chunks":[],"next":1}`, false},
		{`{"caps": {"a": true, …}}`, `{"caps":{"a":false,"b":true}}`, true},
		{`{"caps": {"a": true, …}}`, `{"caps":{"b":true}}`, false},
		{`{"e": [{"path": {"type": "x"}}, {"path": {"type": "y", "value": {}}}]}`, `{"e":[{"path":{"type":"x","value":{}}}]}`, false},
		{`{"e": [{"path": {"type": "x"}}, {"path": {"type": "y", "value": {}}}]}`, `{"e":[{"path":{"type":"y","value":{}}},{"path":{"type":"x"}}]}`, true},
	} {
		p, err := parsePattern(c.pattern)
		if err != nil {
			t.Fatal(err)
		}
		var o any
		if err := json.Unmarshal([]byte(c.object), &o); err != nil {
			t.Fatal(err)
		}
		if got := shapeMatch(p, o); got != c.ok {
			t.Errorf("shapeMatch(%s, %s) = %v, want %v", c.pattern, c.object, got, c.ok)
		}
	}
}

func TestDocBlocks(t *testing.T) {
	doc := "intro\n```\n→ {\"id\":1}\n← {\"id\":1,\"result\":{}}\n```\n```json\n{\"a\": 1}\n```\n```\nplain text\n```\n"
	ex, shapes := docBlocks(doc)
	if len(ex) != 1 || len(ex[0]) != 2 || ex[0][1].line != 4 || len(shapes) != 1 || shapes[0].text != `{"a": 1}` {
		t.Fatalf("docBlocks = %+v %+v", ex, shapes)
	}
}

// Output normalisation: variables, UUIDs (numbered by first appearance,
// and usable in later inputs), pids and times, then the caller's rules.
func TestTranscriptNormalise(t *testing.T) {
	s := &Transcript{
		cfg:   TranscriptConfig{Normalize: []Rewrite{{Re: regexp.MustCompile(`"v":"[^"]*"`), With: `"v":"<v>"`}}},
		vars:  map[string]string{"TMP": "/tmp/x/001", "T": "/tmp/x", "GATE": GateFunc},
		uuids: map[string]string{}, byName: map[string]string{},
	}
	in := `{"a":"/tmp/x/001/f","b":"/tmp/x/g","s":"0a0b0c0d-0000-4000-8000-000000000001","t":"0a0b0c0d-0000-4000-8000-000000000002","u":"0a0b0c0d-0000-4000-8000-000000000001","pid":4242,"modifiedAtMs":17,"v":"1.2"}`
	want := `{"a":"$TMP/f","b":"$T/g","s":"<uuid:1>","t":"<uuid:2>","u":"<uuid:1>","pid":<pid>,"modifiedAtMs":<ms>,"v":"<v>"}`
	if got := s.normalise(in); got != want {
		t.Errorf("normalise:\n got %s\nwant %s", got, want)
	}
	chunk := func(s string) string { return `{"chunk":"` + base64.StdEncoding.EncodeToString([]byte(s)) + `"}` }
	if got, want := s.normalise(chunk("in /tmp/x/001/f\n")), chunk("in $TMP/f\n"); got != want {
		t.Errorf("normalise of a chunk = %s, want %s", got, want)
	}
	if got := s.Expand(`{"resume":"<uuid:2>","cwd":"$TMP","x":"$UNKNOWN $1"}`); got != `{"resume":"0a0b0c0d-0000-4000-8000-000000000002","cwd":"/tmp/x/001","x":"$UNKNOWN $1"}` {
		t.Errorf("Expand = %s", got)
	}
}

// The pile is printed in the canonical order: answers nobody waited for,
// then other notifications (arrival order), then process events by
// process and seq, whatever order they arrived in.
func TestTranscriptPileOrder(t *testing.T) {
	c := &tconn{changed: make(chan struct{})}
	for _, f := range []string{
		`{"method":"process/closed","params":{"processId":"b","seq":2}}`,
		`{"method":"process/output","params":{"processId":"b","seq":1,"stream":"stdout","chunk":"aGkK"}}`,
		`{"method":"fs/missingChanged","params":{"watchId":1}}`,
		`{"method":"process/exited","params":{"processId":"a","seq":1,"exitCode":0}}`,
		`{"id":7,"result":{}}`,
		`{"method":"initialized"}`,
	} {
		c.peek([]byte(f))
	}
	var got []string
	for _, f := range c.takePile() {
		got = append(got, fmt.Sprintf("%s%s/%s:%d", f.id, f.method, f.processID, f.seq))
	}
	want := "[n:7/:0 fs/missingChanged/:0 initialized/:0 process/exited/a:1 process/output/b:1 process/closed/b:2]"
	if fmt.Sprint(got) != want {
		t.Errorf("pile order %v, want %s", got, want)
	}
}

// A transcript against a tiny echo server over MemPipe: send waits for
// each id's answer and prints them in request order, await waits for its
// condition, a wrong expectation is a diff (checked by datadriven), and
// unknown directives fail.
func TestTranscriptEcho(t *testing.T) {
	cfg := TranscriptConfig{Start: echoServer}
	s := newTranscript(t, cfg)
	datadriven.RunTestFromString(t, `
send
{"id":2,"method":"echo","params":{"x":"$TMP"}}
{"id":"a","method":"echo","params":{}}
{"method":"ping"}
----
{"id":2,"result":{"x":"$TMP"}}
{"id":"a","result":{}}

await method=pong
----
{"method":"pong","params":{"n":1}}

events
----
`, func(t *testing.T, d *datadriven.TestData) string { return s.run(t, d) })
}

// echoServer answers every request with its params and every "ping"
// notification with a "pong" notification.
func echoServer(t *testing.T) func() wire.Transport {
	return func() wire.Transport {
		ct, st := MemPipe(8)
		done := make(chan struct{})
		go func() {
			defer close(done)
			n := 0
			for {
				b, err := st.ReadMessage(t.Context())
				if err != nil {
					return
				}
				var m struct {
					ID     json.RawMessage `json:"id"`
					Method string          `json:"method"`
					Params json.RawMessage `json:"params"`
				}
				_ = json.Unmarshal(b, &m)
				var out []byte
				if len(m.ID) > 0 {
					out = fmt.Appendf(nil, `{"id":%s,"result":%s}`, m.ID, m.Params)
				} else if m.Method == "ping" {
					n++
					out = fmt.Appendf(nil, `{"method":"pong","params":{"n":%d}}`, n)
				}
				if out != nil && st.WriteMessage(t.Context(), out) != nil {
					return
				}
			}
		}()
		t.Cleanup(func() { _ = st.Close(); <-done })
		return ct
	}
}
