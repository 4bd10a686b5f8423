package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Sandbox is process/start.sandbox (and the sandbox field of fs/*
// requests), PROTOCOL.md section 7.3, after strict validation. Paths are
// kept as sent (absolute native paths or file: URIs); the executor
// resolves them.
type Sandbox struct {
	// Managed is false for {"type":"disabled"} permissions: no sandbox.
	Managed bool
	// FS is nil for an unrestricted file system.
	FS *SandboxFS
	// Network is true for "enabled".
	Network        bool
	Cwd            string
	WorkspaceRoots []string
}

// SandboxFS is a restricted file system.
type SandboxFS struct {
	Entries []SandboxEntry
}

// SandboxEntry is one file_system entry.
type SandboxEntry struct {
	// Kind is "special", "path" or "glob_pattern".
	Kind string
	// Special is root, project_roots, slash_tmp or tmpdir (Kind special).
	Special string
	// Subpath is the special's optional relative subpath.
	Subpath string
	// Path is the path or URI (Kind path); Pattern the glob (Kind glob_pattern).
	Path    string
	Pattern string
	// Access is read, write or deny.
	Access string
	// SkipMissing is missing_path_behavior "skip".
	SkipMissing bool
}

// StartLimits are process/start.limits (runtimed extension).
type StartLimits struct {
	MemoryBytes   *uint64 `json:"memoryBytes"`
	Pids          *uint64 `json:"pids"`
	CPUSeconds    *uint64 `json:"cpuSeconds"`
	OpenFiles     *uint64 `json:"openFiles"`
	FileSizeBytes *uint64 `json:"fileSizeBytes"`
}

// Sandbox types of the process/start result.
const (
	SandboxTypeNone  = "none"
	SandboxTypeLinux = "linuxSeccomp"
)

// ParseSandbox validates raw strictly. Absent or null gives nil (no
// sandbox), as does {"permissions":{"type":"disabled"}}. Errors are
// -32602 and name the field, e.g. `sandbox.permissions.network`.
func ParseSandbox(raw json.RawMessage) (*Sandbox, *Error) {
	if isNull(raw) {
		return nil, nil
	}
	top, err := object(raw, "sandbox")
	if err != nil {
		return nil, err
	}
	sb := &Sandbox{}
	if err := optString(top, "cwd", "sandbox", &sb.Cwd); err != nil {
		return nil, err
	}
	if v, ok := top["workspaceRoots"]; ok && !isNull(v) {
		if e := json.Unmarshal(v, &sb.WorkspaceRoots); e != nil {
			return nil, badField("sandbox.workspaceRoots", "expected an array of strings")
		}
	}
	if v, ok := top["useLegacyLandlock"]; ok && !isNull(v) {
		var b bool
		if e := json.Unmarshal(v, &b); e != nil {
			return nil, badField("sandbox.useLegacyLandlock", "expected a boolean")
		}
	}
	permRaw, ok := top["permissions"]
	if !ok || isNull(permRaw) {
		return nil, ErrMissingField("sandbox.permissions")
	}
	perm, err := object(permRaw, "sandbox.permissions")
	if err != nil {
		return nil, err
	}
	typ, err := enum(perm, "type", "sandbox.permissions", "disabled", "managed")
	if err != nil {
		return nil, err
	}
	if typ == "disabled" {
		return nil, nil
	}
	sb.Managed = true
	netw, err := enum(perm, "network", "sandbox.permissions", "restricted", "enabled")
	if err != nil {
		return nil, err
	}
	sb.Network = netw == "enabled"
	fsRaw, ok := perm["file_system"]
	if !ok || isNull(fsRaw) {
		return nil, ErrMissingField("sandbox.permissions.file_system")
	}
	fsObj, err := object(fsRaw, "sandbox.permissions.file_system")
	if err != nil {
		return nil, err
	}
	fsType, err := enum(fsObj, "type", "sandbox.permissions.file_system", "unrestricted", "restricted")
	if err != nil {
		return nil, err
	}
	if fsType == "unrestricted" {
		return sb, nil
	}
	sb.FS = &SandboxFS{}
	var entries []json.RawMessage
	if v, ok := fsObj["entries"]; ok && !isNull(v) {
		if e := json.Unmarshal(v, &entries); e != nil {
			return nil, badField("sandbox.permissions.file_system.entries", "expected an array")
		}
	}
	for i, raw := range entries {
		name := fmt.Sprintf("sandbox.permissions.file_system.entries[%d]", i)
		e, err := parseEntry(raw, name)
		if err != nil {
			return nil, err
		}
		sb.FS.Entries = append(sb.FS.Entries, e)
	}
	return sb, nil
}

func parseEntry(raw json.RawMessage, name string) (SandboxEntry, *Error) {
	var e SandboxEntry
	obj, err := object(raw, name)
	if err != nil {
		return e, err
	}
	if e.Access, err = enum(obj, "access", name, "read", "write", "deny"); err != nil {
		return e, err
	}
	if v, ok := obj["missing_path_behavior"]; ok && !isNull(v) {
		mb, err := enum(obj, "missing_path_behavior", name, "skip")
		if err != nil {
			return e, err
		}
		e.SkipMissing = mb == "skip"
	}
	pathRaw, ok := obj["path"]
	if !ok || isNull(pathRaw) {
		return e, ErrMissingField(name + ".path")
	}
	pname := name + ".path"
	p, err := object(pathRaw, pname)
	if err != nil {
		return e, err
	}
	if e.Kind, err = enum(p, "type", pname, "special", "path", "glob_pattern"); err != nil {
		return e, err
	}
	switch e.Kind {
	case "path":
		if err := reqString(p, "path", pname, &e.Path); err != nil {
			return e, err
		}
	case "glob_pattern":
		if err := reqString(p, "pattern", pname, &e.Pattern); err != nil {
			return e, err
		}
	case "special":
		vRaw, ok := p["value"]
		if !ok || isNull(vRaw) {
			return e, ErrMissingField(pname + ".value")
		}
		vname := pname + ".value"
		v, err := object(vRaw, vname)
		if err != nil {
			return e, err
		}
		if e.Special, err = enum(v, "kind", vname, "root", "project_roots", "slash_tmp", "tmpdir"); err != nil {
			return e, err
		}
		if err := optString(v, "subpath", vname, &e.Subpath); err != nil {
			return e, err
		}
		if e.Subpath != "" {
			if strings.HasPrefix(e.Subpath, "/") {
				return e, badField(vname+".subpath", "must be relative")
			}
			for _, part := range strings.Split(e.Subpath, "/") {
				if part == ".." {
					return e, badField(vname+".subpath", "must not contain `..`")
				}
			}
		}
	}
	return e, nil
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}

func object(raw json.RawMessage, name string) (map[string]json.RawMessage, *Error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, badField(name, "expected an object")
	}
	return m, nil
}

func enum(obj map[string]json.RawMessage, key, parent string, allowed ...string) (string, *Error) {
	var s string
	if err := reqString(obj, key, parent, &s); err != nil {
		return "", err
	}
	for _, a := range allowed {
		if s == a {
			return s, nil
		}
	}
	return "", badField(parent+"."+key, fmt.Sprintf("unknown variant `%s`, expected one of `%s`", s, strings.Join(allowed, "`, `")))
}

func reqString(obj map[string]json.RawMessage, key, parent string, dst *string) *Error {
	v, ok := obj[key]
	if !ok || isNull(v) {
		return ErrMissingField(parent + "." + key)
	}
	if err := json.Unmarshal(v, dst); err != nil {
		return badField(parent+"."+key, "expected a string")
	}
	return nil
}

func optString(obj map[string]json.RawMessage, key, parent string, dst *string) *Error {
	v, ok := obj[key]
	if !ok || isNull(v) {
		return nil
	}
	if err := json.Unmarshal(v, dst); err != nil {
		return badField(parent+"."+key, "expected a string")
	}
	return nil
}

func badField(field, why string) *Error {
	return Errorf(CodeInvalidParams, "invalid field `%s`: %s", field, why)
}

// MarshalJSON writes the protocol shape (section 7.3) that ParseSandbox
// reads; a nil or unmanaged Sandbox is disabled permissions.
func (s *Sandbox) MarshalJSON() ([]byte, error) {
	type special struct {
		Kind    string `json:"kind"`
		Subpath string `json:"subpath,omitempty"`
	}
	type path struct {
		Type    string   `json:"type"`
		Value   *special `json:"value,omitempty"`
		Path    string   `json:"path,omitempty"`
		Pattern string   `json:"pattern,omitempty"`
	}
	type entry struct {
		Path    path   `json:"path"`
		Access  string `json:"access"`
		Missing string `json:"missing_path_behavior,omitempty"`
	}
	type fs struct {
		Type    string  `json:"type"`
		Entries []entry `json:"entries,omitempty"`
	}
	type perms struct {
		Type       string `json:"type"`
		FileSystem *fs    `json:"file_system,omitempty"`
		Network    string `json:"network,omitempty"`
	}
	out := struct {
		Permissions    perms    `json:"permissions"`
		Cwd            string   `json:"cwd,omitempty"`
		WorkspaceRoots []string `json:"workspaceRoots,omitempty"`
	}{Permissions: perms{Type: "disabled"}}
	if s == nil || !s.Managed {
		return json.Marshal(out)
	}
	out.Cwd, out.WorkspaceRoots = s.Cwd, s.WorkspaceRoots
	out.Permissions = perms{Type: "managed", Network: "restricted", FileSystem: &fs{Type: "unrestricted"}}
	if s.Network {
		out.Permissions.Network = "enabled"
	}
	if s.FS != nil {
		out.Permissions.FileSystem.Type = "restricted"
		for _, e := range s.FS.Entries {
			je := entry{Access: e.Access, Path: path{Type: e.Kind, Path: e.Path, Pattern: e.Pattern}}
			if e.Kind == "special" {
				je.Path.Value = &special{Kind: e.Special, Subpath: e.Subpath}
			}
			if e.SkipMissing {
				je.Missing = "skip"
			}
			out.Permissions.FileSystem.Entries = append(out.Permissions.FileSystem.Entries, je)
		}
	}
	return json.Marshal(out)
}
