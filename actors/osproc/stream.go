package osproc

// Stream names an output stream of a process.
type Stream uint8

const (
	Stdout Stream = iota + 1
	Stderr
	PTY
)

// String returns the wire name of the stream.
func (s Stream) String() string {
	switch s {
	case Stdout:
		return "stdout"
	case Stderr:
		return "stderr"
	case PTY:
		return "pty"
	}
	return "unknown"
}
