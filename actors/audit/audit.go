package audit

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Version is the schema version every line carries ("v").
const Version = 1

// Event types.
const (
	ConnOpen        = "conn.open"
	ConnClose       = "conn.close"
	AuthRefused     = "auth.refused"
	SessionCreate   = "session.create"
	SessionResume   = "session.resume"
	SessionDetach   = "session.detach"
	SessionEnd      = "session.end"
	ProcessStart    = "process.start"
	ProcessExit     = "process.exit"
	ProcessRefused  = "process.refused"
	ProcessControl  = "process.control" // terminate, attach... (Action)
	FsChange        = "fs.change"
	HTTPRequest     = "http.request"
	NetworkDecision = "network.decision" // a managed-network proxy allowed or denied a connection
	Refused         = "refused"          // any other request refused by a limit
)

// Event is one line of the audit log. Fields that do not apply are left
// out. It never holds output, environment values or tokens.
type Event struct {
	V    int       `json:"v"`
	Time time.Time `json:"time"`
	Type string    `json:"type"`

	// Who.
	Token   string `json:"token,omitempty"` // the token's name, never the token
	Client  string `json:"client,omitempty"`
	Peer    string `json:"peer,omitempty"`
	Session string `json:"session,omitempty"`
	Conn    uint64 `json:"conn,omitempty"` // the server's connection number

	// What.
	Process    string            `json:"process,omitempty"`
	PID        int               `json:"pid,omitempty"`
	Argv       []string          `json:"argv,omitempty"`
	Cwd        string            `json:"cwd,omitempty"`
	EnvNames   []string          `json:"envNames,omitempty"`
	TTY        bool              `json:"tty,omitempty"`
	Sandbox    string            `json:"sandbox,omitempty"`
	Limits     map[string]string `json:"limits,omitempty"`
	Network    string            `json:"network,omitempty"`
	ThreadID   string            `json:"threadId,omitempty"`
	ToolCallID string            `json:"toolCallId,omitempty"`
	Action     string            `json:"action,omitempty"`

	ExitCode   *int   `json:"exitCode,omitempty"`
	Limit      string `json:"limit,omitempty"`
	DurationMs int64  `json:"durationMs,omitempty"`
	BytesOut   int64  `json:"bytesOut,omitempty"`

	Op     string `json:"op,omitempty"` // fs: write, remove, copy, mkdir
	Path   string `json:"path,omitempty"`
	Dest   string `json:"dest,omitempty"`
	Size   *int64 `json:"size,omitempty"`
	Method string `json:"method,omitempty"`
	Host   string `json:"host,omitempty"`

	Check  string `json:"check,omitempty"`  // the refusing check (budget, sandbox floor...)
	Reason string `json:"reason,omitempty"` // a refusal's or an end's reason
}

// Options configure a Log.
type Options struct {
	Queue     int           // queued events; 0: 4096
	CloseWait time.Duration // Close's bound on draining; 0: 2 s
	Logger    *zap.Logger
	// Now stamps events (tests); nil: time.Now.
	Now func() time.Time
	// OnDrop, if set, is called (from any goroutine, must not block) for
	// every dropped event: metrics.
	OnDrop func()
}

// Log is an audit log.
//
// Owned by run: f, lastWarn, reported. Immutable: path, opts, q, reopen, done,
// stop. dropped and written are atomic.
type Log struct {
	path    string
	opts    Options
	q       chan Event
	reopen  chan struct{} // capacity 1
	stop    chan struct{} // closed by Close (under closeOnce)
	done    chan struct{} // closed by run
	dropped atomic.Uint64
	written atomic.Uint64

	closeOnce sync.Once

	f        io.WriteCloser
	lastWarn time.Time
	reported uint64 // drops already logged
}

// ErrClosed is returned by Reopen after Close.
var ErrClosed = errors.New("audit: log closed")

// Open opens (appends to) path, "-" meaning stdout, and starts the owner.
func Open(path string, opts Options) (*Log, error) {
	if opts.Queue <= 0 {
		opts.Queue = 4096
	}
	if opts.CloseWait <= 0 {
		opts.CloseWait = 2 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	l := &Log{path: path, opts: opts, q: make(chan Event, opts.Queue), reopen: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
	f, err := l.open()
	if err != nil {
		return nil, err
	}
	l.f = f
	go l.run()
	return l, nil
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

func (l *Log) open() (io.WriteCloser, error) {
	if l.path == "-" {
		return nopCloser{os.Stdout}, nil
	}
	return os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
}

// Audit queues e (stamped with the version and time); it never blocks.
func (l *Log) Audit(e Event) {
	if l == nil {
		return
	}
	e.V = Version
	if e.Time.IsZero() {
		e.Time = l.opts.Now().UTC()
	}
	select {
	case <-l.stop:
		l.drop()
		return
	default:
	}
	select {
	case l.q <- e:
	default:
		l.drop()
	}
}

func (l *Log) drop() {
	l.dropped.Add(1)
	if l.opts.OnDrop != nil {
		l.opts.OnDrop()
	}
}

// Dropped is how many events were lost (queue full, write failed, closed).
func (l *Log) Dropped() uint64 { return l.dropped.Load() }

// Written is how many events were written.
func (l *Log) Written() uint64 { return l.written.Load() }

// Reopen asks the owner to reopen the file (logrotate); it does not wait.
func (l *Log) Reopen() {
	select {
	case l.reopen <- struct{}{}:
	default: // one is pending already
	}
}

// Close drains the queue (bounded by Options.CloseWait) and closes the file.
func (l *Log) Close() error {
	l.closeOnce.Do(func() { close(l.stop) })
	t := time.NewTimer(l.opts.CloseWait + time.Second)
	defer t.Stop()
	select {
	case <-l.done:
		return nil
	case <-t.C:
		return errors.New("audit: close: the sink is stalled; queued events were dropped")
	}
}

func (l *Log) run() {
	defer close(l.done)
	defer func() { _ = l.f.Close() }()
	for {
		select {
		case e := <-l.q:
			l.write(e)
		case <-l.reopen:
			l.doReopen()
		case <-l.stop:
			deadline := time.Now().Add(l.opts.CloseWait)
		drain:
			for time.Now().Before(deadline) {
				select {
				case e := <-l.q:
					l.write(e)
				default:
					break drain
				}
			}
			// What could not be written in time is dropped, counted.
			for {
				select {
				case <-l.q:
					l.drop()
				default:
					return
				}
			}
		}
	}
}

func (l *Log) write(e Event) {
	b, err := json.Marshal(e)
	if err != nil {
		l.fail(err)
		return
	}
	b = append(b, '\n')
	if _, err := l.f.Write(b); err != nil { // one write per line: a failure loses exactly this event
		l.fail(err)
		return
	}
	l.written.Add(1)
	if d := l.dropped.Load(); d > l.reported && (l.lastWarn.IsZero() || time.Since(l.lastWarn) > time.Minute) {
		l.lastWarn, l.reported = time.Now(), d
		l.opts.Logger.Warn("audit events were dropped (queue full: the sink is slower than the events)", zap.String("path", l.path), zap.Uint64("dropped", d))
	}
}

func (l *Log) fail(err error) {
	l.drop()
	now := time.Now()
	if l.lastWarn.IsZero() || now.Sub(l.lastWarn) > time.Minute {
		l.lastWarn = now
		l.reported = l.dropped.Load()
		l.opts.Logger.Warn("audit log write failed; events are dropped and counted", zap.String("path", l.path), zap.Error(err), zap.Uint64("dropped", l.dropped.Load()))
	}
}

func (l *Log) doReopen() {
	if l.path == "-" {
		return
	}
	f, err := l.open()
	if err != nil {
		l.opts.Logger.Warn("audit log reopen failed; keeping the old file", zap.String("path", l.path), zap.Error(err))
		return
	}
	_ = l.f.Close()
	l.f = f
	l.opts.Logger.Info("audit log reopened", zap.String("path", l.path))
}
