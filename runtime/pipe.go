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
// goes to the logger (or to the writer given to PipeWithStderr).
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

// Pipe returns a pipe over p; ctx bounds every Read and Write. stderr
// lines are logged at Info on log (nil: dropped).
func Pipe(ctx context.Context, p Process, log *zap.Logger) (*ProcessPipe, error) {
	var w io.Writer = io.Discard
	if log != nil {
		w = &logWriter{log: log.Named("stderr")}
	}
	return PipeWithStderr(ctx, p, w)
}

// PipeWithStderr is Pipe with stderr copied to w.
func PipeWithStderr(ctx context.Context, p Process, stderr io.Writer) (*ProcessPipe, error) {
	s, err := p.Events(ctx)
	if err != nil {
		return nil, err
	}
	return &ProcessPipe{p: p, ctx: ctx, stream: s, stderr: stderr}, nil
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
