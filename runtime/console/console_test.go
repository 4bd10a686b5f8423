package console

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/runtimed/runtimed/actors/audit"
	"github.com/runtimed/runtimed/actors/tokens"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type recorder struct {
	mu sync.Mutex
	ev []audit.Event
}

func (r *recorder) Audit(e audit.Event) { r.mu.Lock(); r.ev = append(r.ev, e); r.mu.Unlock() }

func newTestConsole(t *testing.T, control bool) (*httptest.Server, *recorder) {
	tab, err := tokens.Parse([]byte("alice A-token\n"))
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	c := New(Options{Tokens: tokens.NewStore(tab), Control: control, AuditLog: rec})
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(func() { srv.Close(); c.Close() })
	return srv, rec
}

func noRedirect() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func TestRefusals(t *testing.T) {
	srv, rec := newTestConsole(t, false)
	cl := noRedirect()
	do := func(method, path string, hdr map[string]string, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		res, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	// Without a token: API 401, pages go to the login page.
	if res := do("GET", "/api/processes", nil, ""); res.StatusCode != 401 {
		t.Errorf("API without token: %d", res.StatusCode)
	}
	if res := do("GET", "/", nil, ""); res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/login.html" {
		t.Errorf("page without token: %d %s", res.StatusCode, res.Header.Get("Location"))
	}
	res := do("GET", "/login.html", nil, "")
	csp := res.Header.Get("Content-Security-Policy")
	if res.StatusCode != 200 || !strings.Contains(csp, "script-src 'self';") || strings.Contains(csp, "script-src 'self' 'unsafe-inline'") {
		t.Errorf("login page: %d CSP %q", res.StatusCode, csp)
	}
	// A login from another origin is refused; a wrong token is audited.
	form := url.Values{"token": {"A-token"}}.Encode()
	if res := do("POST", "/login", map[string]string{"Origin": "http://evil.example"}, form); res.StatusCode != 403 {
		t.Errorf("cross-origin login: %d", res.StatusCode)
	}
	if res := do("POST", "/login", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": srv.URL}, form); res.StatusCode != 403 {
		t.Errorf("cross-site login: %d", res.StatusCode)
	}
	if res := do("POST", "/login", map[string]string{"Origin": srv.URL}, url.Values{"token": {"wrong"}}.Encode()); res.Header.Get("Location") != "/login.html?failed=1" {
		t.Errorf("wrong token login: %d %s", res.StatusCode, res.Header.Get("Location"))
	}
	rec.mu.Lock()
	if len(rec.ev) != 1 || rec.ev[0].Type != audit.AuthRefused {
		t.Errorf("refused login audited as %+v", rec.ev)
	}
	rec.mu.Unlock()
	res = do("POST", "/login", map[string]string{"Origin": srv.URL}, form)
	var cookie *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == cookieName {
			cookie = c
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode {
		t.Fatalf("login cookie %+v", cookie)
	}
	auth := map[string]string{"Cookie": cookie.Name + "=" + cookie.Value}
	if res := do("GET", "/api/processes", auth, ""); res.StatusCode != 200 {
		t.Errorf("API with the cookie: %d", res.StatusCode)
	}
	// Read-only: terminate is refused even from the console's origin; without an Origin it is refused anyway.
	auth["Origin"] = srv.URL
	if res := do("POST", "/api/processes/1/terminate", auth, ""); res.StatusCode != 403 {
		t.Errorf("terminate on a read-only console: %d", res.StatusCode)
	}
	delete(auth, "Origin")
	if res := do("POST", "/api/processes/1/terminate", auth, ""); res.StatusCode != 403 {
		t.Errorf("terminate without Origin: %d", res.StatusCode)
	}
}

func TestProcUsageOfSelf(t *testing.T) {
	rss, _, ok := procUsage(os.Getpid())
	if !ok || rss <= 0 {
		t.Fatalf("procUsage(self) = %d, %v", rss, ok)
	}
	if _, _, ok := procUsage(0); ok {
		t.Fatal("pid 0 read")
	}
}
