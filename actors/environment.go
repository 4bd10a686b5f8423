package actors

import (
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
		ExecutorVersion:      h.Version,
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
