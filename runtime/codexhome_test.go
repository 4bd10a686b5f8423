package runtime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/runtimed/runtimed/wire"
)

// TestCodexHomeParity: Local, a websocket Client and a stdio Client report the same configuration
// layers and skills of this machine's Codex home, and the same error for no paths.
func TestCodexHomeParity(t *testing.T) {
	dir := t.TempDir()
	home, sys := filepath.Join(dir, "codex"), filepath.Join(dir, "sys")
	for p, s := range map[string]string{
		filepath.Join(home, "config.toml"):              "model = \"m\"\n[mcp_servers.a]\nurl = \"http://a.test\"\n",
		filepath.Join(sys, "config.toml"):               "[mcp_servers.b]\nurl = \"http://b.test\"\n",
		filepath.Join(home, "skills", "hi", "SKILL.md"): "---\nname: hi\ndescription: says hi\n---\n",
		filepath.Join(sys, "skills", "adm", "SKILL.md"): "---\nname: adm\ndescription: admin\n---\n",
	} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("CODEX_HOME", home)
	for _, bc := range backendsWith(Config{CodexSystemDir: sys}) {
		t.Run(bc.name, func(t *testing.T) {
			b := bc.make(t)
			r := b.(interface {
				CodexConfig(ctx context.Context, q CodexConfigQuery) (wire.EnvironmentConfigReadResult, error)
				DiscoverCapabilities(ctx context.Context, cwd string) (wire.DiscoverV2Result, error)
			})
			cfg, err := r.CodexConfig(ctxT(t), CodexConfigQuery{Cwd: dir, ConfigPaths: [][]string{{"mcp_servers"}}})
			if err != nil {
				t.Fatal(err)
			}
			if len(cfg.Config.Layers) != 2 || cfg.Config.CloudInsertionIndex != 1 ||
				cfg.Config.Layers[0].Source != "system ("+filepath.Join(sys, "config.toml")+")" ||
				cfg.Config.Layers[1].TOML != "[mcp_servers]\n[mcp_servers.a]\nurl = \"http://a.test\"\n" {
				t.Errorf("config %+v", cfg.Config)
			}
			inv, err := r.DiscoverCapabilities(ctxT(t), dir)
			if err != nil || len(inv.Skills) != 2 || inv.Skills[0].Name != "hi" || inv.Skills[1].Name != "adm" {
				t.Errorf("skills %+v, %v", inv.Skills, err)
			}
			_, err = r.CodexConfig(ctxT(t), CodexConfigQuery{Cwd: dir})
			var re *RPCError
			if !errors.As(err, &re) || re.Code != wire.CodeInvalidParams || re.Message != "at least one config or requirements path is required" {
				t.Errorf("no paths: %v", err)
			}
		})
	}
}
