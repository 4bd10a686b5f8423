package runtime

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runtimed/runtimed/actors"
	"github.com/runtimed/runtimed/actors/fsops"
	"github.com/runtimed/runtimed/actors/osproc"
	"github.com/runtimed/runtimed/wire"
)

// Local is the embedded backend: process actors in this process, no JSON
// on the path. It applies the same rules and returns the same errors
// (*RPCError with the protocol's codes and messages) as a server would.
type Local struct {
	*fsImpl // the FileSystem methods, on this machine (Config.FsRoots applies)

	sup    *actors.Supervisor
	iso    *isolation
	nextID atomic.Uint64

	mu    sync.Mutex // guards procs, open, spawning and starts only; never held while calling an actor
	procs map[string]*actors.ProcessRef
	// open holds the processes not yet seen closed (activeLocked prunes
	// it) and spawning counts the Starts under way, so that counting the
	// active processes costs the active ones, not every retained one.
	open     map[*actors.ProcessRef]struct{}
	spawning int
	starts   int
	maxProcs int   // Config.MaxProcesses: a Local is one session
	cfgErr   error // Config.Validate's error: every Start returns it

	codexSystemDir string // Config.CodexSystemDir (immutable)
}

// NewLocal starts an embedded runtime. cfg's zero value means the defaults;
// AuthToken, AllowedOrigins and MaxMessageBytes do not apply. A cfg that
// fails Config.Validate makes every Start return that error (as a Server's
// Serve does).
func NewLocal(cfg Config) *Local {
	cfgErr := cfg.Validate()
	cfg = cfg.withDefaults()
	roots, err := fsops.NewRoots(cfg.FsRoots)
	if err != nil {
		roots, _ = fsops.NewRoots([]string{os.TempDir()}) // see Config.Validate
	}
	iso := newIsolation(cfg)
	scfg := supervisorConfig(cfg, iso)
	scfg.Budgets = cfg.budgets(ProbeMachine())
	scfg.FsRoots = roots // process cwds too
	return &Local{fsImpl: newLocalFS(roots), sup: actors.NewSupervisor(scfg), iso: iso, procs: make(map[string]*actors.ProcessRef), open: make(map[*actors.ProcessRef]struct{}), maxProcs: cfg.MaxProcesses, cfgErr: cfgErr, codexSystemDir: cfg.CodexSystemDir}
}

func supervisorConfig(cfg Config, iso *isolation) actors.Config {
	return actors.Config{
		Proc: actors.ProcConfig{
			RetainBytes:         cfg.RetainBytes,
			RetainChunks:        cfg.RetainChunks,
			ClosedRetention:     cfg.ClosedRetention,
			DrainAfterTerminate: drainAfterTerminate,
			ShutdownGrace:       cfg.ShutdownGrace,
		},
		DetachTTL:       cfg.DetachTTL,
		MaxProcesses:    cfg.MaxProcesses,
		MaxMessageBytes: cfg.MaxMessageBytes,
		Isolation:       iso.Isolation,
		DefaultSandbox:  cfg.DefaultSandbox,
		RequireSandbox:  cfg.RequireSandbox,
		Environment:     hostEnvironment(),
		Capabilities:    capabilities(cfg, iso),
		HTTP:            actors.HTTPConfig{Enabled: !cfg.DisableHTTPRequests, MaxBodyBytes: cfg.MaxHTTPBodyBytes},
		NetworkDeny:     cfg.NetworkDeny,
		NetPlacer:       iso.net,
		CodexSystemDir:  cfg.CodexSystemDir,
		Logger:          cfg.Logger,
	}
}

// Start starts a process. ctx bounds the call: if it has ended before the
// process runs, Start returns ctx's error and leaves nothing running.
func (l *Local) Start(ctx context.Context, spec Spec) (Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := cmp.Or(l.cfgErr, spec.validate()); err != nil {
		return nil, err
	}
	if spec.ID == "" {
		spec.ID = "proc-" + strconv.FormatUint(l.nextID.Add(1), 10)
	}
	req := actors.StartRequest{
		ID: spec.ID, Argv: spec.Argv, Arg0: spec.Arg0, Cwd: spec.Dir, Env: spec.Env, TTY: spec.TTY, PipeStdin: spec.PipeStdin,
		Rows: spec.Size.Rows, Cols: spec.Size.Cols, Sandbox: spec.Sandbox.wire(), Limits: actors.LimitsFrom(spec.Limits.wire()),
		Metadata: actorMetadata(spec.Metadata), Listen: min(firstListenerCap, liveQueueCap),
	}
	if p := spec.envPolicy(); p != nil {
		req.EnvPolicy = &osproc.EnvPolicy{Inherit: p.Inherit, IgnoreDefaultExcludes: p.IgnoreDefaultExcludes, Exclude: p.Exclude, Set: p.Set, IncludeOnly: p.IncludeOnly}
	}
	if spec.Network != nil {
		n, err := localNetwork(spec.ID, spec.Network)
		if err != nil {
			return nil, err
		}
		req.Network = n
	}
	res, err := l.sup.Start(ctx, localOwner{l}, req)
	if err != nil {
		if errors.Is(err, actors.ErrStopped) {
			return nil, ErrClosed
		}
		if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
			return nil, cerr
		}
		return nil, startErr(err)
	}
	if err := ctx.Err(); err != nil {
		// The caller gave up while it was spawning: kill it (the actor
		// is fresh, so this is answered at once).
		_, _ = res.Ref.Terminate(context.WithoutCancel(ctx), 0)
		return nil, err
	}
	lp := &localProcess{ref: res.Ref}
	lp.first.Store(&res.Live)
	return lp, nil
}

// localOwner is the actors.Owner of Local.Start: l.procs, under l.mu (a
// Local is one session; Starts may run concurrently).
type localOwner struct{ l *Local }

func (o localOwner) Reserve(id string) (int, bool) {
	l := o.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if ref, ok := l.procs[id]; ok && (ref == nil || ref.Alive()) { // nil: another Start is spawning it
		return 0, true
	}
	active := l.activeLocked()
	l.procs[id] = nil // reserve the id while spawning
	l.spawning++
	if l.starts++; l.starts%256 == 0 {
		// Forget processes whose retention ended (their ids are free).
		for id, ref := range l.procs {
			if ref != nil && !ref.Alive() {
				delete(l.procs, id)
			}
		}
	}
	return active, false
}

func (o localOwner) Spawning() {}

func (o localOwner) Started(id string, ref *actors.ProcessRef) {
	l := o.l
	l.mu.Lock()
	defer l.mu.Unlock()
	l.spawning--
	if ref == nil {
		delete(l.procs, id)
		return
	}
	l.procs[id] = ref
	l.open[ref] = struct{}{}
}

// startErr is the error of a start actors.Supervisor.Start refused: the
// *RPCError a server answers for it (StartError.Wire, the one mapping).
func startErr(err error) error {
	var se *actors.StartError
	if !errors.As(err, &se) {
		return err
	}
	re := rpcErr(se.Wire())
	if re.Code == wire.CodeInvalidRequest && se.Check == actors.CheckID {
		re.sentinel = ErrProcessExists
	}
	return re
}

// firstListenerCap bounds the queue of the listener each Local process
// gets at spawn, for its first Events call (at most liveQueueCap too): it
// holds at most this many events (with their output) until then; if it
// fills first, that subscriber lags and re-reads retained history.
const firstListenerCap = 16

// activeLocked counts the processes that are starting or not yet closed,
// forgetting (in open) the ones that closed since the last call (l.mu
// held; it only looks at channels).
func (l *Local) activeLocked() int {
	for ref := range l.open {
		select {
		case <-ref.Closed():
			delete(l.open, ref)
		default:
		}
	}
	return len(l.open) + l.spawning
}

// Close kills every process and waits for the actors to exit.
func (l *Local) Close() error {
	l.sup.Kill()
	defer l.iso.release()
	return l.sup.Wait(context.Background())
}

// Shutdown terminates every process (SIGTERM, SIGKILL after the grace) and
// waits, or kills them when ctx ends first.
func (l *Local) Shutdown(ctx context.Context) error {
	defer l.iso.release()
	l.sup.Stop()
	if err := l.sup.Wait(ctx); err != nil {
		l.sup.Kill()
		_ = l.sup.Wait(context.Background())
		return err
	}
	return nil
}

type localProcess struct {
	ref *actors.ProcessRef
	// first is the listener registered at spawn; the first Events takes
	// it (so it sees every event from seq 1 even if the process was
	// forgotten meanwhile: closed retention 0).
	first atomic.Pointer[<-chan actors.Event]
}

func (p *localProcess) ID() string { return p.ref.ID() }

// actorErr maps actor errors to the API's: a failed process reports its
// *ProcessError, an ended actor ErrUnknownProcess.
func (p *localProcess) actorErr(err error) error {
	if err == nil {
		return nil
	}
	if f := p.failure(); f != nil {
		return f
	}
	if errors.Is(err, actors.ErrStopped) {
		return ErrUnknownProcess
	}
	return err
}

// failure returns the process's *ProcessError if its actor failed.
func (p *localProcess) failure() error {
	var f *actors.ProcessFailedError
	if errors.As(p.ref.Failure(), &f) {
		return &ProcessError{ID: f.ID, Message: f.Error()}
	}
	return nil
}

func (p *localProcess) Write(ctx context.Context, b []byte) error {
	res, err := p.ref.Write(ctx, b, "")
	if err != nil {
		return p.actorErr(err)
	}
	if res.Err != nil {
		return &RPCError{Code: wire.CodeInternal, Message: res.Err.Error()}
	}
	if res.Status == actors.WriteStdinClosed {
		return ErrStdinClosed
	}
	return nil
}

func (p *localProcess) CloseStdin(ctx context.Context) error {
	if err := p.ref.CloseStdin(ctx); err != nil {
		if errors.Is(err, actors.ErrStopped) {
			return p.actorErr(err)
		}
		return &RPCError{Code: wire.CodeInternal, Message: "stdin failure: " + err.Error()}
	}
	return nil
}

func (p *localProcess) Resize(ctx context.Context, rows, cols uint16) error {
	err := p.ref.Resize(ctx, rows, cols)
	if errors.Is(err, osproc.ErrNotPTY) {
		return ErrNotPTY
	}
	return p.actorErr(err)
}

func (p *localProcess) Signal(ctx context.Context, sig Signal) error {
	s, ok := actors.Signals[string(sig)]
	if !ok {
		return &RPCError{Code: wire.CodeInvalidParams, Message: fmt.Sprintf("unknown signal `%s`; expected one of interrupt, terminate, kill, hangup, quit, user1, user2", sig)} // as the server says
	}
	err := p.ref.Signal(ctx, s)
	if errors.Is(err, actors.ErrStopped) {
		return p.failure()
	}
	return err
}

func (p *localProcess) Terminate(ctx context.Context, grace time.Duration) (bool, error) {
	running, err := p.ref.Terminate(ctx, grace)
	if errors.Is(err, actors.ErrStopped) {
		return false, p.failure()
	}
	return running, err
}

func (p *localProcess) Read(ctx context.Context, opts ReadOptions) (ReadResult, error) {
	if err := opts.validate(); err != nil {
		return ReadResult{}, err
	}
	r, err := p.ref.Read(ctx, opts.After, opts.MaxBytes, opts.Wait)
	if err != nil {
		return ReadResult{}, p.actorErr(err)
	}
	out := ReadResult{NextSeq: r.NextSeq, Exited: r.Exited, ExitCode: r.ExitCode, Closed: r.Closed, Chunks: make([]Chunk, len(r.Chunks))}
	if r.Exited {
		out.Status = exitStatus(r.ExitCode, r.ExitSignal, r.Limit)
	}
	for i, c := range r.Chunks {
		out.Chunks[i] = Chunk{Seq: c.Seq, Stream: Stream(c.Stream.String()), Data: c.Data}
	}
	return out, nil
}

func (p *localProcess) Wait(ctx context.Context) (ExitStatus, error) {
	select {
	case <-p.ref.Closed():
		if f := p.failure(); f != nil {
			return ExitStatus{}, f
		}
		return exitStatus(p.ref.ExitCode(), p.ref.ExitSignal(), p.ref.Limit()), nil
	case <-ctx.Done():
		return ExitStatus{}, ctx.Err()
	}
}

func (p *localProcess) Done() <-chan struct{} { return p.ref.Closed() }

func (p *localProcess) Events(ctx context.Context) (*EventStream, error) {
	if first := p.first.Swap(nil); first != nil {
		taken := false
		return newEventStream(ctx, func(ctx context.Context, after uint64) (subscription, error) {
			if !taken && after == 0 {
				taken = true
				return subscription{live: *first}, nil
			}
			sub, err := p.ref.Subscribe(ctx, after, liveQueueCap)
			if err != nil {
				return subscription{}, p.actorErr(err)
			}
			return subscription{history: sub.History, live: sub.Live}, nil
		})
	}
	return newEventStream(ctx, func(ctx context.Context, after uint64) (subscription, error) {
		sub, err := p.ref.Subscribe(ctx, after, liveQueueCap)
		if err != nil {
			return subscription{}, p.actorErr(err)
		}
		return subscription{history: sub.History, live: sub.Live}, nil
	})
}

// List returns the backend's processes (like process/list), sorted by id.
func (l *Local) List(ctx context.Context) ([]ProcessInfo, error) {
	l.mu.Lock()
	refs := make([]*actors.ProcessRef, 0, len(l.procs))
	for _, ref := range l.procs {
		if ref != nil {
			refs = append(refs, ref)
		}
	}
	l.mu.Unlock()
	out := make([]ProcessInfo, 0, len(refs))
	for _, ref := range refs {
		info, err := ref.Info(ctx)
		if err != nil {
			continue // retention ended
		}
		pi := ProcessInfo{ID: info.ID, Pid: info.Pid, Argv: info.Argv, TTY: info.TTY, State: info.State.String(), NextSeq: info.NextSeq}
		if m := ref.Metadata(); m != nil {
			pi.Metadata = &Metadata{ThreadID: deref(m.ThreadID), ToolCallID: deref(m.ToolCallID)}
		}
		if info.State >= actors.StateExited {
			code := info.ExitCode
			pi.ExitCode = &code
		}
		out = append(out, pi)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}
