package netproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"
)

const benchDownload = 100 << 20

// benchUpstream serves benchDownload bytes over HTTPS.
func benchUpstream(b *testing.B) *httptest.Server {
	chunk := make([]byte, 256<<10)
	s := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(benchDownload))
		for n := 0; n < benchDownload; n += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	b.Cleanup(s.Close)
	return s
}

func benchProxy(b *testing.B, upstream string) string {
	p, err := New(Config{
		Policy:   mustCompile(b, Policy{Allow: []string{"**.bench.test"}}),
		Resolver: fakeResolver{},
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, upstream)
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = p.ServeHTTP(l) }()
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Close(ctx)
		<-done
	})
	return l.Addr().String()
}

func download(b *testing.B, c *http.Client, u string) {
	resp, err := c.Get(u)
	if err != nil {
		b.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || n != benchDownload {
		b.Fatalf("downloaded %d: %v", n, err)
	}
}

// BenchmarkDownload100MB: a 100 MB HTTPS download on loopback, direct and
// through the proxy's CONNECT tunnel (compare MB/s).
func BenchmarkDownload100MB(b *testing.B) {
	up := benchUpstream(b)
	for _, via := range []string{"direct", "proxy"} {
		b.Run(via, func(b *testing.B) {
			tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}
			u := up.URL + "/blob"
			if via == "proxy" {
				pu, _ := url.Parse("http://" + benchProxy(b, hostOf(up)))
				tr.Proxy = http.ProxyURL(pu)
				u = "https://dl.bench.test/blob"
			}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr}
			b.SetBytes(benchDownload)
			cpu0 := cpuTime()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				download(b, c, u)
			}
			b.StopTimer()
			// CPU of the whole test process (server, proxy, client) per
			// download: what the proxy costs, whatever the machine's load.
			b.ReportMetric(float64((cpuTime()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
		})
	}
}

// BenchmarkNewConnection: the time to a usable TCP stream to the
// upstream, direct (connect) and through the proxy (connect + CONNECT +
// policy + dial + 200); reports p50 and p99 per op.
func BenchmarkNewConnection(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	for _, via := range []string{"direct", "proxy"} {
		b.Run(via, func(b *testing.B) {
			proxy := ""
			if via == "proxy" {
				proxy = benchProxy(b, ln.Addr().String())
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				var c net.Conn
				if proxy == "" {
					c, err = net.Dial("tcp", ln.Addr().String())
					if err != nil {
						b.Fatal(err)
					}
				} else {
					c, err = net.Dial("tcp", proxy)
					if err != nil {
						b.Fatal(err)
					}
					fmt.Fprintf(c, "CONNECT x.bench.test:443 HTTP/1.1\r\nHost: x.bench.test:443\r\n\r\n")
					resp, err := http.ReadResponse(bufio.NewReader(c), nil)
					if err != nil || resp.StatusCode != 200 {
						b.Fatalf("CONNECT: %v %v", resp, err)
					}
				}
				lat = append(lat, time.Since(t0))
				c.Close()
			}
			b.StopTimer()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
