package codexhome

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
)

// Bounds of one configuration read.
const (
	// MaxSelectors is the most key paths one read may name (config and
	// requirements together).
	MaxSelectors = 64
	// MaxSelectorSegments is the most keys in one path.
	MaxSelectorSegments = 32
	// MaxSelectorBytes bounds the total length of all keys of one read.
	MaxSelectorBytes = 64 << 10
	// MaxConfigBytes is the largest configuration file read; a larger one
	// is a layer error.
	MaxConfigBytes = 4 << 20
)

// DefaultSystemDir is where the system layer lives (config.toml and
// requirements.toml), as for Codex itself.
const DefaultSystemDir = "/etc/codex"

// ConfigFile and RequirementsFile are the file names in each directory.
const (
	ConfigFile       = "config.toml"
	RequirementsFile = "requirements.toml"
)

// ErrInvalidSelectors is wrapped by every selector validation error.
var ErrInvalidSelectors = errors.New("codexhome: invalid selectors")

// selectorError is a selector refusal whose text is the reference's.
type selectorError struct{ msg string }

func (e *selectorError) Error() string { return e.msg }
func (e *selectorError) Unwrap() error { return ErrInvalidSelectors }

// ValidateSelectors checks the key paths of one read as the reference
// exec-server does: at least one path, none empty, and bounded.
func ValidateSelectors(config, requirements [][]string) error {
	if len(config) == 0 && len(requirements) == 0 {
		return &selectorError{"at least one config or requirements path is required"}
	}
	if len(config)+len(requirements) > MaxSelectors {
		return &selectorError{fmt.Sprintf("at most %d TOML selectors are allowed", MaxSelectors)}
	}
	total := 0
	for _, p := range append(append([][]string{}, config...), requirements...) {
		if len(p) == 0 {
			return &selectorError{"TOML paths must contain at least one key segment"}
		}
		if len(p) > MaxSelectorSegments {
			return &selectorError{fmt.Sprintf("TOML paths may contain at most %d key segments", MaxSelectorSegments)}
		}
		for _, k := range p {
			total += len(k)
		}
	}
	if total > MaxSelectorBytes {
		return &selectorError{fmt.Sprintf("TOML selector input may contain at most %d bytes", MaxSelectorBytes)}
	}
	return nil
}

// Layer is one configuration source, projected and re-emitted as TOML.
type Layer struct {
	Source  string // "system (/etc/codex/config.toml)", "user (...)", or a requirements file path
	BaseDir string // the directory its relative paths are resolved against
	TOML    string
}

// LayerError is a source left out: unreadable, too large or not TOML.
// Message names the file, and the line and column of a parse error.
type LayerError struct {
	Source  string
	Message string
}

// Stack is an ordered set of layers, lowest precedence first.
type Stack struct {
	Layers []Layer
	// CloudInsertionIndex is where a client inserts cloud-provided layers
	// (after the system layer when it is present).
	CloudInsertionIndex int
	Errors              []LayerError
}

// Config is what environmentConfig/read reports.
type Config struct {
	Home         string // the user's home directory; "" when unknown
	CodexHome    string // the resolved Codex home
	Hostname     string // "" when unknown
	Config       Stack
	Requirements Stack
}

// Env is a process environment in os.Environ form, searched last-wins.
type Env []string

// Get returns the value of key and whether it is set.
func (e Env) Get(key string) (string, bool) {
	for i := len(e) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(e[i], "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// HomeDir is $HOME of env, else the user's home directory; "" if neither.
func HomeDir(env Env) string {
	if h, ok := env.Get("HOME"); ok && h != "" {
		return h
	}
	h, _ := os.UserHomeDir()
	return h
}

// CodexHome resolves the Codex home of env as Codex does: $CODEX_HOME when
// set and non-empty (it must exist; symlinks are resolved), else ~/.codex
// (which need not exist).
func CodexHome(env Env) (string, error) {
	if v, ok := env.Get("CODEX_HOME"); ok && v != "" {
		p, err := filepath.Abs(v)
		if err == nil {
			p, err = filepath.EvalSymlinks(p)
		}
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return "", fmt.Errorf("CODEX_HOME points to %q, but that path does not exist", v)
			}
			return "", fmt.Errorf("failed to canonicalize CODEX_HOME %q: %w", v, err)
		}
		return p, nil
	}
	home := HomeDir(env)
	if home == "" {
		return "", errors.New("could not find home directory")
	}
	return filepath.Join(home, ".codex"), nil
}

// ReadConfig loads the system (systemDir/config.toml) and user
// (codexHome/config.toml) configuration layers and the system requirements
// (systemDir/requirements.toml), keeps in each only what the key paths
// select and re-emits it as TOML. A missing file is an empty layer; a
// layer that selects nothing is left out; a layer that cannot be read or
// parsed is left out and listed in its stack's Errors. The selectors must
// have passed ValidateSelectors.
func ReadConfig(systemDir, codexHome string, configPaths, requirementsPaths [][]string) Config {
	if systemDir == "" {
		systemDir = DefaultSystemDir
	}
	sysFile := filepath.Join(systemDir, ConfigFile)
	userFile := filepath.Join(codexHome, ConfigFile)
	reqFile := filepath.Join(systemDir, RequirementsFile)
	var c Config
	c.CodexHome = codexHome
	c.Config = project([]source{
		{name: "system (" + sysFile + ")", file: sysFile, cloudBefore: true},
		{name: "user (" + userFile + ")", file: userFile},
	}, configPaths)
	c.Requirements = project([]source{
		{name: reqFile, file: reqFile, cloudBefore: true, optional: true},
	}, requirementsPaths)
	c.Hostname, _ = os.Hostname()
	return c
}

type source struct {
	name, file string
	// cloudBefore: cloud layers go after this one.
	cloudBefore bool
	// optional: a missing file is no layer at all (not an empty one).
	optional bool
}

func project(srcs []source, paths [][]string) Stack {
	st := Stack{Layers: []Layer{}}
	if len(paths) == 0 {
		return st
	}
	sel := newSelector(paths)
	for _, s := range srcs {
		doc, err := loadTOML(s.file)
		if err != nil {
			st.Errors = append(st.Errors, LayerError{Source: s.name, Message: err.Error()})
			continue
		}
		if doc == nil {
			continue // missing: an empty table, which selects nothing
		}
		out, ok := sel.project(doc)
		if !ok {
			continue
		}
		var buf bytes.Buffer
		enc := toml.NewEncoder(&buf)
		enc.Indent = ""
		if err := enc.Encode(out); err != nil {
			st.Errors = append(st.Errors, LayerError{Source: s.name, Message: "failed to serialize executor-local config: " + err.Error()})
			continue
		}
		if s.cloudBefore {
			st.CloudInsertionIndex++
		}
		st.Layers = append(st.Layers, Layer{Source: s.name, BaseDir: filepath.Dir(s.file), TOML: buf.String()})
	}
	return st
}

// loadTOML reads and parses file; (nil, nil) when it does not exist.
func loadTOML(file string) (map[string]any, error) {
	f, err := os.Open(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, unwrapPath(err))
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, unwrapPath(err))
	}
	if len(data) > MaxConfigBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", file, MaxConfigBytes)
	}
	doc := map[string]any{}
	if _, err := toml.Decode(string(data), &doc); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("%s:%d:%d: %s", file, pe.Position.Line, pe.Position.Col, pe.Message)
		}
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return doc, nil
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// selector is a tree of requested key paths; terminal selects everything
// beneath.
type selector struct {
	terminal bool
	children map[string]*selector
}

func newSelector(paths [][]string) *selector {
	root := &selector{}
	for _, p := range paths {
		n := root
		for _, k := range p {
			if n.terminal {
				break
			}
			if n.children == nil {
				n.children = map[string]*selector{}
			}
			c := n.children[k]
			if c == nil {
				c = &selector{}
				n.children[k] = c
			}
			n = c
		}
		n.terminal, n.children = true, nil
	}
	return root
}

// project keeps what s selects of doc; false when nothing is left.
func (s *selector) project(doc map[string]any) (map[string]any, bool) {
	out := s.table(doc)
	return out, s.terminal || len(out) > 0
}

func (s *selector) table(t map[string]any) map[string]any {
	if s.terminal {
		return t
	}
	out := map[string]any{}
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		c := s.children[k]
		if c == nil {
			continue
		}
		v := t[k]
		if sub, ok := v.(map[string]any); ok && !c.terminal {
			out[k] = c.table(sub)
			continue
		}
		// A selected value, or a non-table where the path goes deeper:
		// kept whole so it still overrides lower layers (as the reference).
		out[k] = v
	}
	return out
}
