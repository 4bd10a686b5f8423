package wire

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
)

// Limits of the filesystem methods that PROTOCOL.md quotes.
const (
	// FsMaxReadBlockLen is the largest len of fs/readBlock.
	FsMaxReadBlockLen = 1 << 20
	// FsMaxHandles is the number of fs/open handles a connection may hold.
	FsMaxHandles = 128
)

// FsPathParams are params that only name a path: fs/readFile,
// fs/getMetadata, fs/canonicalize, fs/readDirectory. Path is an absolute
// path or a file: URI.
type FsPathParams struct {
	Path string `json:"path"`
}

func (*FsPathParams) RequiredFields() []string { return []string{"path"} }

// FsReadFileResult is the result of fs/readFile.
type FsReadFileResult struct {
	DataBase64 Base64 `json:"dataBase64"`
}

// FsWriteFileParams are the params of fs/writeFile.
type FsWriteFileParams struct {
	Path       string `json:"path"`
	DataBase64 Base64 `json:"dataBase64"`
}

func (*FsWriteFileParams) RequiredFields() []string { return []string{"path", "dataBase64"} }
func (*FsWriteFileParams) Base64Field() string      { return "dataBase64" }

// FsCreateDirectoryParams are the params of fs/createDirectory. A nil
// Recursive means true.
type FsCreateDirectoryParams struct {
	Path      string `json:"path"`
	Recursive *bool  `json:"recursive"`
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
	Path      string `json:"path"`
	Recursive *bool  `json:"recursive"`
	Force     *bool  `json:"force"`
}

func (*FsRemoveParams) RequiredFields() []string { return []string{"path"} }

// FsCopyParams are the params of fs/copy. Recursive (default false) is
// required to copy a directory and ignored for files.
type FsCopyParams struct {
	SourcePath      string `json:"sourcePath"`
	DestinationPath string `json:"destinationPath"`
	Recursive       bool   `json:"recursive"`
}

func (*FsCopyParams) RequiredFields() []string { return []string{"sourcePath", "destinationPath"} }

// FsOpenParams are the params of fs/open. The client chooses HandleID.
type FsOpenParams struct {
	HandleID string `json:"handleId"`
	Path     string `json:"path"`
}

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
	return Errorf(CodeInvalidRequest, "file read handle `%s` already exists", handle)
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
