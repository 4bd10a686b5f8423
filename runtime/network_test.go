package runtime

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runtimed/runtimed/actors"
	"github.com/runtimed/runtimed/actors/sandbox"
)

// loopbackPlacer confines nothing: it stands in for the sandbox's
// network namespace so that these tests prove the Go API's plumbing.
func loopbackPlacer(socks bool) (*actors.NetListeners, error) {
	h, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ls := &actors.NetListeners{HTTP: h, HTTPAddr: h.Addr().String()}
	if socks {
		s, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			h.Close()
			return nil, err
		}
		ls.SOCKS, ls.SOCKSAddr = s, s.Addr().String()
	}
	return ls, nil
}

type decisionLog struct {
	mu sync.Mutex
	ds []NetworkDecision
}

func (l *decisionLog) add(d NetworkDecision) { l.mu.Lock(); l.ds = append(l.ds, d); l.mu.Unlock() }
func (l *decisionLog) get() []NetworkDecision {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]NetworkDecision(nil), l.ds...)
}

func TestNetworkPolicyGoAPI(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed")
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hi") }))
	defer up.Close()
	port := up.URL[strings.LastIndexByte(up.URL, ':')+1:]
	cfg := Config{NetworkDeny: []string{"**.floor.test"}, netPlacer: loopbackPlacer}
	for _, bc := range backendsWith(cfg) {
		t.Run(bc.name, func(t *testing.T) {
			b := bc.make(t)
			ctx := ctxT(t)
			var log decisionLog
			var out strings.Builder
			cmd := CommandContext(ctx, b, "sh", "-c", `curl -s -m 10 http://127.0.0.1:`+port+`/; echo; curl -s -m 10 -o /dev/null -w '%{http_code}' http://x.floor.test/; echo; echo "$HTTPS_PROXY"`)
			cmd.Dir, cmd.Env, cmd.Stdout = t.TempDir(), map[string]string{"PATH": "/usr/bin:/bin"}, &out
			cmd.Network = &Network{Allow: []string{"127.0.0.1", "x.floor.test"}, OnDecision: log.add}
			if err := cmd.Run(); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if len(lines) != 3 || lines[0] != "hi" || lines[1] != "403" || !strings.HasPrefix(lines[2], "http://127.0.0.1:") {
				t.Fatalf("output %q", out.String())
			}
			// Local calls OnDecision before the exit is reported; a Client
			// from its own goroutine, possibly just after Wait returned.
			ds := log.get()
			for deadline := time.Now().Add(10 * time.Second); len(ds) < 2 && time.Now().Before(deadline); ds = log.get() {
				time.Sleep(5 * time.Millisecond)
			}
			if len(ds) != 2 || !ds[0].Allow || ds[0].Host != "127.0.0.1" || ds[0].Protocol != "http" || ds[0].Method != "GET" ||
				ds[1].Allow || ds[1].Host != "x.floor.test" || ds[1].Reason != "denied" || ds[0].ProcessID == "" || ds[0].Time.IsZero() {
				t.Fatalf("decisions %+v", ds)
			}
		})
	}
}

// With --sandbox-level landlock no network namespace confines the
// command to its proxies: no placer is set, so managed networks are
// refused (-32602 naming what is missing), on every transport.
func TestNetworkPolicyRefusedWithoutPlacer(t *testing.T) {
	cfg := Config{SandboxLevel: "landlock"}
	for _, bc := range backendsWith(cfg) {
		t.Run(bc.name, func(t *testing.T) {
			b := bc.make(t)
			spec := sh(t, "true")
			spec.Network = &Network{Allow: []string{"pypi.org"}}
			_, err := b.Start(ctxT(t), spec)
			var re *RPCError
			if err == nil || !errors.As(err, &re) || re.Code != -32602 || !strings.Contains(re.Message, "managed network") ||
				!strings.Contains(re.Message, "no network namespace") {
				t.Fatalf("Start with a managed network at the landlock level: %v", err)
			}
		})
	}
}

// namespacesEnforced skips unless this host enforces the namespaces level.
func namespacesEnforced(t *testing.T) {
	t.Helper()
	h, err := sandbox.Probe(os.TempDir())
	if err != nil || h.EnforcedLevel() != sandbox.LevelNamespaces {
		t.Skipf("the namespaces level is not enforced here: %v", err)
	}
}

// realPython is python3's real executable (a pyenv shim needs $HOME).
func realPython(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		t.Skip("python3 not installed")
	}
	return strings.TrimSpace(string(out))
}

// openSockets counts this process's sockets (the proxies' listeners and
// connections among them; other descriptors of a start, such as a cgroup
// directory released after the reap, come and go on their own).
func openSockets(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, _ := os.Readlink("/proc/self/fd/" + e.Name()); strings.HasPrefix(l, "socket:[") {
			n++
		}
	}
	return n
}

// The managed network enforced, with the real placer the host sets
// (actors.NamespacePlacer): a sandboxed command (file system read-only,
// network cut by its policy) in its empty network namespace reaches an
// allowed host only through the proxy (200), a denied one gets the
// reference's 403, and a direct TCP connection (itself, a grandchild,
// Python's sockets), UDP, a raw socket and joining the host's network
// namespace through pid 1 (the sandbox's init, which stays there) all
// fail; the decisions arrive;
// the proxies and the namespace are gone with the command (goleak in
// TestMain, descriptors counted).
func TestManagedNetworkEnforced(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed")
	}
	namespacesEnforced(t)
	py := realPython(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hi") }))
	defer up.Close()
	port := up.URL[strings.LastIndexByte(up.URL, ':')+1:]
	pyProbe := `import socket
def t(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return str(e.errno)
def tcp(): socket.create_connection(("127.0.0.1", ` + port + `), timeout=3)
def ext(): socket.create_connection(("10.255.255.1", 80), timeout=3)
def udp(): socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("8.8.8.8", 53))
def raw(): socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
print("tcp=" + t(tcp), "ext=" + t(ext), "udp=" + t(udp), "raw=" + t(raw))`
	script := `curl -s -m 10 http://127.0.0.1:` + port + `/; echo
for h in not.allowed.test x.denied.test; do curl -s -m 10 -D - -o /dev/null http://$h/ | tr -d '\r' | grep -i -e '^HTTP/' -e '^x-proxy-error' | tr 'A-Z\n' 'a-z '; echo; done
curl -s -m 5 --noproxy '*' -o /dev/null -w 'direct=%{http_code}' http://127.0.0.1:` + port + `/; echo
sh -c "sh -c 'curl -s -m 5 --noproxy \"*\" -o /dev/null -w grandchild=%{http_code} http://127.0.0.1:` + port + `/'"; echo
"$PY" -c "$PROBE"
nsenter --net=/proc/1/ns/net true 2>/dev/null && echo nsenter=joined || echo nsenter=refused
echo "$HTTP_PROXY"`
	for _, bc := range backendsWith(Config{}) {
		t.Run(bc.name, func(t *testing.T) {
			b := bc.make(t)
			ctx := ctxT(t)
			run := func() ([]string, []NetworkDecision) {
				var log decisionLog
				var out, errb strings.Builder
				cmd := CommandContext(ctx, b, "sh", "-c", script)
				cmd.Dir, cmd.Stdout, cmd.Stderr = t.TempDir(), &out, &errb
				cmd.Env = map[string]string{"PATH": "/usr/bin:/bin", "PY": py, "PROBE": pyProbe}
				cmd.Sandbox = &Sandbox{RestrictFS: true, FileSystem: []FSRule{{Special: FSRoot, Access: FSRead}}}
				cmd.Network = &Network{Allow: []string{"127.0.0.1"}, Deny: []string{"x.denied.test"}, OnDecision: log.add}
				if err := cmd.Run(); err != nil {
					t.Fatalf("%v (stderr %q)", err, errb.String())
				}
				ds := log.get()
				for deadline := time.Now().Add(10 * time.Second); len(ds) < 3 && time.Now().Before(deadline); ds = log.get() {
					time.Sleep(5 * time.Millisecond)
				}
				return strings.Split(strings.TrimSpace(out.String()), "\n"), ds
			}
			lines, ds := run()
			want := []string{"hi", "http/1.1 403 forbidden x-proxy-error: blocked-by-allowlist ", "http/1.1 403 forbidden x-proxy-error: blocked-by-denylist ",
				"direct=000", "grandchild=000", "tcp=111 ext=101 udp=101 raw=1", "nsenter=refused"}
			if len(lines) != 8 || !slices.Equal(lines[:7], want) || !strings.HasPrefix(lines[7], "http://127.0.0.1:") {
				t.Fatalf("inside the managed network:\n got %q\nwant %q + HTTP_PROXY", lines, want)
			}
			if len(ds) != 3 || !ds[0].Allow || ds[0].Host != "127.0.0.1" || ds[1].Allow || ds[1].Host != "not.allowed.test" ||
				ds[2].Allow || ds[2].Host != "x.denied.test" {
				t.Fatalf("decisions %+v", ds)
			}
			if bc.name != "local" {
				return
			}
			// Warmed up: a second run leaves no socket behind (the
			// listeners, the proxies' connections).
			before := openSockets(t)
			run()
			after := openSockets(t)
			for deadline := time.Now().Add(5 * time.Second); after > before && time.Now().Before(deadline); after = openSockets(t) {
				time.Sleep(10 * time.Millisecond)
			}
			if after > before {
				var links []string
				ents, _ := os.ReadDir("/proc/self/fd")
				for _, e := range ents {
					l, _ := os.Readlink("/proc/self/fd/" + e.Name())
					links = append(links, e.Name()+"="+l)
				}
				t.Fatalf("sockets: %d before a managed start, %d after it ended: %v", before, after, links)
			}
		})
	}
}
