package osproc

import (
	"os"
	"path"
	"sort"
	"strings"
)

// EnvPolicy mirrors PROTOCOL.md's envPolicy.
type EnvPolicy struct {
	Inherit               string // "all" (default), "none", "core"
	IgnoreDefaultExcludes bool
	Exclude               []string
	Set                   map[string]string
	IncludeOnly           []string
}

var coreVars = []string{"PATH", "SHELL", "TMPDIR", "TEMP", "TMP", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "LOGNAME", "USER"}

var defaultExcludes = []string{"*KEY*", "*SECRET*", "*TOKEN*"}

// BuildEnv returns the child's environment: without a policy exactly env;
// with one, the base built from the server's environment (base) in the
// protocol's order, with env laid over it. The result is sorted by name.
func BuildEnv(base []string, policy *EnvPolicy, env map[string]string) []string {
	vars := map[string]string{}
	if policy != nil {
		for _, kv := range base {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				continue
			}
			vars[k] = v
		}
		switch strings.ToLower(policy.Inherit) {
		case "none":
			clear(vars)
		case "core":
			core := map[string]string{}
			for _, k := range coreVars {
				if v, ok := vars[k]; ok {
					core[k] = v
				}
			}
			vars = core
		}
		if !policy.IgnoreDefaultExcludes {
			dropMatching(vars, defaultExcludes)
		}
		dropMatching(vars, policy.Exclude)
		for k, v := range policy.Set {
			vars[k] = v
		}
		if len(policy.IncludeOnly) > 0 {
			for k := range vars {
				if !matchAny(k, policy.IncludeOnly) {
					delete(vars, k)
				}
			}
		}
	}
	for k, v := range env {
		vars[k] = v
	}
	out := make([]string, 0, len(vars))
	for k, v := range vars {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// ServerEnv is the server's own environment, the base of envPolicy.
func ServerEnv() []string { return os.Environ() }

func dropMatching(vars map[string]string, patterns []string) {
	if len(patterns) == 0 {
		return
	}
	for k := range vars {
		if matchAny(k, patterns) {
			delete(vars, k)
		}
	}
}

// matchAny matches name against glob patterns with * and ?, ignoring case.
func matchAny(name string, patterns []string) bool {
	n := strings.ToUpper(name)
	for _, p := range patterns {
		// path.Match also knows [ranges]; escape them so only * and ? are special.
		p = strings.NewReplacer("[", `\[`, "]", `\]`, `\`, `\\`).Replace(strings.ToUpper(p))
		if ok, _ := path.Match(p, n); ok {
			return true
		}
	}
	return false
}
