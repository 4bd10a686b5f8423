package wire

import "encoding/json"

// Method names of PROTOCOL.md.
const (
	MethodInitialize        = "initialize"
	MethodInitialized       = "initialized"
	MethodEnvironmentStatus = "environment/status"

	MethodProcessStart      = "process/start"
	MethodProcessRead       = "process/read"
	MethodProcessWrite      = "process/write"
	MethodProcessTerminate  = "process/terminate"
	MethodProcessSignal     = "process/signal"
	MethodProcessResize     = "process/resize"
	MethodProcessCloseStdin = "process/closeStdin"
	MethodProcessList       = "process/list"
	MethodProcessAck        = "process/ack" // ext: the client has the output up to a seq

	NotifyProcessOutput = "process/output"
	NotifyProcessExited = "process/exited"
	NotifyProcessClosed = "process/closed"
)

// Stream names.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
	StreamPTY    = "pty"
)

// Write statuses.
const (
	WriteAccepted       = "accepted"
	WriteUnknownProcess = "unknownProcess"
	WriteStdinClosed    = "stdinClosed"
	WriteStarting       = "starting"
)

// InitializeParams are the params of initialize.
type InitializeParams struct {
	ClientName      string  `json:"clientName"`
	ResumeSessionID *string `json:"resumeSessionId"`
	// OutputAck (ext): this client acknowledges the output it receives
	// with process/ack, so the session's processes keep what they handed
	// it until it does (ack mode, from the first byte on).
	OutputAck bool `json:"runtimedOutputAck,omitempty"`
}

func (*InitializeParams) RequiredFields() []string { return nil }

// InitializeResult is the result of initialize. Clients of Codex 0.135
// ignore EnvironmentInfo (section 7.1).
type InitializeResult struct {
	SessionID       string           `json:"sessionId"`
	EnvironmentInfo *EnvironmentInfo `json:"environmentInfo,omitempty"`
}

// StatusResult is the result of environment/status.
type StatusResult struct {
	Status string `json:"status"`
}

// Size is a terminal size.
type Size struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// EnvPolicy builds a child's base environment from the server's own
// (PROTOCOL.md section 4).
type EnvPolicy struct {
	Inherit               string            `json:"inherit"`
	IgnoreDefaultExcludes bool              `json:"ignoreDefaultExcludes"`
	Exclude               []string          `json:"exclude"`
	Set                   map[string]string `json:"set"`
	IncludeOnly           []string          `json:"includeOnly"`
}

// StartParams are the params of process/start.
type StartParams struct {
	ProcessID string            `json:"processId"`
	Argv      []string          `json:"argv"`
	Cwd       string            `json:"cwd"`
	Env       map[string]string `json:"env"`
	EnvPolicy *EnvPolicy        `json:"envPolicy"`
	TTY       bool              `json:"tty"`
	PipeStdin bool              `json:"pipeStdin"`
	Arg0      *string           `json:"arg0"`
	Size      *Size             `json:"size"`
	Sandbox   json.RawMessage   `json:"sandbox"` // parsed strictly by ParseSandbox
	Limits    *StartLimits      `json:"limits"`  // (ext)
	// Metadata attributes the process to a Codex thread and tool call; it
	// is kept and shown by process/list (section 7.2).
	Metadata *ProcessMetadata `json:"metadata"`
	// EnforceManagedNetwork asks the sandbox to route the process's network
	// through a managed proxy described by ManagedNetwork.
	EnforceManagedNetwork bool            `json:"enforceManagedNetwork"`
	ManagedNetwork        *ManagedNetwork `json:"managedNetwork"`
	// NetworkProxy asks the executor to launch a managed-network proxy
	// (capability networkProxyLaunch, section 7.5); parsed strictly by
	// ParseNetworkProxy.
	NetworkProxy json.RawMessage `json:"networkProxy"`
	// PolicyDecisionTimeoutMs bounds a network/policyRequest (default 30 s).
	PolicyDecisionTimeoutMs *uint64 `json:"policyDecisionTimeoutMs"`
}

// ProcessMetadata is process/start's optional attribution. Codex sends a
// UUID threadId; runtimed keeps any string.
type ProcessMetadata struct {
	ThreadID   *string `json:"threadId,omitempty"`
	ToolCallID *string `json:"toolCallId,omitempty"`
}

// ManagedNetwork describes the managed proxy a sandboxed process may reach:
// its loopback ports, and whether it may bind local sockets.
type ManagedNetwork struct {
	LoopbackPorts     []uint16 `json:"loopbackPorts"`
	AllowLocalBinding bool     `json:"allowLocalBinding"`
}

func (*StartParams) RequiredFields() []string { return []string{"processId", "argv", "cwd"} }

// StartResult is the result of process/start.
type StartResult struct {
	ProcessID   string `json:"processId"`
	SandboxType string `json:"sandboxType"`
}

// ProcessIDResult is {"processId"}.
type ProcessIDResult struct {
	ProcessID string `json:"processId"`
}

// ReadParams are the params of process/read.
type ReadParams struct {
	ProcessID string  `json:"processId"`
	AfterSeq  uint64  `json:"afterSeq"`
	MaxBytes  *uint64 `json:"maxBytes"`
	WaitMs    uint64  `json:"waitMs"`
}

func (*ReadParams) RequiredFields() []string { return []string{"processId"} }

// AckParams are the params of process/ack (ext): the client has every seq
// of the process up to Seq, so the server need no longer keep it for a
// resume (PROTOCOL.md, docs: lossless resume).
type AckParams struct {
	ProcessID string `json:"processId"`
	Seq       uint64 `json:"seq"`
}

func (*AckParams) RequiredFields() []string { return []string{"processId", "seq"} }

// Chunk is one retained output chunk.
type Chunk struct {
	Seq    uint64 `json:"seq"`
	Stream string `json:"stream"`
	Chunk  Base64 `json:"chunk"`
}

// ReadResult is the result of process/read.
type ReadResult struct {
	Chunks   []Chunk `json:"chunks"`
	NextSeq  uint64  `json:"nextSeq"`
	Exited   bool    `json:"exited"`
	ExitCode *int    `json:"exitCode"`
	// ExitSignal (ext), once exited: the signal that killed the process
	// (exitCode is then 128+N), 0 when it exited on its own. Absent from
	// a server that does not report it.
	ExitSignal    *int    `json:"exitSignal,omitempty"`
	Closed        bool    `json:"closed"`
	Failure       *string `json:"failure"`
	SandboxDenied bool    `json:"sandboxDenied"`
	// Limit (ext) names the resource limit that ended the process, once
	// exited; absent when none did (as in process/exited).
	Limit string `json:"limit,omitempty"`
}

// WriteParams are the params of process/write.
type WriteParams struct {
	ProcessID string  `json:"processId"`
	Chunk     Base64  `json:"chunk"`
	WriteID   *string `json:"writeId"`
}

func (*WriteParams) RequiredFields() []string { return []string{"processId", "chunk"} }
func (*WriteParams) Base64Field() string      { return "chunk" }

// WriteResult is the result of process/write.
type WriteResult struct {
	Status string `json:"status"`
}

// ProcessParams are params that only name a process (process/closeStdin).
type ProcessParams struct {
	ProcessID string `json:"processId"`
}

func (*ProcessParams) RequiredFields() []string { return []string{"processId"} }

// TerminateParams are the params of process/terminate.
type TerminateParams struct {
	ProcessID string  `json:"processId"`
	GraceMs   *uint64 `json:"graceMs"`
}

func (*TerminateParams) RequiredFields() []string { return []string{"processId"} }

// TerminateResult is the result of process/terminate.
type TerminateResult struct {
	Running bool `json:"running"`
}

// SignalParams are the params of process/signal.
type SignalParams struct {
	ProcessID string `json:"processId"`
	Signal    string `json:"signal"`
}

func (*SignalParams) RequiredFields() []string { return []string{"processId", "signal"} }

// ResizeParams are the params of process/resize.
type ResizeParams struct {
	ProcessID string `json:"processId"`
	Rows      uint16 `json:"rows"`
	Cols      uint16 `json:"cols"`
}

func (*ResizeParams) RequiredFields() []string { return []string{"processId", "rows", "cols"} }

// ProcessInfo is one entry of process/list.
type ProcessInfo struct {
	ProcessID  string   `json:"processId"`
	PID        int      `json:"pid"`
	Argv       []string `json:"argv"`
	TTY        bool     `json:"tty"`
	State      string   `json:"state"`
	ExitCode   *int     `json:"exitCode"`
	ExitSignal *int     `json:"exitSignal,omitempty"` // (ext) as in process/read, once exited
	NextSeq    uint64   `json:"nextSeq"`
	Limit      string   `json:"limit,omitempty"` // (ext) the resource limit that ended it
	// Metadata is process/start's metadata, or null.
	Metadata *ProcessMetadata `json:"metadata"`
	// TokenName (ext) is the name of the bearer token the process was
	// started with (--auth-token-file); omitted without one.
	TokenName string `json:"tokenName,omitempty"`
}

// ListResult is the result of process/list.
type ListResult struct {
	Processes []ProcessInfo `json:"processes"`
}

// NoParams accepts {}, null or nothing.
type NoParams struct{}

func (*NoParams) RequiredFields() []string { return nil }

// ExitedNotification is process/exited.
type ExitedNotification struct {
	ProcessID     string `json:"processId"`
	Seq           uint64 `json:"seq"`
	ExitCode      int    `json:"exitCode"`
	ExitSignal    *int   `json:"exitSignal,omitempty"` // (ext) the signal that killed it, 0 if it exited on its own
	SandboxDenied bool   `json:"sandboxDenied"`
	Limit         string `json:"limit,omitempty"` // (ext)
}

// ClosedNotification is process/closed.
type ClosedNotification struct {
	ProcessID string `json:"processId"`
	Seq       uint64 `json:"seq"`
	// Failure (ext) is set when the server failed the process (an internal
	// error); requests about the process then answer -32603.
	Failure *string `json:"failure,omitempty"`
}

// OutputNotification is process/output. Servers encode it with
// [AppendOutputNotification]; clients decode it with encoding/json.
type OutputNotification struct {
	ProcessID string `json:"processId"`
	Seq       uint64 `json:"seq"`
	Stream    string `json:"stream"`
	Chunk     Base64 `json:"chunk"`
}
