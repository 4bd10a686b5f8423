package actors

import (
	"syscall"
	"time"

	"github.com/runtimed/runtimed/actors/osproc"
)

// Requests into the process actor: the closed message set its mailbox
// carries, and how run answers each. Every request carries a reply channel
// of capacity 1, so answering never blocks.

// procMsg is the closed set of requests a process actor accepts.
type procMsg interface{ isProcMsg() }

type readMsg struct {
	after    uint64
	maxBytes int // 0: unlimited
	wait     time.Duration
	reply    chan<- ReadReply
}
type writeMsg struct {
	data    []byte
	writeID string // "" means none
	reply   chan<- WriteResult
}
type closeStdinMsg struct{ reply chan<- error }
type terminateMsg struct {
	grace time.Duration // 0: SIGKILL at once
	reply chan<- bool
}
type signalMsg struct {
	sig   syscall.Signal
	reply chan<- error
}
type resizeMsg struct {
	rows, cols uint16
	reply      chan<- error
}
type infoMsg struct{ reply chan<- ProcessInfo }
type attachMsg struct {
	sub   Subscriber
	reply chan<- uint64
}
type discardMsg struct{ why reason }
type ackMsg struct{ seq uint64 } // a tell: the connection answers once it is queued
type subscribeMsg struct {
	after    uint64
	capacity int
	reply    chan<- Subscription
}

func (readMsg) isProcMsg()       {}
func (writeMsg) isProcMsg()      {}
func (closeStdinMsg) isProcMsg() {}
func (terminateMsg) isProcMsg()  {}
func (signalMsg) isProcMsg()     {}
func (resizeMsg) isProcMsg()     {}
func (infoMsg) isProcMsg()       {}
func (attachMsg) isProcMsg()     {}
func (discardMsg) isProcMsg()    {}
func (ackMsg) isProcMsg()        {}
func (subscribeMsg) isProcMsg()  {}

func (p *process) handle(m procMsg) {
	runTestHook(&hookProcessRequest, p.id)
	switch m := m.(type) {
	case readMsg:
		p.read(m)
	case writeMsg:
		p.write(m)
	case closeStdinMsg:
		if p.stdinClosed {
			m.reply <- nil
			return
		}
		p.stdinClosed = true
		p.queueStdin(stdinOp{close: true, done: m.reply})
	case terminateMsg:
		running := !p.reaped()
		_ = p.kill(reasonTerminate, m.grace)
		m.reply <- running
	case signalMsg:
		switch {
		case p.reaped():
			m.reply <- nil
		case m.sig == syscall.SIGKILL:
			m.reply <- p.kill(reasonSignal, 0)
		default:
			m.reply <- p.sess.Signal(m.sig)
		}
	case resizeMsg:
		switch {
		case !p.tty:
			m.reply <- osproc.ErrNotPTY
		case p.closed():
			m.reply <- nil
		default:
			m.reply <- p.sess.Resize(m.rows, m.cols)
		}
	case infoMsg:
		p.publishReadView() // the answer shows nextSeq: no older view after it (see answerRead)
		m.reply <- p.info()
	case attachMsg:
		seq := p.attach(m.sub)
		p.publishReadView()
		m.reply <- seq
	case subscribeMsg:
		m.reply <- p.subscribe(m.after, m.capacity)
	case ackMsg:
		p.acknowledge(m.seq)
		if p.sub != nil {
			p.ackMode = true
		}
	case discardMsg:
		why := m.why
		if why == reasonNone {
			why = reasonConnEnd
		}
		p.discardProcess(why)
	}
}

// write queues data for the stdin writer; a repeated writeId is accepted
// and writes nothing.
func (p *process) write(m writeMsg) {
	if m.writeID != "" {
		if _, dup := p.writeIDs[m.writeID]; dup {
			m.reply <- WriteResult{Status: WriteAccepted}
			return
		}
	}
	if p.stdinClosed || p.closed() {
		m.reply <- WriteResult{Status: WriteStdinClosed}
		return
	}
	if m.writeID != "" {
		p.rememberWriteID(m.writeID)
	}
	p.queueStdin(stdinOp{data: m.data, reply: m.reply})
}

func (p *process) rememberWriteID(id string) {
	p.writeIDs[id] = struct{}{}
	p.writeIDFIFO = append(p.writeIDFIFO, id)
	if len(p.writeIDFIFO) > writeIDMemory {
		delete(p.writeIDs, p.writeIDFIFO[0])
		p.writeIDFIFO = p.writeIDFIFO[1:]
	}
}

func (p *process) info() ProcessInfo {
	return ProcessInfo{ID: p.id, Pid: p.pid, Argv: p.argv, TTY: p.tty, State: p.phase.state(), ExitCode: p.exitCode, ExitSignal: p.exitSignal, NextSeq: p.nextSeq, Limit: p.limit}
}
