package runtime

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The services file of `runtimed serve --supervise FILE` is JSON:
//
//	{"services": [
//	  {"name": "web", "argv": ["python3", "-m", "http.server", "8000"], "cwd": "/srv/site",
//	   "env": {"PORT": "8000"}, "inheritEnv": true,
//	   "restart": "on-failure", "backoff": {"initial": "1s", "max": "30s", "jitter": 0.2, "resetAfter": "10s"},
//	   "maxRestarts": 5, "window": "60s", "stopGrace": "5s",
//	   "sandbox": "workspace-write", "network": false,
//	   "limits": {"memoryBytes": 268435456, "pids": 64}}
//	]}
//
// Only name, argv and cwd are required. Durations are Go durations
// ("250ms", "1m"). Unknown fields are errors, so a typo is not silently
// ignored; every error names the service and the field.
type servicesFile struct {
	Services []serviceEntry `json:"services"`
}

type serviceEntry struct {
	Name        string            `json:"name"`
	Argv        []string          `json:"argv"`
	Cwd         string            `json:"cwd"`
	Env         map[string]string `json:"env"`
	InheritEnv  *bool             `json:"inheritEnv"`
	Restart     string            `json:"restart"`
	Backoff     *backoffEntry     `json:"backoff"`
	MaxRestarts *int              `json:"maxRestarts"`
	Window      string            `json:"window"`
	StopGrace   string            `json:"stopGrace"`
	Sandbox     string            `json:"sandbox"`
	Network     bool              `json:"network"`
	Limits      *Limits           `json:"limits"`
}

type backoffEntry struct {
	Initial    string  `json:"initial"`
	Max        string  `json:"max"`
	Jitter     float64 `json:"jitter"`
	ResetAfter string  `json:"resetAfter"`
}

// LoadServices reads and validates a services file.
func LoadServices(path string) ([]Service, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseServices(b)
}

// ParseServices validates the JSON of a services file (see LoadServices).
func ParseServices(b []byte) ([]Service, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f servicesFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("services file: %w", err)
	}
	if len(f.Services) == 0 {
		return nil, errors.New(`services file: no services (want {"services": [{"name": ..., "argv": [...], "cwd": ...}]})`)
	}
	var out []Service
	seen := map[string]bool{}
	for i, e := range f.Services {
		where := fmt.Sprintf("services[%d]", i)
		if e.Name != "" {
			where = fmt.Sprintf("services[%d] (%s)", i, e.Name)
		}
		svc, err := e.service(where)
		if err != nil {
			return nil, err
		}
		if seen[svc.Name] {
			return nil, fmt.Errorf("%s: name %q is used twice", where, svc.Name)
		}
		seen[svc.Name] = true
		out = append(out, svc)
	}
	return out, nil
}

func (e serviceEntry) service(where string) (Service, error) {
	bad := func(field, format string, args ...any) (Service, error) {
		return Service{}, fmt.Errorf("%s: %s: %s", where, field, fmt.Sprintf(format, args...))
	}
	if e.Name == "" || strings.ContainsAny(e.Name, "# /") {
		return bad("name", "%q: want a non-empty name without '#', '/' or spaces", e.Name)
	}
	if len(e.Argv) == 0 {
		return bad("argv", "empty")
	}
	if !filepath.IsAbs(e.Cwd) {
		return bad("cwd", "%q: want an absolute path", e.Cwd)
	}
	dur := func(field, s string) (time.Duration, error) {
		if s == "" {
			return 0, nil
		}
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return 0, fmt.Errorf("%s: %s: %q: want a duration like \"1s\" or \"250ms\"", where, field, s)
		}
		return d, nil
	}
	svc := Service{Name: e.Name, Restart: RestartPolicy(e.Restart)}
	svc.Spec = Spec{Argv: e.Argv, Dir: e.Cwd, Env: e.Env}
	if e.InheritEnv == nil || *e.InheritEnv {
		svc.Spec.EnvPolicy = &EnvPolicy{Inherit: "all"}
	} else if svc.Spec.Env == nil {
		svc.Spec.Env = map[string]string{} // exactly env: empty (a nil Env would inherit)
	}
	var err error
	if svc.Window, err = dur("window", e.Window); err != nil {
		return Service{}, err
	}
	if svc.StopGrace, err = dur("stopGrace", e.StopGrace); err != nil {
		return Service{}, err
	}
	if e.MaxRestarts != nil {
		if *e.MaxRestarts < -1 || *e.MaxRestarts == 0 {
			return bad("maxRestarts", "%d: want at least 1, or -1 for no limit (use restart \"never\" for none)", *e.MaxRestarts)
		}
		svc.MaxRestarts = *e.MaxRestarts
	}
	if b := e.Backoff; b != nil {
		if svc.Backoff.Initial, err = dur("backoff.initial", b.Initial); err != nil {
			return Service{}, err
		}
		if svc.Backoff.Max, err = dur("backoff.max", b.Max); err != nil {
			return Service{}, err
		}
		if svc.Backoff.ResetAfter, err = dur("backoff.resetAfter", b.ResetAfter); err != nil {
			return Service{}, err
		}
		svc.Backoff.Jitter = b.Jitter
	}
	switch e.Sandbox {
	case "", "none":
		if e.Network {
			return bad("network", "only meaningful with a sandbox")
		}
	case "read-only":
		svc.Spec.Sandbox = ReadOnlySandbox()
	case "workspace-write":
		svc.Spec.Sandbox = WorkspaceWriteSandbox(e.Cwd)
	default:
		return bad("sandbox", "%q: want none, read-only or workspace-write", e.Sandbox)
	}
	if svc.Spec.Sandbox != nil {
		svc.Spec.Sandbox.Network = e.Network
	}
	if e.Limits != nil {
		svc.Spec.Limits = *e.Limits
	}
	checked, err := svc.withDefaults()
	if err != nil {
		return Service{}, fmt.Errorf("%s: %w", where, err)
	}
	return checked, nil
}
