package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"syscall"
	"time"

	"github.com/runtimed/runtimed/runtime"
)

const fsUsage = `usage: runtimed fs COMMAND [--connect URL [--token-file F] [--ca F]] PATH
  cat PATH    write the file to stdout (streamed with fs/open + fs/readBlock)
  put PATH    replace the file atomically with stdin
  ls PATH     list a directory
  stat PATH   describe what PATH points to
  config [DIR]  what the executor reports about its Codex home (see runtimed fs config -h)
Without --connect the command runs on this machine through the embedded runtime.
PATH is absolute (or a file: URI); a server started with --fs-root refuses
paths outside its roots.
`

// fsCmd runs one filesystem command against a server or locally.
func fsCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	sub := ""
	if len(args) > 0 {
		sub = args[0]
	}
	fs := flag.NewFlagSet("runtimed fs "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf clientFlags
	cf.register(fs, false)
	fs.Usage = func() { fmt.Fprint(stderr, fsUsage); fmt.Fprintln(stderr, "\nflags:"); fs.PrintDefaults() }
	switch sub {
	case "":
		fs.Usage()
		return 2
	case "-h", "-help", "--help", "help":
		fs.Usage()
		return 0
	case "config":
		return fsConfigCmd(args[1:], stdout, stderr)
	}
	if code, done := parseArgs(fs, args[1:]); done {
		return code
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	path := fs.Arg(0)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	b, err := cf.backend(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "runtimed fs:", err)
		return 1
	}
	defer b.Close()
	fsys := b.(runtime.FileSystem)
	switch sub {
	case "cat":
		r, err := fsys.Open(ctx, path)
		if err == nil {
			_, err = io.Copy(stdout, r)
			if cerr := r.Close(); err == nil {
				err = cerr
			}
		}
		return fsResult(stderr, err)
	case "put":
		w := fsys.Create(ctx, path)
		_, err := io.Copy(w, stdin)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		return fsResult(stderr, err)
	case "ls":
		ents, err := fsys.ReadDirectory(ctx, path)
		for _, e := range ents {
			suffix := ""
			switch {
			case e.IsDirectory:
				suffix = "/"
			case !e.IsFile:
				suffix = "@"
			}
			fmt.Fprintln(stdout, e.Name+suffix)
		}
		return fsResult(stderr, err)
	case "stat":
		st, err := fsys.Stat(ctx, path)
		if err == nil {
			kind := "other"
			switch {
			case st.IsDirectory:
				kind = "directory"
			case st.IsFile:
				kind = "file"
			}
			if st.IsSymlink {
				kind = "symlink to " + kind
			}
			fmt.Fprintf(stdout, "type: %s\nsize: %d\nmodified: %s\ncreated: %s\n", kind, st.Size, st.Modified.Format(time.RFC3339), st.Created.Format(time.RFC3339))
		}
		return fsResult(stderr, err)
	default:
		fmt.Fprintf(stderr, "runtimed fs: unknown command %q\n%s", sub, fsUsage)
		return 2
	}
}

func fsResult(stderr io.Writer, err error) int {
	if err == nil {
		return 0
	}
	var re *runtime.RPCError
	if errors.As(err, &re) {
		fmt.Fprintf(stderr, "runtimed fs: %s\n", re.Message)
	} else {
		fmt.Fprintln(stderr, "runtimed fs:", err)
	}
	return 1
}
