// Package codexhome reads what the executor's own Codex installation holds:
// its configuration layers (environmentConfig/read) and its installed
// skills and plugins (capabilities/discoverV2, capabilityRoots/discoverV1).
// It knows nothing of actors; the connection actor turns its results into
// the protocol's answers (PROTOCOL.md section 7.6). Of the wire it uses only
// wire.FileURI, the one file: URI encoder, for the paths it reports.
//
// # Usage
//
//	env := codexhome.Env(os.Environ())
//	home, err := codexhome.CodexHome(env)            // $CODEX_HOME (must exist), else ~/.codex
//	if err := codexhome.ValidateSelectors(cfg, req); err != nil { ... } // the reference's texts
//	c := codexhome.ReadConfig("", home, cfg, req)     // system + user layers, projected, as TOML
//	inv := codexhome.Scanner{MayRead: check}.Discover(home, codexhome.HomeDir(env), "")
//	root := codexhome.Scanner{MayRead: check}.ScanRoot("/abs/root")
//
// Configuration: /etc/codex/config.toml (system) and $CODEX_HOME/config.toml
// (user), /etc/codex/requirements.toml (requirements). Each is decoded with
// github.com/BurntSushi/toml, reduced to the requested key paths (a path
// that meets a non-table keeps that value whole, as the reference does) and
// re-encoded; keys come out sorted, scalars before tables.
//
// Discovery: skills are directories holding a SKILL.md (YAML front matter
// with name, description and metadata.short-description; agents/openai.yaml
// adds dependencies and policy) under $CODEX_HOME/skills, ~/.agents/skills
// and /etc/codex/skills; plugins are $CODEX_HOME/plugins/cache/<marketplace>/
// <plugin>/<version> with a .codex-plugin/plugin.json.
//
// # Concurrency
//
// Everything here is synchronous and stateless; any goroutine may call it.
// Results are new values owned by the caller.
//
// # Failure semantics
//
// A configuration layer that cannot be read or parsed is left out and
// listed in its Stack's Errors (path:line:column: message for a parse
// error); the read itself does not fail. Discovery never fails as a whole:
// an unreadable or sandbox-denied path, a file over the size bound or a
// malformed SKILL.md becomes a warning (discoverV2 reports one generic
// warning, as the reference); a root that is missing or not a directory is
// that root's Err.
//
// # Backpressure
//
// Every read is bounded: configuration files at MaxConfigBytes, discovered
// files at Scanner.MaxFileBytes, a walk at MaxDepth levels, MaxEntries
// directory entries and MaxSkills skills per root; selectors at
// MaxSelectors paths of MaxSelectorSegments keys, MaxSelectorBytes in all.
package codexhome
