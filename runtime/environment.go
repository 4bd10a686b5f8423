package runtime

import (
	"context"

	"github.com/runtimed/runtimed/actors"
	"github.com/runtimed/runtimed/actors/contain"
	"github.com/runtimed/runtimed/actors/hostenv"
	"github.com/runtimed/runtimed/actors/sandbox"
	"github.com/runtimed/runtimed/wire"
)

// DefaultMaxHTTPBodyBytes caps a buffered http/request response body.
const DefaultMaxHTTPBodyBytes = 16 << 20

// capabilities is the one place that says which optional features
// (environmentInfo.capabilities, PROTOCOL.md section 7.1) this build
// provides. Set a flag only together with the code that makes the feature
// work; every other flag stays false. cfg and iso (the probed sandbox host,
// nil-safe) are there for flags that depend on the configuration or on what
// this host can enforce.
func capabilities(cfg Config, iso *isolation) wire.Capabilities {
	_ = cfg
	c := wire.Capabilities{
		FsWatchMissing:     true, // fs/watchMissing + fs/missingChanged (actors/fsops)
		FileWriteStreaming: true, // fs/open mode "replace" + fs/writeBlock (actors/fsops)
		// fs/open (both modes) and fs/readBlock/writeBlock hold a request's
		// sandbox to its rules before touching the disk (actors/fsops checkSandbox).
		SandboxedFileStreaming: true,
		// process/ack: handed output stays retained until acknowledged
		// (actors, the unread-output rule).
		RuntimedOutputAck: true,
		// environmentConfig/read: system and user layers, projected
		// (actors/codexhome).
		EnvironmentConfigRead: true,
		// capabilities/discoverV2 and capabilityRoots/discoverV1
		// (actors/codexhome), every read offered to the request's sandbox
		// through the check fs/* requests use (fsops.ReadCheck).
		CapabilityDiscoveryV2:      true,
		CapabilityDiscoverySandbox: true,
		// http/request headers {name, value, valueEnvVar} (actors/httpreq).
		HTTPHeaderEnvVars: true,
	}
	if iso != nil {
		c.RuntimedSandbox = iso.Host.Enforces()
		c.RuntimedSandboxSubpaths = c.RuntimedSandbox && (iso.Host.MountNS || iso.Host.EnforcedLevel() == sandbox.LevelNamespaces)
		c.RuntimedSandboxNamespaces = iso.Host.EnforcedLevel() == sandbox.LevelNamespaces
		// A policy with "/" writable keeps /dev/null, zero, full, random,
		// urandom and tty usable (the sandbox's device rules apply whatever
		// the root access; cmd/runtimed TestSandboxRootWritePreservesDevices).
		// linuxApprovedRootWritePreservesRestrictions stays false: denied
		// root-metadata symlink targets under approved root writes are not
		// verified here.
		c.LinuxRootWritePreservesDevices = c.RuntimedSandbox
		// A managed network only where the sandbox places the proxies as
		// the command's only way out (Config.NetPlacer); never advertised
		// otherwise.
		c.NetworkProxyLaunch = iso.net != nil
		c.NetworkProxyReviewDomains = c.NetworkProxyLaunch
		if iso.Contain != nil {
			c.RuntimedTreeContainment = iso.Contain.Mode() != contain.ModePgroup
			c.RuntimedLimits = iso.Contain.LimitsOnTree()
		}
	}
	return c
}

// Shell is a login shell: its base name ("bash") and path.
type Shell struct {
	Name string // the base name, e.g. "bash"
	Path string // the absolute path, e.g. "/bin/bash"
}

// EnvironmentInfo describes the machine a backend runs processes on
// (environment/info). Paths are native absolute paths; "" means unknown.
type EnvironmentInfo struct {
	// Shell is the daemon user's login shell (its passwd entry, else
	// $SHELL, else /bin/sh).
	Shell Shell
	// ExecutorVersion is the runtimed version (semver; "0.0.0-devel+<rev>"
	// for a build from a checkout).
	ExecutorVersion string
	// ProviderID identifies the installation: "sha256:" of host name,
	// executable path and uid. It is stable across restarts.
	ProviderID           string
	Cwd                  string   // the backend's working directory
	UserHomeDir          string   // the daemon user's home directory
	PlatformOS           string   // e.g. "linux"
	PrependPathDirs      []string // directories a client should put first on PATH
	TemporaryDirectories []string // $TMPDIR when set
	TempDir              string   // where temporary files go ($TMPDIR, else /tmp)
	// Capabilities maps each optional feature's name (wire.Cap*) to whether
	// the backend provides it.
	Capabilities map[string]bool
}

// hostEnvironment collects the host's description once per backend.
func hostEnvironment() hostenv.Info { return hostenv.Collect() }

// environmentFromWire converts the protocol's form (file: URIs) to the Go
// API's (native paths). A value that is not a file: URI is kept as it is.
func environmentFromWire(w wire.EnvironmentInfo) EnvironmentInfo {
	info := EnvironmentInfo{
		Shell:                Shell{Name: w.Shell.Name, Path: w.Shell.Path},
		ExecutorVersion:      w.ExecutorVersion,
		ProviderID:           w.ProviderID,
		UserHomeDir:          nativePath(w.UserHomeDir),
		PlatformOS:           w.PlatformOS,
		TempDir:              nativePath(w.TempDir),
		PrependPathDirs:      nativePaths(w.PrependPathDirs),
		TemporaryDirectories: nativePaths(w.TemporaryDirectories),
		Capabilities:         map[string]bool{},
	}
	if w.Cwd != nil {
		info.Cwd = nativePath(*w.Cwd)
	}
	for k, v := range w.Capabilities {
		info.Capabilities[k] = v
	}
	return info
}

// nativePath is the native path of a URI the server sent (wire.ParseFileURI,
// the decoder of the server's own arguments); what is not a local file: URI
// is kept as sent.
func nativePath(s string) string {
	if !wire.IsFileURI(s) {
		return s
	}
	p, err := wire.ParseFileURI(s)
	if err != nil {
		return s
	}
	return p
}

func nativePaths(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = nativePath(s)
	}
	return out
}

// EnvironmentInfo describes this machine as a server started with the same
// Config would (environment/info).
func (l *Local) EnvironmentInfo(ctx context.Context) (EnvironmentInfo, error) {
	if err := ctx.Err(); err != nil {
		return EnvironmentInfo{}, err
	}
	return environmentFromWire(l.sup.EnvironmentInfo()), nil
}

// EnvironmentInfo asks the server to describe its machine
// (environment/info). A server that predates it answers an *RPCError with
// code -32601.
func (c *Client) EnvironmentInfo(ctx context.Context) (EnvironmentInfo, error) {
	var res wire.EnvironmentInfo
	if err := c.call(ctx, wire.MethodEnvironmentInfo, nil, &res); err != nil {
		return EnvironmentInfo{}, err
	}
	return environmentFromWire(res), nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// actorMetadata and wireMetadata carry Spec.Metadata to the process actor
// (Local) and to process/start (Client).
func actorMetadata(m *Metadata) *actors.Metadata {
	if m == nil {
		return nil
	}
	return &actors.Metadata{ThreadID: optional(m.ThreadID), ToolCallID: optional(m.ToolCallID)}
}

func wireMetadata(m *Metadata) *wire.ProcessMetadata {
	if m == nil {
		return nil
	}
	return &wire.ProcessMetadata{ThreadID: optional(m.ThreadID), ToolCallID: optional(m.ToolCallID)}
}
