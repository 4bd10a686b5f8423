package runtime

import (
	"strings"
	"testing"

	"github.com/runtimed/runtimed/actors/sandbox/sandboxtest"
)

// TestLocalSandboxAttacks runs the attacks from inside trees the
// embedded runtime starts, in Codex's read-only and workspace-write modes
// (ReadOnlySandbox, WorkspaceWriteSandbox without .aws, as Codex 0.169
// sends it) and unsandboxed, while this process holds a writable
// descriptor without close-on-exec; the host is checked afterwards.
func TestLocalSandboxAttacks(t *testing.T) {
	sc := sandboxtest.NewScene(t)
	b := newLocalBackend(t)
	for _, mode := range []string{sandboxtest.ReadOnly, sandboxtest.WorkspaceWrite, sandboxtest.Unsandboxed} {
		t.Run(mode, func(t *testing.T) {
			ctx := ctxT(t)
			spec := Spec{Argv: []string{"/usr/bin/bash", "-c", sc.Script(sc.FD) + "echo END-OF-ATTACKS\n"}, Dir: sc.WS,
				Env: map[string]string{"PATH": "/usr/bin:/bin"}}
			switch mode {
			case sandboxtest.ReadOnly:
				spec.Sandbox = ReadOnlySandbox()
			case sandboxtest.WorkspaceWrite:
				spec.Sandbox = WorkspaceWriteSandbox(sc.WS)
				var fs []FSRule
				for _, r := range spec.Sandbox.FileSystem {
					if r.Subpath != ".aws" { // Codex 0.169 does not list it
						fs = append(fs, r)
					}
				}
				spec.Sandbox.FileSystem = fs
			}
			p, err := b.Start(ctx, spec)
			if err != nil {
				if strings.Contains(err.Error(), "cannot be enforced on this host") {
					t.Skipf("host: %v", err)
				}
				t.Fatal(err)
			}
			out := readUntil(t, ctx, p, "END-OF-ATTACKS")
			if st, err := p.Wait(ctx); err != nil || st.Code != 0 {
				t.Errorf("wait: %+v %v", st, err)
			}
			sc.Check(t, strings.ReplaceAll(out, "\r", ""), mode)
		})
	}
}
