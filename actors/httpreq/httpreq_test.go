package httpreq

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait bounds every wait of these tests.
const wait = 20 * time.Second

func newClient(t *testing.T, maxBody int64) *Client {
	t.Helper()
	c := NewClient(Options{MaxBodyBytes: maxBody})
	t.Cleanup(c.Close)
	return c
}

func newServer(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

func ms(n int) *time.Duration { d := time.Duration(n) * time.Millisecond; return &d }

func do(t *testing.T, c *Client, r Request) (*Response, error) {
	t.Helper()
	p, err := c.Prepare(r)
	if err != nil {
		t.Fatalf("prepare %+v: %v", r, err)
	}
	return p.Send(ctxT(t))
}

func TestBufferedRequestAndHeaders(t *testing.T) {
	type seen struct {
		method, host, body string
		header             http.Header
	}
	got := make(chan seen, 1)
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.Host, string(b), r.Header.Clone()}
		w.Header().Add("X-Multi", "a")
		w.Header().Add("X-Multi", "b")
		w.Header().Set("Set-Cookie", "c=1")
		w.WriteHeader(201)
		io.WriteString(w, "made")
	})
	c := newClient(t, 0)
	resp, err := do(t, c, Request{
		Method: "PATCH", URL: s.URL + "/x?q=1", Body: []byte("hi"),
		Headers: []Header{{Name: "X-A", Value: "1"}, {Name: "x-a", Value: "2"}, {Name: "Host", Value: "example.test"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	body, err := resp.ReadAll()
	if err != nil || string(body) != "made" || resp.Status != 201 {
		t.Fatalf("status %d body %q err %v, want 201 \"made\"", resp.Status, body, err)
	}
	r := <-got
	if r.method != "PATCH" || r.host != "example.test" || r.body != "hi" {
		t.Errorf("server saw method %q host %q body %q", r.method, r.host, r.body)
	}
	if v := r.header.Values("X-A"); len(v) != 2 || v[0] != "1" || v[1] != "2" {
		t.Errorf("repeated request header: server saw %q, want [1 2]", v)
	}
	if _, ok := r.header["User-Agent"]; ok {
		t.Errorf("a User-Agent was added: %q", r.header.Get("User-Agent"))
	}
	if r.header.Get("Accept") != "*/*" || r.header.Get("Accept-Encoding") != "" {
		t.Errorf("Accept %q Accept-Encoding %q, want */* and none", r.header.Get("Accept"), r.header.Get("Accept-Encoding"))
	}
	var names []string
	for _, h := range resp.Headers {
		names = append(names, h.Name+"="+h.Value)
	}
	joined := strings.Join(names, ",")
	if !strings.Contains(joined, "set-cookie=c=1,x-multi=a,x-multi=b") || !strings.HasPrefix(joined, "content-length=4,") {
		t.Errorf("response headers %q: want lower-case names, sorted, repeats in order", joined)
	}
}

func TestMethodSentAsGivenAndBodyNotDecompressed(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		io.WriteString(w, r.Method)
	})
	c := newClient(t, 0)
	for _, m := range []string{"FOO", "get", "M-SEARCH"} {
		resp, err := do(t, c, Request{Method: m, URL: s.URL})
		if err != nil {
			t.Fatal(err)
		}
		body, err := resp.ReadAll()
		if err != nil || string(body) != m {
			t.Errorf("method %q: server saw %q (%v)", m, body, err)
		}
	}
}

func TestChunkedResponseKeepsTransferEncoding(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "a")
		w.(http.Flusher).Flush()
		io.WriteString(w, "b")
	})
	resp, err := do(t, newClient(t, 0), Request{Method: "GET", URL: s.URL})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := resp.ReadAll()
	found := false
	for _, h := range resp.Headers {
		found = found || (h.Name == "transfer-encoding" && h.Value == "chunked")
	}
	if string(body) != "ab" || !found {
		t.Errorf("body %q headers %v: want \"ab\" and transfer-encoding: chunked", body, resp.Headers)
	}
}

func TestInvalidRequests(t *testing.T) {
	c := newClient(t, 0)
	cases := []struct {
		r      Request
		kind   InvalidKind
		detail string
	}{
		{Request{Method: "", URL: "http://127.0.0.1/"}, InvalidMethod, ""},
		{Request{Method: "G ET", URL: "http://127.0.0.1/"}, InvalidMethod, ""},
		{Request{Method: "GET\n", URL: "http://127.0.0.1/"}, InvalidMethod, ""},
		{Request{Method: "GET", URL: "not a url"}, InvalidURL, "relative URL without a base"},
		{Request{Method: "GET", URL: "/relative"}, InvalidURL, "relative URL without a base"},
		{Request{Method: "GET", URL: "http://[::1"}, InvalidURL, "missing ']' in host"},
		{Request{Method: "GET", URL: "http:///path"}, InvalidURL, "empty host"},
		{Request{Method: "GET", URL: "ftp://example.test/x"}, UnsupportedScheme, "ftp"},
		{Request{Method: "GET", URL: "file:///etc/passwd"}, UnsupportedScheme, "file"},
		{Request{Method: "GET", URL: "ws://127.0.0.1/"}, UnsupportedScheme, "ws"},
		{Request{Method: "GET", URL: "http://127.0.0.1/", Headers: []Header{{Name: "bad name", Value: "v"}}}, InvalidHeaderName, "bad name"},
		{Request{Method: "GET", URL: "http://127.0.0.1/", Headers: []Header{{Name: "", Value: "v"}}}, InvalidHeaderName, ""},
		{Request{Method: "GET", URL: "http://127.0.0.1/", Headers: []Header{{Name: "X", Value: "a\nb"}}}, InvalidHeaderValue, "X"},
		{Request{Method: "GET", URL: "http://127.0.0.1/", Headers: []Header{{Name: "X", Value: "a\x00"}}}, InvalidHeaderValue, "X"},
	}
	for _, cs := range cases {
		_, err := c.Prepare(cs.r)
		var inv *InvalidError
		if !errors.As(err, &inv) || inv.Kind != cs.kind || !strings.Contains(inv.Detail, cs.detail) {
			t.Errorf("%+v: got %v, want kind %d detail containing %q", cs.r, err, cs.kind, cs.detail)
		}
	}
	// Upper-case schemes and tabs in values are fine.
	if _, err := c.Prepare(Request{Method: "GET", URL: "HTTPS://127.0.0.1/", Headers: []Header{{Name: "X", Value: "a\tb"}}}); err != nil {
		t.Errorf("HTTPS URL with a tab in a value: %v", err)
	}
}

func TestSendFailure(t *testing.T) {
	l := httptest.NewServer(http.NotFoundHandler())
	addr := l.URL
	l.Close() // nothing listens there any more
	_, err := do(t, newClient(t, 0), Request{Method: "GET", URL: addr})
	var ue *url.Error
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("request to a closed port: %v, want a *url.Error saying connection refused", err)
	}
}

func TestTimeouts(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/body" {
			io.WriteString(w, "head")
			w.(http.Flusher).Flush()
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	c := newClient(t, 0)
	wantTimeout := func(what string, err error, after time.Duration) {
		t.Helper()
		var te *TimeoutError
		if !errors.As(err, &te) || te.After != after {
			t.Errorf("%s: got %v, want a *TimeoutError after %v", what, err, after)
		}
	}

	start := time.Now()
	_, err := do(t, c, Request{Method: "GET", URL: s.URL + "/headers", Timeout: ms(150)})
	wantTimeout("headers never come", err, 150*time.Millisecond)
	if el := time.Since(start); el < 150*time.Millisecond || el > 10*time.Second {
		t.Errorf("timed out after %v, want about 150ms", el)
	}

	_, err = do(t, c, Request{Method: "GET", URL: s.URL + "/headers", Timeout: ms(0)})
	wantTimeout("timeout 0", err, 0)

	// The timeout covers the body: buffered and streamed reads end with it.
	resp, err := do(t, c, Request{Method: "GET", URL: s.URL + "/body", Timeout: ms(200)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = resp.ReadAll()
	wantTimeout("buffered body stalls", err, 200*time.Millisecond)

	resp, err = do(t, c, Request{Method: "GET", URL: s.URL + "/body", Timeout: ms(200)})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Close()
	buf := make([]byte, 100)
	n, err := resp.Read(buf)
	if err != nil || string(buf[:n]) != "head" {
		t.Fatalf("first read: %q %v", buf[:n], err)
	}
	_, err = resp.Read(buf)
	wantTimeout("streamed body stalls", err, 200*time.Millisecond)
}

func TestBodyCap(t *testing.T) {
	const limit = 1000
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		if r.URL.Query().Get("chunked") == "" {
			w.Header().Set("Content-Length", strconv.Itoa(n))
		}
		w.Write(bytes.Repeat([]byte("x"), n))
	})
	c := newClient(t, limit)
	for _, cs := range []struct {
		q       string
		tooBig  bool
		wantLen int
	}{
		{"n=1000", false, 1000},
		{"n=1001", true, 0},
		{"n=1000&chunked=1", false, 1000},
		{"n=1001&chunked=1", true, 0},
		{"n=5000000&chunked=1", true, 0},
		{"n=0", false, 0},
	} {
		resp, err := do(t, c, Request{Method: "GET", URL: s.URL + "/?" + cs.q})
		if err != nil {
			t.Fatal(err)
		}
		body, err := resp.ReadAll()
		if cs.tooBig != errors.Is(err, ErrBodyTooLarge) || len(body) != cs.wantLen {
			t.Errorf("%s with a %d-byte cap: %d bytes, err %v", cs.q, limit, len(body), err)
		}
	}
	if NewClient(Options{}).MaxBodyBytes() != DefaultMaxBodyBytes {
		t.Errorf("default cap is not %d", DefaultMaxBodyBytes)
	}
}

// A 100 MiB body read by a slow consumer: the sender is held back (what it
// has written minus what was read stays bounded by socket buffers), the
// heap stays small, and every byte arrives in order.
func TestStreamedBodySlowConsumerBoundedMemory(t *testing.T) {
	const total = 100 << 20
	const bound = 32 << 20 // socket buffers on both ends, far below total
	var written atomic.Int64
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		chunk := make([]byte, 32<<10)
		for i := range chunk {
			chunk[i] = byte(i * 7)
		}
		for sent := 0; sent < total; sent += len(chunk) {
			n, err := w.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	})
	resp, err := do(t, newClient(t, 0), Request{Method: "GET", URL: s.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Close()

	var read int64
	h := sha256.New()
	buf := make([]byte, 64<<10)
	readSome := func(n int64) {
		for stop := read + n; read < stop; {
			k, err := resp.Read(buf)
			h.Write(buf[:k])
			read += int64(k)
			if err != nil {
				if err == io.EOF && read == total {
					return
				}
				t.Fatalf("read after %d bytes: %v", read, err)
			}
		}
	}
	var peakHeap uint64
	heap := func() {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		peakHeap = max(peakHeap, m.HeapAlloc)
	}

	var maxGap int64
	readSome(1 << 20)
	for round := 0; read < total; round++ {
		// Stop reading until the sender is blocked: its count stops moving.
		last, stable := written.Load(), 0
		deadline := time.Now().Add(wait)
		for stable < 5 {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the sender never stalled (written %d, read %d)", round, written.Load(), read)
			}
			time.Sleep(20 * time.Millisecond)
			if w := written.Load(); w == last {
				stable++
			} else {
				last, stable = w, 0
			}
		}
		gap := written.Load() - read
		if gap > bound {
			t.Fatalf("round %d: sender is %d bytes ahead of the reader, want at most %d", round, gap, bound)
		}
		maxGap = max(maxGap, gap)
		heap()
		readSome(min(16<<20, total-read))
	}
	if read != total {
		t.Fatalf("read %d bytes, want %d", read, total)
	}
	want := sha256.New()
	chunk := make([]byte, 32<<10)
	for i := range chunk {
		chunk[i] = byte(i * 7)
	}
	for i := 0; i < total/len(chunk); i++ {
		want.Write(chunk)
	}
	if !bytes.Equal(h.Sum(nil), want.Sum(nil)) {
		t.Error("the body arrived corrupted")
	}
	if peakHeap > 48<<20 {
		t.Errorf("heap reached %d MiB while streaming %d MiB", peakHeap>>20, total>>20)
	}
	t.Logf("sender at most %d KiB ahead of a stalled reader; peak live heap %d MiB", maxGap>>10, peakHeap>>20)
}

// Cancelling the request's context (the connection ended) aborts it at any
// stage, and the remote server sees the request go away.
func TestCancellation(t *testing.T) {
	gone := make(chan string, 2)
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/body" {
			io.WriteString(w, "head")
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done()
		gone <- r.URL.Path
	})
	c := newClient(t, 0)
	waitGone := func(path string) {
		t.Helper()
		select {
		case p := <-gone:
			if p != path {
				t.Errorf("server saw %s end, want %s", p, path)
			}
		case <-time.After(wait):
			t.Fatalf("the server never saw %s cancelled", path)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	p, err := c.Prepare(Request{Method: "GET", URL: s.URL + "/headers"})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { _, err := p.Send(ctx); errc <- err }()
	time.AfterFunc(50*time.Millisecond, cancel)
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("send cancelled before the headers: %v", err)
		}
	case <-time.After(wait):
		t.Fatal("send did not return after cancel")
	}
	waitGone("/headers")

	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	p, _ = c.Prepare(Request{Method: "GET", URL: s.URL + "/body"})
	resp, err := p.Send(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Close()
	buf := make([]byte, 10)
	if n, err := resp.Read(buf); err != nil || string(buf[:n]) != "head" {
		t.Fatalf("first read %q %v", buf[:n], err)
	}
	readErr := make(chan error, 1)
	go func() { _, err := resp.Read(buf); readErr <- err }()
	cancel()
	select {
	case err := <-readErr:
		if err == nil || err == io.EOF {
			t.Errorf("read after cancel: %v, want an error", err)
		}
	case <-time.After(wait):
		t.Fatal("read did not return after cancel")
	}
	waitGone("/body")
}

func TestTimeoutErrorText(t *testing.T) {
	if got := (&TimeoutError{After: 1500 * time.Millisecond}).Error(); got != "request timed out after 1500 ms" {
		t.Errorf("got %q", got)
	}
	if got := fmt.Sprint((&InvalidError{Kind: UnsupportedScheme, Detail: "ftp"}).Error()); !strings.Contains(got, "ftp") {
		t.Errorf("got %q", got)
	}
}

func TestHeaderValueEnvVar(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Header.Get("Authorization")) })
	env := map[string]string{"TOKEN": "s3cr3t", "EMPTY": "", "OPENAI_API_KEY": "k", "BAD": "a\nb"}
	c := NewClient(Options{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	t.Cleanup(c.Close)
	ptr := func(s string) *string { return &s }
	resp, err := do(t, c, Request{Method: "GET", URL: s.URL, Headers: []Header{{Name: "Authorization", Value: "Bearer ", ValueEnvVar: ptr("TOKEN")}}})
	if err != nil {
		t.Fatal(err)
	}
	if body, err := resp.ReadAll(); err != nil || string(body) != "Bearer s3cr3t" {
		t.Errorf("body %q, %v: want the value followed by the variable", body, err)
	}
	for _, tc := range []struct {
		envVar string
		kind   InvalidKind
	}{
		{"MISSING", HeaderEnvUnset}, {"EMPTY", HeaderEnvEmpty}, {"openai_api_key", HeaderEnvProtected},
		{"OPENAI_API_KEY", HeaderEnvProtected}, {"Aws_Secret_Access_Key", HeaderEnvProtected}, {"BAD", InvalidHeaderValue},
	} {
		_, err := c.Prepare(Request{Method: "GET", URL: s.URL, Headers: []Header{{Name: "X", Value: "v", ValueEnvVar: ptr(tc.envVar)}}})
		var inv *InvalidError
		if !errors.As(err, &inv) || inv.Kind != tc.kind || inv.Detail != "X" || (tc.kind != InvalidHeaderValue && inv.Var != tc.envVar) {
			t.Errorf("%s: %v, want kind %d", tc.envVar, err, tc.kind)
		}
	}
}

func TestStopRedirects(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/r" {
			http.Redirect(w, r, "/final", http.StatusMovedPermanently)
			return
		}
		io.WriteString(w, "final")
	})
	c := newClient(t, 0)
	for _, stop := range []bool{true, false} {
		resp, err := do(t, c, Request{Method: "GET", URL: s.URL + "/r", StopRedirects: stop})
		if err != nil {
			t.Fatal(err)
		}
		body, _ := resp.ReadAll()
		if stop && (resp.Status != http.StatusMovedPermanently || !hasLocation(resp.Headers)) {
			t.Errorf("stop: %d %q %v: want the 301 with its location", resp.Status, body, resp.Headers)
		}
		if !stop && (resp.Status != 200 || string(body) != "final") {
			t.Errorf("follow: %d %q", resp.Status, body)
		}
	}
}

func hasLocation(hs []Header) bool {
	for _, h := range hs {
		if h.Name == "location" && h.Value == "/final" {
			return true
		}
	}
	return false
}
