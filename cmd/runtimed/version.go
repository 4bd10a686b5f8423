package main

import (
	"flag"
	"fmt"
	"io"
	goruntime "runtime"
	"runtime/debug"

	"github.com/runtimed/runtimed/runtime"
)

// versionCmd prints the version and what the binary was built from.
func versionCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("runtimed version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	setUsage(fs, stderr, "runtimed version", "Prints runtimed's version, the Go version and platform, and the VCS revision and module versions it was built from.")
	if code, done := parseArgs(fs, args); done {
		return code
	}
	fmt.Fprintf(stdout, "runtimed %s\n", runtime.BuildVersion())
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		fmt.Fprintf(stdout, "go: %s %s/%s (no build information)\n", goruntime.Version(), goruntime.GOOS, goruntime.GOARCH)
		return 0
	}
	fmt.Fprintf(stdout, "go: %s %s/%s\n", bi.GoVersion, goruntime.GOOS, goruntime.GOARCH)
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision", "vcs.time", "vcs.modified", "CGO_ENABLED", "-trimpath", "-tags", "-ldflags":
			fmt.Fprintf(stdout, "%s: %s\n", s.Key, s.Value)
		}
	}
	for _, d := range bi.Deps {
		fmt.Fprintf(stdout, "dep: %s %s\n", d.Path, d.Version)
	}
	return 0
}
