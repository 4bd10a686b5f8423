package wire

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
)

// StdioTransport frames one JSON message per line over a reader and a
// writer (a server's stdin/stdout, or a client's pipes to a child).
type StdioTransport struct {
	// Reader side: owned by the single ReadMessage caller.
	r      *bufio.Reader
	max    int
	line   []byte
	rclose io.Closer
	gate   ReadGate // nil: every message is read

	// Writer side: owned by the single WriteMessage/Flush caller.
	w      *bufio.Writer
	wclose io.Closer

	closeOnce sync.Once
	closed    chan struct{}
}

// NewStdioTransport returns a line-framed transport. maxMessage <= 0 means
// DefaultMaxMessageBytes. If r or w is an io.Closer, Close closes it, which
// unblocks a pending read or write on pipes.
func NewStdioTransport(r io.Reader, w io.Writer, maxMessage int) *StdioTransport {
	if maxMessage <= 0 {
		maxMessage = DefaultMaxMessageBytes
	}
	t := &StdioTransport{
		r:      bufio.NewReaderSize(r, 256<<10),
		w:      bufio.NewWriterSize(w, 256<<10),
		max:    maxMessage,
		closed: make(chan struct{}),
	}
	t.rclose, _ = r.(io.Closer)
	t.wclose, _ = w.(io.Closer)
	// Pipes default to 64 KiB: a large message would take several
	// fill/drain round trips between the two processes.
	enlargePipe(r)
	enlargePipe(w)
	return t
}

var nl = []byte("\n")

// ReadMessage returns the next non-empty line without its newline. The
// slice is reused by the next call unless ReleaseReadBuffer drops it.
func (t *StdioTransport) ReadMessage(ctx context.Context) ([]byte, error) {
	for {
		t.line = t.line[:0]
		tooBig := false
		admitted := t.gate == nil
		var refused *ReadRefusedError
		for {
			frag, err := t.r.ReadSlice('\n')
			switch {
			case refused != nil:
				refused.Size += len(bytes.TrimSuffix(frag, nl))
			case tooBig:
			case len(t.line)+len(frag) > t.max+1:
				tooBig = true
				t.line = t.line[:0]
			default:
				if !admitted && len(t.line)+len(frag) > LargeReadBytes {
					if gerr := t.gate.AdmitRead(ctx); gerr != nil {
						refused = &ReadRefusedError{Prefix: bytes.Clone(t.line), Size: len(t.line) + len(bytes.TrimSuffix(frag, nl)), Err: gerr}
						if len(refused.Prefix) < LargeReadBytes {
							refused.Prefix = append(refused.Prefix, frag[:min(len(frag), LargeReadBytes-len(refused.Prefix))]...)
						}
						t.line = t.line[:0]
						break
					}
					admitted = true
				}
				for cap(t.line)-len(t.line) < len(frag) {
					t.line = growBuffer(t.line)
				}
				t.line = append(t.line, frag...)
			}
			if err == nil {
				break
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if err == io.EOF && (len(t.line) > 0 || refused != nil) && !tooBig {
				break // a last line without newline
			}
			select {
			case <-t.closed:
				return nil, ErrClosed
			default:
			}
			return nil, err
		}
		if tooBig {
			return nil, fmt.Errorf("stdio: line exceeds %d bytes: %w", t.max, ErrMessageTooBig)
		}
		if refused != nil {
			return nil, refused
		}
		msg := bytes.TrimRight(t.line, "\r\n")
		if len(bytes.TrimSpace(msg)) == 0 {
			continue
		}
		return msg, nil
	}
}

// SetReadGate installs the gate large messages must pass (see ReadGate).
func (t *StdioTransport) SetReadGate(g ReadGate) { t.gate = g }

// ReleaseReadBuffer drops the line buffer; the last message stays valid
// for its holder. Called by the ReadMessage caller only.
func (t *StdioTransport) ReleaseReadBuffer() { t.line = nil }

// WriteMessage buffers msg and a newline; Flush sends them.
func (t *StdioTransport) WriteMessage(ctx context.Context, msg []byte) error {
	if _, err := t.w.Write(msg); err != nil {
		return err
	}
	return t.w.WriteByte('\n')
}

// Flush writes buffered messages.
func (t *StdioTransport) Flush() error { return t.w.Flush() }

// Close closes the underlying reader and writer when they are closers.
func (t *StdioTransport) Close() error {
	t.closeOnce.Do(func() {
		close(t.closed)
		if t.rclose != nil {
			t.rclose.Close()
		}
		if t.wclose != nil && t.wclose != t.rclose {
			t.wclose.Close()
		}
	})
	return nil
}

// stdioPipeSize is the capacity asked for stdio pipes (F_SETPIPE_SZ).
const stdioPipeSize = 1 << 20

// enlargePipe grows v's pipe if it is one; anything else (a terminal, a
// file, a limit) is left as it is.
func enlargePipe(v any) {
	f, ok := v.(*os.File)
	if !ok {
		return
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		const fSetPipeSz = 1031 // F_SETPIPE_SZ (Linux); EINVAL/EBADF elsewhere
		_, _, _ = syscall.Syscall(syscall.SYS_FCNTL, fd, fSetPipeSz, stdioPipeSize)
	})
}
