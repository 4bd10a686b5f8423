package main

import (
	"fmt"
	"io"
	"os"
)

const usage = `runtimed: a process runtime that other programs talk to.

Usage:
  runtimed serve [flags]                          serve the protocol over websocket (default ws://127.0.0.1:0) or stdio://
  runtimed exec [--connect URL] [-t] -- CMD ...   run a command (remotely, or embedded without --connect); exits with its code
  runtimed stdio [--connect URL] -- CMD ...       bridge local stdin/stdout to a command byte for byte (e.g. an MCP server)
  runtimed ps --connect URL --session ID          list a session's processes
  runtimed attach --connect URL SESSION PROCESS   re-attach to a process of a detached session; exits with its code
  runtimed fs cat|put|ls|stat [--connect URL] PATH  read, write, list or describe files (remotely or here)
  runtimed bench (--connect URL | --spawn 'CMD') measure a runtimed or any compatible server
  runtimed version                                print the version and build information
  runtimed help                                   this text

URLs are ws://HOST:PORT, or wss://HOST:PORT for TLS (then --ca FILE for a
private certificate authority). A server with a token needs --token-file FILE
or RUNTIMED_AUTH_TOKEN. Run "runtimed COMMAND -h" for a command's flags;
docs/PROTOCOL.md is the protocol, docs/operations.md the operator's guide.
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
	case "exec":
		return execCmd(args[1:], stdin, stdout, stderr)
	case "stdio":
		return stdioCmd(args[1:], stdin, stdout, stderr)
	case "ps":
		return psCmd(args[1:], stdout, stderr)
	case "attach":
		return attachCmd(args[1:], stdin, stdout, stderr)
	case "fs":
		return fsCmd(args[1:], stdin, stdout, stderr)
	case "bench":
		return benchCmd(args[1:], stdout, stderr)
	case "version", "--version":
		return versionCmd(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "runtimed: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}
