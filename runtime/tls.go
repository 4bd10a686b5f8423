package runtime

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"

	"github.com/runtimed/runtimed/wire"
)

// ErrBadURL is wrapped by Dial's error for a URL that is not ws:// or wss://.
var ErrBadURL = errors.New("runtime: not a ws:// or wss:// URL")

// ErrUnauthorized is wrapped by Dial's error when the server answered the
// upgrade with 401: a token is required and was missing or wrong.
var ErrUnauthorized = errors.New("runtime: the server requires a valid bearer token")

func checkDialURL(url string) error {
	u, err := neturl.Parse(url)
	switch {
	case err == nil && (u.Scheme == "ws" || u.Scheme == "wss") && u.Host != "":
		return nil
	case err == nil && u.Scheme == "http" && u.Host != "":
		return fmt.Errorf("%w: %q; runtimed speaks websocket: use ws://%s", ErrBadURL, url, u.Host)
	case err == nil && u.Scheme == "https" && u.Host != "":
		return fmt.Errorf("%w: %q; runtimed speaks websocket: use wss://%s", ErrBadURL, url, u.Host)
	case !strings.Contains(url, "://"):
		return fmt.Errorf("%w: %q has no scheme; did you mean ws://%s (or wss://%s for TLS)?", ErrBadURL, url, url, url)
	}
	return fmt.Errorf("%w: %q (expected ws://HOST:PORT or wss://HOST:PORT)", ErrBadURL, url)
}

func dialWebsocket(ctx context.Context, url string, header http.Header, tlsConfig *tls.Config, maxMessage int) (wire.Transport, error) {
	t, err := wire.DialWebsocketTLS(ctx, url, header, tlsConfig, maxMessage)
	var de *wire.DialError
	if errors.As(err, &de) && de.Status == http.StatusUnauthorized {
		return nil, fmt.Errorf("%w: %w", ErrUnauthorized, err)
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

// LoadCA returns a client TLS configuration that trusts only the
// certificates of the PEM file (a private certificate authority, or a
// server's self-signed certificate).
func LoadCA(file string) (*tls.Config, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// CertReloader serves a certificate and key read from PEM files and reads
// them again when asked (Reload, e.g. on SIGHUP) or when either file
// changes (Run watches their directories, so an atomic rename or a
// Kubernetes secret update is seen). A pair that fails to load is logged and
// the previous one stays in use.
//
// One goroutine, Run's, owns reloading; GetCertificate reads the current
// pair through an atomic pointer and may be called from any goroutine.
type CertReloader struct {
	certFile, keyFile string
	log               *zap.Logger
	cur               atomic.Pointer[tls.Certificate]
	loads             atomic.Uint64   // successful loads, the first included
	reload            chan chan error // requests to Run; capacity 1
}

// NewCertReloader loads the pair once; an error means it could not.
func NewCertReloader(certFile, keyFile string, log *zap.Logger) (*CertReloader, error) {
	if log == nil {
		log = zap.NewNop()
	}
	r := &CertReloader{certFile: certFile, keyFile: keyFile, log: log, reload: make(chan chan error, 1)}
	if err := r.load(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *CertReloader) load() error {
	c, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("TLS pair %s, %s: %w", r.certFile, r.keyFile, err)
	}
	r.cur.Store(&c)
	r.loads.Add(1)
	return nil
}

// Loads returns how many times the pair was loaded successfully.
func (r *CertReloader) Loads() uint64 { return r.loads.Load() }

// GetCertificate is tls.Config.GetCertificate: the current pair.
func (r *CertReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.cur.Load(), nil
}

// TLSConfig returns a server configuration (TLS 1.2 or newer, HTTP/1.1
// for the websocket upgrade) that serves the current pair.
func (r *CertReloader) TLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.GetCertificate, NextProtos: []string{"http/1.1"}}
}

// Reload asks Run to read the pair again and returns the result. It waits
// for Run, bounded by ctx.
func (r *CertReloader) Reload(ctx context.Context) error {
	reply := make(chan error, 1)
	select {
	case r.reload <- reply:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// reloadDebounce lets a writer finish both files before they are read.
const reloadDebounce = 100 * time.Millisecond

// Run reloads on request and on file changes until ctx ends. Without a
// working file watcher (no inotify) it serves Reload requests only.
func (r *CertReloader) Run(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	var events <-chan fsnotify.Event
	var errs <-chan error
	if err != nil {
		r.log.Warn("cannot watch the TLS files; reload with SIGHUP", zap.Error(err))
	} else {
		defer w.Close()
		dirs := map[string]bool{filepath.Dir(r.certFile): true, filepath.Dir(r.keyFile): true}
		for d := range dirs {
			if err := w.Add(d); err != nil {
				r.log.Warn("cannot watch a TLS directory; reload with SIGHUP", zap.String("dir", d), zap.Error(err))
			}
		}
		events, errs = w.Events, w.Errors
	}
	watched := map[string]bool{filepath.Base(r.certFile): true, filepath.Base(r.keyFile): true, "..data": true}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case reply := <-r.reload:
			err := r.load()
			r.logReload("signal", err)
			reply <- err
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if watched[filepath.Base(ev.Name)] {
				timer.Reset(reloadDebounce)
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			r.log.Warn("TLS file watcher", zap.Error(err))
		case <-timer.C:
			r.logReload("file change", r.load())
		}
	}
}

func (r *CertReloader) logReload(cause string, err error) {
	if err != nil {
		r.log.Error("TLS reload failed; the previous certificate stays in use", zap.String("cause", cause), zap.Error(err))
		return
	}
	leaf := r.cur.Load().Leaf
	fields := []zap.Field{zap.String("cause", cause)}
	if leaf != nil {
		fields = append(fields, zap.String("subject", leaf.Subject.String()), zap.Time("not_after", leaf.NotAfter))
	}
	r.log.Info("TLS certificate reloaded", fields...)
}
