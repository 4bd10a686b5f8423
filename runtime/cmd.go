package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Cmd is a command to run on a Backend, in the spirit of os/exec's Cmd:
// set its fields, then Run, or Start and Wait, or Output or
// CombinedOutput. It works the same on Local and on a Client.
//
// Output cannot be lost between Start and the copying to Stdout and
// Stderr: Start subscribes from seq 0, so the copy begins with the
// process's first output however early it came (Local's first listener
// is registered at spawn; a Client keeps its own history of each process
// it started, and the server retains the rest).
//
// A Cmd is used by one goroutine; once started, its Process may be used
// from any (to Signal, Resize, Terminate).
type Cmd struct {
	// Backend runs the command (required).
	Backend Backend
	// Args is the command; Args[0] is looked up on the child's PATH, then
	// /bin:/usr/bin (required, non-empty).
	Args []string
	// Dir is the working directory, an absolute path on the backend's
	// machine. Empty means the backend's own working directory (its
	// EnvironmentInfo's Cwd), as os/exec uses the caller's.
	Dir string
	// Env and EnvPolicy are the child's environment, as in Spec: a nil Env
	// inherits the server's environment, an empty one is empty.
	Env       map[string]string
	EnvPolicy *EnvPolicy // as Spec.EnvPolicy
	// Stdin, if set, is copied to the process's stdin, which is closed
	// when Stdin reaches EOF. Nil: the process reads /dev/null (or, with
	// TTY, a terminal nothing writes to).
	Stdin io.Reader
	// Stdout and Stderr receive the process's output (with TTY, everything
	// goes to Stdout); nil discards it. One goroutine writes to both, in
	// seq order, so they may be the same writer. A writer that blocks
	// holds the copy back; the process's output is then read back from
	// retention, and output retention evicted meanwhile makes Wait report
	// ErrOutputLost.
	Stdout io.Writer
	Stderr io.Writer // see Stdout
	// TTY runs the process on a pseudo-terminal of size Size (zero: 24x80).
	TTY  bool
	Size Size // see TTY
	// Sandbox and Limits confine and bound the process tree, as in Spec.
	Sandbox *Sandbox
	Limits  Limits // see Sandbox
	// ID names the process in its session; empty picks a unique one.
	ID string
	// Metadata attributes the process to a thread and tool call.
	Metadata *Metadata
	// Network gives the process a managed network, as in Spec.
	Network *Network

	// Process is the started process, set by Start.
	Process Process
	// ProcessState is how the process ended, set by Wait.
	ProcessState *ExitStatus

	ctx       context.Context // from CommandContext; nil: none
	started   bool
	finished  bool
	copied    chan error // the output copier's result
	stdinErr  chan error // the stdin copier's result, if any
	stopCtx   func() bool
	stderrBuf *capBuffer // Output's capture of stderr for ExitError
}

// Command returns a Cmd that runs argv on b.
func Command(b Backend, argv ...string) *Cmd {
	return &Cmd{Backend: b, Args: argv}
}

// CommandContext is Command with a ctx that bounds the process's life:
// when ctx ends before the process does, the process tree is killed
// (Terminate with grace 0) and Wait reports the kill. ctx also bounds
// Start. A nil ctx panics, as with os/exec.
func CommandContext(ctx context.Context, b Backend, argv ...string) *Cmd {
	if ctx == nil {
		panic("runtime: CommandContext with a nil Context")
	}
	return &Cmd{Backend: b, Args: argv, ctx: ctx}
}

// String describes the command (its arguments, space-separated).
func (c *Cmd) String() string { return strings.Join(c.Args, " ") }

// ExitError is returned by Wait, Run and Output when the command ran and
// did not exit with 0 (or was killed by a signal).
type ExitError struct {
	ExitStatus
	// Stderr holds the first 64 KiB of stderr when Output captured it
	// (Stderr was nil).
	Stderr []byte
}

// Error reads like os/exec's: "exit status 3", "signal: killed".
func (e *ExitError) Error() string { return e.ExitStatus.String() }

// ErrOutputLost: output the process wrote was evicted from retention
// before it could be delivered (a reader that blocked for long, or a
// retention smaller than the burst). The error's text says which seqs.
var ErrOutputLost = errors.New("runtime: output lost")

// Start starts the command and the copying of its input and output; it
// does not wait for the process to end.
func (c *Cmd) Start() error {
	switch {
	case c.started:
		return errors.New("runtime: Cmd already started")
	case c.Backend == nil:
		return invalid("Cmd.Backend", "is nil: want Local or a Client")
	case len(c.Args) == 0:
		return invalid("Cmd.Args", "is empty: Args[0] is the command")
	}
	ctx := c.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	dir := c.Dir
	if dir == "" {
		ei, ok := c.Backend.(interface {
			EnvironmentInfo(ctx context.Context) (EnvironmentInfo, error)
		})
		if !ok {
			return invalid("Cmd.Dir", "is empty and the backend does not say its working directory")
		}
		info, err := ei.EnvironmentInfo(ctx)
		if err != nil {
			return err
		}
		dir = info.Cwd
	}
	spec := Spec{
		ID: c.ID, Argv: c.Args, Dir: dir, Env: c.Env, EnvPolicy: c.EnvPolicy, TTY: c.TTY, Size: c.Size,
		PipeStdin: c.Stdin != nil && !c.TTY, Sandbox: c.Sandbox, Limits: c.Limits, Metadata: c.Metadata, Network: c.Network,
	}
	if err := checkCmdSpec(spec); err != nil {
		return err
	}
	p, err := c.Backend.Start(ctx, spec)
	if err != nil {
		return err
	}
	c.started, c.Process = true, p
	// Subscribing right after Start begins at seq 0: nothing is missed.
	events, err := p.Events(context.Background())
	if err != nil {
		_, _ = p.Terminate(context.Background(), 0)
		return err
	}
	stdout, stderr := c.Stdout, c.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	c.copied = make(chan error, 1)
	go func() { c.copied <- copyEvents(events, stdout, stderr) }()
	if c.Stdin != nil {
		c.stdinErr = make(chan error, 1)
		go func() { c.stdinErr <- copyStdin(p, c.Stdin) }()
	}
	if c.ctx != nil {
		c.stopCtx = context.AfterFunc(c.ctx, func() {
			tctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, _ = p.Terminate(tctx, 0)
		})
	}
	return nil
}

// copyEvents writes a process's output to stdout and stderr until it
// closed; it returns the failure that ended the stream, or the first
// output loss.
func copyEvents(s *EventStream, stdout, stderr io.Writer) error {
	var lost error
	for {
		ev, err := s.Next(context.Background())
		if err == io.EOF {
			return lost
		}
		if err != nil {
			return err
		}
		switch ev.Kind {
		case EventOutput:
			w := stdout
			if ev.Stream == Stderr {
				w = stderr
			}
			_, _ = w.Write(ev.Data) // like os/exec, a failing writer does not stop the process
		case EventGap:
			if lost == nil {
				lost = fmt.Errorf("%w: seqs %d..%d were evicted from retention before they were copied", ErrOutputLost, ev.Seq, ev.To)
			}
		case EventFailed:
			return ev.Err
		}
	}
}

// copyStdin copies r to the process's stdin and closes it at EOF. A
// process that ended or closed its stdin first is not an error.
func copyStdin(p Process, r io.Reader) error {
	ctx := context.Background()
	buf := make([]byte, 32<<10)
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			if err := p.Write(ctx, bytes.Clone(buf[:n])); err != nil {
				if errors.Is(err, ErrStdinClosed) || errors.Is(err, ErrUnknownProcess) {
					return nil
				}
				return err
			}
		}
		if rerr != nil {
			err := p.CloseStdin(ctx)
			if errors.Is(err, ErrUnknownProcess) {
				err = nil
			}
			if rerr != io.EOF && err == nil {
				err = fmt.Errorf("runtime: reading Cmd.Stdin: %w", rerr)
			}
			return err
		}
	}
}

// Wait waits for the process to end and its output to be copied, and
// returns nil if it exited with 0, an *ExitError if it ran and failed,
// or the backend's failure (for example one wrapping ErrDisconnected).
// An output loss (ErrOutputLost) or a stdin copy failure is reported
// only when the process succeeded, as os/exec reports copy errors.
//
// Wait waits for Stdin to be copied only until the process ends: a Stdin
// whose Read is still blocked then is left to its goroutine, which ends
// when that Read returns.
func (c *Cmd) Wait() error {
	switch {
	case !c.started:
		return errors.New("runtime: Cmd not started")
	case c.finished:
		return errors.New("runtime: Wait was already called")
	}
	c.finished = true
	copyErr := <-c.copied
	if c.stopCtx != nil {
		c.stopCtx()
	}
	st, err := c.Process.Wait(context.Background())
	if err != nil {
		return err
	}
	c.ProcessState = &st
	if !st.Success() {
		ee := &ExitError{ExitStatus: st}
		if c.stderrBuf != nil {
			ee.Stderr = c.stderrBuf.buf
		}
		return ee
	}
	if copyErr != nil {
		return copyErr
	}
	if c.stdinErr != nil {
		select {
		case err := <-c.stdinErr:
			return err
		default: // still blocked in Stdin.Read (see above)
		}
	}
	return nil
}

// Run starts the command and waits for it (Start, then Wait).
func (c *Cmd) Run() error {
	if err := c.Start(); err != nil {
		return err
	}
	return c.Wait()
}

// Output runs the command and returns its stdout. If Stderr is nil, the
// first 64 KiB of stderr is kept in the *ExitError of a failed command.
func (c *Cmd) Output() ([]byte, error) {
	if c.Stdout != nil {
		return nil, errors.New("runtime: Stdout already set")
	}
	var out bytes.Buffer
	c.Stdout = &out
	if c.Stderr == nil {
		c.stderrBuf = &capBuffer{max: 64 << 10}
		c.Stderr = c.stderrBuf
	}
	err := c.Run()
	return out.Bytes(), err
}

// CombinedOutput runs the command and returns its stdout and stderr
// together, in the order the backend numbered them.
func (c *Cmd) CombinedOutput() ([]byte, error) {
	if c.Stdout != nil || c.Stderr != nil {
		return nil, errors.New("runtime: Stdout or Stderr already set")
	}
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	return out.Bytes(), err
}

// capBuffer keeps the first max bytes written to it. The output copier
// writes it; Wait reads it after receiving the copier's result.
type capBuffer struct {
	buf []byte
	max int
}

func (b *capBuffer) Write(p []byte) (int, error) {
	if room := b.max - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}
