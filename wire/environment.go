package wire

// MethodEnvironmentInfo answers the executor's EnvironmentInfo (PROTOCOL.md
// section 7.1).
const MethodEnvironmentInfo = "environment/info"

// ShellInfo is the user's login shell: Name is the base name of Path
// ("bash", "zsh", "sh", ...).
type ShellInfo struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// EnvironmentInfo describes the executor: the initialize result's
// environmentInfo and the result of environment/info. Paths are file: URIs.
type EnvironmentInfo struct {
	Shell ShellInfo `json:"shell"`
	// ExecutorVersion is runtimed's own version (a semver string).
	ExecutorVersion string `json:"executorVersion"`
	// ProviderID identifies this executor installation ("sha256:<hex>").
	ProviderID string `json:"providerId"`
	// Cwd is the daemon's working directory; null when it cannot be read.
	Cwd                  *string         `json:"cwd"`
	UserHomeDir          string          `json:"userHomeDir,omitempty"`
	PlatformOS           string          `json:"platformOs"`
	PrependPathDirs      []string        `json:"prependPathDirs"`
	TemporaryDirectories []string        `json:"temporaryDirectories"`
	TempDir              string          `json:"tempDir,omitempty"`
	Capabilities         map[string]bool `json:"capabilities"`
}

// Names of the capabilities Codex 0.169 gates on environmentInfo. Each is
// true only when the feature it names works on this executor.
const (
	// CapNetworkProxyLaunch: process/start accepts networkProxy, instructions
	// to launch an executor-local managed-network proxy.
	CapNetworkProxyLaunch = "networkProxyLaunch"
	// CapNetworkProxyReviewDomains: that proxy can ask the client to review
	// domains it would otherwise block.
	CapNetworkProxyReviewDomains = "networkProxyReviewDomains"
	// CapCredentialMasking: the executor masks credentials it injects into
	// processes (and CapCredentialMaskingCustomProviders: for custom
	// model providers too).
	CapCredentialMasking                = "credentialMasking"
	CapCredentialMaskingCustomProviders = "credentialMaskingCustomProviders"
	// CapCapabilityDiscoverySandbox: capability discovery applies the
	// filesystem sandbox sent with each root.
	CapCapabilityDiscoverySandbox = "capabilityDiscoverySandbox"
	// CapFsWatchMissing: fs/watchMissing and fs/missingChanged.
	CapFsWatchMissing = "fsWatchMissing"
	// CapCapabilityDiscoveryV2: capabilities/discoverV2.
	CapCapabilityDiscoveryV2 = "capabilityDiscoveryV2"
	// CapEnvironmentConfigRead: environmentConfig/read.
	CapEnvironmentConfigRead = "environmentConfigRead"
	// CapHTTPHeaderEnvVars: http/request header values may name an
	// executor environment variable to read them from.
	CapHTTPHeaderEnvVars = "httpHeaderEnvVars"
	// CapSandboxedFileStreaming: fs/open streams honour the request's sandbox.
	CapSandboxedFileStreaming = "sandboxedFileStreaming"
	// CapFileWriteStreaming: fs/open mode "replace" and fs/writeBlock.
	CapFileWriteStreaming = "fileWriteStreaming"
	// CapShellSnapshotV2: process/start's shellSnapshot (shell state cached
	// and restored inside the executor).
	CapShellSnapshotV2 = "shellSnapshotV2"
	// CapWindowsMxc: requests may select the MXC Windows sandbox backend.
	CapWindowsMxc = "windowsMxc"
	// CapLinuxRootWritePreservesDevices: a Linux sandbox with "/" writable
	// keeps the standard devices usable.
	CapLinuxRootWritePreservesDevices = "linuxRootWritePreservesDevices"
	// CapLinuxApprovedRootWritePreservesRestrictions: approved root writes
	// keep devices and denied root-metadata symlink targets restricted.
	CapLinuxApprovedRootWritePreservesRestrictions = "linuxApprovedRootWritePreservesRestrictions"

	// runtimed extensions (Codex ignores names it does not know):

	// CapRuntimedSandbox: this host enforces process/start.sandbox
	// (Landlock ABI 6+, seccomp); false means every sandboxed start is refused.
	CapRuntimedSandbox = "runtimedSandbox"
	// CapRuntimedSandboxSubpaths: read-only subpaths under writable roots
	// and deny entries under readable ones (a private mount namespace).
	CapRuntimedSandboxSubpaths = "runtimedSandboxSubpaths"
	// CapRuntimedSandboxNamespaces: sandboxed starts get the namespaces
	// level (a read-only mount tree, private /dev, /proc, IPC and network,
	// docs/sandbox.md); false with runtimedSandbox true means the operator
	// chose --sandbox-level landlock, which leaves that list open.
	CapRuntimedSandboxNamespaces = "runtimedSandboxNamespaces"
	// CapRuntimedTreeContainment: every descendant of a process is tracked
	// by a cgroup and dies with it (setsid and double forks included).
	CapRuntimedTreeContainment = "runtimedTreeContainment"
	// CapRuntimedLimits: process/start.limits memoryBytes and pids bound
	// the whole tree (a cgroup); cpuSeconds, openFiles and fileSizeBytes
	// are per-process rlimits and always available.
	CapRuntimedLimits = "runtimedLimits"
	// CapRuntimedOutputAck: process/ack is served: output handed to the
	// connection stays retained until the client acknowledges it, so a
	// resume after an abrupt drop loses nothing in flight.
	CapRuntimedOutputAck = "runtimedOutputAck"
)

// Capabilities is the set of optional features this executor provides. The
// server fills it (package runtime, one place) with true only for what works;
// Map turns it into environmentInfo.capabilities, every known name present.
type Capabilities struct {
	NetworkProxyLaunch                          bool
	NetworkProxyReviewDomains                   bool
	CredentialMasking                           bool
	CredentialMaskingCustomProviders            bool
	CapabilityDiscoverySandbox                  bool
	FsWatchMissing                              bool
	CapabilityDiscoveryV2                       bool
	EnvironmentConfigRead                       bool
	HTTPHeaderEnvVars                           bool
	SandboxedFileStreaming                      bool
	FileWriteStreaming                          bool
	ShellSnapshotV2                             bool
	WindowsMxc                                  bool
	LinuxRootWritePreservesDevices              bool
	LinuxApprovedRootWritePreservesRestrictions bool

	RuntimedSandbox           bool
	RuntimedSandboxSubpaths   bool
	RuntimedSandboxNamespaces bool
	RuntimedTreeContainment   bool
	RuntimedLimits            bool
	RuntimedOutputAck         bool
}

// fields pairs each capability name with its flag, in Codex's order.
func (c *Capabilities) fields() []struct {
	name string
	flag *bool
} {
	return []struct {
		name string
		flag *bool
	}{
		{CapNetworkProxyLaunch, &c.NetworkProxyLaunch},
		{CapNetworkProxyReviewDomains, &c.NetworkProxyReviewDomains},
		{CapCredentialMasking, &c.CredentialMasking},
		{CapCredentialMaskingCustomProviders, &c.CredentialMaskingCustomProviders},
		{CapCapabilityDiscoverySandbox, &c.CapabilityDiscoverySandbox},
		{CapFsWatchMissing, &c.FsWatchMissing},
		{CapCapabilityDiscoveryV2, &c.CapabilityDiscoveryV2},
		{CapEnvironmentConfigRead, &c.EnvironmentConfigRead},
		{CapHTTPHeaderEnvVars, &c.HTTPHeaderEnvVars},
		{CapSandboxedFileStreaming, &c.SandboxedFileStreaming},
		{CapFileWriteStreaming, &c.FileWriteStreaming},
		{CapShellSnapshotV2, &c.ShellSnapshotV2},
		{CapWindowsMxc, &c.WindowsMxc},
		{CapLinuxRootWritePreservesDevices, &c.LinuxRootWritePreservesDevices},
		{CapLinuxApprovedRootWritePreservesRestrictions, &c.LinuxApprovedRootWritePreservesRestrictions},
		{CapRuntimedSandbox, &c.RuntimedSandbox},
		{CapRuntimedSandboxSubpaths, &c.RuntimedSandboxSubpaths},
		{CapRuntimedSandboxNamespaces, &c.RuntimedSandboxNamespaces},
		{CapRuntimedTreeContainment, &c.RuntimedTreeContainment},
		{CapRuntimedLimits, &c.RuntimedLimits},
		{CapRuntimedOutputAck, &c.RuntimedOutputAck},
	}
}

// Map returns every known capability name with its flag.
func (c Capabilities) Map() map[string]bool {
	fs := c.fields()
	m := make(map[string]bool, len(fs))
	for _, f := range fs {
		m[f.name] = *f.flag
	}
	return m
}

// CapabilitiesFromMap reads known names from m (a client's view of a
// server's capabilities); unknown names are ignored, missing ones are false.
func CapabilitiesFromMap(m map[string]bool) Capabilities {
	var c Capabilities
	for _, f := range c.fields() {
		*f.flag = m[f.name]
	}
	return c
}

// CapabilityNames lists every known capability name, in Codex's order.
func CapabilityNames() []string {
	var c Capabilities
	fs := c.fields()
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = f.name
	}
	return names
}
