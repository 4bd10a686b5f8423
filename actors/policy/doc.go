// Package policy resolves a client's sandbox (wire.Sandbox) into the
// sandbox.Policy the kernel enforces. See the package comment in
// policy.go for what it expands.
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
// "skip", globs on non-deny entries, globs that visit too much.
//
// # Backpressure
//
// None. A deny glob visits at most 20,000 entries 8 levels deep.
package policy
