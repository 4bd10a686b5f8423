package main_test

// Operating runtimed as docs/operations.md describes: TLS with a token,
// certificate rotation on SIGHUP, the refusals that protect a network
// listener, the metrics listener, and CLI messages that say what to do.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/runtimed/runtimed/wire/wiretest"
)

// writeTLSPair writes a self-signed certificate for 127.0.0.1 (serial
// given) and its key, each through a rename.
func writeTLSPair(t *testing.T, certFile, keyFile string, serial int64) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "runtimed e2e"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	for path, blk := range map[string]*pem.Block{keyFile: {Type: "EC PRIVATE KEY", Bytes: kder}, certFile: {Type: "CERTIFICATE", Bytes: der}} {
		if err := os.WriteFile(path+".tmp", pem.EncodeToMemory(blk), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
}

func serialAt(t *testing.T, addr string) int64 {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

// waitStderr waits (bounded) until the server's stderr matches re.
func waitStderr(t *testing.T, s *wiretest.Server, re *regexp.Regexp) string {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		if m := re.FindString(s.Stderr()); m != "" {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("stderr never matched %s:\n%s", re, s.Stderr())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestServeTLSWithToken: wss:// with a token serves exec, stdio and fs
// through --ca and --token-file; the CLI says what is missing without them;
// SIGHUP reloads a rotated pair.
func TestServeTLSWithToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cert, key, tok := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "token")
	writeTLSPair(t, cert, key, 1)
	if err := os.WriteFile(tok, []byte("tls-e2e-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := wiretest.Start(t, bin, "serve", "--listen", "wss://127.0.0.1:0", "--tls-cert", cert, "--tls-key", key, "--auth-token-file", tok)
	line, err := srv.FirstLine(tctx(t, wait))
	if err != nil {
		t.Fatalf("no URL: %v\n%s", err, srv.Stderr())
	}
	url := strings.TrimSpace(line)
	if !strings.HasPrefix(url, "wss://127.0.0.1:") {
		t.Fatalf("first line %q, want wss://127.0.0.1:PORT", url)
	}
	addr := strings.TrimPrefix(url, "wss://")

	out, errOut, code := runCLI(t, "", "exec", "--connect", url, "--ca", cert, "--token-file", tok, "--", "sh", "-c", "echo secure; exit 3")
	if out != "secure\n" || code != 3 {
		t.Fatalf("exec over TLS: %q %q %d", out, errOut, code)
	}
	out, _, code = runCLI(t, "round trip\n", "stdio", "--connect", url, "--ca", cert, "--token-file", tok, "--", "cat")
	if out != "round trip\n" || code != 0 {
		t.Fatalf("stdio over TLS: %q %d", out, code)
	}
	out, _, code = runCLI(t, "", "fs", "stat", "--connect", url, "--ca", cert, "--token-file", tok, "/")
	if code != 0 || !strings.Contains(out, "type: directory") {
		t.Fatalf("fs over TLS: %q %d", out, code)
	}

	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"no token", []string{"--ca", cert}, []string{"requires a token", "--token-file", "RUNTIMED_AUTH_TOKEN"}},
		{"no CA", []string{"--token-file", tok}, []string{"--ca FILE"}},
		{"plain ws to TLS", []string{"--token-file", tok}, []string{"wss://" + addr}},
	} {
		u := url
		if tc.name == "plain ws to TLS" {
			u = "ws://" + addr
		}
		_, errOut, code := runCLI(t, "", append(append([]string{"exec", "--connect", u}, tc.args...), "--", "true")...)
		for _, w := range tc.want {
			if code == 0 || !strings.Contains(errOut, w) {
				t.Errorf("%s: code %d, stderr %q lacks %q", tc.name, code, errOut, w)
			}
		}
	}

	// Rotation: new files, then SIGHUP. The log names the cause.
	if s := serialAt(t, addr); s != 1 {
		t.Fatalf("serial %d, want 1", s)
	}
	writeTLSPair(t, cert, key, 2)
	if err := srv.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitStderr(t, srv, regexp.MustCompile(`TLS certificate reloaded.*"cause": "signal"`))
	if s := serialAt(t, addr); s != 2 {
		t.Fatalf("serial %d after SIGHUP, want 2", s)
	}
	out, _, code = runCLI(t, "", "exec", "--connect", url, "--ca", cert, "--token-file", tok, "--", "echo", "rotated")
	if out != "rotated\n" || code != 0 {
		t.Fatalf("exec after rotation: %q %d", out, code)
	}
	if code := srv.Stop(); code != 0 {
		t.Fatalf("exit code %d after SIGTERM\n%s", code, srv.Stderr())
	}
}

// TestServeRefusesUnsafeListen: the start-up refusals name the flag to set.
func TestServeRefusesUnsafeListen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--listen", "ws://0.0.0.0:0", "--auth-token-file", tok}, []string{"without TLS", "--tls-cert", "--insecure-listen"}},
		{[]string{"--listen", "wss://0.0.0.0:0", "--auth-token-file", tok}, []string{"--tls-cert FILE and --tls-key FILE"}},
		{[]string{"--listen", "ws://127.0.0.1:0", "--tls-cert", tok}, []string{"need --listen wss://"}},
		{[]string{"--listen", "wss://127.0.0.1:0", "--tls-cert", tok, "--tls-key", tok}, []string{"--tls-cert/--tls-key", "failed to find"}},
		{[]string{"--pprof"}, []string{"--metrics-listen"}},
		{[]string{"--listen", "stdio://", "--metrics-listen", "127.0.0.1:0"}, []string{"not stdio"}},
		{[]string{"--metrics-listen", "localhost:9464"}, []string{"hostname"}},
	} {
		srv := wiretest.Start(t, bin, append([]string{"serve"}, tc.args...)...)
		code, err := srv.Wait(tctx(t, wait))
		if err != nil || code != 2 {
			t.Errorf("serve %v: code %d, %v", tc.args, code, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(srv.Stderr(), w) {
				t.Errorf("serve %v: stderr %q lacks %q", tc.args, srv.Stderr(), w)
			}
		}
		if strings.Contains(srv.Stdout(), "ws") {
			t.Errorf("serve %v printed a URL although it refused: %q", tc.args, srv.Stdout())
		}
	}
	// --insecure-listen allows it (a token is still required).
	srv := wiretest.Start(t, bin, "serve", "--listen", "ws://0.0.0.0:0", "--auth-token-file", tok, "--insecure-listen")
	if _, err := srv.FirstLine(tctx(t, wait)); err != nil {
		t.Fatalf("--insecure-listen did not start: %v\n%s", err, srv.Stderr())
	}
}

// TestServeMetricsListener: /metrics counts what ran through the server,
// /healthz and /readyz answer on both listeners, pprof only when asked.
func TestServeMetricsListener(t *testing.T) {
	t.Parallel()
	srv := wiretest.StartWS(t, bin, "--metrics-listen", "127.0.0.1:0", "--pprof")
	m := waitStderr(t, srv, regexp.MustCompile(`http://127\.0\.0\.1:\d+/metrics`))
	base := strings.TrimSuffix(m, "/metrics")
	get := func(url string, want int) string {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("GET %s: %d, want %d", url, resp.StatusCode, want)
		}
		return string(b)
	}
	if !strings.Contains(get(base+"/metrics", 200), "runtimed_processes_started_total 0") {
		t.Fatal("metrics before any process do not show 0 started")
	}
	for range 3 {
		if _, _, code := runCLI(t, "", "exec", "--connect", srv.URL, "--", "sh", "-c", "echo 12345"); code != 0 {
			t.Fatal("exec failed")
		}
	}
	body := get(base+"/metrics", 200)
	for _, want := range []string{
		"runtimed_processes_started_total 3",
		`runtimed_processes_ended_total{reason="exit"} 3`,
		`runtimed_output_bytes_total{stream="stdout"} 18`,
		`runtimed_connections_total{transport="websocket"} 3`,
		`runtimed_request_duration_seconds_count{method="process/start"} 3`,
		"runtimed_spawn_duration_seconds_count 3",
		"process_resident_memory_bytes",
		"process_open_fds",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	get(base+"/healthz", 200)
	get(base+"/readyz", 200)
	get(strings.Replace(srv.URL, "ws://", "http://", 1)+"/healthz", 200)
	get(base+"/debug/pprof/goroutine?debug=1", 200)
}

// TestCLIMessagesSayWhatToDo: a URL without scheme, a missing token, and
// the configured (not default) message limit.
func TestCLIMessagesSayWhatToDo(t *testing.T) {
	t.Parallel()
	_, errOut, code := runCLI(t, "", "exec", "--connect", "127.0.0.1:4500", "--", "true")
	if code == 0 || !strings.Contains(errOut, "did you mean ws://127.0.0.1:4500") {
		t.Errorf("no scheme: %d %q", code, errOut)
	}
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("right"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := wiretest.StartWS(t, bin, "--auth-token-file", tok, "--max-message-bytes", "1000")
	for _, args := range [][]string{{"exec", "--connect", srv.URL, "--", "true"}, {"ps", "--connect", srv.URL, "--session", "x"}, {"fs", "ls", "--connect", srv.URL, "/"}} {
		_, errOut, code := runCLI(t, "", args...)
		if code == 0 || !strings.Contains(errOut, "--token-file") || !strings.Contains(errOut, "RUNTIMED_AUTH_TOKEN") {
			t.Errorf("%v without token: %d %q", args[0], code, errOut)
		}
	}
	wrong := filepath.Join(t.TempDir(), "wrong")
	_ = os.WriteFile(wrong, []byte("wrong"), 0o600)
	if _, errOut, _ := runCLI(t, "", "exec", "--connect", srv.URL, "--token-file", wrong, "--", "true"); !strings.Contains(errOut, "refused the token") {
		t.Errorf("wrong token: %q", errOut)
	}
	// Over stdio the answer to an oversize line quotes the configured limit.
	stdio := exec.Command(bin, "serve", "--listen", "stdio://", "--max-message-bytes", "1000")
	stdio.Stdin = strings.NewReader(`{"id":1,"method":"initialize","params":{"clientName":"` + strings.Repeat("x", 2000) + `"}}` + "\n")
	var so bytes.Buffer
	stdio.Stdout = &so
	if err := stdio.Run(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(so.String(), "message exceeds the 1000-byte limit") {
		t.Errorf("oversize answer %q does not quote the configured 1000", so.String())
	}
}

// TestCLIHelp: every command's -h exits 0 and shows its synopsis and every
// flag it has; version prints build information.
func TestCLIHelp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cmd  []string
		want []string
	}{
		{[]string{"serve"}, []string{"usage: runtimed serve", "-listen", "-tls-cert", "-tls-key", "-insecure-listen", "-metrics-listen", "-pprof", "-auth-token-file", "-shutdown-grace", "docs/operations.md"}},
		{[]string{"exec"}, []string{"usage: runtimed exec", "-connect", "-token-file", "-ca", "-sandbox", "-t"}},
		{[]string{"stdio"}, []string{"usage: runtimed stdio", "-connect", "-token-file", "-ca"}},
		{[]string{"ps"}, []string{"usage: runtimed ps", "-session", "-token-file", "-ca"}},
		{[]string{"attach"}, []string{"usage: runtimed attach", "SESSION PROCESS", "-no-stdin", "-close-stdin", "-token-file", "-ca"}},
		{[]string{"fs"}, []string{"usage: runtimed fs", "cat PATH", "-token-file", "-ca"}},
		{[]string{"fs", "cat"}, []string{"usage: runtimed fs", "-token-file"}},
		{[]string{"bench"}, []string{"usage: runtimed bench", "-connect", "-token-file", "-ca", "-runs"}},
		{[]string{"version"}, []string{"usage: runtimed version"}},
	} {
		_, errOut, code := runCLI(t, "", append(tc.cmd, "-h")...)
		if code != 0 {
			t.Errorf("%v -h: exit %d", tc.cmd, code)
		}
		for _, w := range tc.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%v -h lacks %q:\n%s", tc.cmd, w, errOut)
			}
		}
	}
	out, _, code := runCLI(t, "", "help")
	if code != 0 || !strings.Contains(out, "runtimed version") || !strings.Contains(out, "wss://") {
		t.Errorf("help: %d %q", code, out)
	}
	out, _, code = runCLI(t, "", "version")
	if code != 0 || !regexp.MustCompile(`(?m)^runtimed \S+\ngo: go1\.\d+`).MatchString(out) || !strings.Contains(out, "dep: github.com/coder/websocket") {
		t.Errorf("version: %d %q", code, out)
	}
}

// TestBenchProgressOnTerminal: bench draws progress on a terminal's stderr
// and never into a pipe.
func TestBenchProgressOnTerminal(t *testing.T) {
	t.Parallel()
	srv := wiretest.StartWS(t, bin)
	args := []string{"bench", "--connect", srv.URL, "--only", "d", "--runs", "2", "--rpc-n", "20"}
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skip("no pty:", err)
	}
	defer ptmx.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, tty
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close()
	screen, _ := io.ReadAll(ptmx) // EIO once the child closed the terminal
	if err := cmd.Wait(); err != nil {
		t.Fatalf("bench: %v\n%s", err, screen)
	}
	for _, w := range []string{"running d small RPC, run 1/2", "running d small RPC, run 2/2", "\r\x1b[K"} {
		if !strings.Contains(string(screen), w) {
			t.Errorf("terminal output %q lacks %q", screen, w)
		}
	}
	if !strings.Contains(out.String(), "d small RPC p50") {
		t.Errorf("results %q", out.String())
	}
	_, errOut, code := runCLI(t, "", args...)
	if code != 0 || strings.Contains(errOut, "running d") {
		t.Errorf("progress written to a pipe: %d %q", code, errOut)
	}
}

// TestBenchSpawnSeries: figure a reports the bare fork/exec floor, the
// contained spawn and the sandboxed spawn from one run, with their ratios
// to the floor; a server that refuses the sandbox leaves that series out.
func TestBenchSpawnSeries(t *testing.T) {
	t.Parallel()
	srv := wiretest.StartWS(t, bin)
	out, errOut, code := runCLI(t, "", "bench", "--connect", srv.URL, "--only", "a", "--runs", "1", "--spawn-n", "3", "--json")
	if code != 0 {
		t.Fatalf("bench: %d %s", code, errOut)
	}
	var results []struct {
		Name   string  `json:"name"`
		Unit   string  `json:"unit"`
		Median float64 `json:"median"`
	}
	if err := json.Unmarshal([]byte(out), &results); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	got := map[string]float64{}
	for _, r := range results {
		got[r.Name] = r.Median
	}
	want := []string{"a bare fork/exec p50 (client)", "a spawn->closed p50", "a spawn->closed p50 / bare"}
	if strings.Contains(errOut, "refused a sandboxed start") {
		t.Logf("no sandbox on this host: %s", errOut)
	} else {
		want = append(want, "a spawn->closed p50, sandboxed workspace-write", "a spawn->closed p50, sandboxed workspace-write / bare")
	}
	for _, name := range want {
		if got[name] <= 0 {
			t.Errorf("%q: %v (results %s)", name, got[name], out)
		}
	}
}
