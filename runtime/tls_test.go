package runtime

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

// writePair writes a self-signed certificate for 127.0.0.1 with the given
// serial, and its key, atomically (temporary file, then rename), as a
// certificate manager would.
func writePair(t *testing.T, certFile, keyFile string, serial int64) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial),
		Subject:               pkix.Name{CommonName: "runtimed test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	put := func(path, typ string, b []byte) {
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	put(keyFile, "EC PRIVATE KEY", kder)
	put(certFile, "CERTIFICATE", der)
}

// servedSerial dials addr with TLS (no verification) and returns the
// serial of the certificate the server presents.
func servedSerial(t *testing.T, addr string) int64 {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

type tlsServer struct {
	srv      *Server
	addr     string
	reloader *CertReloader
	certFile string
	keyFile  string
}

func startTLSServer(t *testing.T, cfg Config) *tlsServer {
	t.Helper()
	dir := t.TempDir()
	ts := &tlsServer{certFile: filepath.Join(dir, "tls.crt"), keyFile: filepath.Join(dir, "tls.key")}
	writePair(t, ts.certFile, ts.keyFile, 1)
	cfg.Logger = zaptest.NewLogger(t)
	var err error
	ts.reloader, err = NewCertReloader(ts.certFile, ts.keyFile, cfg.Logger)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { _ = ts.reloader.Run(ctx); close(ran) }()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts.addr = l.Addr().String()
	ts.srv = NewServer(cfg)
	served := make(chan struct{})
	go func() { _ = ts.srv.Serve(tls.NewListener(l, ts.reloader.TLSConfig())); close(served) }()
	t.Cleanup(func() {
		_ = ts.srv.Close()
		<-served
		cancel()
		<-ran
	})
	return ts
}

// TestTLSServeAndReload: a wss:// server with a token serves a client that
// trusts its certificate (and nobody else); replacing the files is picked
// up without a restart, a broken pair is refused by Reload and the old one
// stays, and Reload loads a good one at once.
func TestTLSServeAndReload(t *testing.T) {
	ts := startTLSServer(t, Config{AuthToken: "t0ken"})
	ctx := ctxT(t)
	url := "wss://" + ts.addr

	ca1, err := LoadCA(ts.certFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Dial(ctx, url, &ClientOptions{TLSConfig: ca1, Token: "t0ken"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Start(ctx, sh(t, "echo over tls"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(mustPipe(t, ctx, p))
	if err != nil || string(out) != "over tls\n" {
		t.Fatalf("output %q, %v", out, err)
	}
	_ = c.Close()

	// The system roots do not know a self-signed certificate.
	if _, err := Dial(ctx, url, &ClientOptions{Token: "t0ken"}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("dial without the CA: %v", err)
	}
	// The token is still required over TLS.
	if _, err := Dial(ctx, url, &ClientOptions{TLSConfig: ca1}); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("dial without the token: %v", err)
	}
	// Plain websocket to the TLS port fails.
	if _, err := Dial(ctx, "ws://"+ts.addr, &ClientOptions{Token: "t0ken", ConnectTimeout: 2 * time.Second}); err == nil {
		t.Fatal("ws:// to a TLS listener succeeded")
	}

	// Rotation by file change: the watcher reloads without being asked.
	if s := servedSerial(t, ts.addr); s != 1 {
		t.Fatalf("serial %d, want 1", s)
	}
	writePair(t, ts.certFile, ts.keyFile, 2)
	deadline := time.Now().Add(10 * time.Second)
	for servedSerial(t, ts.addr) != 2 {
		if time.Now().After(deadline) {
			t.Fatal("the new pair was not picked up")
		}
		time.Sleep(20 * time.Millisecond)
	}
	ca2, err := LoadCA(ts.certFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Dial(ctx, url, &ClientOptions{TLSConfig: ca1, Token: "t0ken"}); err == nil {
		t.Fatal("the old CA still verifies the rotated server")
	}
	c2, err := Dial(ctx, url, &ClientOptions{TLSConfig: ca2, Token: "t0ken"})
	if err != nil {
		t.Fatal(err)
	}
	_ = c2.Close()

	// A broken key: Reload reports it and the previous pair stays.
	if err := os.WriteFile(ts.keyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ts.reloader.Reload(ctx); err == nil {
		t.Fatal("Reload of a broken pair succeeded")
	}
	if s := servedSerial(t, ts.addr); s != 2 {
		t.Fatalf("serial %d after a failed reload, want 2", s)
	}
	// Reload (SIGHUP) loads a good pair before it returns.
	writePair(t, ts.certFile, ts.keyFile, 3)
	if err := ts.reloader.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if s := servedSerial(t, ts.addr); s != 3 {
		t.Fatalf("serial %d right after Reload, want 3", s)
	}
	if n := ts.reloader.Loads(); n < 3 {
		t.Fatalf("loads = %d, want at least 3", n)
	}
}

func mustPipe(t *testing.T, ctx context.Context, p Process) io.Reader {
	t.Helper()
	pr, err := Pipe(ctx, p, PipeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pr
}

// TestDialURLErrors: URLs that are not ws:// or wss:// are refused before
// any network use, with a suggestion.
func TestDialURLErrors(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"127.0.0.1:4500", "did you mean ws://127.0.0.1:4500"},
		{"localhost:4500", "did you mean ws://localhost:4500"},
		{"http://127.0.0.1:4500", "use ws://127.0.0.1:4500"},
		{"https://runtimed.example:443", "use wss://runtimed.example:443"},
		{"ftp://x", "expected ws://HOST:PORT"},
	} {
		_, err := Dial(context.Background(), tc.url, nil)
		if !errors.Is(err, ErrBadURL) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Dial(%q) = %v, want ErrBadURL with %q", tc.url, err, tc.want)
		}
	}
}

// TestNewCertReloaderErrors: a missing or mismatched pair is refused at
// construction.
func TestNewCertReloaderErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := NewCertReloader(filepath.Join(dir, "no.crt"), filepath.Join(dir, "no.key"), nil); err == nil {
		t.Fatal("missing files accepted")
	}
	a, b := filepath.Join(dir, "a.crt"), filepath.Join(dir, "a.key")
	c, d := filepath.Join(dir, "b.crt"), filepath.Join(dir, "b.key")
	writePair(t, a, b, 1)
	writePair(t, c, d, 2)
	if _, err := NewCertReloader(a, d, nil); err == nil || !strings.Contains(err.Error(), "private key does not match") {
		t.Fatalf("mismatched pair: %v", err)
	}
}
