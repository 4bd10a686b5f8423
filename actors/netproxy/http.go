package netproxy

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"time"
)

// The refusal header's values, by reason (as the reference spells them).
func blockedHeader(reason string) string {
	switch reason {
	case ReasonNotAllowed, ReasonNotAllowedLocal:
		return "blocked-by-allowlist"
	case ReasonDenied:
		return "blocked-by-denylist"
	case ReasonMethod, ReasonMITMRequired:
		return "blocked-by-method-policy"
	}
	return "blocked-by-policy"
}

func blockedMessage(reason string) string {
	switch reason {
	case ReasonNotAllowed:
		return "runtimed blocked this request: the host is not in the allowlist"
	case ReasonNotAllowedLocal:
		return "runtimed blocked this request: local and private addresses are not allowed"
	case ReasonDenied:
		return "runtimed blocked this request: the host is denied by policy"
	case ReasonMethod:
		return "runtimed blocked this request: only GET, HEAD and OPTIONS are allowed in limited mode"
	case ReasonMITMRequired:
		return "runtimed blocked this request: limited mode cannot check the methods inside a CONNECT tunnel"
	}
	return "runtimed blocked this request by network policy"
}

// targetKey carries the checked addresses of a forwarded request to the
// transport's dial: the transport dials nothing else.
type targetKey struct{}

type target struct {
	addrs []netip.Addr
	port  int
}

var refusal503 = []byte("HTTP/1.1 503 Service Unavailable\r\nx-proxy-error: too-many-connections\r\n" +
	"Content-Type: text/plain\r\nContent-Length: 23\r\nConnection: close\r\n\r\ntoo many connections\r\n\r\n")

func (p *Proxy) initHTTP() {
	p.tr = &http.Transport{
		Proxy: nil, // never an upstream proxy from the daemon's environment
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			t, ok := ctx.Value(targetKey{}).(target)
			if !ok {
				return nil, errors.New("netproxy: dial without a checked target")
			}
			return p.dial(ctx, network, t.addrs, t.port)
		},
		MaxIdleConns:           16,
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        90 * time.Second,
		ResponseHeaderTimeout:  p.lim.IdleTimeout,
		MaxResponseHeaderBytes: 1 << 20,
		DisableCompression:     true,
		ForceAttemptHTTP2:      false,
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// The absolute URI names the destination; a Host header that
			// says otherwise is not believed.
			pr.Out.Host = pr.In.URL.Host
		},
		Transport: p.tr,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			w.Header().Set("x-proxy-error", "upstream-error")
			http.Error(w, "runtimed proxy: upstream: "+err.Error(), http.StatusBadGateway)
		},
	}
	p.srv = &http.Server{
		Handler:           p.handler(rp),
		ReadHeaderTimeout: p.lim.HeaderTimeout,
		IdleTimeout:       p.lim.IdleTimeout,
		MaxHeaderBytes:    p.lim.MaxHeaderBytes,
		ErrorLog:          nil,
		ConnState: func(c net.Conn, s http.ConnState) {
			switch s {
			case http.StateNew:
				if p.grp.enter() {
					p.serverConns.Store(c, struct{}{})
				} else {
					_ = c.Close()
				}
			case http.StateHijacked, http.StateClosed:
				if _, ok := p.serverConns.LoadAndDelete(c); ok {
					p.grp.leave()
				}
			}
		},
	}
	p.srv.SetKeepAlivesEnabled(true)
}

// ServeHTTP serves the HTTP proxy on l until Close. It takes ownership of l.
func (p *Proxy) ServeHTTP(l net.Listener) error {
	if !p.grp.enter() {
		_ = l.Close()
		return ErrClosed
	}
	defer p.grp.leave()
	if !p.grp.add(l) {
		_ = l.Close()
		return ErrClosed
	}
	err := p.srv.Serve(&limitListener{Listener: l, p: p, refusal: refusal503})
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, ErrClosed) || errors.Is(err, net.ErrClosed) {
		return ErrClosed
	}
	return err
}

func (p *Proxy) handler(rp *httputil.ReverseProxy) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !p.grp.enter() {
			http.Error(w, "proxy closing", http.StatusServiceUnavailable)
			return
		}
		defer p.grp.leave()
		if r.Method == http.MethodConnect {
			p.connect(w, r)
			return
		}
		if !r.URL.IsAbs() || r.URL.Scheme != "http" || r.URL.Host == "" {
			w.Header().Set("x-proxy-error", "bad-request")
			http.Error(w, "runtimed proxy: an absolute http:// URI (or CONNECT for https) is required", http.StatusBadRequest)
			return
		}
		host, port, ok := splitHostPort(r.URL.Host, 80)
		if !ok {
			w.Header().Set("x-proxy-error", "bad-request")
			http.Error(w, "runtimed proxy: bad host in the request URI", http.StatusBadRequest)
			return
		}
		addrs, v, err := p.authorize(r.Context(), HTTP, host, port, r.Method, r.RemoteAddr)
		if err != nil {
			w.Header().Set("x-proxy-error", "dns-error")
			http.Error(w, "runtimed proxy: "+err.Error(), http.StatusBadGateway)
			return
		}
		if !v.Allow {
			p.blocked(w, v, HTTP, host, port)
			return
		}
		ctx := context.WithValue(r.Context(), targetKey{}, target{addrs: addrs, port: port})
		rp.ServeHTTP(w, r.WithContext(ctx))
	})
}

// blocked answers a refusal: 403, x-proxy-error, and a JSON body of the
// reference's shape.
func (p *Proxy) blocked(w http.ResponseWriter, v Verdict, proto Protocol, host string, port int) {
	w.Header().Set("x-proxy-error", blockedHeader(v.Reason))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusForbidden)
	_ = json.NewEncoder(w).Encode(blockedBody{Status: "blocked", Host: host, Reason: v.Reason, Decision: "deny",
		Source: v.Source, Protocol: string(proto), Port: port, Message: blockedMessage(v.Reason)})
}

type blockedBody struct {
	Status   string `json:"status"`
	Host     string `json:"host"`
	Reason   string `json:"reason"`
	Decision string `json:"decision"`
	Source   string `json:"source"`
	Protocol string `json:"protocol"`
	Port     int    `json:"port"`
	Message  string `json:"message"`
}

func (p *Proxy) connect(w http.ResponseWriter, r *http.Request) {
	host, port, ok := splitHostPort(r.Host, 0)
	if !ok {
		w.Header().Set("x-proxy-error", "bad-request")
		http.Error(w, "runtimed proxy: CONNECT needs host:port", http.StatusBadRequest)
		return
	}
	addrs, v, err := p.authorize(r.Context(), HTTPSConnect, host, port, http.MethodConnect, r.RemoteAddr)
	if err != nil {
		w.Header().Set("x-proxy-error", "dns-error")
		http.Error(w, "runtimed proxy: "+err.Error(), http.StatusBadGateway)
		return
	}
	if !v.Allow {
		p.blocked(w, v, HTTPSConnect, host, port)
		return
	}
	up, err := p.dial(r.Context(), "tcp", addrs, port)
	if err != nil {
		w.Header().Set("x-proxy-error", "upstream-error")
		http.Error(w, "runtimed proxy: connect: "+err.Error(), http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		_ = up.Close()
		http.Error(w, "runtimed proxy: cannot tunnel", http.StatusInternalServerError)
		return
	}
	c, brw, err := hj.Hijack()
	if err != nil {
		_ = up.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	_ = c.SetWriteDeadline(time.Now().Add(p.lim.StallTimeout))
	if _, err := c.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		_ = c.Close()
		_ = up.Close()
		return
	}
	// Bytes the client sent after its CONNECT (a TLS hello) are in brw.
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		_ = up.SetWriteDeadline(time.Now().Add(p.lim.StallTimeout))
		if _, err := up.Write(b); err != nil {
			_ = c.Close()
			_ = up.Close()
			return
		}
	}
	p.pipe(c, up)
}
