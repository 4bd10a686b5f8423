package policy

import (
	"os"
	"testing"

	"github.com/runtimed/runtimed/actors/sandbox"
)

// BenchmarkAdmitWorkspaceWrite is what a sandboxed start's admission does
// with Codex's workspace-write shape (a project root and its .git,
// .agents, .codex and .aws): Resolve, then the host's Check.
func BenchmarkAdmitWorkspaceWrite(b *testing.B) {
	h, err := sandbox.Probe(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = h.Close() })
	dir := b.TempDir()
	for _, sub := range []string{".git", ".codex"} {
		if err := os.Mkdir(dir+"/"+sub, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	sb, env := FloorSandbox(FloorWorkspaceWrite, dir), []string{"TMPDIR=" + dir}
	for b.Loop() {
		p, werr := Resolve(sb, dir, env)
		if werr != nil {
			b.Fatal(werr)
		}
		if err := h.Check(p); err != nil {
			b.Fatal(err)
		}
	}
}
