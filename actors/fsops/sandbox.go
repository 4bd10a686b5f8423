package fsops

import (
	"encoding/json"

	"github.com/runtimed/runtimed/wire"
)

// access is what an operation does to a path, for the sandbox check.
type access uint8

const (
	accessRead access = iota + 1
	accessWrite
)

// checkSandbox is the one place where the sandbox an fs request carries
// (PROTOCOL.md section 7.3: null, or a permissions policy) is to be
// enforced: every operation calls it with the resolved targets it is about
// to read or write, after confinement to the roots and before touching the
// disk. A non-nil error refuses the request.
//
// HOOK: it accepts every policy today. The policy is parsed (as raw JSON)
// and ignored until the sandbox enforcement lands; that work fills in this
// function and nothing else in the package.
func checkSandbox(sandbox json.RawMessage, a access, ts ...target) *wire.Error {
	_, _, _ = sandbox, a, ts
	return nil
}
