package wire

import (
	"errors"
	"fmt"
	"strings"
)

// JSON-RPC error codes of PROTOCOL.md section 2. They are mapped here and
// nowhere else: other packages return typed errors or sentinels and the
// connection edge turns them into an *Error with [AsError].
const (
	CodeInvalidRequest  = -32600
	CodeMethodNotFound  = -32601
	CodeInvalidParams   = -32602
	CodeInternal        = -32603
	CodeNotFound        = -32004
	CodeSessionAttached = -32010
	// CodeBudgetExceeded: a server-wide or per-session budget (connections,
	// processes, open files, retained output, outbound memory) refused the
	// request; the message names the limit, its value and the flag that sets it.
	CodeBudgetExceeded = -32011
)

// Error is a JSON-RPC error object. Its Message is part of the contract:
// clients match on it, so constructors below spell every quoted text of
// PROTOCOL.md exactly once.
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	// Limit names the configured limit that refused the request (for
	// metrics: "processes", "message_bytes", "fs_handles", ...); empty for
	// other errors. It is not sent.
	Limit string `json:"-"`
	// Data, if set, is sent as the error object's data member (a runtimed
	// extension: ErrorData; Codex ignores it).
	Data *ErrorData `json:"data,omitempty"`
}

// ErrorData is the data member runtimed adds to some error answers, so
// that a client can branch without parsing the message (which stays as
// PROTOCOL.md words it).
type ErrorData struct {
	// Spawn is set on the -32603 answer to a start whose child could not
	// be started.
	Spawn *SpawnFailure `json:"spawn,omitempty"`
}

// SpawnFailure says why a child could not be started: the stage ("cwd",
// "lookup": the command on the PATH, "exec", "setup": pipes, PTY, cgroup)
// and the OS error's name ("ENOENT", "EACCES"; empty when it had none).
type SpawnFailure struct {
	Op    string `json:"op"`
	Errno string `json:"errno,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("wire: rpc error %d: %s", e.Code, e.Message) }

// Sentinels for conditions callers branch on.
var (
	// ErrMessageTooBig is returned by a transport when an inbound message exceeds its limit.
	ErrMessageTooBig = errors.New("wire: message too big")
	// ErrClosed is returned by a transport after Close.
	ErrClosed = errors.New("wire: transport closed")
)

// Errorf builds an *Error with a formatted message.
func Errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// AsError converts any error to the *Error sent on the wire. An error that
// wraps an *Error keeps its code and message; anything else is -32603 with
// the error text (the OS text for spawn and stdin failures).
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: CodeInternal, Message: err.Error()}
}

// Constructors for the messages PROTOCOL.md quotes.

func ErrUnknownMethod(method string) *Error {
	return Errorf(CodeMethodNotFound, "exec-server stub does not implement `%s` yet", method)
}

func ErrNotInitialized(family string) *Error {
	return Errorf(CodeInvalidRequest, "client must call initialize before using %s methods", family)
}

func ErrNotInitializedAck(family string) *Error {
	return Errorf(CodeInvalidRequest, "client must send initialized before using %s methods", family)
}

func ErrInitializeTwice() *Error {
	return Errorf(CodeInvalidRequest, "initialize may only be sent once per connection")
}

func ErrUnknownSession(id string) *Error {
	return Errorf(CodeInvalidRequest, "unknown session id %s", id)
}

func ErrSessionAttached(id string) *Error {
	return Errorf(CodeSessionAttached, "session %s is already attached to another connection", id)
}

func ErrProcessExists(id string) *Error {
	return Errorf(CodeInvalidRequest, "process %s already exists", id)
}

func ErrUnknownProcess(id string) *Error {
	return Errorf(CodeInvalidRequest, "unknown process id %s", id)
}

// ErrProcessFailed answers every request about a process whose server-side
// handling failed (a recovered internal panic); failure says why.
func ErrProcessFailed(failure string) *Error {
	return Errorf(CodeInternal, "%s", failure)
}

// ErrInternal answers a request whose handling failed inside the server (a
// recovered panic); the connection is then closed.
func ErrInternal(reason string) *Error {
	return Errorf(CodeInternal, "internal error: %s", reason)
}

func ErrEmptyArgv() *Error { return Errorf(CodeInvalidParams, "argv must not be empty") }

// ErrEmptyCommand is the app-server dialect's ErrEmptyArgv (process/spawn).
func ErrEmptyCommand() *Error { return Errorf(CodeInvalidParams, "command must not be empty") }

// ErrCwdRelative, ErrCwdURI and ErrCwdForeignHost refuse a process's cwd
// (process/start, process/spawn) that is neither an absolute path nor a
// file: URI of this host.
func ErrCwdRelative(cwd string) *Error {
	return Errorf(CodeInvalidParams, "cwd must be absolute: %s", cwd)
}

func ErrCwdURI(cwd string) *Error {
	return Errorf(CodeInvalidParams, "cwd is not a valid file URI: %s", cwd)
}

func ErrCwdForeignHost(host, cwd string) *Error {
	return Errorf(CodeInvalidParams, "cwd is a file URI with a foreign host %q: %s", host, cwd)
}

// ErrSandboxRequired refuses a start without a sandbox on a server that
// requires one.
func ErrSandboxRequired() *Error {
	return Errorf(CodeInvalidParams, "this server requires a sandbox on every process (runtimed serve --require-sandbox): send process/start.sandbox with managed permissions")
}

func ErrEmptyWriteID() *Error { return Errorf(CodeInvalidParams, "writeId must not be empty") }

func ErrMissingField(field string) *Error {
	return Errorf(CodeInvalidParams, "missing field `%s`", field)
}

func ErrNotPTY() *Error {
	return Errorf(CodeInvalidRequest, "process is not attached to a PTY")
}

// ErrMessageTooLarge answers (with id -1) an inbound message over the
// transport's limit of n bytes.
func ErrMessageTooLarge(n int) *Error {
	e := Errorf(CodeInvalidRequest, "message exceeds the %d-byte limit", n)
	e.Limit = "message_bytes"
	return e
}

// ErrMalformed is the error for a message that is not valid JSON or not a
// valid envelope; it is answered with id -1.
func ErrMalformed(detail string) *Error {
	return Errorf(CodeInvalidRequest, "invalid JSON-RPC message: %s", detail)
}

// http/request (section 7.4). The texts follow the reference exec-server.

func ErrHTTPDisabled() *Error {
	return Errorf(CodeInvalidParams, "http/request is disabled on this executor (runtimed serve --http-requests=false)")
}

func ErrHTTPMethod() *Error {
	return Errorf(CodeInvalidParams, "http/request method is invalid: invalid HTTP method")
}

func ErrHTTPURL(reason string) *Error {
	return Errorf(CodeInvalidParams, "http/request url is invalid: %s", reason)
}

func ErrHTTPScheme(scheme string) *Error {
	return Errorf(CodeInvalidParams, "http/request only supports http and https URLs, got %s", scheme)
}

func ErrHTTPHeaderName() *Error {
	return Errorf(CodeInvalidParams, "http/request header name is invalid: invalid HTTP header name")
}

func ErrHTTPHeaderValue(name string) *Error {
	return Errorf(CodeInvalidParams, "http/request header value is invalid for %s: failed to parse header value", name)
}

// ErrHTTPHeaderEnv: a header's valueEnvVar is protected, unset or empty
// (kind "protected", "unset" or "empty").
func ErrHTTPHeaderEnv(kind, name, envVar string) *Error {
	switch kind {
	case "protected":
		return Errorf(CodeInvalidParams, "http/request header %s cannot use executor environment variable %s", name, envVar)
	case "empty":
		return Errorf(CodeInvalidParams, "http/request header %s requires a non-empty executor environment variable %s", name, envVar)
	}
	return Errorf(CodeInvalidParams, "http/request header %s requires executor environment variable %s", name, envVar)
}

func ErrHTTPStreamActive(requestID string) *Error {
	return Errorf(CodeInvalidParams, "http/request streamResponse requestId `%s` is already active", requestID)
}

// ErrHTTPBusy: the connection already has the most requests in flight.
func ErrHTTPBusy(limit int) *Error {
	e := Errorf(CodeInvalidRequest, "at most %d http requests may be in flight per connection", limit)
	e.Limit = "http_requests"
	return e
}

// ErrHTTPFailed: the request could not be sent or its headers not received
// (including a timeout); detail is the cause.
func ErrHTTPFailed(detail string) *Error {
	return Errorf(CodeInternal, "http/request failed: %s", detail)
}

// ErrHTTPBody: the buffered response body could not be read.
func ErrHTTPBody(detail string) *Error {
	return Errorf(CodeInternal, "failed to read http/request response body: %s", detail)
}

// ErrHTTPBodyTooLarge: a buffered response body exceeds the server's cap.
func ErrHTTPBodyTooLarge(limit int64) *Error {
	return Errorf(CodeInternal, "failed to read http/request response body: the body exceeds the %d-byte limit for buffered responses; use streamResponse for larger bodies", limit)
}

// ErrManagedNetwork: process/start asked for a managed network this
// executor cannot provide (section 7.2); reason says what is missing.
func ErrManagedNetwork(reason string) *Error {
	return Errorf(CodeInvalidParams, "managed network cannot be provided: %s", reason)
}

// ErrEnvName: an environment variable name a child's environment cannot
// carry (empty, or containing '=' or NUL) in field (env, envPolicy.set).
func ErrEnvName(field, name string) *Error {
	return Errorf(CodeInvalidParams, "invalid environment variable name %q in `%s`: a name must not be empty or contain '=' or NUL", name, field)
}

// ErrBudget: a server budget refused the request. limit names it (e.g.
// "processes per session"), value is its value, flag the setting that
// changes it and detail the state that made it refuse.
func ErrBudget(limit, value, flag, detail string) *Error {
	e := Errorf(CodeBudgetExceeded, "limit reached: %s = %s (%s): %s", limit, value, flag, detail)
	e.Limit = strings.ReplaceAll(limit, " ", "_") // the metric label: "processes_per_session"
	return e
}

// ErrUnknownVariant: field holds a value outside its enumeration, in the
// reference's words.
func ErrUnknownVariant(field, got string, allowed ...string) *Error {
	return Errorf(CodeInvalidParams, "invalid field `%s`: unknown variant `%s`, expected one of `%s`", field, got, strings.Join(allowed, "`, `"))
}
