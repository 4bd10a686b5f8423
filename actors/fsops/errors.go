package fsops

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"github.com/runtimed/runtimed/wire"
)

// osCode maps an OS error to its JSON-RPC code (PROTOCOL.md section 5): not
// found -32004; invalid input or permission denied -32600; others -32603.
// The classes follow Rust's io::ErrorKind as the Codex exec-server uses
// them: ENOENT is NotFound; EINVAL is InvalidInput; EACCES and EPERM are
// PermissionDenied; ENOTDIR, EISDIR, EEXIST, ENOTEMPTY, ELOOP, ENOSPC... are
// others.
func osCode(err error) int {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return wire.CodeNotFound
	case errors.Is(err, syscall.EINVAL), errors.Is(err, fs.ErrInvalid), errors.Is(err, fs.ErrPermission):
		return wire.CodeInvalidRequest
	}
	return wire.CodeInternal
}

// osError turns an OS error into the wire error; the message is the OS
// error text. A physical path under one of the targets is shown in the
// client's spelling. An operation the root handle refused for leaving the
// roots is -32600 "path {path} is outside the allowed roots", naming the
// argument as the client sent it.
func osError(err error, ts ...target) *wire.Error {
	var oe *outsideError
	if errors.As(err, &oe) {
		return wire.ErrOutsideRoots(argOf(oe.path, ts...))
	}
	msg := err.Error()
	var pe *fs.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		msg = pe.Op + " " + display(pe.Path, ts...) + ": " + pe.Err.Error()
	case errors.As(err, &le):
		msg = le.Op + " " + le.Old + " " + display(le.New, ts...) + ": " + le.Err.Error()
	}
	return &wire.Error{Code: osCode(err), Message: msg}
}

// argOf shows a physical path as the client would have spelled it: the
// argument itself for a target's own path, the argument's form (native or
// URI) with the rest appended for a path under one.
func argOf(phys string, ts ...target) string {
	for _, t := range ts {
		if t.phys != "" && phys == t.phys {
			return t.arg
		}
	}
	for _, t := range ts {
		if t.phys != "" && strings.HasPrefix(phys, t.phys+"/") {
			return t.show(t.abs + phys[len(t.phys):])
		}
	}
	return phys
}
