package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/runtimed/runtimed/runtime"
	"github.com/runtimed/runtimed/wire"
)

const fsConfigUsage = `usage: runtimed fs config [--connect URL [--token-file F] [--ca F]] [--key K[.K...]]... [--json] [DIR]
Shows what the executor reports to Codex about its own Codex installation:
the configuration layers (environmentConfig/read: /etc/codex/config.toml and
$CODEX_HOME/config.toml, else ~/.codex/config.toml) projected onto each --key
(default mcp_servers, what Codex asks for), the requirements for the same keys,
and the installed skills and plugins (capabilities/discoverV2). DIR is the
working directory the questions are asked for (default: the current one).
Without --connect it reads this machine through the embedded runtime.
`

// codexHomeReader is implemented by runtime.Local and runtime.Client.
type codexHomeReader interface {
	CodexConfig(ctx context.Context, q runtime.CodexConfigQuery) (wire.EnvironmentConfigReadResult, error)
	DiscoverCapabilities(ctx context.Context, cwd string) (wire.DiscoverV2Result, error)
}

func fsConfigCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("runtimed fs config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf clientFlags
	cf.register(fs, false)
	var keys stringList
	fs.Var(&keys, "key", "a dotted TOML key path to report (repeatable; default mcp_servers)")
	asJSON := fs.Bool("json", false, "print the two answers as JSON, as the protocol carries them")
	fs.Usage = func() { fmt.Fprint(stderr, fsConfigUsage); fmt.Fprintln(stderr, "\nflags:"); fs.PrintDefaults() }
	if code, done := parseArgs(fs, args); done {
		return code
	}
	if fs.NArg() > 1 {
		fs.Usage()
		return 2
	}
	dir := fs.Arg(0)
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			fmt.Fprintln(stderr, "runtimed fs config:", err)
			return 1
		}
		dir = wd
	}
	if len(keys) == 0 {
		keys = stringList{"mcp_servers"}
	}
	var paths [][]string
	for _, k := range keys {
		paths = append(paths, strings.Split(k, "."))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	b, err := cf.backend(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "runtimed fs config:", err)
		return 1
	}
	defer b.Close()
	r, ok := b.(codexHomeReader)
	if !ok {
		fmt.Fprintln(stderr, "runtimed fs config: this backend cannot read the executor's Codex home")
		return 1
	}
	cfg, err := r.CodexConfig(ctx, runtime.CodexConfigQuery{Cwd: dir, ConfigPaths: paths, RequirementsPaths: paths})
	if err != nil {
		return fsResult(stderr, err)
	}
	inv, err := r.DiscoverCapabilities(ctx, dir)
	if err != nil {
		return fsResult(stderr, err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(map[string]any{"environmentConfig": cfg, "capabilities": inv})
		return 0
	}
	printCodexHome(stdout, cfg, inv)
	return 0
}

func printCodexHome(w io.Writer, cfg wire.EnvironmentConfigReadResult, inv wire.DiscoverV2Result) {
	fmt.Fprintf(w, "codex home: %s\n", cfg.CodexHomeDir)
	stack := func(title string, s wire.EnvironmentConfigLayerStack) {
		fmt.Fprintf(w, "\n%s (%d layers):\n", title, len(s.Layers))
		for _, l := range s.Layers {
			fmt.Fprintf(w, "# %s\n%s", l.Source, l.TOML)
		}
		for _, e := range s.Errors {
			fmt.Fprintf(w, "# %s: NOT LOADED: %s\n", e.Source, e.Message)
		}
	}
	stack("config", cfg.Config)
	stack("requirements", cfg.Requirements)
	fmt.Fprintf(w, "\nskills (%d):\n", len(inv.Skills))
	for _, s := range inv.Skills {
		root := ""
		if s.DiscoveryRoot != nil {
			root = " [" + s.DiscoveryRoot.ID + "]"
		}
		fmt.Fprintf(w, "  %s%s: %s (%s)\n", s.Name, root, s.Description, s.Path)
	}
	fmt.Fprintf(w, "\nplugins (%d):\n", len(inv.Plugins))
	for _, p := range inv.Plugins {
		fmt.Fprintf(w, "  %s %s (%s), %d skills\n", p.ID, p.Version, p.Root, len(p.Skills))
		for _, s := range p.Skills {
			fmt.Fprintf(w, "    %s: %s\n", s.Name, s.Description)
		}
	}
	for _, warn := range inv.Warnings {
		fmt.Fprintf(w, "\nwarning: %s\n", warn)
	}
}
