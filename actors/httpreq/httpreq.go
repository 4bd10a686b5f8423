package httpreq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
)

// DefaultMaxBodyBytes is the default cap on a buffered response body.
const DefaultMaxBodyBytes = 16 << 20

// Header is one request or response header. Repeated names are kept.
// ValueEnvVar (requests only), when set, names an environment variable of
// the executor whose value is appended to Value, so a secret never crosses
// the wire.
type Header struct {
	Name        string
	Value       string
	ValueEnvVar *string
}

// ProtectedEnvVars are the executor variables a header may never take its
// value from (any case): the executor's own credentials. The list is the
// reference exec-server's (Codex 0.169).
var ProtectedEnvVars = []string{
	"CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN",
	"OPENAI_FEDERATION_RULE_ID",
	"OPENAI_IDENTITY_TOKEN_FILE",
	"OPENAI_WORKLOAD_IDENTITY_CONTEXT",
	"OPENAI_API_KEY",
	"CODEX_API_KEY",
	"CODEX_ACCESS_TOKEN",
	"CODEX_CONNECTORS_TOKEN",
	"AWS_ACCESS_KEY_ID",
	"AWS_SECRET_ACCESS_KEY",
	"AWS_SESSION_TOKEN",
	"AZURE_CLIENT_SECRET",
	"AZURE_FEDERATED_TOKEN_FILE",
	"GOOGLE_APPLICATION_CREDENTIALS",
}

func protectedEnvVar(name string) bool {
	for _, p := range ProtectedEnvVars {
		if strings.EqualFold(p, name) {
			return true
		}
	}
	return false
}

// Request is one HTTP request to make.
type Request struct {
	Method  string // sent as given (case-sensitive); must be an HTTP token
	URL     string // absolute http:// or https:// URL
	Headers []Header
	Body    []byte // nil: no body
	// Timeout, if not nil, bounds the whole exchange: connecting, the
	// response headers and reading the body. Zero times out at once.
	Timeout *time.Duration
	// StopRedirects makes a redirect response the answer instead of
	// following it (redirectPolicy "stop").
	StopRedirects bool
}

// InvalidKind says what is wrong with a Request.
type InvalidKind uint8

const (
	InvalidMethod      InvalidKind = iota + 1 // Detail is empty
	InvalidURL                                // Detail is the reason
	UnsupportedScheme                         // Detail is the scheme
	InvalidHeaderName                         // Detail is the name
	InvalidHeaderValue                        // Detail is the header's name
	HeaderEnvProtected                        // Detail is the header's name, Var the variable
	HeaderEnvUnset                            // Detail is the header's name, Var the variable
	HeaderEnvEmpty                            // Detail is the header's name, Var the variable
)

// InvalidError is a request refused before anything was sent.
type InvalidError struct {
	Kind   InvalidKind
	Detail string
	Var    string // the header's valueEnvVar, for the HeaderEnv kinds
}

func (e *InvalidError) Error() string {
	switch e.Kind {
	case InvalidMethod:
		return "httpreq: invalid HTTP method"
	case InvalidURL:
		return "httpreq: invalid url: " + e.Detail
	case UnsupportedScheme:
		return "httpreq: only http and https URLs are supported, got " + e.Detail
	case InvalidHeaderName:
		return fmt.Sprintf("httpreq: invalid header name %q", e.Detail)
	case HeaderEnvProtected:
		return fmt.Sprintf("httpreq: header %s cannot use executor environment variable %s", e.Detail, e.Var)
	case HeaderEnvUnset:
		return fmt.Sprintf("httpreq: header %s requires executor environment variable %s", e.Detail, e.Var)
	case HeaderEnvEmpty:
		return fmt.Sprintf("httpreq: header %s requires a non-empty executor environment variable %s", e.Detail, e.Var)
	default:
		return "httpreq: invalid header value for " + e.Detail
	}
}

// ErrBodyTooLarge: a buffered body is larger than the client's cap.
var ErrBodyTooLarge = errors.New("httpreq: response body too large")

// TimeoutError: the request's Timeout elapsed.
type TimeoutError struct{ After time.Duration }

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("request timed out after %d ms", e.After.Milliseconds())
}

// Options configure a Client.
type Options struct {
	// MaxBodyBytes caps a buffered body (ReadAll); <= 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// LookupEnv reads the executor's environment for ValueEnvVar headers;
	// nil means os.LookupEnv.
	LookupEnv func(string) (string, bool)
}

// Client makes requests over one connection pool. Its methods may be
// called concurrently. Close it when done: it closes idle connections.
type Client struct {
	hc      *http.Client // follows redirects (at most 10)
	stop    *http.Client // same pool; a redirect is the answer
	maxBody int64
	env     func(string) (string, bool)
}

// NewClient returns a client with its own connection pool. Bodies are
// passed through as received (no transparent decompression); proxies come
// from the environment (HTTP_PROXY, HTTPS_PROXY, NO_PROXY); redirects are
// followed (at most 10) unless a request says StopRedirects.
func NewClient(opts Options) *Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DisableCompression = true
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.LookupEnv == nil {
		opts.LookupEnv = os.LookupEnv
	}
	stop := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &Client{hc: &http.Client{Transport: tr}, stop: stop, maxBody: opts.MaxBodyBytes, env: opts.LookupEnv}
}

// MaxBodyBytes is the cap on a buffered body.
func (c *Client) MaxBodyBytes() int64 { return c.maxBody }

// Close closes the pool's idle connections. Requests still in flight keep
// their connection until they end.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// Prepared is a validated request, ready to send once.
type Prepared struct {
	c       *Client
	hc      *http.Client
	req     *http.Request
	timeout *time.Duration
}

// Prepare validates r without sending anything; errors are *InvalidError.
func (c *Client) Prepare(r Request) (*Prepared, error) {
	if !isToken(r.Method) {
		return nil, &InvalidError{Kind: InvalidMethod}
	}
	u, err := url.Parse(r.URL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, &InvalidError{Kind: InvalidURL, Detail: err.Error()}
	}
	switch {
	case u.Scheme == "":
		return nil, &InvalidError{Kind: InvalidURL, Detail: "relative URL without a base"}
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, &InvalidError{Kind: UnsupportedScheme, Detail: u.Scheme}
	case u.Host == "":
		return nil, &InvalidError{Kind: InvalidURL, Detail: "empty host"}
	}
	var body io.Reader
	if r.Body != nil {
		body = bytes.NewReader(r.Body)
	}
	req, err := http.NewRequest(r.Method, u.String(), body)
	if err != nil {
		return nil, &InvalidError{Kind: InvalidURL, Detail: err.Error()}
	}
	for _, h := range r.Headers {
		if !isToken(h.Name) {
			return nil, &InvalidError{Kind: InvalidHeaderName, Detail: h.Name}
		}
		value := h.Value
		if v := h.ValueEnvVar; v != nil {
			switch env, ok := c.env(*v); {
			case protectedEnvVar(*v):
				return nil, &InvalidError{Kind: HeaderEnvProtected, Detail: h.Name, Var: *v}
			case !ok:
				return nil, &InvalidError{Kind: HeaderEnvUnset, Detail: h.Name, Var: *v}
			case env == "":
				return nil, &InvalidError{Kind: HeaderEnvEmpty, Detail: h.Name, Var: *v}
			default:
				value += env
			}
		}
		if !validHeaderValue(value) {
			return nil, &InvalidError{Kind: InvalidHeaderValue, Detail: h.Name}
		}
		if strings.EqualFold(h.Name, "Host") {
			req.Host = value
			continue
		}
		req.Header.Add(h.Name, value)
	}
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header["User-Agent"] = []string{""} // send none rather than Go's default
	}
	if _, ok := req.Header["Accept"]; !ok {
		req.Header.Set("Accept", "*/*")
	}
	hc := c.hc
	if r.StopRedirects {
		hc = c.stop
	}
	return &Prepared{c: c, hc: hc, req: req, timeout: r.Timeout}, nil
}

// Response is a response whose headers have arrived. Read or ReadAll its
// body, or Close it; either way it must end with one of them.
type Response struct {
	Status  int
	Headers []Header

	body    io.ReadCloser
	ctx     context.Context
	cancel  context.CancelFunc
	timeout *time.Duration
	maxBody int64
	length  int64
}

// Send makes the request and returns once the response headers arrived.
// ctx cancels the whole exchange, body included. A failure is a
// *TimeoutError, or the transport's error (a *url.Error).
func (p *Prepared) Send(ctx context.Context) (*Response, error) {
	var cancel context.CancelFunc
	if p.timeout != nil {
		ctx, cancel = context.WithTimeout(ctx, *p.timeout)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	resp, err := p.hc.Do(p.req.WithContext(ctx))
	if err != nil {
		err = p.mapErr(ctx, err)
		cancel()
		return nil, err
	}
	return &Response{
		Status:  resp.StatusCode,
		Headers: responseHeaders(resp.Header, resp.TransferEncoding),
		body:    resp.Body,
		ctx:     ctx,
		cancel:  cancel,
		timeout: p.timeout,
		maxBody: p.c.maxBody,
		length:  resp.ContentLength,
	}, nil
}

func (p *Prepared) mapErr(ctx context.Context, err error) error {
	if p.timeout != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &TimeoutError{After: *p.timeout}
	}
	return err
}

// Read reads the next piece of the body as it arrives; io.EOF at its end.
// Other errors: *TimeoutError, or the transport's error.
func (r *Response) Read(b []byte) (int, error) {
	n, err := r.body.Read(b)
	if err != nil && err != io.EOF {
		if r.timeout != nil && errors.Is(r.ctx.Err(), context.DeadlineExceeded) {
			err = &TimeoutError{After: *r.timeout}
		}
	}
	return n, err
}

// ReadAll reads the whole body, at most the client's MaxBodyBytes
// (ErrBodyTooLarge beyond it, checked against Content-Length first), and
// closes the response.
func (r *Response) ReadAll() ([]byte, error) {
	defer r.Close()
	if r.length > r.maxBody {
		return nil, ErrBodyTooLarge
	}
	var buf bytes.Buffer
	if r.length > 0 {
		buf.Grow(int(r.length))
	}
	_, err := buf.ReadFrom(io.LimitReader(readerFunc(r.Read), r.maxBody+1))
	if err != nil {
		return nil, err
	}
	if int64(buf.Len()) > r.maxBody {
		return nil, ErrBodyTooLarge
	}
	return buf.Bytes(), nil
}

// Close abandons the rest of the body and releases the request.
func (r *Response) Close() {
	r.body.Close()
	r.cancel()
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(b []byte) (int, error) { return f(b) }

// responseHeaders lists the headers with lower-case names (as HTTP/2 and
// the reference exec-server send them), sorted by name, each name's values
// in the order received. Values that are not valid UTF-8 are left out.
// net/http moves Transfer-Encoding out of the header map; it is put back.
func responseHeaders(h http.Header, te []string) []Header {
	if len(te) > 0 {
		h = h.Clone()
		h["Transfer-Encoding"] = []string{strings.Join(te, ", ")}
	}
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	sort.Strings(names)
	out := make([]Header, 0, len(h))
	for _, name := range names {
		lower := strings.ToLower(name)
		for _, v := range h[name] {
			if utf8.ValidString(v) {
				out = append(out, Header{Name: lower, Value: v})
			}
		}
	}
	return out
}

// isToken reports whether s is a non-empty RFC 9110 token (methods and
// header names).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValue rejects control characters other than horizontal tab.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
