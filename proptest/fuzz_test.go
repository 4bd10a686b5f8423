package proptest

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/runtimed/runtimed/actors"
	"github.com/runtimed/runtimed/wire"
)

// envelopeSeeds are PROTOCOL.md's message shapes and malformed messages.
var envelopeSeeds = []string{
	`{"id":1,"method":"initialize","params":{"clientName":"codex","resumeSessionId":null}}`,
	`{"id":1,"method":"initialize","params":{"clientName":"codex","resumeSessionId":"6f1c0d0e-8a7b-4c43-9d55-3f2b9a1e4c21"}}`,
	`{"method":"initialized"}`,
	`{"method":"initialized","params":{}}`,
	`{"jsonrpc":"2.0","id":"s-1","method":"environment/status"}`,
	`{"id":2,"method":"process/start","params":{"processId":"p1","argv":["sh","-c","echo hi"],"cwd":"/tmp","env":{"A":"b"},"tty":false,"pipeStdin":true,"arg0":null,"size":{"rows":24,"cols":80}}}`,
	`{"id":3,"method":"process/start","params":{"processId":"p1","argv":["ls"],"cwd":"file:///tmp","env":{},"envPolicy":{"inherit":"core","exclude":["*X*"],"set":{"K":"v"},"includeOnly":[]},"tty":true}}`,
	`{"id":4,"method":"process/read","params":{"processId":"p1","afterSeq":3,"maxBytes":100,"waitMs":1000}}`,
	`{"id":5,"method":"process/write","params":{"processId":"p1","chunk":"aGVsbG8=","writeId":"w1"}}`,
	`{"id":6,"method":"process/terminate","params":{"processId":"p1","graceMs":500}}`,
	`{"id":7,"method":"process/signal","params":{"processId":"p1","signal":"interrupt"}}`,
	`{"id":8,"method":"process/resize","params":{"processId":"p1","rows":40,"cols":120}}`,
	`{"id":9,"method":"process/closeStdin","params":{"processId":"p1"}}`,
	`{"id":10,"method":"process/list","params":null}`,
	`{"method":"process/output","params":{"processId":"p1","seq":1,"stream":"stdout","chunk":"aGk="}}`,
	`{"id":11,"result":{}}`,
	`{"id":"x","error":{"code":-32600,"message":"no"}}`,
	// malformed
	``, `{`, `}`, `[]`, `null`, `1`, `"x"`, `{}`, `{"id":1}`, `{"id":null,"result":1}`,
	`{"id":1.5,"method":"x"}`, `{"id":true,"method":"x"}`, `{"id":{},"method":"x"}`, `{"id":[1],"method":"x"}`,
	`{"id":99999999999999999999,"method":"x"}`, `{"id":-0,"method":"x"}`, `{"id":1e2,"method":"x"}`,
	`{"id":"\ud800","method":"x"}`, `{"id":"a\"b","method":"x"}`, `{"method":""}`, `{"method":1}`, `{"method":null}`,
	`{"id":1,"method":"x","params":}`, `{"id":1,"method":"x","params":null}`, "{\"method\":\"\xff\"}",
	`{"id":1,"method":"x"} trailing`, ` {"id" : 1 , "method" : "x" } `, `{"id":1,"id":2,"method":"x"}`,
	// issue 14's bad input: a null id (answered with id null), ids that cannot be echoed byte for byte
	// (invalid UTF-8) or can (escapes), env names a child cannot carry, an oversized id.
	`{"id":null,"method":"environment/status"}`, `{"jsonrpc":"2.0","id":null,"method":"initialized"}`,
	`{"id":null,"method":"process/start","params":{"processId":"p","argv":["true"],"cwd":"/"}}`,
	"{\"id\":\"\xff\xfe\",\"method\":\"environment/status\"}", "{\"id\":\"ok\xc3\",\"method\":\"x\"}",
	`{"id":"\u00e9t\u00e9","method":"x"}`, `{"id":"\ud83d\ude00","method":"x"}`, `{"id":9223372036854775808,"method":"x"}`,
	`{"id":3,"method":"process/start","params":{"processId":"p","argv":["a"],"cwd":"/","env":{"":"x"}}}`,
	`{"id":3,"method":"process/start","params":{"processId":"p","argv":["a"],"cwd":"/","env":{"A=B":"x"}}}`,
	`{"id":3,"method":"process/start","params":{"processId":"p","argv":["a"],"cwd":"/","env":{"A\u0000B":"x"}}}`,
	`{"id":3,"method":"process/start","params":{"processId":"p","argv":["a"],"cwd":"/","envPolicy":{"set":{"=":"x"}}}}`,
}

// paramsSeeds are params objects, valid and malformed.
var paramsSeeds = []string{
	`{}`, `null`, ``, ` `, `[]`, `1`, `"s"`, `{`,
	`{"clientName":"c","resumeSessionId":null}`,
	`{"processId":"p","argv":["a"],"cwd":"/"}`,
	`{"processId":"p","argv":"a","cwd":"/"}`,
	`{"processId":"p","argv":[1],"cwd":"/"}`,
	`{"processId":null,"argv":["a"],"cwd":"/"}`,
	`{"processId":"p","processId":null}`,
	`{"processId":null,"processId":"p"}`,
	`{"PROCESSID":"p"}`,
	`{"process\u0049d":"p"}`,
	`{"processId":"p","afterSeq":-1}`,
	`{"processId":"p","maxBytes":1e3}`,
	`{"processId":"p","waitMs":18446744073709551616}`,
	`{"processId":"p","chunk":"aGVsbG8="}`,
	`{"processId":"p","chunk":"@@"}`,
	`{"processId":"p","chunk":"aGk\/"}`,
	`{"processId":"p","chunk":"aGk"}`,
	`{"processId":"p","chunk":null}`,
	`{"processId":"p","chunk":5}`,
	`{"processId":"p","chunk":"","writeId":""}`,
	`{"processId":"p","rows":70000,"cols":1}`,
	`{"processId":"p","rows":1,"cols":-1}`,
	`{"processId":"p","signal":"interrupt"}`,
	`{"a":"}\"","processId":"p"}`,
	`{"x":[{"y":"]"}],"processId":"p"}`,
	`{"x":{"processId":"p"}}`,
	`{ "processId" : "p" , "chunk" : "" }`,
	`{"processId":"p","graceMs":null}`,
	`{"processId":"p","env":{"A":1},"argv":[],"cwd":"/"}`,
	`{"processId":"p","envPolicy":"all","argv":[],"cwd":"/"}`,
	`{"processId":"p","size":{"rows":"1"},"argv":[],"cwd":"/"}`,
	`{"processId":"p","argv":["a"],"cwd":"/","env":{"":"x"}}`,
	`{"processId":"p","argv":["a"],"cwd":"/","env":{"A=B":"x","C":"d"}}`,
	`{"processId":"p","argv":["a"],"cwd":"/","env":{"A\u0000B":"x"}}`,
	`{"processId":"p","argv":["a"],"cwd":"/","envPolicy":{"inherit":"none","set":{"=x":"y"}}}`,
	`{"processId":"p","argv":["a"],"cwd":"/","env":{"\u00e9":"ok","PATH":"/bin"}}`,
}

// paramTypes returns a fresh value of every params type of wire/schema.go.
func paramTypes() []wire.Params {
	return []wire.Params{
		&wire.InitializeParams{}, &wire.StartParams{}, &wire.ReadParams{}, &wire.WriteParams{},
		&wire.ProcessParams{}, &wire.TerminateParams{}, &wire.SignalParams{}, &wire.ResizeParams{}, &wire.NoParams{},
	}
}

// FuzzDecode: wire.Decode never panics; it either fails with a -32600
// *wire.Error, or returns a well-formed message whose id is an integer or
// a string that can be echoed into a valid JSON response.
func FuzzDecode(f *testing.F) {
	for _, s := range envelopeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, e := wire.Decode(data)
		if e != nil {
			if e.Code != wire.CodeInvalidRequest || e.Message == "" {
				t.Fatalf("Decode(%q): error %d %q, want -32600 with a message", data, e.Code, e.Message)
			}
			// The answer's id is null for a null id, -1 otherwise: never anything from the input.
			if string(m.ID) != string(wire.NullID) && string(m.ID) != string(wire.MalformedID) {
				t.Fatalf("Decode(%q): error answered with id %q", data, m.ID)
			}
			return
		}
		switch m.Kind {
		case wire.KindRequest:
			if m.ID == nil || m.Method == "" {
				t.Fatalf("Decode(%q): request without id or method: %+v", data, m)
			}
		case wire.KindNotification:
			if m.ID != nil || m.Method == "" {
				t.Fatalf("Decode(%q): notification with id or without method: %+v", data, m)
			}
		case wire.KindResponse:
			if m.ID == nil || (m.Result == nil && m.Error == nil) {
				t.Fatalf("Decode(%q): response without id or result/error: %+v", data, m)
			}
		default:
			t.Fatalf("Decode(%q): kind %d", data, m.Kind)
		}
		if m.ID != nil {
			var s string
			_, intErr := strconv.ParseInt(string(m.ID), 10, 64)
			if intErr != nil && json.Unmarshal(m.ID, &s) != nil {
				t.Fatalf("Decode(%q): id %s is neither an integer nor a string", data, m.ID)
			}
			if !utf8.Valid(m.ID) {
				t.Fatalf("Decode(%q): id %q is not valid UTF-8: it could not be echoed unaltered", data, m.ID)
			}
			// The id is echoed byte for byte into valid JSON.
			for _, resp := range [][]byte{
				wire.AppendError(nil, m.ID, wire.ErrUnknownMethod(m.Method)),
				mustResult(t, m.ID),
			} {
				var back struct{ ID json.RawMessage }
				if !json.Valid(resp) || json.Unmarshal(resp, &back) != nil || !bytes.Equal(back.ID, m.ID) {
					t.Fatalf("Decode(%q): response %q does not echo id %s", data, resp, m.ID)
				}
			}
		}
		if m.Params != nil && (!json.Valid(m.Params) || bytes.Equal(m.Params, []byte("null"))) {
			t.Fatalf("Decode(%q): params %q", data, m.Params)
		}
		// The params of any message decode without panicking, with -32602 errors.
		for _, dst := range paramTypes() {
			checkDecodeParams(t, m.Params, dst)
		}
	})
}

func mustResult(t *testing.T, id wire.ID) []byte {
	b, err := wire.AppendResult(nil, id, wire.StatusResult{Status: "ready"})
	if err != nil {
		t.Fatalf("AppendResult: %v", err)
	}
	return b
}

// FuzzDecodeParams: wire.DecodeParams never panics on any input for any
// params type; it either fails with a -32602 *wire.Error, or succeeds with
// every required field present and non-null in the object.
func FuzzDecodeParams(f *testing.F) {
	for _, s := range paramsSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, dst := range paramTypes() {
			checkDecodeParams(t, data, dst)
		}
		// The same bytes as the params of an envelope, when that is a message.
		env := append(append([]byte(`{"id":1,"method":"m","params":`), data...), '}')
		if m, e := wire.Decode(env); e == nil {
			for _, dst := range paramTypes() {
				checkDecodeParams(t, m.Params, dst)
			}
		}
	})
}

func checkDecodeParams(t *testing.T, raw []byte, dst wire.Params) {
	t.Helper()
	e := wire.DecodeParams(raw, dst)
	if e != nil {
		if e.Code != wire.CodeInvalidParams || e.Message == "" {
			t.Fatalf("DecodeParams(%q, %T): error %d %q, want -32602 with a message", raw, dst, e.Code, e.Message)
		}
		return
	}
	if sp, ok := dst.(*wire.StartParams); ok {
		checkEnvNames(t, raw, "env", sp.Env)
		if sp.EnvPolicy != nil {
			checkEnvNames(t, raw, "envPolicy.set", sp.EnvPolicy.Set)
		}
	}
	req := dst.RequiredFields()
	if len(req) == 0 {
		return
	}
	present, ok := presentKeys(raw)
	if !ok {
		t.Fatalf("DecodeParams(%q, %T) accepted a non-object with required fields %v", raw, dst, req)
	}
	for _, f := range req {
		if !present[f] {
			t.Fatalf("DecodeParams(%q, %T) accepted it without required field %q", raw, dst, f)
		}
	}
}

// presentKeys returns the top-level keys of a JSON object that have a
// non-null value at least once; ok is false if raw is not an object.
func presentKeys(raw []byte) (map[string]bool, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return nil, false
	}
	keys := map[string]bool{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, false
		}
		key, _ := kt.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		keys[key] = keys[key] || !bytes.Equal(bytes.TrimSpace(v), []byte("null"))
	}
	return keys, true
}

// checkEnvNames: the start's env-name check refuses exactly the names a
// child's environment cannot carry (empty, '=' or NUL), with -32602 naming
// the field.
func checkEnvNames(t *testing.T, raw []byte, field string, env map[string]string) {
	t.Helper()
	bad := false
	for k := range env {
		bad = bad || k == "" || strings.ContainsAny(k, "=\x00")
	}
	e := actors.CheckEnvNames(field, env)
	if bad != (e != nil) {
		t.Fatalf("CheckEnvNames(%s of %q) = %v; bad names present: %v", field, raw, e, bad)
	}
	if e != nil && (e.Code != wire.CodeInvalidParams || !strings.Contains(e.Message, "`"+field+"`")) {
		t.Fatalf("CheckEnvNames(%s of %q) = %d %q", field, raw, e.Code, e.Message)
	}
}
