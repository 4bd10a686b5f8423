package sandbox

import (
	"os"
	"testing"
)

// BenchmarkHelper measures one start through the helper to the command's
// exit: with no policy (the cost of the extra exec) and with a read-only
// policy (Landlock, seccomp, capabilities on top).
func BenchmarkHelper(b *testing.B) {
	h, err := Probe(os.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	for _, c := range []struct {
		name   string
		policy *Policy
	}{{"no-policy", nil}, {"read-only", &Policy{RestrictFS: true, Rules: []Rule{{Path: "/", Access: Read}}}}} {
		b.Run(c.name, func(b *testing.B) {
			if c.policy != nil && !h.Enforces() {
				b.Skip("no sandbox here")
			}
			devnull, _ := os.Open(os.DevNull)
			defer devnull.Close()
			for b.Loop() {
				l, err := NewLaunch(h, Plan{Path: "/bin/true", Argv: []string{"true"}, Policy: c.policy})
				if err != nil {
					b.Fatal(err)
				}
				proc, err := os.StartProcess(l.Exe, l.Argv, &os.ProcAttr{Env: l.Env, Files: []*os.File{devnull, devnull, devnull, l.Files[0], l.Files[1]}})
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Started(); err != nil {
					b.Fatal(err)
				}
				_, _ = proc.Wait()
			}
		})
	}
}

// BenchmarkTrue is the floor: /bin/true without the helper.
func BenchmarkTrue(b *testing.B) {
	for b.Loop() {
		p, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{})
		if err != nil {
			b.Fatal(err)
		}
		_, _ = p.Wait()
	}
}
