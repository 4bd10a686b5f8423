package main_test

// End-to-end tests of http/request (PROTOCOL.md §7.4) through the real binary over both transports,
// against an HTTP server on loopback in the test process.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runtimed/runtimed/wire/wiretest"
)

func httpTestServer(t *testing.T) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/sse":
			w.Header().Set("Content-Type", "text/event-stream")
			for i := 1; i <= 3; i++ {
				fmt.Fprintf(w, "data: event %d\n\n", i)
				w.(http.Flusher).Flush()
			}
		case strings.HasPrefix(r.URL.Path, "/bytes/"):
			n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/bytes/"))
			w.Write(bytes.Repeat([]byte("0123456789abcdef"), n/16))
		case r.URL.Path == "/slow":
			select {
			case <-time.After(wait):
			case <-r.Context().Done():
			}
		default:
			b, _ := io.ReadAll(r.Body)
			w.Header().Add("X-Reply", "one")
			w.Header().Add("X-Reply", "two")
			w.WriteHeader(http.StatusAccepted)
			fmt.Fprintf(w, "%s %s auth=%s body=%s", r.Method, r.URL.RequestURI(), r.Header.Get("Authorization"), b)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

type httpReply struct {
	Status  int `json:"status"`
	Headers []struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	} `json:"headers"`
	BodyBase64 string `json:"bodyBase64"`
}

func httpCall(t *testing.T, c *wiretest.Client, params map[string]any) (httpReply, error) {
	t.Helper()
	var r httpReply
	res, err := call(tctx(t, wait), c, "http/request", params)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(res, &r); err != nil {
		t.Fatalf("http/request result %s: %v", res, err)
	}
	return r, nil
}

func TestHTTPRequest(t *testing.T) {
	s := httpTestServer(t)
	forEachTransport(t, func(t *testing.T, tr transport) {
		c := session(t, tr)
		r, err := httpCall(t, c, map[string]any{
			"method": "PUT", "url": s.URL + "/put?x=1", "requestId": "a", "streamResponse": false, "timeoutMs": 10000,
			"headers":    []map[string]string{{"name": "Authorization", "value": "Bearer t"}},
			"bodyBase64": base64.StdEncoding.EncodeToString([]byte("payload")),
		})
		if err != nil {
			t.Fatal(err)
		}
		body, _ := base64.StdEncoding.DecodeString(r.BodyBase64)
		if r.Status != 202 || string(body) != "PUT /put?x=1 auth=Bearer t body=payload" {
			t.Errorf("status %d body %q", r.Status, body)
		}
		var replies []string
		for _, h := range r.Headers {
			if h.Name == "x-reply" {
				replies = append(replies, h.Value)
			}
		}
		if strings.Join(replies, ",") != "one,two" {
			t.Errorf("headers %+v: want x-reply one then two", r.Headers)
		}

		// Streamed: the result has an empty body, the body follows as deltas seq 1.., done last.
		r, err = httpCall(t, c, map[string]any{"method": "GET", "url": s.URL + "/sse", "requestId": "sse-1", "streamResponse": true})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != 200 || r.BodyBase64 != "" {
			t.Errorf("stream result: status %d body %q, want 200 and empty", r.Status, r.BodyBase64)
		}
		got := collectHTTPStream(t, c, "sse-1")
		if want := "data: event 1\n\ndata: event 2\n\ndata: event 3\n\n"; string(got) != want {
			t.Errorf("streamed body %q, want %q", got, want)
		}

		// A 3 MiB body, streamed, arrives whole and in order.
		if _, err = httpCall(t, c, map[string]any{"method": "GET", "url": s.URL + "/bytes/3145728", "requestId": "big", "streamResponse": true}); err != nil {
			t.Fatal(err)
		}
		if got := collectHTTPStream(t, c, "big"); !bytes.Equal(got, bytes.Repeat([]byte("0123456789abcdef"), 3<<16)) {
			t.Errorf("3 MiB streamed body: got %d bytes, corrupted or short", len(got))
		}

		for _, cs := range []struct {
			params map[string]any
			code   int
			msg    string
		}{
			{map[string]any{"method": "GET", "url": "file:///etc/passwd", "requestId": "e"}, -32602, "http/request only supports http and https URLs, got file"},
			{map[string]any{"method": "BAD METHOD", "url": s.URL, "requestId": "e"}, -32602, "http/request method is invalid: invalid HTTP method"},
			{map[string]any{"method": "GET", "url": "http//missing-colon", "requestId": "e"}, -32602, "http/request url is invalid: relative URL without a base"},
			{map[string]any{"method": "GET", "url": s.URL}, -32602, "missing field `requestId`"},
			{map[string]any{"method": "GET", "url": s.URL + "/slow", "requestId": "e", "timeoutMs": 200}, -32603, "http/request failed: request timed out after 200 ms"},
		} {
			_, err := httpCall(t, c, cs.params)
			wantRPCError(t, fmt.Sprint(cs.params), err, cs.code, cs.msg)
		}
	})
}

// collectHTTPStream waits for the bodyDelta notifications of requestID and checks their sequence.
func collectHTTPStream(t *testing.T, c *wiretest.Client, requestID string) []byte {
	t.Helper()
	var body []byte
	for seq := 1; ; seq++ {
		n, err := c.WaitNotification(tctx(t, wait), func(method string, params json.RawMessage) bool {
			var p struct {
				RequestID string `json:"requestId"`
				Seq       int    `json:"seq"`
			}
			return method == "http/request/bodyDelta" && json.Unmarshal(params, &p) == nil && p.RequestID == requestID && p.Seq == seq
		})
		if err != nil {
			t.Fatalf("delta %d of %s: %v", seq, requestID, err)
		}
		var d struct {
			DeltaBase64 string  `json:"deltaBase64"`
			Done        bool    `json:"done"`
			Error       *string `json:"error"`
		}
		if err := json.Unmarshal(n.Params, &d); err != nil {
			t.Fatal(err)
		}
		b, err := base64.StdEncoding.DecodeString(d.DeltaBase64)
		if err != nil || d.Error != nil {
			t.Fatalf("delta %d: %v error %v", seq, err, d.Error)
		}
		if d.Done {
			if len(b) != 0 {
				t.Errorf("the done delta carries %d bytes", len(b))
			}
			return body
		}
		body = append(body, b...)
	}
}

func TestHTTPRequestDisabledAndCapFlags(t *testing.T) {
	s := httpTestServer(t)
	forEachTransport(t, func(t *testing.T, tr transport) {
		c := session(t, tr, "--http-requests=false")
		_, err := httpCall(t, c, map[string]any{"method": "GET", "url": s.URL, "requestId": "a"})
		wantRPCError(t, "--http-requests=false", err, -32602, "http/request is disabled on this executor (runtimed serve --http-requests=false)")

		c = session(t, tr, "--http-max-body-bytes", "1024")
		if _, err := httpCall(t, c, map[string]any{"method": "GET", "url": s.URL + "/bytes/1024", "requestId": "a"}); err != nil {
			t.Errorf("a body at the cap: %v", err)
		}
		_, err = httpCall(t, c, map[string]any{"method": "GET", "url": s.URL + "/bytes/1040", "requestId": "a"})
		wantRPCErrorContains(t, "a body over the cap", err, -32603, "exceeds the 1024-byte limit", "streamResponse")
	})
}
