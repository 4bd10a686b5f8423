package runtime

import (
	"io"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// Spec.Env's nil and empty values mean the same on every backend: nil
// inherits the server's environment (minus *KEY*, *SECRET*, *TOKEN*), an
// empty map is an empty environment, a non-nil map is exactly itself.
func TestEnvNilAndEmptyAgree(t *testing.T) {
	t.Setenv("RUNTIMED_ENVTEST_PLAIN", "plain")
	t.Setenv("RUNTIMED_ENVTEST_API_KEY", "secret")
	cases := []struct {
		name   string
		env    map[string]string
		policy *EnvPolicy
		check  func(vars []string) bool
	}{
		{"nil inherits, filtered", nil, nil, func(v []string) bool {
			return slices.Contains(v, "RUNTIMED_ENVTEST_PLAIN=plain") && slices.Contains(v, "PATH="+os.Getenv("PATH")) &&
				!slices.Contains(v, "RUNTIMED_ENVTEST_API_KEY=secret")
		}},
		{"empty is empty", map[string]string{}, nil, func(v []string) bool { return len(v) == 0 }},
		{"non-nil is exact", map[string]string{"A": "1"}, nil, func(v []string) bool { return reflect.DeepEqual(v, []string{"A=1"}) }},
		{"nil with policy none", nil, &EnvPolicy{Inherit: "none"}, func(v []string) bool { return len(v) == 0 }},
		{"nil with policy, no excludes", nil, &EnvPolicy{IgnoreDefaultExcludes: true}, func(v []string) bool {
			return slices.Contains(v, "RUNTIMED_ENVTEST_API_KEY=secret")
		}},
	}
	got := map[string][][]string{}
	forEachBackend(t, func(t *testing.T, b Backend) {
		ctx := ctxT(t)
		for _, c := range cases {
			p, err := b.Start(ctx, Spec{Argv: []string{"/usr/bin/env"}, Dir: "/", Env: c.env, EnvPolicy: c.policy})
			if err != nil {
				t.Fatal(err)
			}
			pipe, err := Pipe(ctx, p, PipeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			out, err := io.ReadAll(pipe)
			if err != nil {
				t.Fatal(err)
			}
			vars := strings.Fields(string(out))
			slices.Sort(vars)
			if !c.check(vars) {
				t.Errorf("%s: environment %q", c.name, vars)
			}
			got[c.name] = append(got[c.name], vars)
		}
	})
	for name, envs := range got {
		for i := 1; i < len(envs); i++ {
			if !reflect.DeepEqual(envs[i], envs[0]) {
				t.Errorf("%s: %s gives %q, %s gives %q", name, backends[0].name, envs[0], backends[i].name, envs[i])
			}
		}
	}
}
