package actors

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runtimed/runtimed/wire"
	"github.com/runtimed/runtimed/wire/wiretest"
)

func newHTTPSupervisor(t *testing.T, enabled bool, maxBody int64) *Supervisor {
	t.Helper()
	sup := NewSupervisor(Config{
		Proc:      ProcConfig{RetainBytes: 1 << 20, RetainChunks: 1000, ClosedRetention: time.Minute, DrainAfterTerminate: 50 * time.Millisecond, ShutdownGrace: time.Second},
		DetachTTL: time.Second,
		HTTP:      HTTPConfig{Enabled: enabled, MaxBodyBytes: maxBody},
	})
	stopAtCleanup(t, sup)
	return sup
}

func newHTTPServer(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}

func httpParams(method, url, requestID string, stream bool, extra map[string]any) map[string]any {
	p := map[string]any{"method": method, "url": url, "requestId": requestID, "streamResponse": stream}
	for k, v := range extra {
		p[k] = v
	}
	return p
}

type httpResult struct {
	Status     int               `json:"status"`
	Headers    []wire.HTTPHeader `json:"headers"`
	BodyBase64 string            `json:"bodyBase64"`
}

func decodeResult(t *testing.T, r rpcReply) httpResult {
	t.Helper()
	mustOK(t, r)
	var res httpResult
	if err := json.Unmarshal(r.Result, &res); err != nil {
		t.Fatalf("bad http/request result %s: %v", r.Result, err)
	}
	return res
}

func TestHTTPRequestDisabled(t *testing.T) {
	c := startConn(t, newHTTPSupervisor(t, false, 1<<20), false)
	mustErr(t, c.call("http/request", httpParams("GET", "http://127.0.0.1:1/", "r", false, nil)),
		-32602, "http/request is disabled on this executor (runtimed serve --http-requests=false)")
}

func TestHTTPRequestBufferedAndErrors(t *testing.T) {
	s := newHTTPServer(t, func(w http.ResponseWriter, r *http.Request) {
		if n, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/big/")); err == nil {
			w.Write(bytes.Repeat([]byte("x"), n))
			return
		}
		b, _ := io.ReadAll(r.Body)
		w.Header().Add("X-Multi", "a")
		w.Header().Add("X-Multi", "b")
		w.WriteHeader(201)
		fmt.Fprintf(w, "%s %s %s %s", r.Method, r.URL.Path, r.Header.Values("X-A"), b)
	})
	c := startConn(t, newHTTPSupervisor(t, true, 1000), false)

	res := decodeResult(t, c.call("http/request", httpParams("POST", s.URL+"/echo", "r1", false, map[string]any{
		"headers":    []map[string]string{{"name": "X-A", "value": "1"}, {"name": "X-A", "value": "2"}},
		"bodyBase64": base64.StdEncoding.EncodeToString([]byte("hi")),
		"timeoutMs":  5000,
	})))
	body, _ := base64.StdEncoding.DecodeString(res.BodyBase64)
	if res.Status != 201 || string(body) != "POST /echo [1 2] hi" {
		t.Errorf("status %d body %q, want 201 \"POST /echo [1 2] hi\"", res.Status, body)
	}
	var multi []string
	for _, h := range res.Headers {
		if h.Name == "x-multi" {
			multi = append(multi, h.Value)
		}
	}
	if strings.Join(multi, ",") != "a,b" {
		t.Errorf("headers %v: want x-multi a then b", res.Headers)
	}

	// Null optional fields are accepted.
	res = decodeResult(t, c.call("http/request", httpParams("GET", s.URL+"/big/3", "r2", false, map[string]any{"headers": nil, "bodyBase64": nil, "timeoutMs": nil})))
	if res.BodyBase64 != "eHh4" {
		t.Errorf("body %q, want xxx", res.BodyBase64)
	}
	// The buffered body cap (1000 bytes here).
	decodeResult(t, c.call("http/request", httpParams("GET", s.URL+"/big/1000", "r3", false, nil)))
	mustErr(t, c.call("http/request", httpParams("GET", s.URL+"/big/1001", "r4", false, nil)), -32603,
		"failed to read http/request response body: the body exceeds the 1000-byte limit for buffered responses; use streamResponse for larger bodies")
	// Streaming is not capped.
	c.call("http/request", httpParams("GET", s.URL+"/big/5000", "r5", true, nil))
	if got := collectStream(t, c, "r5"); len(got) != 5000 {
		t.Errorf("streamed %d bytes, want 5000", len(got))
	}

	for _, cs := range []struct {
		params map[string]any
		code   int
		msg    string
	}{
		{httpParams("GET", "ftp://x/y", "e", false, nil), -32602, "http/request only supports http and https URLs, got ftp"},
		{httpParams("G ET", s.URL, "e", false, nil), -32602, "http/request method is invalid: invalid HTTP method"},
		{httpParams("", s.URL, "e", false, nil), -32602, "http/request method is invalid: invalid HTTP method"},
		{httpParams("GET", "not a url", "e", false, nil), -32602, "http/request url is invalid: relative URL without a base"},
		{httpParams("GET", s.URL, "e", false, map[string]any{"headers": []map[string]string{{"name": "bad name", "value": "1"}}}), -32602, "http/request header name is invalid: invalid HTTP header name"},
		{httpParams("GET", s.URL, "e", false, map[string]any{"headers": []map[string]string{{"name": "X", "value": "a\nb"}}}), -32602, "http/request header value is invalid for X: failed to parse header value"},
		{map[string]any{"method": "GET", "url": s.URL}, -32602, "missing field `requestId`"},
		{httpParams("GET", s.URL, "e", false, map[string]any{"bodyBase64": "!!"}), -32602, "invalid base64 in field `bodyBase64`: illegal base64 data at input byte 0"},
		{httpParams("GET", s.URL, "e", false, map[string]any{"timeoutMs": 0}), -32603, "http/request failed: request timed out after 0 ms"},
	} {
		mustErr(t, c.call("http/request", cs.params), cs.code, cs.msg)
	}
	r := c.call("http/request", httpParams("GET", "http://127.0.0.1:1/x", "e", false, nil))
	if r.Error == nil || r.Error.Code != -32603 || !strings.HasPrefix(r.Error.Message, "http/request failed: ") || !strings.Contains(r.Error.Message, "connection refused") {
		t.Errorf("closed port: %+v, want -32603 http/request failed: ... connection refused", r.Error)
	}
}

// collectStream reads the body deltas of requestID (the result was already
// answered) and checks their sequence: seq from 1 without gaps, the last
// one done with an empty delta and no error.
func collectStream(t *testing.T, c *rawClient, requestID string) []byte {
	t.Helper()
	var body []byte
	for seq := 1; ; seq++ {
		m := c.waitNote(func(m map[string]any) bool {
			return m["method"] == "http/request/bodyDelta" && params(m)["requestId"] == requestID
		})
		p := params(m)
		if p["seq"] != float64(seq) {
			t.Fatalf("delta seq %v, want %d", p["seq"], seq)
		}
		b, err := base64.StdEncoding.DecodeString(p["deltaBase64"].(string))
		if err != nil {
			t.Fatal(err)
		}
		if p["done"] == true {
			if len(b) != 0 || p["error"] != nil {
				t.Fatalf("last delta carries %d bytes and error %v", len(b), p["error"])
			}
			return body
		}
		if p["error"] != nil || len(b) == 0 {
			t.Fatalf("delta %d: %d bytes, error %v", seq, len(b), p["error"])
		}
		body = append(body, b...)
	}
}

// The streamed result comes before its first delta; an id in flight is
// refused for another stream, and is free again as soon as done was seen.
func TestHTTPStreamOrderAndRequestIDs(t *testing.T) {
	hold := make(chan struct{})
	s := newHTTPServer(t, func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i < 5; i++ {
			fmt.Fprintf(w, "part%d\n", i)
			w.(http.Flusher).Flush()
		}
		if r.URL.Path == "/hold" {
			select {
			case <-hold:
			case <-r.Context().Done():
			}
		}
	})
	c := startConn(t, newHTTPSupervisor(t, true, 1<<20), false)
	for i := 0; i < 20; i++ {
		c.send(fmt.Sprintf(`{"id":"s%d","method":"http/request","params":{"method":"GET","url":%q,"requestId":"same","streamResponse":true}}`, i, s.URL))
		var sawResult bool
		var body []byte
		for done := false; !done; {
			m := c.recv()
			switch {
			case m["id"] == fmt.Sprintf("s%d", i):
				if m["error"] != nil {
					t.Fatalf("round %d: %v (the id should be free once done was seen)", i, m["error"])
				}
				res := m["result"].(map[string]any)
				if res["bodyBase64"] != "" || res["status"] != float64(200) {
					t.Fatalf("stream result %v: want status 200 and an empty body", res)
				}
				sawResult = true
			case m["method"] == "http/request/bodyDelta":
				if !sawResult {
					t.Fatalf("round %d: a body delta came before the http/request result", i)
				}
				b, _ := base64.StdEncoding.DecodeString(params(m)["deltaBase64"].(string))
				body = append(body, b...)
				done = params(m)["done"] == true
			}
		}
		if want := "part0\npart1\npart2\npart3\npart4\n"; string(body) != want {
			t.Fatalf("round %d: body %q, want %q", i, body, want)
		}
	}

	mustOK(t, c.call("http/request", httpParams("GET", s.URL+"/hold", "held", true, nil)))
	mustErr(t, c.call("http/request", httpParams("GET", s.URL, "held", true, nil)), -32602, "http/request streamResponse requestId `held` is already active")
	decodeResult(t, c.call("http/request", httpParams("GET", s.URL, "held", false, nil))) // buffered requests do not reserve ids
	close(hold)
	if got := collectStream(t, c, "held"); !strings.HasPrefix(string(got), "part0") {
		t.Errorf("held stream body %q", got)
	}
}

// At most connHTTPCap requests are in flight on a connection; one more is
// refused at once and the others are still answered.
func TestHTTPRequestsInFlightBound(t *testing.T) {
	arrived := make(chan struct{}, connHTTPCap+1)
	release := make(chan struct{})
	s := newHTTPServer(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		io.WriteString(w, "ok")
	})
	c := startConn(t, newHTTPSupervisor(t, true, 1<<20), false)
	for i := 0; i < connHTTPCap; i++ {
		c.send(fmt.Sprintf(`{"id":"h%d","method":"http/request","params":{"method":"GET","url":%q,"requestId":"h%d"}}`, i, s.URL, i))
	}
	for i := 0; i < connHTTPCap; i++ {
		select {
		case <-arrived:
		case <-time.After(15 * time.Second):
			t.Fatalf("only %d of %d requests reached the server", i, connHTTPCap)
		}
	}
	busy := wire.ErrHTTPBusy(connHTTPCap)
	mustErr(t, c.call("http/request", httpParams("GET", s.URL, "over", false, nil)), busy.Code, busy.Message)
	if busy.Code != -32600 || busy.Message != "at most 64 http requests may be in flight per connection" {
		t.Errorf("busy error %d %q", busy.Code, busy.Message)
	}
	close(release)
	answered := 0
	for answered < connHTTPCap {
		m := c.recv()
		if id, _ := m["id"].(string); strings.HasPrefix(id, "h") {
			if m["result"] == nil {
				t.Fatalf("%s: %v", id, m["error"])
			}
			answered++
		}
	}
	decodeResult(t, c.call("http/request", httpParams("GET", s.URL, "after", false, nil)))
}

// slowPipe is memPipe with a small server-to-client queue (32 messages), so that a client
// that stops reading stops the connection's writer at once.
func slowPipe() (client, server *memTransport) {
	return wiretest.MemPipeSized(1024, 32)
}

func serveRaw(t *testing.T, sup *Supervisor, client, server *memTransport) *rawClient {
	t.Helper()
	done := make(chan struct{})
	go func() {
		_ = sup.ServeConn(context.Background(), server, ConnOptions{})
		close(done)
	}()
	t.Cleanup(func() {
		client.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("connection actor did not end")
		}
	})
	return newRawClient(t, client)
}

// A streamed body to a client that does not read is held back by the
// connection's events queue: the remote server stalls far short of the
// body's end, and the whole body arrives once the client reads again.
func TestHTTPStreamBackpressure(t *testing.T) {
	const total = 40 << 20
	const bound = 30 << 20 // events queue (256 deltas of at most 64 KiB) + pipe (32) + socket buffers
	var written atomic.Int64
	chunk := make([]byte, 32<<10)
	for i := range chunk {
		chunk[i] = byte(i * 13)
	}
	s := newHTTPServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(total))
		for sent := 0; sent < total; sent += len(chunk) {
			n, err := w.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	})
	client, server := slowPipe()
	c := serveRaw(t, newHTTPSupervisor(t, true, 1<<20), client, server)
	c.call("initialize", map[string]any{"clientName": "test"})
	c.send(`{"method":"initialized"}`)
	mustOK(t, c.call("http/request", httpParams("GET", s.URL, "big", true, nil)))

	last, stable := written.Load(), 0
	deadline := time.Now().Add(20 * time.Second)
	for stable < 10 {
		if time.Now().After(deadline) {
			t.Fatalf("the remote server never stalled (written %d)", written.Load())
		}
		time.Sleep(20 * time.Millisecond)
		if w := written.Load(); w == last {
			stable++
		} else {
			last, stable = w, 0
		}
	}
	if last > bound {
		t.Fatalf("the server wrote %d bytes to a client that read nothing, want at most %d", last, bound)
	}
	t.Logf("stalled after %d KiB of %d KiB", last>>10, total>>10)

	h, n := sha256.New(), 0
	for seq := uint64(1); ; seq++ {
		raw, err := c.tr.ReadMessage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		// Pick the fields by hand: json.Unmarshal of 40 MiB is slow under -race.
		gotSeq, delta, done, err := parseDelta(raw)
		if err != nil || gotSeq != seq {
			t.Fatalf("delta %d: seq %d err %v in %.200s", seq, gotSeq, err, raw)
		}
		h.Write(delta)
		n += len(delta)
		if done {
			break
		}
	}
	want := sha256.New()
	for i := 0; i < total/len(chunk); i++ {
		want.Write(chunk)
	}
	if n != total || !bytes.Equal(h.Sum(nil), want.Sum(nil)) {
		t.Fatalf("received %d bytes (checksum match %v), want %d", n, bytes.Equal(h.Sum(nil), want.Sum(nil)), total)
	}
}

// The connection's end cancels its requests: the remote server sees them go
// away, buffered or streaming.
func TestHTTPCancelledWhenConnectionEnds(t *testing.T) {
	gone := make(chan string, 2)
	arrived := make(chan string, 2)
	s := newHTTPServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stream" {
			io.WriteString(w, "head")
			w.(http.Flusher).Flush()
		}
		arrived <- r.URL.Path
		<-r.Context().Done()
		gone <- r.URL.Path
	})
	sup := newHTTPSupervisor(t, true, 1<<20)
	client, server := memPipe()
	c := serveRaw(t, sup, client, server)
	c.call("initialize", map[string]any{"clientName": "test"})
	c.send(`{"method":"initialized"}`)
	mustOK(t, c.call("http/request", httpParams("GET", s.URL+"/stream", "s", true, nil)))
	c.send(fmt.Sprintf(`{"id":"b","method":"http/request","params":{"method":"GET","url":%q,"requestId":"b"}}`, s.URL+"/buffered"))
	for i := 0; i < 2; i++ {
		select {
		case <-arrived:
		case <-time.After(15 * time.Second):
			t.Fatal("the requests did not reach the server")
		}
	}
	client.Close()
	seen := map[string]bool{}
	for len(seen) < 2 {
		select {
		case p := <-gone:
			seen[p] = true
		case <-time.After(15 * time.Second):
			t.Fatalf("after the connection ended the server still holds requests (ended: %v)", seen)
		}
	}
}

// parseDelta reads seq, the decoded delta and done from an
// http/request/bodyDelta notification as the server encodes it.
func parseDelta(raw []byte) (uint64, []byte, bool, error) {
	field := func(name string, end byte) (string, error) {
		key := `"` + name + `":`
		i := bytes.Index(raw, []byte(key))
		if i < 0 {
			return "", fmt.Errorf("no %s", name)
		}
		rest := raw[i+len(key):]
		j := bytes.IndexByte(rest, end)
		if j < 0 {
			return "", fmt.Errorf("unterminated %s", name)
		}
		return string(rest[:j]), nil
	}
	seqText, err := field("seq", ',')
	if err != nil {
		return 0, nil, false, err
	}
	seq, err := strconv.ParseUint(seqText, 10, 64)
	if err != nil {
		return 0, nil, false, err
	}
	b64, err := field("deltaBase64", ',')
	if err != nil {
		return 0, nil, false, err
	}
	delta, err := base64.StdEncoding.DecodeString(strings.Trim(b64, `"`))
	if err != nil {
		return 0, nil, false, err
	}
	doneText, err := field("done", ',')
	return seq, delta, doneText == "true", err
}
