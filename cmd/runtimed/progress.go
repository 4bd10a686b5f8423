package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/term"
)

// progress shows what a long command is doing on one self-rewriting line
// of stderr, only when stderr is a terminal (never in logs or pipes). A nil
// *progress does nothing. Used by one goroutine.
type progress struct {
	w     io.Writer
	start time.Time
	shown bool
}

func newProgress(stderr io.Writer) *progress {
	f, ok := stderr.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return &progress{w: stderr, start: time.Now()}
}

// step shows "what, run i/n" with the elapsed time.
func (p *progress) step(what string, i, n int) {
	if p == nil {
		return
	}
	fmt.Fprintf(p.w, "\r\033[Krunning %s, run %d/%d (%s elapsed)", what, i, n, time.Since(p.start).Round(time.Second))
	p.shown = true
}

// done clears the line.
func (p *progress) done() {
	if p == nil || !p.shown {
		return
	}
	fmt.Fprint(p.w, "\r\033[K")
	p.shown = false
}
