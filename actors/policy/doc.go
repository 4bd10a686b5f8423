// Package policy turns the sandbox a client sent (wire.Sandbox, PROTOCOL.md
// section 7.3) into the resolved sandbox.Policy the kernel enforces:
// special kinds, file: URIs, subpaths and deny globs become absolute,
// symlink-free rules. Process starts (package actors) and fs requests
// (package fsops) resolve through this one place. It knows the wire schema
// and the sandbox package, nothing of actors.
//
// # Usage
//
//	p, werr := policy.Resolve(sb, cwd, childEnv)   // nil, nil: no sandbox
//	sb := policy.FloorSandbox(policy.FloorWorkspaceWrite, cwd)
//
// # Concurrency
//
// Stateless: every function may be called from any goroutine.
//
// # Failure semantics
//
// Errors are *wire.Error with code -32602 that name the offending field
// (`sandbox.permissions.file_system.entries[2].path.path`): relative paths,
// foreign file: URI hosts, missing paths without missing_path_behavior
// "skip", globs on non-deny entries, globs that visit too much. NativePath
// refuses a path with a *PathError whose Kind says why (relative, a bad
// file: URI, a foreign host), so callers word it for their field.
//
// # Backpressure
//
// None. A deny glob visits at most 20,000 entries 8 levels deep.
package policy
