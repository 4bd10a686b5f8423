package wire

import "encoding/json"

// Method names of the filesystem methods (PROTOCOL.md section 5).
const (
	MethodFsReadFile        = "fs/readFile"
	MethodFsWriteFile       = "fs/writeFile"
	MethodFsCreateDirectory = "fs/createDirectory"
	MethodFsGetMetadata     = "fs/getMetadata"
	MethodFsCanonicalize    = "fs/canonicalize"
	MethodFsReadDirectory   = "fs/readDirectory"
	MethodFsRemove          = "fs/remove"
	MethodFsCopy            = "fs/copy"
	MethodFsOpen            = "fs/open"
	MethodFsReadBlock       = "fs/readBlock"
	MethodFsClose           = "fs/close"

	// Section 7.4 (Codex 0.169).
	MethodFsWalk         = "fs/walk"
	MethodFsWatchMissing = "fs/watchMissing"
	MethodFsWriteBlock   = "fs/writeBlock"
	// NotifyFsMissingChanged is the one notification of a watch.
	NotifyFsMissingChanged = "fs/missingChanged"
)

// Limits of the filesystem methods that PROTOCOL.md quotes.
const (
	// FsMaxReadBlockLen is the largest len of fs/readBlock.
	FsMaxReadBlockLen = 1 << 20
	// FsMaxHandles is the number of fs/open handles a connection may hold,
	// read and replace handles together.
	FsMaxHandles = 128
	// FsMaxWriteBlockLen is the largest chunk of fs/writeBlock.
	FsMaxWriteBlockLen = 1 << 20

	// Maxima of the fs/walk options (the Codex exec-server's).
	FsWalkMaxDepth       = 64
	FsWalkMaxDirectories = 10_000
	FsWalkMaxEntries     = 50_000

	// FsMaxWatches is the number of fs/watchMissing watches a connection
	// may have active; FsMaxWatchPaths bounds the paths of one watch
	// (missing and present together).
	FsMaxWatches    = 128
	FsMaxWatchPaths = 256
)

// Every fs params struct that PROTOCOL.md section 7.3 gives a sandbox
// carries it raw in a Sandbox field: runtimed accepts it and does not yet
// interpret it (the sandbox check is one hook in package fsops).

// FsPathParams are params that only name a path: fs/readFile,
// fs/getMetadata, fs/canonicalize, fs/readDirectory. Path is an absolute
// path or a file: URI.
type FsPathParams struct {
	Path    string          `json:"path"`
	Sandbox json.RawMessage `json:"sandbox,omitempty"`
}

func (*FsPathParams) RequiredFields() []string { return []string{"path"} }

// FsReadFileResult is the result of fs/readFile.
type FsReadFileResult struct {
	DataBase64 Base64 `json:"dataBase64"`
}

// FsWriteFileParams are the params of fs/writeFile.
type FsWriteFileParams struct {
	Path       string          `json:"path"`
	DataBase64 Base64          `json:"dataBase64"`
	Sandbox    json.RawMessage `json:"sandbox,omitempty"`
}

func (*FsWriteFileParams) RequiredFields() []string { return []string{"path", "dataBase64"} }
func (*FsWriteFileParams) Base64Field() string      { return "dataBase64" }

// FsCreateDirectoryParams are the params of fs/createDirectory. A nil
// Recursive means true.
type FsCreateDirectoryParams struct {
	Path      string          `json:"path"`
	Recursive *bool           `json:"recursive"`
	Sandbox   json.RawMessage `json:"sandbox,omitempty"`
}

func (*FsCreateDirectoryParams) RequiredFields() []string { return []string{"path"} }

// FsMetadataResult is the result of fs/getMetadata. It describes what the
// path points to; IsSymlink says whether the path itself is a symbolic link.
// Times are Unix milliseconds.
type FsMetadataResult struct {
	IsDirectory  bool   `json:"isDirectory"`
	IsFile       bool   `json:"isFile"`
	IsSymlink    bool   `json:"isSymlink"`
	Size         uint64 `json:"size"`
	CreatedAtMs  int64  `json:"createdAtMs"`
	ModifiedAtMs int64  `json:"modifiedAtMs"`
}

// FsPathResult is the result of fs/canonicalize.
type FsPathResult struct {
	Path string `json:"path"`
}

// FsDirEntry is one entry of fs/readDirectory. IsDirectory and IsFile
// describe what the entry resolves to.
type FsDirEntry struct {
	FileName    string `json:"fileName"`
	IsDirectory bool   `json:"isDirectory"`
	IsFile      bool   `json:"isFile"`
}

// FsReadDirectoryResult is the result of fs/readDirectory.
type FsReadDirectoryResult struct {
	Entries []FsDirEntry `json:"entries"`
}

// FsRemoveParams are the params of fs/remove. A nil Recursive or Force
// means true.
type FsRemoveParams struct {
	Path      string          `json:"path"`
	Recursive *bool           `json:"recursive"`
	Force     *bool           `json:"force"`
	Sandbox   json.RawMessage `json:"sandbox,omitempty"`
}

func (*FsRemoveParams) RequiredFields() []string { return []string{"path"} }

// FsCopyParams are the params of fs/copy. Recursive (default false) is
// required to copy a directory and ignored for files.
type FsCopyParams struct {
	SourcePath      string          `json:"sourcePath"`
	DestinationPath string          `json:"destinationPath"`
	Recursive       bool            `json:"recursive"`
	Sandbox         json.RawMessage `json:"sandbox,omitempty"`
}

func (*FsCopyParams) RequiredFields() []string { return []string{"sourcePath", "destinationPath"} }

// FsOpenParams are the params of fs/open. The client chooses HandleID.
// Mode is FsModeRead (the default, also for null) or FsModeReplace.
type FsOpenParams struct {
	HandleID string          `json:"handleId"`
	Path     string          `json:"path"`
	Mode     *string         `json:"mode,omitempty"`
	Sandbox  json.RawMessage `json:"sandbox,omitempty"`
}

// Modes of fs/open.
const (
	FsModeRead    = "read"
	FsModeReplace = "replace"
)

func (*FsOpenParams) RequiredFields() []string { return []string{"handleId", "path"} }

// FsHandleResult is the result of fs/open.
type FsHandleResult struct {
	HandleID string `json:"handleId"`
}

// FsReadBlockParams are the params of fs/readBlock. Len is signed so that
// a negative len gets the range error rather than a type error.
type FsReadBlockParams struct {
	HandleID string `json:"handleId"`
	Offset   uint64 `json:"offset"`
	Len      int64  `json:"len"`
}

func (*FsReadBlockParams) RequiredFields() []string { return []string{"handleId", "offset", "len"} }

// FsReadBlockResult is the result of fs/readBlock. EOF is true when fewer
// than len bytes were returned.
type FsReadBlockResult struct {
	Chunk Base64 `json:"chunk"`
	EOF   bool   `json:"eof"`
}

// FsHandleParams are the params of fs/close.
type FsHandleParams struct {
	HandleID string `json:"handleId"`
}

func (*FsHandleParams) RequiredFields() []string { return []string{"handleId"} }

// FsWriteBlockParams are the params of fs/writeBlock: Chunk is written at
// Offset of a handle opened with mode replace.
type FsWriteBlockParams struct {
	HandleID string `json:"handleId"`
	Offset   uint64 `json:"offset"`
	Chunk    Base64 `json:"chunk"`
}

func (*FsWriteBlockParams) RequiredFields() []string { return []string{"handleId", "offset", "chunk"} }

// FsWalkParams are the params of fs/walk. Options is decoded separately
// into FsWalkOptions so that its own missing fields are named.
type FsWalkParams struct {
	Path    string          `json:"path"`
	Options json.RawMessage `json:"options"`
	Sandbox json.RawMessage `json:"sandbox,omitempty"`
}

func (*FsWalkParams) RequiredFields() []string { return []string{"path", "options"} }

// FsWalkOptions bound a walk. MaxDepth is how deep below the root the walk
// descends (0: the root's entries only); MaxDirectories counts the
// directories read, the root included; MaxEntries counts the directory
// entries examined.
type FsWalkOptions struct {
	MaxDepth                uint64 `json:"maxDepth"`
	MaxDirectories          uint64 `json:"maxDirectories"`
	MaxEntries              uint64 `json:"maxEntries"`
	FollowDirectorySymlinks bool   `json:"followDirectorySymlinks"`
	PruneHiddenDirectories  bool   `json:"pruneHiddenDirectories"`
}

func (*FsWalkOptions) RequiredFields() []string {
	return []string{"maxDepth", "maxDirectories", "maxEntries", "followDirectorySymlinks"}
}

// Kinds of fs/walk entries. PROTOCOL.md allows FsKindSymlink and
// FsKindOther; runtimed, like the Codex exec-server, reports only files
// and directories (see package fsops).
const (
	FsKindFile      = "file"
	FsKindDirectory = "directory"
	FsKindSymlink   = "symlink"
	FsKindOther     = "other"
)

// FsWalkEntry is one entry of fs/walk; Path has the form of the request's
// path (a file: URI or a native path).
type FsWalkEntry struct {
	Path string `json:"path"`
	Kind string `json:"kind"`
}

// FsWalkError is a directory fs/walk could not read (or a link it would
// not follow); the walk went on without it.
type FsWalkError struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

// FsWalkResult is the result of fs/walk. Truncated is set when a limit cut
// the walk short.
type FsWalkResult struct {
	Entries   []FsWalkEntry `json:"entries"`
	Errors    []FsWalkError `json:"errors"`
	Truncated bool          `json:"truncated"`
}

// FsWatchMissingParams are the params of fs/watchMissing. WatchID is a
// non-negative integer (what Codex sends) or a string, echoed as sent in
// fs/missingChanged. Missing and Present are paths or file: URIs.
type FsWatchMissingParams struct {
	WatchID json.RawMessage `json:"watchId"`
	Missing []string        `json:"missing"`
	Present *string         `json:"present"`
}

func (*FsWatchMissingParams) RequiredFields() []string { return []string{"watchId", "missing"} }

// FsWatchMissingResult is the result of fs/watchMissing: Watching is false
// when nothing is watched (the watch was ended, or its condition already
// held).
type FsWatchMissingResult struct {
	Watching bool `json:"watching"`
}

// FsMissingChangedParams are the params of the fs/missingChanged
// notification.
type FsMissingChangedParams struct {
	WatchID json.RawMessage `json:"watchId"`
}

// Constructors for the filesystem messages. Those PROTOCOL.md quotes come
// first; the others are runtimed's own texts (several reuse the Codex
// exec-server's wording).

func ErrPathNotAbsolute(path string) *Error {
	return Errorf(CodeInvalidParams, "path must be absolute: %s", path)
}

func ErrReadBlockLen() *Error {
	return Errorf(CodeInvalidParams, "file read block length must be between 1 and %d", FsMaxReadBlockLen)
}

func ErrTooManyHandles() *Error {
	e := Errorf(CodeInvalidRequest, "at most %d file reads may be open per connection", FsMaxHandles)
	e.Limit = "fs_handles"
	return e
}

func ErrUnknownHandle(handle string) *Error {
	return Errorf(CodeNotFound, "unknown file read handle `%s`", handle)
}

func ErrOutsideRoots(path string) *Error {
	return Errorf(CodeInvalidRequest, "path %s is outside the allowed roots", path)
}

func ErrFileURIHost(uri string) *Error {
	return Errorf(CodeInvalidParams, "file URI must not name a remote host: %s", uri)
}

func ErrHandleExists(handle string) *Error {
	return Errorf(CodeInvalidRequest, "file handle `%s` already exists", handle)
}

func ErrReadOffset(offset uint64) *Error {
	return Errorf(CodeInvalidRequest, "file read offset overflowed: %d", offset)
}

func ErrFileTooLarge(path string, limit int64) *Error {
	e := Errorf(CodeInvalidRequest,
		"file %s is larger than the fs/readFile limit of %d bytes; read it in blocks with fs/open and fs/readBlock",
		path, limit)
	e.Limit = "fs_read_file_bytes"
	return e
}

func ErrTooManyEntries(path string, limit int) *Error {
	e := Errorf(CodeInvalidRequest,
		"directory %s has more than %d entries, the most fs/readDirectory returns", path, limit)
	e.Limit = "fs_directory_entries"
	return e
}

func ErrNotRegularFile(path string) *Error {
	return Errorf(CodeInvalidRequest, "%s is not a regular file", path)
}

func ErrRemoveRoot(path string) *Error {
	return Errorf(CodeInvalidRequest, "path %s is an allowed root and cannot be removed", path)
}

func ErrCopyNeedsRecursive() *Error {
	return Errorf(CodeInvalidRequest, "fs/copy requires recursive: true when sourcePath is a directory")
}

func ErrCopyIntoItself() *Error {
	return Errorf(CodeInvalidRequest, "fs/copy cannot copy a directory to itself or one of its descendants")
}

func ErrCopyUnsupported(path string) *Error {
	return Errorf(CodeInvalidRequest, "fs/copy only supports regular files, directories, and symlinks: %s", path)
}

// Messages of section 7.4. The texts the Codex exec-server uses are kept
// where a client might match on them.

func ErrUnknownOpenMode(mode string) *Error {
	return Errorf(CodeInvalidParams, "unknown variant `%s`, expected `read` or `replace`", mode)
}

// ErrTooManyFileHandles is the handle limit met by an fs/open in mode
// replace (a read keeps ErrTooManyHandles's section 5 text); one limit
// counts both kinds.
func ErrTooManyFileHandles() *Error {
	e := Errorf(CodeInvalidRequest, "at most %d file handles may be open per connection", FsMaxHandles)
	e.Limit = "fs_handles"
	return e
}

func ErrUnknownFileHandle(handle string) *Error {
	return Errorf(CodeNotFound, "unknown file handle `%s`", handle)
}

func ErrWriteBlockLen() *Error {
	return Errorf(CodeInvalidRequest, "file write block length must be between 1 and %d", FsMaxWriteBlockLen)
}

func ErrWriteRange() *Error {
	return Errorf(CodeInvalidRequest, "file write range exceeds the signed 64-bit file offset limit")
}

// ErrHandleMode is an fs/readBlock on a replace handle or an fs/writeBlock
// on a read handle: -32603 as the Codex exec-server answers (EBADF).
func ErrHandleMode(method, handle, mode string) *Error {
	return Errorf(CodeInternal, "%s: file handle `%s` was opened with mode %s: bad file descriptor", method, handle, mode)
}

func ErrWalkLimitsZero() *Error {
	return Errorf(CodeInvalidRequest, "filesystem walk limits must be greater than zero")
}

func ErrWalkLimitsExceeded() *Error {
	return Errorf(CodeInvalidRequest, "filesystem walk limits exceed maximums: depth=%d, directories=%d, entries=%d",
		FsWalkMaxDepth, FsWalkMaxDirectories, FsWalkMaxEntries)
}

func ErrWatchID() *Error {
	return Errorf(CodeInvalidParams, "invalid type for field `watchId`: expected non-negative integer or string")
}

func ErrTooManyWatches() *Error {
	e := Errorf(CodeInvalidRequest, "at most %d file watches may be active per connection", FsMaxWatches)
	e.Limit = "fs_watches"
	return e
}

func ErrTooManyWatchPaths() *Error {
	e := Errorf(CodeInvalidRequest, "fs/watchMissing watches at most %d paths (missing and present together)", FsMaxWatchPaths)
	e.Limit = "fs_watch_paths"
	return e
}
