package fsops

import (
	"encoding/json"
	"os"

	"github.com/runtimed/runtimed/actors/policy"
	"github.com/runtimed/runtimed/wire"
)

// access is what an operation does to a path, for the sandbox check.
type access uint8

const (
	accessRead access = iota + 1
	accessWrite
)

// checkSandbox enforces the sandbox an fs request carries (PROTOCOL.md
// section 7.3: null, or a permissions policy) on the resolved targets the
// operation is about to read or write, after confinement to the roots and
// before touching the disk: the same rules a sandboxed process gets
// (resolved by package policy), checked by path because the daemon itself
// does the I/O. tmpdir is the daemon's $TMPDIR; project roots without
// workspaceRoots are the sandbox's cwd. An entry for a path that does not
// exist yet still governs it (Codex 0.135 sends such entries). A refusal
// is -32600 naming the path.
func checkSandbox(raw json.RawMessage, a access, ts ...target) *wire.Error {
	sb, werr := wire.ParseSandbox(raw)
	if werr != nil || sb == nil {
		return werr
	}
	p, werr := policy.ResolveForCheck(sb, "", os.Environ())
	if werr != nil {
		return werr
	}
	for _, t := range ts {
		if p.Allows(t.phys, a == accessWrite) {
			continue
		}
		what := "reading"
		if a == accessWrite {
			what = "writing"
		}
		return wire.Errorf(wire.CodeInvalidRequest, "%s %s: permission denied by the request's sandbox", what, t.abs)
	}
	return nil
}

// ReadCheck resolves the sandbox an fs-like request carries (raw: null or a
// section 7.3 sandbox) once and returns the check checkSandbox applies to
// reads: may the daemon read the physical absolute path p on the request's
// behalf? Capability discovery walks with it, so its reads are held to the
// same rules as fs/readFile's. A malformed sandbox is its -32602.
func ReadCheck(raw json.RawMessage) (func(p string) bool, *wire.Error) {
	sb, werr := wire.ParseSandbox(raw)
	if werr != nil {
		return nil, werr
	}
	if sb == nil {
		return func(string) bool { return true }, nil
	}
	p, werr := policy.ResolveForCheck(sb, "", os.Environ())
	if werr != nil {
		return nil, werr
	}
	return func(path string) bool { return p.Allows(path, false) }, nil
}
