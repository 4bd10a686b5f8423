package actors

import (
	"strings"

	"github.com/runtimed/runtimed/actors/hostenv"
	"github.com/runtimed/runtimed/wire"
)

// Metadata attributes a process to a client's thread and tool call
// (process/start's metadata). It is kept as given and shown by process/list.
type Metadata struct {
	ThreadID   *string
	ToolCallID *string
}

// Metadata returns the process's metadata, or nil when none was given.
func (r *ProcessRef) Metadata() *Metadata { return r.meta }

// environmentInfo is the answer of environment/info (and the initialize
// result's environmentInfo): h's paths as file: URIs, caps as a map with
// every known name.
func environmentInfo(h hostenv.Info, caps wire.Capabilities) wire.EnvironmentInfo {
	info := wire.EnvironmentInfo{
		Shell:                wire.ShellInfo{Name: h.ShellName, Path: h.ShellPath},
		ExecutorVersion:      ExecutorVersion(h.Version),
		ProviderID:           h.ProviderID,
		PlatformOS:           h.OS,
		UserHomeDir:          fileURI(h.Home),
		TempDir:              fileURI(h.TempDir),
		PrependPathDirs:      fileURIs(h.PrependPathDirs),
		TemporaryDirectories: fileURIs(h.TempDirs),
		Capabilities:         caps.Map(),
	}
	if h.Cwd != "" {
		cwd := fileURI(h.Cwd)
		info.Cwd = &cwd
	}
	return info
}

// CodexProtocolVersion is the newest Codex release whose exec-server
// protocol runtimed speaks (PROTOCOL.md section 7).
const CodexProtocolVersion = "0.171.0"

// ExecutorVersion is environmentInfo.executorVersion for runtimed version
// v: CodexProtocolVersion with v as semver build metadata
// ("0.171.0+runtimed.1.4.2"). Codex compares the executor's version to
// decide what to ask of it (0.169 sends capabilities/discoverV2 only to an
// executor of 0.164.0 or later, whatever its capabilities say), so the
// version it compares is the protocol level runtimed implements; runtimed's
// own version stays in the build metadata, which semver ordering ignores.
func ExecutorVersion(v string) string {
	var b strings.Builder
	b.WriteString(CodexProtocolVersion + "+runtimed")
	ident := false
	for _, r := range v {
		switch {
		case r >= '0' && r <= '9', r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r == '-':
			if !ident {
				b.WriteByte('.')
				ident = true
			}
			b.WriteRune(r)
		default: // '.', '+' and anything semver metadata cannot hold separate identifiers
			ident = false
		}
	}
	return b.String()
}

// fileURI turns an absolute native path into a file: URI with
// wire.FileURI, the encoder of every fs/* answer too ("" stays "").
func fileURI(p string) string {
	if p == "" {
		return ""
	}
	return wire.FileURI(p)
}

func fileURIs(ps []string) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		if p != "" {
			out = append(out, fileURI(p))
		}
	}
	return out
}

// environment answers environment/info.
func (c *conn) environment(msg wire.Message) {
	var p wire.NoParams
	if !c.params(msg, &p) {
		return
	}
	c.reply(msg.ID, c.sup.envInfo, nil)
}

// EnvironmentInfo is what environment/info answers on this supervisor's
// connections.
func (s *Supervisor) EnvironmentInfo() wire.EnvironmentInfo { return *s.envInfo }
