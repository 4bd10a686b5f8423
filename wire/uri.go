package wire

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Paths on the wire (PROTOCOL.md section 7.1) are native absolute paths or
// file: URIs. FileURI and ParseFileURI are the one encoder and decoder of
// the project: every answer that carries a URI (environment/info, the
// initialize result, fs/* answers, fs/walk entries and errors) is made by
// FileURI, and every path argument that may be a URI (process/start cwd,
// sandbox paths and roots, fs/* paths, the Go client's view of
// environmentInfo) is read by ParseFileURI.

// Sentinels of ParseFileURI; the *FileURIError it returns wraps one.
var (
	// ErrFileURIInvalid: the argument starts with "file:" but is not a
	// valid URI (a bad percent escape, a malformed authority).
	ErrFileURIInvalid = errors.New("wire: not a valid file URI")
	// ErrFileURIRemote: the URI names a host other than empty or localhost.
	ErrFileURIRemote = errors.New("wire: file URI names a remote host")
)

// FileURIError is ParseFileURI's error: the URI, the host it named (for
// ErrFileURIRemote) and the sentinel.
type FileURIError struct {
	URI  string
	Host string
	Err  error
}

func (e *FileURIError) Error() string {
	if e.Host != "" {
		return fmt.Sprintf("%v %q: %s", e.Err, e.Host, e.URI)
	}
	return fmt.Sprintf("%v: %s", e.Err, e.URI)
}

func (e *FileURIError) Unwrap() error { return e.Err }

// IsFileURI reports whether a path argument is meant as a file: URI (it
// starts with "file:"); anything else is a native path.
func IsFileURI(s string) bool { return strings.HasPrefix(s, "file:") }

// FileURI returns the file: URI of the absolute native path p, with an
// empty host, spelled as the Codex client spells its own (Rust's url crate,
// Url::from_file_path, releases 2.x): p is split into components, empty
// and "." components are dropped (".." is kept), and each component is
// percent-encoded with the WHATWG path-segment set of a special scheme plus
// "%": C0 controls, space, " # % < > ? \ ` { }, DEL and every non-ASCII
// byte. Everything else is kept as it is, "[", "]", "|", "^" and "/"
// between components included. "/" is "file:///". Two spellings of one
// path would compare unequal on the client, so no other encoder may exist.
func FileURI(p string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len("file://") + len(p) + 8)
	b.WriteString("file://")
	empty := true
	for comp := range strings.SplitSeq(p, "/") {
		if comp == "" || comp == "." {
			continue
		}
		empty = false
		b.WriteByte('/')
		for i := 0; i < len(comp); i++ {
			c := comp[i]
			if uriEscape(c) {
				b.WriteByte('%')
				b.WriteByte(hex[c>>4])
				b.WriteByte(hex[c&15])
				continue
			}
			b.WriteByte(c)
		}
	}
	if empty {
		b.WriteByte('/')
	}
	return b.String()
}

// uriEscape is the set FileURI percent-encodes.
func uriEscape(c byte) bool {
	if c < 0x20 || c >= 0x7f {
		return true
	}
	switch c {
	case ' ', '"', '#', '%', '<', '>', '?', '\\', '`', '{', '}':
		return true
	}
	return false
}

// ParseFileURI returns the native path of a file: URI: its path,
// percent-decoded and not cleaned (".." stays for the caller to resolve).
// The host must be empty or "localhost"; a query or fragment is ignored,
// as Url::to_file_path does. The result may be relative or empty when the
// URI has no absolute path ("file:x"): callers check absoluteness, as they
// do for native paths. Errors are *FileURIError wrapping ErrFileURIInvalid
// or ErrFileURIRemote.
func ParseFileURI(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "file" {
		return "", &FileURIError{URI: s, Err: ErrFileURIInvalid}
	}
	if u.Host != "" && u.Host != "localhost" {
		return "", &FileURIError{URI: s, Host: u.Host, Err: ErrFileURIRemote}
	}
	if u.Opaque != "" {
		return u.Opaque, nil
	}
	return u.Path, nil
}

// NativePath returns the native form of a path argument: a file: URI is
// decoded (ParseFileURI), anything else is returned as it is.
func NativePath(s string) (string, error) {
	if !IsFileURI(s) {
		return s, nil
	}
	return ParseFileURI(s)
}
