package wire

import "encoding/json"

// Executor configuration and discovery (PROTOCOL.md section 7.6):
// environmentConfig/read, capabilities/discoverV2, capabilityRoots/discoverV1.
const (
	MethodEnvironmentConfigRead     = "environmentConfig/read"
	MethodCapabilitiesDiscoverV2    = "capabilities/discoverV2"
	MethodCapabilityRootsDiscoverV1 = "capabilityRoots/discoverV1"
)

// EnvironmentConfigReadParams are the params of environmentConfig/read.
// Each path is a list of TOML keys; the answer keeps only what they select.
type EnvironmentConfigReadParams struct {
	Cwd               string     `json:"cwd"`
	ConfigPaths       [][]string `json:"configPaths"`
	RequirementsPaths [][]string `json:"requirementsPaths"`
}

func (*EnvironmentConfigReadParams) RequiredFields() []string {
	return []string{"cwd", "configPaths", "requirementsPaths"}
}

// EnvironmentConfigLayer is one configuration source, projected and
// re-emitted as TOML. BaseDir (a file: URI) is where its relative paths
// are resolved.
type EnvironmentConfigLayer struct {
	Source  string `json:"source"`
	BaseDir string `json:"baseDir"`
	TOML    string `json:"toml"`
}

// EnvironmentConfigLayerError is a source that could not be read or
// parsed (runtimed extension: the reference fails the whole request).
type EnvironmentConfigLayerError struct {
	Source  string `json:"source"`
	Message string `json:"message"`
}

// EnvironmentConfigLayerStack lists layers from lowest to highest
// precedence; CloudInsertionIndex is where a client inserts cloud layers.
// Errors (runtimed extension) names the layers left out.
type EnvironmentConfigLayerStack struct {
	Layers              []EnvironmentConfigLayer      `json:"layers"`
	CloudInsertionIndex int                           `json:"cloudInsertionIndex"`
	Errors              []EnvironmentConfigLayerError `json:"errors,omitempty"`
}

// EnvironmentConfigReadResult is the answer of environmentConfig/read.
type EnvironmentConfigReadResult struct {
	UserHomeDir  *string                     `json:"userHomeDir"`
	CodexHomeDir string                      `json:"codexHomeDir"`
	Hostname     *string                     `json:"hostname"`
	Config       EnvironmentConfigLayerStack `json:"config"`
	Requirements EnvironmentConfigLayerStack `json:"requirements"`
}

// DiscoverV2Params are the params of capabilities/discoverV2. Sandbox is
// the fs sandbox (section 7.3) the reads are held to; null: none.
type DiscoverV2Params struct {
	Cwd     string          `json:"cwd"`
	Sandbox json.RawMessage `json:"sandbox,omitempty"`
}

func (*DiscoverV2Params) RequiredFields() []string { return []string{"cwd"} }

// DiscoveryRoot names where a skill was found.
type DiscoveryRoot struct {
	ID   string `json:"id"`
	Path string `json:"path"`
}

// SkillToolDependency is one tool a skill needs (agents/openai.yaml).
type SkillToolDependency struct {
	Type              string  `json:"type"`
	Value             string  `json:"value"`
	Description       *string `json:"description"`
	Transport         *string `json:"transport"`
	Command           *string `json:"command"`
	URL               *string `json:"url"`
	OAuthCallbackPort *int    `json:"oauthCallbackPort"`
}

// SkillDependencies is a skill's dependencies block.
type SkillDependencies struct {
	Tools []SkillToolDependency `json:"tools"`
}

// SkillPolicy is a skill's policy block.
type SkillPolicy struct {
	AllowImplicitInvocation *bool    `json:"allowImplicitInvocation"`
	Products                []string `json:"products"`
}

// ExecutorSkill is one skill found on the executor. DiscoveryRoot is
// absent for a plugin's skills.
type ExecutorSkill struct {
	Name             string             `json:"name"`
	Description      string             `json:"description"`
	ShortDescription *string            `json:"shortDescription"`
	Path             string             `json:"path"`
	DiscoveryRoot    *DiscoveryRoot     `json:"discoveryRoot,omitempty"`
	Dependencies     *SkillDependencies `json:"dependencies"`
	Policy           *SkillPolicy       `json:"policy"`
}

// CapabilityTextFile is a file's path (file: URI) and contents.
type CapabilityTextFile struct {
	Path     string `json:"path"`
	Contents string `json:"contents"`
}

// PluginFiles are a plugin's manifest and the configuration files it names.
type PluginFiles struct {
	Manifest   CapabilityTextFile  `json:"manifest"`
	MCPConfig  *CapabilityTextFile `json:"mcpConfig"`
	AppsConfig *CapabilityTextFile `json:"appsConfig"`
}

// ExecutorPlugin is one installed plugin ("<name>@<marketplace>").
type ExecutorPlugin struct {
	ID             string          `json:"id"`
	DisplayName    *string         `json:"displayName"`
	RemotePluginID *string         `json:"remotePluginId"`
	Version        string          `json:"version"`
	Root           string          `json:"root"`
	Files          PluginFiles     `json:"files"`
	Skills         []ExecutorSkill `json:"skills"`
}

// DiscoverV2Result is the answer of capabilities/discoverV2.
type DiscoverV2Result struct {
	Plugins  []ExecutorPlugin `json:"plugins"`
	Skills   []ExecutorSkill  `json:"skills"`
	Warnings []string         `json:"warnings"`
}

// CapabilityRootRequest is one root of capabilityRoots/discoverV1.
type CapabilityRootRequest struct {
	ID      string          `json:"id"`
	Path    string          `json:"path"`
	Sandbox json.RawMessage `json:"sandbox,omitempty"`
}

// DiscoverV1Params are the params of capabilityRoots/discoverV1.
type DiscoverV1Params struct {
	Roots []CapabilityRootRequest `json:"roots"`
}

func (*DiscoverV1Params) RequiredFields() []string { return []string{"roots"} }

// DiscoveredSkillFiles are a skill's SKILL.md and its agents/openai.yaml.
type DiscoveredSkillFiles struct {
	Instructions CapabilityTextFile  `json:"instructions"`
	Metadata     *CapabilityTextFile `json:"metadata"`
}

// CapabilityRootResult is what one root holds; Error, when set, says why
// the root could not be read at all.
type CapabilityRootResult struct {
	ID                 string                 `json:"id"`
	Path               string                 `json:"path"`
	Plugin             *PluginFiles           `json:"plugin"`
	Skills             []DiscoveredSkillFiles `json:"skills"`
	NamespaceManifests []CapabilityTextFile   `json:"namespaceManifests"`
	Warnings           []string               `json:"warnings"`
	Error              *string                `json:"error"`
}

// DiscoverV1Result is the answer of capabilityRoots/discoverV1.
type DiscoverV1Result struct {
	Roots []CapabilityRootResult `json:"roots"`
}

// ErrConfigPathsRequired: environmentConfig/read with no path at all.
func ErrConfigPathsRequired() *Error {
	return Errorf(CodeInvalidParams, "at least one config or requirements path is required")
}
