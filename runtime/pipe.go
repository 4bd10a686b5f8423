package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"go.uber.org/zap"
)

// ProcessPipe is an io.ReadWriteCloser over a process: Read returns its
// stdout (or PTY output) in order, each byte once, recovering from lag
// through retained history; Write writes stdin; Close closes stdin. Stderr
// goes where PipeOptions says.
//
// Read and Write may be called concurrently with each other; each from one
// goroutine at a time. This is what running an MCP stdio server on a remote
// executor needs.
type ProcessPipe struct {
	p      Process
	ctx    context.Context
	stream *EventStream
	stderr io.Writer
	buf    bytes.Buffer // owned by the Read caller
	rerr   error
	once   sync.Once
}

// PipeOptions configure Pipe. The zero value discards stderr.
type PipeOptions struct {
	// Stderr receives the process's stderr as it comes.
	Stderr io.Writer
	// Logger, instead of Stderr, logs each stderr line at Info (logger
	// named "stderr"). Setting both is an error.
	Logger *zap.Logger
}

// Pipe returns a pipe over p. ctx bounds every Read, Write and Close of
// the pipe (not the process: ending ctx does not stop it).
func Pipe(ctx context.Context, p Process, opts PipeOptions) (*ProcessPipe, error) {
	var w io.Writer = io.Discard
	switch {
	case opts.Stderr != nil && opts.Logger != nil:
		return nil, invalid("PipeOptions.Logger", "Stderr is set too: pick one")
	case opts.Stderr != nil:
		w = opts.Stderr
	case opts.Logger != nil:
		w = &logWriter{log: opts.Logger.Named("stderr")}
	}
	s, err := p.Events(ctx)
	if err != nil {
		return nil, err
	}
	return &ProcessPipe{p: p, ctx: ctx, stream: s, stderr: w}, nil
}

// Read reads the process's output. It returns io.EOF once the process has
// closed and everything was read, or the backend's failure.
func (pp *ProcessPipe) Read(b []byte) (int, error) {
	for pp.buf.Len() == 0 {
		if pp.rerr != nil {
			return 0, pp.rerr
		}
		ev, err := pp.stream.Next(pp.ctx)
		if err != nil {
			pp.rerr = err
			continue
		}
		switch ev.Kind {
		case EventOutput:
			if ev.Stream == Stderr {
				_, _ = pp.stderr.Write(ev.Data)
				continue
			}
			pp.buf.Write(ev.Data)
		case EventFailed:
			pp.rerr = ev.Err
		case EventGap:
			pp.rerr = fmt.Errorf("runtime: output seqs %d..%d were evicted before they were read", ev.Seq, ev.To)
		case EventClosed:
			pp.rerr = io.EOF
		}
	}
	return pp.buf.Read(b)
}

// Write writes b to the process's stdin.
func (pp *ProcessPipe) Write(b []byte) (int, error) {
	if err := pp.p.Write(pp.ctx, b); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Close closes the process's stdin (once). The process is not terminated.
func (pp *ProcessPipe) Close() error {
	var err error
	pp.once.Do(func() {
		err = pp.p.CloseStdin(pp.ctx)
		if errors.Is(err, ErrUnknownProcess) {
			err = nil
		}
	})
	return err
}

type logWriter struct {
	log  *zap.Logger
	line []byte
}

func (w *logWriter) Write(b []byte) (int, error) {
	w.line = append(w.line, b...)
	for {
		i := bytes.IndexByte(w.line, '\n')
		if i < 0 {
			break
		}
		w.log.Info(string(w.line[:i]))
		w.line = w.line[i+1:]
	}
	return len(b), nil
}
