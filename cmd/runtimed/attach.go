package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	"github.com/runtimed/runtimed/runtime"
)

// detachKey, typed on an attached terminal, detaches and leaves the
// process running (Ctrl-], as telnet's escape).
const detachKey = 0x1d

// attachCmd re-attaches to a process of a detached session: it resumes the
// session, shows the process's retained output, then its live output,
// forwards stdin, and exits with the process's status.
func attachCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("runtimed attach", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf clientFlags
	cf.register(fs, true)
	noStdin := fs.Bool("no-stdin", false, "do not forward local stdin")
	closeStdin := fs.Bool("close-stdin", false, "close the process's stdin when local stdin ends (default: leave it open for a later attach)")
	setUsage(fs, stderr, "runtimed attach --connect URL [--token-file F] [--ca F] [--no-stdin] [--close-stdin] SESSION PROCESS", `
Re-attaches to process PROCESS of the detached session SESSION (the
sessionId its client got from initialize; runtimed ps lists the processes):
prints the output the server still retains, then the live output, forwards
local stdin, and exits with the process's status, like runtimed exec. A
process on a PTY gets the local terminal in raw mode and its size; Ctrl-]
detaches and leaves it running (exit 0). Ctrl-C (not on a terminal) is
forwarded as SIGINT, a second one within 2 s terminates the process.
Exits 125 when it cannot attach (cannot connect, refused, unknown session
or process, session still held by another connection after 5 s).`)
	if code, done := parseArgs(fs, args); done {
		return code
	}
	if cf.connect == "" || fs.NArg() != 2 {
		fs.Usage()
		return 2
	}
	session, id := fs.Arg(0), fs.Arg(1)
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A client that just dropped may still hold the session until the
	// server notices: Dial retries that refusal (-32010) for its connect
	// timeout before giving up.
	c, ok := cf.dialSession(ctx, "attach", session, stderr)
	if !ok {
		return exitRuntimeFailed
	}
	defer c.Close()
	procs, err := c.List(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "runtimed attach: process/list:", err)
		return exitRuntimeFailed
	}
	var info *runtime.ProcessInfo
	for i := range procs {
		if procs[i].ID == id {
			info = &procs[i]
		}
	}
	if info == nil {
		fmt.Fprintf(stderr, "runtimed attach: session %s has no process %s (runtimed ps --session %s lists them)\n", session, id, session)
		return exitRuntimeFailed
	}
	p, err := c.Attach(ctx, id)
	if err != nil {
		fmt.Fprintf(stderr, "runtimed attach: %s: %v\n", id, err)
		return exitRuntimeFailed
	}
	f, isFile := stdin.(*os.File)
	raw := info.TTY && isFile && term.IsTerminal(int(f.Fd())) && !*noStdin
	detached := make(chan struct{})
	if raw {
		state, err := term.MakeRaw(int(f.Fd()))
		if err != nil {
			fmt.Fprintln(stderr, "runtimed attach: raw mode:", err)
			return exitRuntimeFailed
		}
		defer func() { _ = term.Restore(int(f.Fd()), state) }()
		if w, h, err := term.GetSize(int(f.Fd())); err == nil {
			_ = p.Resize(ctx, uint16(h), uint16(w))
		}
		go forwardWinch(ctx, p, f)
	} else {
		go forwardSignals(ctx, p, sigs)
	}
	if !*noStdin {
		go forwardAttachedStdin(ctx, p, stdin, raw, *closeStdin, detached)
	}
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		code, err := copyOutput(ctx, p, stdout, stderr)
		done <- result{code, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			fmt.Fprintln(stderr, "runtimed attach:", r.err)
			return exitRuntimeFailed
		}
		if st, err := p.Wait(ctx); err == nil && st.Limit != "" {
			fmt.Fprintf(stderr, "runtimed attach: the process was ended by its %s limit (exit code %d)\n", st.Limit, st.Code)
		}
		return r.code
	case <-detached:
		if raw {
			fmt.Fprint(stderr, "\r\n")
		}
		fmt.Fprintf(stderr, "runtimed attach: detached; %s keeps running in session %s\n", id, session)
		return 0
	}
}

// forwardAttachedStdin copies local stdin to an attached process. On a
// terminal, the detach key ends the attachment (closes detached). At EOF
// the process's stdin is closed only with closeAtEOF. A process without a
// writable stdin ends the forwarding.
func forwardAttachedStdin(ctx context.Context, p runtime.Process, stdin io.Reader, raw, closeAtEOF bool, detached chan<- struct{}) {
	buf := make([]byte, 32<<10)
	for {
		n, err := stdin.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			i := -1
			if raw {
				i = bytes.IndexByte(chunk, detachKey)
			}
			if i >= 0 {
				chunk = chunk[:i]
			}
			if len(chunk) > 0 {
				if werr := p.Write(ctx, bytes.Clone(chunk)); werr != nil {
					return
				}
			}
			if i >= 0 {
				close(detached)
				return
			}
		}
		if err != nil {
			if closeAtEOF {
				_ = p.CloseStdin(ctx)
			}
			return
		}
	}
}
