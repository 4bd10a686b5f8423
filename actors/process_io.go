package actors

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/runtimed/runtimed/actors/osproc"
)

// The process actor's helper goroutines: one reader per output stream, the
// waiter, the stdin writer. They own no actor state: readers and the waiter
// report facts, the stdin writer carries out the writes run hands it.

// fact is the closed set of things helper goroutines report.
type fact interface{ isFact() }

// outputReadMsg: a reader goroutine read data from a stream.
type outputReadMsg struct {
	stream Stream
	data   []byte
}

// streamEndedMsg: a stream reached EOF (or an error, or was closed).
type streamEndedMsg struct {
	stream Stream
	err    error
}

func (outputReadMsg) isFact()  {}
func (streamEndedMsg) isFact() {}

// stdinOp is one write or the close of stdin, for the stdin writer.
type stdinOp struct {
	data  []byte
	close bool
	reply chan<- WriteResult // for writes
	done  chan<- error       // for close
}

// isExpectedEnd: EIO is how a PTY master reports that the slave side is gone.
func isExpectedEnd(err error) bool {
	return errors.Is(err, syscall.EIO) || errors.Is(err, os.ErrClosed)
}

// startHelpers starts the reader goroutines, the waiter and the stdin
// writer. Each ends on its own: readers at EOF/close, the waiter after the
// reap, the writer when the actor is done.
func (p *process) startHelpers(wg interface{ Go(func()) }) {
	for i, st := range p.sess.Streams() {
		r, st := p.sess.Output(i), st
		wg.Go(func() { p.readLoop(st, r) })
	}
	wg.Go(func() { p.exitCh <- p.sess.Wait() })
	if p.sess.HasStdin() {
		wg.Go(p.stdinLoop)
	}
}

func (p *process) readLoop(st Stream, r osproc.Reader) {
	cr, ok := r.(osproc.ChunkReader)
	if !ok {
		cr = &bufferedChunks{r: r, buf: make([]byte, p.readSize)}
	}
	for {
		data, err := cr.ReadChunk(p.readSize)
		if len(data) > 0 {
			select {
			case p.facts <- outputReadMsg{stream: st, data: data}:
			case <-p.done:
				return
			}
		}
		if err != nil {
			select {
			case p.facts <- streamEndedMsg{stream: st, err: err}:
			case <-p.done:
			}
			return
		}
	}
}

// bufferedChunks adapts a plain Reader (test fakes) to ChunkReader.
type bufferedChunks struct {
	r   osproc.Reader
	buf []byte
}

func (b *bufferedChunks) ReadChunk(max int) ([]byte, error) {
	n, err := b.r.Read(b.buf[:min(max, len(b.buf))])
	if n > 0 {
		return append([]byte(nil), b.buf[:n]...), nil
	}
	return nil, err
}

// queueStdin hands op to the stdin writer, or queues it in the actor while
// the writer's channel is full (or earlier ops wait).
func (p *process) queueStdin(op stdinOp) {
	if len(p.stdinQueue) == 0 {
		select {
		case p.stdinCh <- op:
			return
		default:
		}
	}
	p.stdinQueue = append(p.stdinQueue, op)
}

func (p *process) stdinLoop() {
	for {
		select {
		case op := <-p.stdinCh:
			if op.close {
				op.done <- p.sess.CloseStdin()
				continue
			}
			if err := p.sess.Write(op.data); err != nil {
				op.reply <- WriteResult{Err: fmt.Errorf("stdin failure: %w", err)}
			} else {
				op.reply <- WriteResult{Status: WriteAccepted}
			}
		case <-p.done:
			if !p.tty {
				_ = p.sess.CloseStdin() // release the pipe's write end
			}
			return
		}
	}
}
