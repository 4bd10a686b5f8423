package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestDecodeKinds(t *testing.T) {
	cases := []struct {
		in     string
		kind   Kind
		id     string
		method string
		params string
	}{
		{`{"id":1,"method":"initialize","params":{"clientName":"x"}}`, KindRequest, `1`, "initialize", `{"clientName":"x"}`},
		{`{"jsonrpc":"2.0","id":"abc","method":"m"}`, KindRequest, `"abc"`, "m", ``},
		{`{"id":"a\"b","method":"m","params":null}`, KindRequest, `"a\"b"`, "m", ``},
		{`{"method":"initialized"}`, KindNotification, ``, "initialized", ``},
		{`{"id":7,"result":{}}`, KindResponse, `7`, "", ``},
		{`{"id":7,"error":{"code":1,"message":"x"}}`, KindResponse, `7`, "", ``},
		{`{"id":-3,"method":"m","extra":true}`, KindRequest, `-3`, "m", ``},
	}
	for _, c := range cases {
		m, err := Decode([]byte(c.in))
		if err != nil {
			t.Fatalf("Decode(%s): %v", c.in, err)
		}
		if m.Kind != c.kind || string(m.ID) != c.id || m.Method != c.method || string(m.Params) != c.params {
			t.Errorf("Decode(%s) = kind %d id %q method %q params %q", c.in, m.Kind, m.ID, m.Method, m.Params)
		}
	}
}

func TestDecodeMalformed(t *testing.T) {
	for _, in := range []string{
		``, `not json`, `[]`, `1`, `"x"`, `{}`, `{"id":1}`, `{"id":1.5,"method":"m"}`, `{"id":{},"method":"m"}`,
		`{"id":true,"method":"m"}`, `{"method":""}`, `{"method":5}`, `{"id":1,"method":"m"`,
	} {
		_, err := Decode([]byte(in))
		if err == nil {
			t.Errorf("Decode(%q) succeeded; want a malformed-message error", in)
			continue
		}
		if err.Code != CodeInvalidRequest || !strings.HasPrefix(err.Message, "invalid JSON-RPC message") {
			t.Errorf("Decode(%q) = %d %q", in, err.Code, err.Message)
		}
	}
}

// Each bad id is refused with the id to answer it with: null for a null
// id (JSON-RPC 2.0), -1 for an id that cannot be echoed byte for byte.
func TestDecodeRefusedIDs(t *testing.T) {
	cases := []struct {
		in      string
		replyID ID
		detail  string
	}{
		{`{"id":null,"method":"environment/status"}`, NullID, "not null"},
		{`{"id":null,"method":"initialized","params":{}}`, NullID, "not null"},
		{` {"id" : null , "method":"n","params":[1]}`, NullID, "not null"},
		{"{\"id\":\"\xff\xfe\",\"method\":\"m\"}", MalformedID, "valid UTF-8"},
		{"{\"id\":\"ok\xc3\",\"method\":\"m\"}", MalformedID, "valid UTF-8"},
		{`{"id":1e3,"method":"m"}`, MalformedID, "integer or a string"},
		{`{"id":9223372036854775808,"method":"m"}`, MalformedID, "integer or a string"},
	}
	for _, c := range cases {
		m, err := Decode([]byte(c.in))
		if err == nil {
			t.Errorf("Decode(%q) succeeded: %+v", c.in, m)
			continue
		}
		if err.Code != CodeInvalidRequest || !strings.Contains(err.Message, c.detail) || string(m.ID) != string(c.replyID) {
			t.Errorf("Decode(%q) = id %s, %d %q; want id %s and a -32600 saying %q", c.in, m.ID, err.Code, err.Message, c.replyID, c.detail)
		}
	}
	// Escapes are not invalid UTF-8: they are echoed as sent.
	for _, in := range []string{`{"id":"\ud800","method":"m"}`, `{"id":"\u00e9t\u00e9","method":"m"}`, "{\"id\":\"été\",\"method\":\"m\"}"} {
		m, err := Decode([]byte(in))
		if err != nil || !strings.Contains(in, string(m.ID)) {
			t.Errorf("Decode(%q) = id %s, %v; want the id as sent", in, m.ID, err)
		}
	}
}

func TestAppendResponsesEchoID(t *testing.T) {
	for _, id := range []ID{IntID(42), StringID("req-\u2028\"1"), ID(`"x"`)} {
		b, err := AppendResult(nil, id, StatusResult{Status: "ready"})
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			ID     json.RawMessage
			Result StatusResult
		}
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if string(got.ID) != string(id) || got.Result.Status != "ready" {
			t.Errorf("AppendResult echoed %s, result %+v; want id %s", got.ID, got.Result, id)
		}
		eb := AppendError(nil, id, ErrUnknownProcess("p<&>\n"))
		var ge struct {
			ID    json.RawMessage
			Error Error
		}
		if err := json.Unmarshal(eb, &ge); err != nil {
			t.Fatalf("%s: %v", eb, err)
		}
		if string(ge.ID) != string(id) || ge.Error.Code != CodeInvalidRequest || ge.Error.Message != "unknown process id p<&>\n" {
			t.Errorf("AppendError = %s", eb)
		}
	}
}

func TestAppendStringMatchesEncodingJSON(t *testing.T) {
	inputs := []string{"", "plain", "quote\" back\\slash", "\x00\x01\x1f\x7f", "<tag>&amp;", "ü日本\u2028\u2029", "bad\xffutf8\xc3", "tab\tnl\ncr\r"}
	for _, s := range inputs {
		got := AppendString(nil, s)
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("AppendString(%q) = %s: invalid JSON: %v", s, got, err)
		}
		want := s
		if !utf8.ValidString(s) {
			want = strings.ToValidUTF8(s, "\uFFFD")
		}
		if back != want {
			t.Errorf("AppendString(%q) round-trips to %q", s, back)
		}
	}
}

func TestOutputNotificationDecodes(t *testing.T) {
	data := make([]byte, 256)
	for i := range data {
		data[i] = byte(i)
	}
	b := AppendOutputNotification(nil, `p"1`, 9, StreamStderr, data)
	m, err := Decode(b)
	if err != nil || m.Kind != KindNotification || m.Method != NotifyProcessOutput {
		t.Fatalf("Decode = %+v, %v", m, err)
	}
	var n OutputNotification
	if err := json.Unmarshal(m.Params, &n); err != nil {
		t.Fatal(err)
	}
	if n.ProcessID != `p"1` || n.Seq != 9 || n.Stream != "stderr" || string(n.Chunk) != string(data) {
		t.Errorf("got %+v", n)
	}
	var ex ExitedNotification
	m, _ = Decode(AppendExitedNotification(nil, "p", 3, 137, 9, ""))
	if err := json.Unmarshal(m.Params, &ex); err != nil || ex.ExitCode != 137 || ex.Seq != 3 {
		t.Errorf("exited: %+v %v", ex, err)
	}
	var cl ClosedNotification
	m, _ = Decode(AppendClosedNotification(nil, "p", 4))
	if err := json.Unmarshal(m.Params, &cl); err != nil || cl.Seq != 4 || cl.ProcessID != "p" {
		t.Errorf("closed: %+v %v", cl, err)
	}
}

func TestDecodeParams(t *testing.T) {
	cases := []struct {
		in   string
		dst  Params
		want string // "" = success
	}{
		{``, &ReadParams{}, "missing field `processId`"},
		{`{}`, &ReadParams{}, "missing field `processId`"},
		{`{"processId":null}`, &ReadParams{}, "missing field `processId`"},
		{`{"processId":"p","afterSeq":"x"}`, &ReadParams{}, "invalid type for field `afterSeq`"},
		{`{"processId":"p","afterSeq":-1}`, &ReadParams{}, "invalid type for field `afterSeq`"},
		{`{"processId":1}`, &ReadParams{}, "invalid type for field `processId`"},
		{`[1,2]`, &ReadParams{}, "invalid params"},
		{`{"processId":"p","argv":"ls","cwd":"/"}`, &StartParams{}, "invalid type for field `argv`"},
		{`{"processId":"p","argv":["ls"]}`, &StartParams{}, "missing field `cwd`"},
		{`{"processId":"p","argv":["ls"],"cwd":"/","unknown":{"a":[1,"}"]}}`, &StartParams{}, ""},
		{`{"processId":"p","chunk":"!!!"}`, &WriteParams{}, "invalid base64 in field `chunk`"},
		{`{"processId":"p","chunk":"aGk="}`, &WriteParams{}, ""},
		{`{"processId":"p","chunk":"a\/8="}`, &WriteParams{}, ""},
		{`{"processId":"p"}`, &WriteParams{}, "missing field `chunk`"},
		{`null`, &NoParams{}, ""},
		{`{"x":1}`, &NoParams{}, ""},
	}
	for _, c := range cases {
		var raw []byte
		if c.in != "" && c.in != "null" {
			raw = []byte(c.in)
		}
		err := DecodeParams(raw, c.dst)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("DecodeParams(%s) = %v; want success", c.in, err)
		case c.want != "" && (err == nil || err.Code != CodeInvalidParams || !strings.Contains(err.Message, c.want)):
			t.Errorf("DecodeParams(%s) = %v; want -32602 containing %q", c.in, err, c.want)
		}
	}
	var w WriteParams
	if err := DecodeParams([]byte(`{"processId":"p","chunk":"a\/8="}`), &w); err != nil || string(w.Chunk) != "k\xff" {
		t.Errorf("escaped base64 decoded to %q, %v", w.Chunk, err)
	}
}

func TestAsError(t *testing.T) {
	e := AsError(errors.New("boom"))
	if e.Code != CodeInternal || e.Message != "boom" {
		t.Errorf("AsError(plain) = %+v", e)
	}
	wrapped := AsError(errors.Join(errors.New("ctx"), ErrEmptyArgv()))
	if wrapped.Code != CodeInvalidParams || wrapped.Message != "argv must not be empty" {
		t.Errorf("AsError(wrapped) = %+v", wrapped)
	}
}

func TestParseOutputNotification(t *testing.T) {
	data := []byte{0, 1, 2, 250, 255, '"', '\\'}
	cases := [][]byte{
		AppendOutputNotification(nil, `p"1\`, 9, StreamStderr, data),
		[]byte(`{"jsonrpc":"2.0","method":"process/output","params":{"chunk":"AAEC+v8iXA==","stream":"stderr","extra":{"a":[1,"}"]},"seq":9,"processId":"p\"1\\"}}`),
		[]byte(`{ "params" : { "processId" : "p\"1\\" , "seq" : 9 , "stream" : "stderr" , "chunk" : "AAEC+v8iXA==" } , "method" : "process/output" }`),
	}
	for _, msg := range cases {
		n, ok := ParseOutputNotification(msg)
		if !ok || n.ProcessID != `p"1\` || n.Seq != 9 || n.Stream != "stderr" || string(n.Chunk) != string(data) {
			t.Errorf("ParseOutputNotification(%s) = %+v, %v", msg, n, ok)
		}
	}
	for _, msg := range []string{
		`{"method":"process/exited","params":{"processId":"p","seq":1,"exitCode":0}}`,
		`{"method":"process/output","params":{"processId":"p","seq":1,"stream":"stdout"}}`,
		`{"method":"process/output","params":{"processId":"p","seq":-1,"stream":"stdout","chunk":""}}`,
		`{"method":"process/output","params":{"processId":"p","seq":1,"stream":"stdout","chunk":"!!"}}`,
		`{"method":"process/output","params":{"processId":"p","seq":1,"stream":"stdout","chunk":"aGk\u003d"}}`,
		`{"method":"process/output","params":[1,2]}`,
		`{"method":"process/output"`,
	} {
		if n, ok := ParseOutputNotification([]byte(msg)); ok {
			t.Errorf("ParseOutputNotification(%s) accepted: %+v", msg, n)
		}
	}
}

// FuzzEnvelopeFastPath: whatever scanEnvelope accepts, the reflective
// decode accepts too and finds the same members, byte for byte.
func FuzzEnvelopeFastPath(f *testing.F) {
	for _, s := range []string{
		`{"id":1,"method":"process/read","params":{"processId":"p","afterSeq":0}}`,
		`{"jsonrpc":"2.0","id":"a\u00e9","method":"x","params":null}`,
		`{"id":null,"method":"m"}`, `{"id":1,"result":{"a":[1,2,{"b":"}"}]}}`,
		`{"id":2,"error":{"code":-1,"message":"x\"y"}}`, `{"method":"a","method":"b"}`,
		`{"METHOD":"a"}`, `{"method":"a\nb"}`, ` { "id" : 7 , "method" : "m" , "params" : { } } `,
		`{"method":5}`, `[1]`, `{"id":1,"method":"m","params":"s"}`, `{"a\u0069d":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fast, ok := scanEnvelope(data, true)
		if !ok {
			return
		}
		var slow rawEnvelope
		if err := json.Unmarshal(data, &slow); err != nil {
			t.Fatalf("fast path took %q; encoding/json: %v", data, err)
		}
		same := func(a, b json.RawMessage) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }
		if !same(fast.ID, slow.ID) || !same(fast.Params, slow.Params) || !same(fast.Result, slow.Result) || !same(fast.Error, slow.Error) {
			t.Fatalf("%q: fast %+v, slow %+v", data, fast, slow)
		}
		if (fast.Method == nil) != (slow.Method == nil) || (fast.Method != nil && *fast.Method != *slow.Method) {
			t.Fatalf("%q: method fast %v, slow %v", data, fast.Method, slow.Method)
		}
	})
}
