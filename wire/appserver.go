package wire

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// The app-server dialect (PROTOCOL.md section 6): connection-scoped
// processes named by a client-chosen handle.
const (
	MethodProcessSpawn      = "process/spawn"
	MethodProcessWriteStdin = "process/writeStdin"
	MethodProcessResizePty  = "process/resizePty"
	MethodProcessKill       = "process/kill"

	NotifyProcessOutputDelta = "process/outputDelta"
	// The dialect's process/exited shares its name with the exec
	// notification but carries AppExitedNotification.
)

// Dialect defaults.
const (
	AppDefaultOutputBytesCap = 1 << 20
	AppDefaultTimeoutMs      = 10_000
	// AppTimeoutExitCode is reported when a process is killed by its timeout.
	AppTimeoutExitCode = 124
)

// SpawnParams are the params of process/spawn. OutputBytesCap and
// TimeoutMs are raw so that absent (the default) and null (none) differ.
type SpawnParams struct {
	ProcessHandle      string             `json:"processHandle"`
	Command            []string           `json:"command"`
	Cwd                string             `json:"cwd"`
	Env                map[string]*string `json:"env"`
	TTY                bool               `json:"tty"`
	Size               *Size              `json:"size"`
	StreamStdin        bool               `json:"streamStdin"`
	StreamStdoutStderr bool               `json:"streamStdoutStderr"`
	OutputBytesCap     json.RawMessage    `json:"outputBytesCap"`
	TimeoutMs          json.RawMessage    `json:"timeoutMs"`
}

func (*SpawnParams) RequiredFields() []string { return []string{"processHandle", "command", "cwd"} }

// OptionalLimit decodes a field that is absent (def), null (0 = none) or a
// non-negative integer.
func OptionalLimit(raw json.RawMessage, field string, def uint64) (uint64, bool, *Error) {
	if raw == nil {
		return def, true, nil
	}
	if string(raw) == "null" {
		return 0, false, nil
	}
	var n uint64
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, false, Errorf(CodeInvalidParams, "invalid type for field `%s`: expected non-negative integer or null", field)
	}
	return n, true, nil
}

// WriteStdinParams are the params of process/writeStdin.
type WriteStdinParams struct {
	ProcessHandle string `json:"processHandle"`
	DeltaBase64   Base64 `json:"deltaBase64"`
	CloseStdin    bool   `json:"closeStdin"`
}

func (*WriteStdinParams) RequiredFields() []string { return []string{"processHandle"} }
func (*WriteStdinParams) Base64Field() string      { return "deltaBase64" }

// ResizePtyParams are the params of process/resizePty.
type ResizePtyParams struct {
	ProcessHandle string `json:"processHandle"`
	Size          Size   `json:"size"`
}

func (*ResizePtyParams) RequiredFields() []string { return []string{"processHandle", "size"} }

// HandleParams are params that only name a handle (process/kill).
type HandleParams struct {
	ProcessHandle string `json:"processHandle"`
}

func (*HandleParams) RequiredFields() []string { return []string{"processHandle"} }

// OutputDeltaNotification is process/outputDelta.
type OutputDeltaNotification struct {
	ProcessHandle string `json:"processHandle"`
	Stream        string `json:"stream"`
	DeltaBase64   Base64 `json:"deltaBase64"`
	CapReached    bool   `json:"capReached"`
}

// AppExitedNotification is the dialect's process/exited.
type AppExitedNotification struct {
	ProcessHandle    string `json:"processHandle"`
	ExitCode         int    `json:"exitCode"`
	Stdout           string `json:"stdout"`
	StdoutCapReached bool   `json:"stdoutCapReached"`
	Stderr           string `json:"stderr"`
	StderrCapReached bool   `json:"stderrCapReached"`
}

func ErrDuplicateHandle(h string) *Error {
	return Errorf(CodeInvalidRequest, "duplicate active process handle: %q", h)
}

func ErrNoActiveHandle(h string) *Error {
	return Errorf(CodeInvalidRequest, "no active process for process handle %q", h)
}

func ErrResizeNotPTY() *Error {
	return Errorf(CodeInvalidRequest, "failed to resize PTY: process is not attached to a PTY")
}

func ErrStdinNotStreaming() *Error {
	return Errorf(CodeInvalidRequest, "stdin streaming is not enabled for this process")
}

func ErrWriteStdinEmpty() *Error {
	return Errorf(CodeInvalidParams, "process/writeStdin requires deltaBase64 or closeStdin")
}

// ErrProcessLimit is the answer when a session or connection already has
// its maximum of active processes.
func ErrProcessLimit(n int) *Error {
	return ErrBudget("processes per session", strconv.Itoa(n), "--max-processes", fmt.Sprintf("this session already has %d active processes", n))
}
