// Command runtimed is the runtimed daemon and its command-line client.
//
//	runtimed serve [--listen ws://127.0.0.1:0 | stdio://] [flags]
//
// Run "runtimed help" for the full list.
package main

import (
	"fmt"
	"io"
	"os"
)

const usage = `runtimed: a process runtime that other programs talk to.

Usage:
  runtimed serve [flags]     serve the protocol over websocket (default ws://127.0.0.1:0) or stdio://
  runtimed help              this text

Run "runtimed serve -h" for the serve flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stdin, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "runtimed: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}
