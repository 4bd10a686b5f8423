package main_test

import (
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runtimed/runtimed/wire/wiretest"
)

func wantHandshakeStatus(t *testing.T, what, url string, header http.Header, status int) {
	t.Helper()
	c, err := wiretest.DialWS(tctx(t, wait), url, header)
	if err == nil {
		c.Close()
		t.Errorf("%s: the websocket upgrade succeeded, want HTTP %d", what, status)
		return
	}
	var he *wiretest.HandshakeError
	if !errors.As(err, &he) || he.StatusCode != status {
		t.Errorf("%s: %v, want HTTP %d", what, err, status)
	}
}

func wantUsable(t *testing.T, what, url string, header http.Header) {
	t.Helper()
	c, err := wiretest.DialWS(tctx(t, wait), url, header)
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return
	}
	defer c.Close()
	ctx := tctx(t, wait)
	if _, err := c.Initialize(ctx); err != nil {
		t.Errorf("%s: initialize: %v", what, err)
		return
	}
	res, err := call(ctx, c, "environment/status", nil)
	wantStatusReady(t, what, res, err)
}

// PROTOCOL.md §1: HTTP on the websocket port.
func TestHTTPReadyzAndOrigin(t *testing.T) {
	t.Parallel()
	srv := wiretest.StartWS(t, bin)
	ctx := tctx(t, wait)
	status, body, err := wiretest.HTTPGet(ctx, srv.URL, "/readyz", nil)
	if err != nil || status != http.StatusOK {
		t.Errorf("GET /readyz: %d %q %v, want 200", status, body, err)
	}
	status, _, err = wiretest.HTTPGet(ctx, srv.URL, "/readyz", http.Header{"Origin": {"http://evil.example"}})
	if err != nil || status != http.StatusForbidden {
		t.Errorf("GET /readyz with an Origin header: %d %v, want 403", status, err)
	}
	wantHandshakeStatus(t, "upgrade with an Origin header", srv.URL, http.Header{"Origin": {"http://evil.example"}}, http.StatusForbidden)
	wantHandshakeStatus(t, "upgrade with Origin null", srv.URL, http.Header{"Origin": {"null"}}, http.StatusForbidden)
	wantUsable(t, "upgrade without an Origin header", srv.URL, nil)
}

func TestHTTPAllowedOrigin(t *testing.T) {
	t.Parallel()
	srv := wiretest.StartWS(t, bin, "--allowed-origin", "http://good.example", "--allowed-origin", "http://also-good.example")
	wantUsable(t, "allowed origin", srv.URL, http.Header{"Origin": {"http://good.example"}})
	wantUsable(t, "second allowed origin", srv.URL, http.Header{"Origin": {"http://also-good.example"}})
	wantHandshakeStatus(t, "other origin", srv.URL, http.Header{"Origin": {"http://evil.example"}}, http.StatusForbidden)
}

// PROTOCOL.md §1 (ext): bearer-token authentication.
func TestHTTPAuthToken(t *testing.T) {
	t.Parallel()
	const token = "e2e-secret-token-0123456789"
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := wiretest.StartWS(t, bin, "--auth-token-file", tokenFile)
	wantHandshakeStatus(t, "no Authorization header", srv.URL, nil, http.StatusUnauthorized)
	wantHandshakeStatus(t, "wrong token", srv.URL, http.Header{"Authorization": {"Bearer wrong-token"}}, http.StatusUnauthorized)
	wantHandshakeStatus(t, "token prefix", srv.URL, http.Header{"Authorization": {"Bearer " + token[:len(token)-1]}}, http.StatusUnauthorized)
	wantHandshakeStatus(t, "token without Bearer", srv.URL, http.Header{"Authorization": {token}}, http.StatusUnauthorized)
	wantUsable(t, "right token", srv.URL, http.Header{"Authorization": {"Bearer " + token}})

	// A non-loopback address is allowed once a token is configured (and, without TLS, --insecure-listen).
	open := wiretest.Start(t, bin, "serve", "--listen", "ws://0.0.0.0:0", "--auth-token-file", tokenFile, "--insecure-listen")
	line, err := open.FirstLine(tctx(t, wait))
	if err != nil {
		t.Fatalf("server on 0.0.0.0 with a token did not start: %v\n%s", err, open.Stderr())
	}
	u, err := url.Parse(strings.TrimSpace(line))
	if err != nil || u.Scheme != "ws" || u.Port() == "" || u.Port() == "0" || net.ParseIP(u.Hostname()) == nil {
		t.Fatalf("first stdout line %q: want ws://IP:PORT", line)
	}
	port := u.Port()
	wantHandshakeStatus(t, "0.0.0.0 without token", "ws://127.0.0.1:"+port, nil, http.StatusUnauthorized)
	wantUsable(t, "0.0.0.0 with token", "ws://127.0.0.1:"+port, http.Header{"Authorization": {"Bearer " + token}})
}

// PROTOCOL.md §1: refused start-up configurations.
func TestListenRefused(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		listen string
		check  func(stderr string) bool
		want   string
	}{
		{"non-loopback without token", "ws://0.0.0.0:0",
			func(s string) bool { return strings.Contains(s, "--auth-token-file") }, "a message naming --auth-token-file"},
		{"hostname", "ws://localhost:0",
			func(s string) bool {
				l := strings.ToLower(s)
				return strings.Contains(l, "localhost") || strings.Contains(l, "hostname") || strings.Contains(l, "ip address")
			}, "a message about the hostname"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := wiretest.Start(t, bin, "serve", "--listen", tc.listen)
			code, err := srv.Wait(tctx(t, 15*time.Second))
			if err != nil {
				t.Fatalf("--listen %s: server still running (stdout %q): %v", tc.listen, srv.Stdout(), err)
			}
			if code == 0 {
				t.Errorf("--listen %s: exit code 0, want non-zero", tc.listen)
			}
			if !tc.check(srv.Stderr()) {
				t.Errorf("--listen %s: stderr %q, want %s", tc.listen, srv.Stderr(), tc.want)
			}
			if strings.Contains(srv.Stdout(), "ws://") {
				t.Errorf("--listen %s: printed a URL %q although it refused to start", tc.listen, srv.Stdout())
			}
		})
	}
}

// PROTOCOL.md §1 (ext): the token may come from RUNTIMED_AUTH_TOKEN.
func TestHTTPAuthTokenEnv(t *testing.T) {
	t.Parallel()
	const token = "e2e-env-token-9876543210"
	srv := wiretest.StartWSEnv(t, bin, []string{"RUNTIMED_AUTH_TOKEN=" + token})
	wantHandshakeStatus(t, "no Authorization header", srv.URL, nil, http.StatusUnauthorized)
	wantUsable(t, "right token", srv.URL, http.Header{"Authorization": {"Bearer " + token}})
}

// PROTOCOL.md §1: `serve` listens on loopback by default, and `stdio` (without //) is accepted.
func TestListenDefaultsAndStdioSpelling(t *testing.T) {
	t.Parallel()
	srv := wiretest.Start(t, bin, "serve")
	line, err := srv.FirstLine(tctx(t, wait))
	if err != nil {
		t.Fatalf("serve without --listen: %v\n%s", err, srv.Stderr())
	}
	if !strings.HasPrefix(line, "ws://127.0.0.1:") || strings.HasSuffix(line, ":0") {
		t.Errorf("serve without --listen printed %q, want ws://127.0.0.1:PORT", line)
	}
	wantUsable(t, "default listener", strings.TrimSpace(line), nil)

	c := wiretest.StartStdioArgs(t, bin, "serve", "--listen", "stdio")
	t.Cleanup(func() { checkNoGarbage(t, c) })
	ctx := tctx(t, wait)
	if _, err := c.Initialize(ctx); err != nil {
		t.Fatalf("--listen stdio: %v", err)
	}
	res, err := call(ctx, c, "environment/status", nil)
	wantStatusReady(t, "--listen stdio", res, err)
}
