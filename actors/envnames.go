package actors

import (
	"sort"
	"strings"

	"github.com/runtimed/runtimed/wire"
)

// checkEnvNames refuses environment variable names a child's environment
// cannot carry: empty, or containing '=' or NUL (-32602 naming the field
// and the name). Names are checked in sorted order, so the error is stable.
func checkEnvNames(field string, env map[string]string) *wire.Error {
	var bad []string
	for k := range env {
		if !ValidEnvName(k) {
			bad = append(bad, k)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	return wire.ErrEnvName(field, bad[0])
}

// ValidEnvName reports whether name can be an environment variable name:
// not empty, without '=' or NUL.
func ValidEnvName(name string) bool {
	return name != "" && !strings.ContainsAny(name, "=\x00")
}

// CheckEnvNames is checkEnvNames, for the fuzz tests (proptest).
func CheckEnvNames(field string, env map[string]string) *wire.Error { return checkEnvNames(field, env) }

// checkEnvInherit refuses an envPolicy.inherit other than all, core or none
// (absent means all), as the reference's enum does (-32602 naming the field
// and the values).
func checkEnvInherit(inherit string) *wire.Error {
	switch inherit {
	case "", "all", "core", "none":
		return nil
	}
	return wire.ErrUnknownVariant("envPolicy.inherit", inherit, "all", "core", "none")
}
