package codexhome

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"go.yaml.in/yaml/v3"

	"github.com/runtimed/runtimed/wire"
)

// Names of the files discovery reads.
const (
	SkillFile      = "SKILL.md"
	SkillMetadata  = "agents/openai.yaml"
	PluginManifest = ".codex-plugin/plugin.json"
)

// Discovery root ids (capabilities/discoverV2's discoveryRoot.id).
const (
	RootCodexHomeSkills = "codex-home-skills"
	RootUserAgentSkills = "user-agent-skills"
	RootSystemSkills    = "codex-system-skills"
)

// IncompleteWarning is discoverV2's one warning when anything could not be
// read or parsed.
const IncompleteWarning = "some capability metadata could not be loaded; discovery may be incomplete"

// Default bounds of a Scanner.
const (
	DefaultMaxDepth     = 6
	DefaultMaxEntries   = 20000
	DefaultMaxSkills    = 1000
	DefaultMaxFileBytes = 256 << 10
)

// Scanner finds skills and plugins. Every directory it lists and every
// file it reads is first offered to MayRead (nil: all), so a request's
// sandbox holds. The zero value uses the default bounds.
type Scanner struct {
	MayRead func(path string) bool
	// MaxDepth bounds how far below a root a skill directory may be.
	MaxDepth int
	// MaxEntries bounds the directory entries examined per root.
	MaxEntries int
	// MaxSkills bounds the skills reported per root.
	MaxSkills int
	// MaxFileBytes bounds each file read; a larger one is a warning.
	MaxFileBytes int64
}

func (s Scanner) bounds() Scanner {
	if s.MaxDepth <= 0 {
		s.MaxDepth = DefaultMaxDepth
	}
	if s.MaxEntries <= 0 {
		s.MaxEntries = DefaultMaxEntries
	}
	if s.MaxSkills <= 0 {
		s.MaxSkills = DefaultMaxSkills
	}
	if s.MaxFileBytes <= 0 {
		s.MaxFileBytes = DefaultMaxFileBytes
	}
	if s.MayRead == nil {
		s.MayRead = func(string) bool { return true }
	}
	return s
}

// TextFile is a file's path (a file: URI) and contents.
type TextFile struct {
	Path     string
	Contents string
}

// SkillFiles are a skill's SKILL.md and, when present, agents/openai.yaml.
type SkillFiles struct {
	Instructions TextFile
	Metadata     *TextFile
}

// PluginFiles are a plugin's manifest and the configuration files it names.
type PluginFiles struct {
	Manifest   TextFile
	MCPConfig  *TextFile
	AppsConfig *TextFile
}

// RootScan is what one capability root holds (capabilityRoots/discoverV1).
// Err, when not "", says why the root could not be read at all.
type RootScan struct {
	Plugin             *PluginFiles
	Skills             []SkillFiles
	NamespaceManifests []TextFile
	Warnings           []string
	Err                string
}

// RootRef names a discovery root.
type RootRef struct{ ID, Path string }

// ToolDependency is one tool a skill depends on.
type ToolDependency struct {
	Type, Value                          string
	Description, Transport, Command, URL *string
	OAuthCallbackPort                    *int
}

// Policy is a skill's invocation policy.
type Policy struct {
	AllowImplicitInvocation *bool
	Products                []string
}

// Skill is a skill's metadata (capabilities/discoverV2). Root is nil for a
// plugin's skills.
type Skill struct {
	Name, Description string
	ShortDescription  *string
	Path              string // the SKILL.md, a file: URI
	Root              *RootRef
	Dependencies      []ToolDependency // nil: no dependencies block
	HasDependencies   bool
	Policy            *Policy
}

// Plugin is an installed plugin.
type Plugin struct {
	ID          string // <name>@<marketplace>
	DisplayName *string
	Version     string
	Root        string // file: URI
	Files       PluginFiles
	Skills      []Skill
}

// Inventory is what capabilities/discoverV2 reports.
type Inventory struct {
	Plugins  []Plugin
	Skills   []Skill
	Warnings []string
}

// osText renders an OS error as the reference does ("No such file or
// directory (os error 2)").
func osText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		s := errno.Error()
		if s != "" {
			s = strings.ToUpper(s[:1]) + s[1:]
		}
		return fmt.Sprintf("%s (os error %d)", s, int(errno))
	}
	return err.Error()
}

var errDenied = syscall.EACCES

// scan is one root's walk state.
type scan struct {
	s        Scanner
	entries  int
	warnings []string
	seen     map[[2]uint64]bool
}

func (s Scanner) newScan() *scan {
	return &scan{s: s.bounds(), seen: map[[2]uint64]bool{}}
}

func (sc *scan) warn(path string, err error) {
	sc.warnings = append(sc.warnings, fmt.Sprintf("failed to scan capability path %s: %s", wire.FileURI(path), osText(err)))
}

// readFile reads a bounded text file the sandbox allows.
func (sc *scan) readFile(path string) (string, error) {
	if !sc.s.MayRead(path) {
		return "", &fs.PathError{Op: "open", Path: path, Err: errDenied}
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", wire.FileURI(path))
	}
	data, err := io.ReadAll(io.LimitReader(f, sc.s.MaxFileBytes+1))
	if err != nil {
		return "", err
	}
	if int64(len(data)) > sc.s.MaxFileBytes {
		return "", fmt.Errorf("%s is larger than %d bytes", wire.FileURI(path), sc.s.MaxFileBytes)
	}
	return string(data), nil
}

// exists reports whether path is there (a sandbox-denied path is not).
func (sc *scan) exists(path string) bool {
	if !sc.s.MayRead(path) {
		return false
	}
	_, err := os.Stat(path)
	return err == nil
}

// skillDirs lists the directories under root that hold a SKILL.md, in
// path order: a skill directory is not searched further; hidden
// directories are searched; symlinked directories are followed once.
func (sc *scan) skillDirs(root string) []string {
	var out []string
	var walk func(dir string, depth int)
	walk = func(dir string, depth int) {
		if len(out) >= sc.s.MaxSkills || sc.entries >= sc.s.MaxEntries {
			return
		}
		if !sc.s.MayRead(dir) {
			sc.warn(dir, errDenied)
			return
		}
		fi, err := os.Stat(dir)
		if err != nil {
			sc.warn(dir, err)
			return
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			key := [2]uint64{uint64(st.Dev), st.Ino}
			if sc.seen[key] {
				return
			}
			sc.seen[key] = true
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			sc.warn(dir, err)
			return
		}
		sc.entries += len(ents)
		var subdirs []string
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			if e.Name() == SkillFile && depth > 0 {
				if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
					out = append(out, dir)
					return
				}
			}
			if e.IsDir() || e.Type()&fs.ModeSymlink != 0 {
				subdirs = append(subdirs, p)
			}
		}
		if depth >= sc.s.MaxDepth {
			return
		}
		for _, p := range subdirs {
			if fi, err := os.Stat(p); err == nil && fi.IsDir() {
				walk(p, depth+1)
			}
		}
	}
	// A root that is itself a skill directory holds that one skill.
	if sc.exists(filepath.Join(root, SkillFile)) {
		return []string{root}
	}
	walk(root, 0)
	return out
}

// skillFiles reads one skill directory's files; false when SKILL.md could
// not be read (a warning says why).
func (sc *scan) skillFiles(dir string) (SkillFiles, bool) {
	md := filepath.Join(dir, SkillFile)
	body, err := sc.readFile(md)
	if err != nil {
		sc.warn(md, err)
		return SkillFiles{}, false
	}
	sf := SkillFiles{Instructions: TextFile{Path: wire.FileURI(md), Contents: body}}
	meta := filepath.Join(dir, filepath.FromSlash(SkillMetadata))
	if sc.exists(meta) {
		if c, err := sc.readFile(meta); err == nil {
			sf.Metadata = &TextFile{Path: wire.FileURI(meta), Contents: c}
		} else {
			sc.warn(meta, err)
		}
	}
	return sf, true
}

// ScanRoot lists what the capability root at the absolute path root holds:
// a plugin (its manifest, configuration files and skills) or the skills
// beneath it, with their files' contents.
func (s Scanner) ScanRoot(root string) RootScan {
	sc := s.newScan()
	res := RootScan{Skills: []SkillFiles{}, NamespaceManifests: []TextFile{}}
	if !sc.s.MayRead(root) {
		res.Err = fmt.Sprintf("failed to inspect capability root %s: %s", wire.FileURI(root), osText(errDenied))
		res.Warnings = []string{}
		return res
	}
	fi, err := os.Stat(root)
	if err != nil {
		res.Err = fmt.Sprintf("failed to inspect capability root %s: %s", wire.FileURI(root), osText(err))
		res.Warnings = []string{}
		return res
	}
	if !fi.IsDir() {
		res.Err = fmt.Sprintf("capability root %s is not a directory", wire.FileURI(root))
		res.Warnings = []string{}
		return res
	}
	skillsRoot := root
	if pf, m, ok := sc.plugin(root); ok {
		res.Plugin = &pf
		res.NamespaceManifests = append(res.NamespaceManifests, pf.Manifest)
		skillsRoot = m.skillsDir(root)
	}
	if skillsRoot != "" && sc.exists(skillsRoot) {
		for _, d := range sc.skillDirs(skillsRoot) {
			if f, ok := sc.skillFiles(d); ok {
				res.Skills = append(res.Skills, f)
			}
		}
	}
	res.Warnings = append([]string{}, sc.warnings...)
	return res
}

// manifest is the part of plugin.json discovery uses.
type manifest struct {
	Name       string          `json:"name"`
	Version    string          `json:"version"`
	Skills     json.RawMessage `json:"skills"`
	MCPServers json.RawMessage `json:"mcpServers"`
	Apps       json.RawMessage `json:"apps"`
	Interface  struct {
		DisplayName *string `json:"displayName"`
	} `json:"interface"`
}

// rel resolves a manifest path field (a string) inside root, or def when
// it is absent; "" when it is not a string or leaves root.
func rel(root string, raw json.RawMessage, def string) string {
	p := def
	if len(raw) > 0 && string(raw) != "null" {
		if json.Unmarshal(raw, &p) != nil {
			return ""
		}
	}
	if p == "" {
		return ""
	}
	full := filepath.Join(root, filepath.FromSlash(p))
	if full != root && !strings.HasPrefix(full, root+string(filepath.Separator)) {
		return ""
	}
	return full
}

func (m *manifest) skillsDir(root string) string { return rel(root, m.Skills, "skills") }

// plugin reads root's plugin manifest and the files it names; false when
// root is not a plugin (or its manifest is unreadable: a warning).
func (sc *scan) plugin(root string) (PluginFiles, *manifest, bool) {
	mp := filepath.Join(root, filepath.FromSlash(PluginManifest))
	if !sc.exists(mp) {
		return PluginFiles{}, nil, false
	}
	body, err := sc.readFile(mp)
	if err != nil {
		sc.warn(mp, err)
		return PluginFiles{}, nil, false
	}
	var m manifest
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		sc.warnings = append(sc.warnings, fmt.Sprintf("failed to parse plugin manifest %s: %v", wire.FileURI(mp), err))
		return PluginFiles{}, nil, false
	}
	pf := PluginFiles{Manifest: TextFile{Path: wire.FileURI(mp), Contents: body}}
	optional := func(raw json.RawMessage, def string) *TextFile {
		p := rel(root, raw, def)
		if p == "" || !sc.exists(p) {
			return nil
		}
		c, err := sc.readFile(p)
		if err != nil {
			sc.warn(p, err)
			return nil
		}
		return &TextFile{Path: wire.FileURI(p), Contents: c}
	}
	pf.MCPConfig = optional(m.MCPServers, ".mcp.json")
	pf.AppsConfig = optional(m.Apps, ".app.json")
	return pf, &m, true
}

// frontmatter is the part of SKILL.md's YAML front matter discovery uses.
type frontmatter struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
	Metadata    struct {
		ShortDescription string `yaml:"short-description"`
	} `yaml:"metadata"`
}

// skillMeta is the part of agents/openai.yaml discovery uses.
type skillMeta struct {
	Interface struct {
		ShortDescription string `yaml:"short_description"`
	} `yaml:"interface"`
	Dependencies *struct {
		Tools []struct {
			Type              string  `yaml:"type"`
			Value             string  `yaml:"value"`
			Description       *string `yaml:"description"`
			Transport         *string `yaml:"transport"`
			Command           *string `yaml:"command"`
			URL               *string `yaml:"url"`
			OAuthCallbackPort *int    `yaml:"oauth_callback_port"`
		} `yaml:"tools"`
	} `yaml:"dependencies"`
	Policy *struct {
		AllowImplicitInvocation *bool    `yaml:"allow_implicit_invocation"`
		Products                []string `yaml:"products"`
	} `yaml:"policy"`
}

// ErrNoFrontmatter: SKILL.md does not start with a YAML front matter block.
var ErrNoFrontmatter = errors.New("codexhome: SKILL.md has no front matter")

// parseFrontmatter extracts and decodes the block between the opening and
// closing "---" lines.
func parseFrontmatter(body string) (frontmatter, error) {
	var fm frontmatter
	body = strings.TrimPrefix(body, "\ufeff")
	lines := strings.SplitAfter(body, "\n")
	if len(lines) == 0 || strings.TrimRight(lines[0], "\r\n") != "---" {
		return fm, ErrNoFrontmatter
	}
	var block strings.Builder
	for _, l := range lines[1:] {
		if strings.TrimRight(l, "\r\n") == "---" {
			if err := yaml.Unmarshal([]byte(block.String()), &fm); err != nil {
				return fm, err
			}
			return fm, nil
		}
		block.WriteString(l)
	}
	return fm, ErrNoFrontmatter
}

// skill turns a skill directory's files into its metadata; false (and a
// warning) when the front matter is missing, malformed or has no
// description.
func (sc *scan) skill(dir string, f SkillFiles, prefix string, root *RootRef) (Skill, bool) {
	fm, err := parseFrontmatter(f.Instructions.Contents)
	if err == nil && strings.TrimSpace(fm.Description) == "" {
		err = errors.New("missing field `description`")
	}
	if err != nil {
		sc.warnings = append(sc.warnings, fmt.Sprintf("invalid skill %s: %v", f.Instructions.Path, err))
		return Skill{}, false
	}
	name := strings.TrimSpace(fm.Name)
	if name == "" {
		name = filepath.Base(dir)
	}
	sk := Skill{Name: prefix + name, Description: fm.Description, Path: f.Instructions.Path, Root: root}
	if fm.Metadata.ShortDescription != "" {
		sd := fm.Metadata.ShortDescription
		sk.ShortDescription = &sd
	}
	if f.Metadata != nil {
		var m skillMeta
		if err := yaml.Unmarshal([]byte(f.Metadata.Contents), &m); err != nil {
			sc.warnings = append(sc.warnings, fmt.Sprintf("invalid skill metadata %s: %v", f.Metadata.Path, err))
		} else {
			if sk.ShortDescription == nil && m.Interface.ShortDescription != "" {
				sd := m.Interface.ShortDescription
				sk.ShortDescription = &sd
			}
			if m.Dependencies != nil {
				sk.HasDependencies = true
				sk.Dependencies = []ToolDependency{}
				for _, t := range m.Dependencies.Tools {
					sk.Dependencies = append(sk.Dependencies, ToolDependency{
						Type: t.Type, Value: t.Value, Description: t.Description, Transport: t.Transport,
						Command: t.Command, URL: t.URL, OAuthCallbackPort: t.OAuthCallbackPort,
					})
				}
			}
			if m.Policy != nil {
				sk.Policy = &Policy{AllowImplicitInvocation: m.Policy.AllowImplicitInvocation, Products: m.Policy.Products}
				if sk.Policy.Products == nil {
					sk.Policy.Products = []string{}
				}
			}
		}
	}
	return sk, true
}

// skillsUnder lists the skills beneath dir (missing: none).
func (sc *scan) skillsUnder(dir, prefix string, root *RootRef) []Skill {
	if !sc.s.MayRead(dir) {
		sc.warn(dir, errDenied)
		return nil
	}
	if _, err := os.Stat(dir); err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			sc.warn(dir, err)
		}
		return nil
	}
	var out []Skill
	for _, d := range sc.skillDirs(dir) {
		f, ok := sc.skillFiles(d)
		if !ok {
			continue
		}
		if sk, ok := sc.skill(d, f, prefix, root); ok {
			out = append(out, sk)
		}
	}
	return out
}

// Discover lists the executor's installed skills and plugins: skills under
// codexHome/skills, home/.agents/skills and systemDir/skills, and plugins
// under codexHome/plugins/cache/<marketplace>/<plugin>/<version> (the
// greatest version of each). Anything unreadable or malformed is left out
// and the inventory says discovery may be incomplete.
func (s Scanner) Discover(codexHome, home, systemDir string) Inventory {
	if systemDir == "" {
		systemDir = DefaultSystemDir
	}
	sc := s.newScan()
	inv := Inventory{Plugins: []Plugin{}, Skills: []Skill{}, Warnings: []string{}}
	roots := []RootRef{{RootCodexHomeSkills, filepath.Join(codexHome, "skills")}}
	if home != "" {
		roots = append(roots, RootRef{RootUserAgentSkills, filepath.Join(home, ".agents", "skills")})
	}
	roots = append(roots, RootRef{RootSystemSkills, filepath.Join(systemDir, "skills")})
	for _, r := range roots {
		ref := &RootRef{ID: r.ID, Path: wire.FileURI(r.Path)}
		sc.entries = 0
		inv.Skills = append(inv.Skills, sc.skillsUnder(r.Path, "", ref)...)
	}
	for _, root := range sc.pluginRoots(filepath.Join(codexHome, "plugins", "cache")) {
		sc.entries = 0
		pf, m, ok := sc.plugin(root.dir)
		if !ok {
			continue
		}
		name := m.Name
		if name == "" {
			name = root.name
		}
		version := m.Version
		if version == "" {
			version = filepath.Base(root.dir)
		}
		p := Plugin{
			ID: name + "@" + root.marketplace, DisplayName: m.Interface.DisplayName, Version: version,
			Root: wire.FileURI(root.dir), Files: pf, Skills: []Skill{},
		}
		if dir := m.skillsDir(root.dir); dir != "" {
			p.Skills = append(p.Skills, sc.skillsUnder(dir, name+":", nil)...)
		}
		inv.Plugins = append(inv.Plugins, p)
	}
	if len(sc.warnings) > 0 {
		inv.Warnings = append(inv.Warnings, IncompleteWarning)
	}
	return inv
}

type pluginRoot struct{ marketplace, name, dir string }

// pluginRoots lists cache/<marketplace>/<plugin>/<version> directories,
// the greatest version of each plugin.
func (sc *scan) pluginRoots(cache string) []pluginRoot {
	list := func(dir string) []string {
		if !sc.s.MayRead(dir) {
			sc.warn(dir, errDenied)
			return nil
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				sc.warn(dir, err)
			}
			return nil
		}
		sc.entries += len(ents)
		var out []string
		for _, e := range ents {
			if sc.entries > sc.s.MaxEntries {
				break
			}
			if fi, err := os.Stat(filepath.Join(dir, e.Name())); err == nil && fi.IsDir() && !strings.HasPrefix(e.Name(), ".") {
				out = append(out, e.Name())
			}
		}
		sort.Strings(out)
		return out
	}
	var out []pluginRoot
	for _, mkt := range list(cache) {
		for _, name := range list(filepath.Join(cache, mkt)) {
			versions := list(filepath.Join(cache, mkt, name))
			for i := len(versions) - 1; i >= 0; i-- {
				dir := filepath.Join(cache, mkt, name, versions[i])
				if sc.exists(filepath.Join(dir, filepath.FromSlash(PluginManifest))) {
					out = append(out, pluginRoot{marketplace: mkt, name: name, dir: dir})
					break
				}
			}
		}
	}
	return out
}
