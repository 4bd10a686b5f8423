package actors

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/runtimed/runtimed/actors/netproxy"
	"github.com/runtimed/runtimed/actors/osproc"
	"github.com/runtimed/runtimed/actors/sandbox"
)

// A managed network (PROTOCOL.md section 7.5) is one command's HTTP and
// SOCKS5 proxies: started before the command (its environment names
// them), on listeners the sandbox places where only that command reaches
// them, and closed when the command has exited. Decisions are counted,
// logged with the process id and handed to ManagedNetwork.Notify through
// a bounded queue (netEventQueue; a full queue drops the notification,
// counts it and logs it: the decision itself was already counted and
// logged, and was enforced).

// NetListeners are one command's proxy listeners and the addresses the
// command dials them at.
type NetListeners struct {
	HTTP, SOCKS         net.Listener // SOCKS nil unless asked for
	HTTPAddr, SOCKSAddr string       // host:port as the command sees them
	// NS, if set, is the network namespace the listeners were opened in
	// and the command must run in (its only way out is then the proxies);
	// it is closed with the proxies.
	NS *sandbox.NetNS
}

// NamespacePlacer places a command's proxy listeners on 127.0.0.1 of a
// new, empty network namespace (sandbox.NewNetNS; NetListeners.NS). The
// sandbox's helper starts the command in that namespace (Plan.NetNS) and
// its seccomp filter refuses setns, so the listeners are the command's
// only way out; only the namespaces level does that, so a host sets
// Config.NetPlacer to this only where that level is enforced. (TCP on
// loopback, not an abstract socket: Landlock scopes abstract sockets to
// the sandbox's domain, so a proxy bound from outside could not be
// reached.)
func NamespacePlacer(socks bool) (*NetListeners, error) { return placeIn(sandbox.NewNetNS, socks) }

// HostPlacer is NamespacePlacer taking h's namespace made ahead when one
// is ready (Host.NetNS), which keeps the namespace's creation off the
// start's path.
func HostPlacer(h *sandbox.Host) NetPlacer {
	return func(socks bool) (*NetListeners, error) { return placeIn(h.NetNS, socks) }
}

func placeIn(newNS func() (*sandbox.NetNS, error), socks bool) (*NetListeners, error) {
	ns, err := newNS()
	if err != nil {
		return nil, err
	}
	ls := &NetListeners{NS: ns}
	err = ns.Do(func() error {
		var err error
		if ls.HTTP, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return err
		}
		if socks {
			if ls.SOCKS, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
				ls.HTTP.Close()
				return err
			}
		}
		return nil
	})
	if err != nil {
		ns.Close()
		return nil, err
	}
	ls.HTTPAddr = ls.HTTP.Addr().String()
	if ls.SOCKS != nil {
		ls.SOCKSAddr = ls.SOCKS.Addr().String()
	}
	return ls, nil
}

// NetPlacer opens one command's proxy listeners where that command, and
// no other way out, reaches them (its network namespace); socks asks for
// a SOCKS5 listener too. Nil in Config: managed networks are refused.
type NetPlacer func(socks bool) (*NetListeners, error)

// ManagedNetwork is a start's managed network (Spec.Network).
type ManagedNetwork struct {
	Spec      *NetworkSpec
	ProcessID string
	// Who started the process (the audit log's network.decision); nil: unknown.
	Who *Who
	// Notify receives each decision on the process's forwarder goroutine
	// (it may block; the queue before it is bounded).
	Notify func(netproxy.Event)
	// Ask, if set, is asked about hosts the policy does not cover.
	Ask netproxy.AskFunc
}

// netEventQueue bounds the decisions waiting for Notify per process.
const netEventQueue = 256

// netLogBurst and netLogEvery rate the info-level log of denials per
// process (see startProxies).
const (
	netLogBurst = 50
	netLogEvery = 1000
)

// netCloseTimeout bounds closing a command's proxies.
const netCloseTimeout = 5 * time.Second

// ErrNoManagedNetwork: a start asked for a managed network on a host
// whose sandbox cannot confine a command to its proxy.
var ErrNoManagedNetwork = errors.New("actors: managed network cannot be provided: no network namespace confines the command to the proxy on this host")

// NetworkProxyError: the proxies of a start could not be started (the
// start fails; never an open network).
type NetworkProxyError struct{ Err error }

func (e *NetworkProxyError) Error() string {
	return "network proxy could not be started: " + e.Err.Error()
}
func (e *NetworkProxyError) Unwrap() error { return e.Err }

// goTracked runs f on a goroutine the supervisor waits for; false (f not
// run) once it has stopped.
func (s *Supervisor) goTracked(f func()) bool {
	s.startMu.Lock()
	defer s.startMu.Unlock()
	if s.stopped() {
		return false
	}
	s.wg.Go(f)
	return true
}

// startNetworked starts spec's child, with its managed network first when
// it has one.
func (s *Supervisor) startNetworked(spec Spec, mn *ManagedNetwork) (osproc.Session, error) {
	if mn == nil {
		return s.startOS(spec)
	}
	if s.cfg.NetPlacer == nil {
		return nil, ErrNoManagedNetwork
	}
	ls, err := s.cfg.NetPlacer(mn.Spec.SOCKS5)
	if err != nil {
		return nil, &NetworkProxyError{err}
	}
	n, err := s.startProxies(mn, ls)
	if err != nil {
		return nil, &NetworkProxyError{err}
	}
	spec.Env = netproxy.MergeEnv(spec.Env, netproxy.Env(ls.HTTPAddr, ls.SOCKSAddr, mn.Spec.AllowLocalBinds))
	if ls.NS != nil {
		// The namespace is the boundary: inside it the command may open
		// inet sockets (its only peers are the proxies on loopback), so
		// the policy's own network cut is lifted for this start only. No
		// policy (an unsandboxed start): the namespaces level with the
		// file system unrestricted, so that the command still cannot
		// leave the namespace.
		p := sandbox.Policy{}
		if spec.Sandbox != nil {
			p = *spec.Sandbox
		}
		p.Network = true
		spec.Sandbox, spec.NetNS = &p, ls.NS
	}
	sess, err := s.startOS(spec)
	if err != nil {
		n.close()
		return nil, err
	}
	return &netSession{Session: sess, n: n}, nil
}

// netRun is one command's running proxies.
type netRun struct {
	p       *netproxy.Proxy
	ns      *sandbox.NetNS // nil unless the placer made one
	serving sync.WaitGroup // the Serve goroutines
	done    chan struct{}  // closed by close: the forwarder drains and ends
	fwdDone chan struct{}  // closed by the forwarder as it ends
	once    sync.Once
}

func (n *netRun) close() {
	n.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), netCloseTimeout)
		_ = n.p.Close(ctx)
		cancel()
		n.serving.Wait()
		if n.ns != nil {
			_ = n.ns.Close()
		}
		close(n.done)
		// Every decision reaches Notify before the exit is reported (a
		// client sees the last network/policyDecision before
		// process/exited), unless Notify is stuck that long.
		t := time.NewTimer(netCloseTimeout)
		select {
		case <-n.fwdDone:
		case <-t.C:
		}
		t.Stop()
	})
}

func (s *Supervisor) startProxies(mn *ManagedNetwork, ls *NetListeners) (*netRun, error) {
	closeLs := func() {
		_ = ls.HTTP.Close()
		if ls.SOCKS != nil {
			_ = ls.SOCKS.Close()
		}
		if ls.NS != nil {
			_ = ls.NS.Close()
		}
	}
	events := make(chan netproxy.Event, netEventQueue)
	var dropped atomic.Int64
	ask := mn.Ask
	if !mn.Spec.Enabled {
		ask = nil
	}
	p, err := netproxy.New(netproxy.Config{
		Policy:   mn.Spec.Policy,
		Resolver: s.cfg.netResolver,
		OnDecision: func(e netproxy.Event) {
			select {
			case events <- e:
			default:
				dropped.Add(1)
			}
		},
		Ask:             ask,
		AskTimeout:      mn.Spec.AskTimeout,
		EnableSOCKS5UDP: mn.Spec.SOCKS5UDP,
	})
	if err != nil {
		closeLs()
		return nil, err
	}
	n := &netRun{p: p, ns: ls.NS, done: make(chan struct{}), fwdDone: make(chan struct{})}
	log := s.log.Named("net").With(zap.String("process_id", mn.ProcessID))
	n.serving.Add(1)
	if !s.goTracked(func() { defer n.serving.Done(); _ = p.ServeHTTP(ls.HTTP) }) {
		n.serving.Done()
		closeLs()
		return nil, ErrStopped
	}
	if ls.SOCKS != nil {
		n.serving.Add(1)
		if !s.goTracked(func() { defer n.serving.Done(); _ = p.ServeSOCKS5(ls.SOCKS) }) {
			n.serving.Done()
			_ = ls.SOCKS.Close()
			close(n.fwdDone)
			n.close()
			return nil, ErrStopped
		}
	}
	denials := 0 // owned by the forwarder goroutine
	forward := func(e netproxy.Event) {
		decision := "deny"
		if e.Allow {
			decision = "allow"
		}
		s.metrics.NetworkDecision(decision, e.Source)
		s.auditNetwork(mn, e, decision)
		// Denials at info, allows at debug; a command that is refused in a
		// loop cannot flood the log: after netLogBurst denials only every
		// netLogEvery-th is logged at info (with the count), the rest at debug.
		lvl := zap.DebugLevel
		if !e.Allow {
			denials++
			if denials <= netLogBurst || denials%netLogEvery == 0 {
				lvl = zap.InfoLevel
			}
		}
		if ce := log.Check(lvl, "network decision"); ce != nil {
			ce.Write(zap.String("decision", decision), zap.String("source", e.Source), zap.String("reason", e.Reason),
				zap.String("protocol", string(e.Protocol)), zap.String("host", e.Host), zap.Int("port", e.Port),
				zap.String("method", e.Method), zap.Bool("override", e.Override), zap.Bool("floor", e.Floor), zap.Int("denials", denials))
		}
		if d := dropped.Swap(0); d > 0 {
			s.metrics.NetworkEventsDropped(int(d))
			log.Warn("network/policyDecision notifications dropped: the queue was full", zap.Int64("dropped", d))
		}
		if mn.Notify != nil {
			mn.Notify(e)
		}
	}
	if !s.goTracked(func() {
		defer close(n.fwdDone)
		for {
			select {
			case e := <-events:
				forward(e)
			case <-n.done:
				for {
					select {
					case e := <-events:
						forward(e)
					default:
						if d := dropped.Swap(0); d > 0 {
							s.metrics.NetworkEventsDropped(int(d))
						}
						return
					}
				}
			}
		}
	}) {
		close(n.fwdDone)
		n.close()
		return nil, ErrStopped
	}
	log.Debug("network proxies started", zap.String("http", ls.HTTPAddr), zap.String("socks", ls.SOCKSAddr),
		zap.String("mode", mn.Spec.Policy.Mode().String()))
	return n, nil
}

// netSession closes the command's proxies once the child has exited.
type netSession struct {
	osproc.Session
	n *netRun
}

func (s *netSession) Wait() int {
	code := s.Session.Wait()
	s.n.close()
	return code
}
