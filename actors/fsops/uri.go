package fsops

import "strings"

// Path form (PROTOCOL.md section 7.1): a client may send a path as a
// native absolute path or as a file: URI, and every path in an answer has
// the form the request used.

// isURI reports whether a path argument is a file: URI.
func isURI(arg string) bool { return strings.HasPrefix(arg, "file:") }

// show returns the absolute native path p in the form of t's argument.
func (t target) show(p string) string {
	if t.uri {
		return fileURI(p)
	}
	return p
}

// fileURI returns the file: URI of the absolute native path p, with an
// empty host, encoded as the Codex client's own URLs are (Rust's url crate
// on a file path): the bytes below are percent-encoded and everything else,
// "/" included, is kept as it is. Two spellings of one path would compare
// unequal on the client.
func fileURI(p string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len("file://") + len(p) + 8)
	b.WriteString("file://")
	for i := 0; i < len(p); i++ {
		c := p[i]
		if uriEscape(c) {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// uriEscape is the path-segment encode set of the WHATWG URL standard for
// a special scheme: C0 controls, space, " # % < > ? \ ` { }, DEL and every
// non-ASCII byte.
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
