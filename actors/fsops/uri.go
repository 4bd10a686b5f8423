package fsops

import "github.com/runtimed/runtimed/wire"

// Path form (PROTOCOL.md section 7.1): a client may send a path as a
// native absolute path or as a file: URI, and every path in an answer has
// the form the request used. The URI spelling is wire.FileURI's, the one
// encoder of the project.

// show returns the absolute native path p in the form of t's argument.
func (t target) show(p string) string {
	if t.uri {
		return wire.FileURI(p)
	}
	return p
}
