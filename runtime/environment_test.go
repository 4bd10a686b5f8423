package runtime

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/runtimed/runtimed/wire"
)

type environmentInfoer interface {
	EnvironmentInfo(ctx context.Context) (EnvironmentInfo, error)
}

// Every backend describes this machine the same way, with native paths;
// the remote ones convert the server's file: URIs.
func TestBackendEnvironmentInfo(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	var infos []EnvironmentInfo
	forEachBackend(t, func(t *testing.T, b Backend) {
		info, err := b.(environmentInfoer).EnvironmentInfo(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		cwd, _ := os.Getwd()
		home, _ := os.UserHomeDir()
		if info.Cwd != cwd || info.UserHomeDir != home || info.TempDir != tmp || !reflect.DeepEqual(info.TemporaryDirectories, []string{tmp}) {
			t.Errorf("cwd %q home %q tempDir %q temporaryDirectories %q", info.Cwd, info.UserHomeDir, info.TempDir, info.TemporaryDirectories)
		}
		if info.PlatformOS != "linux" || info.Shell.Name != filepath.Base(info.Shell.Path) || !strings.HasPrefix(info.ProviderID, "sha256:") || info.ExecutorVersion == "" {
			t.Errorf("info %+v", info)
		}
		// Which flags are true is decided in capabilities (the E2E tests
		// pin the list); here every name is present and backends agree.
		if len(info.Capabilities) != len(wire.CapabilityNames()) {
			t.Errorf("capabilities %v, want every known name", info.Capabilities)
		}
		infos = append(infos, info)
	})
	for i := 1; i < len(infos); i++ {
		if !reflect.DeepEqual(infos[i], infos[0]) {
			t.Errorf("backend %d says %+v, backend 0 says %+v", i, infos[i], infos[0])
		}
	}
}

func TestBackendMetadataListed(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		ctx := ctxT(t)
		spec := sh(t, "true")
		spec.ID = "with"
		spec.Metadata = &Metadata{ThreadID: "thread-1", ToolCallID: "call-1"}
		if _, err := b.Start(ctx, spec); err != nil {
			t.Fatal(err)
		}
		spec = sh(t, "true")
		spec.ID = "partial"
		spec.Metadata = &Metadata{ToolCallID: "call-2"}
		if _, err := b.Start(ctx, spec); err != nil {
			t.Fatal(err)
		}
		spec = sh(t, "true")
		spec.ID = "without"
		if _, err := b.Start(ctx, spec); err != nil {
			t.Fatal(err)
		}
		infos, err := b.(lister).List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]*Metadata{}
		for _, pi := range infos {
			got[pi.ID] = pi.Metadata
		}
		want := map[string]*Metadata{"with": {ThreadID: "thread-1", ToolCallID: "call-1"}, "partial": {ToolCallID: "call-2"}, "without": nil}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("metadata %+v, want %+v", got, want)
		}
	})
}

func TestEnvironmentFromWire(t *testing.T) {
	cwd := "file:///a%20b"
	got := environmentFromWire(wire.EnvironmentInfo{
		Cwd: &cwd, UserHomeDir: "file://localhost/home/u", TempDir: "/already/native",
		PrependPathDirs: []string{"file:///opt/bin"}, TemporaryDirectories: []string{"file://otherhost/tmp"},
		Capabilities: map[string]bool{"fsWatchMissing": true},
	})
	if got.Cwd != "/a b" || got.UserHomeDir != "/home/u" || got.TempDir != "/already/native" ||
		!reflect.DeepEqual(got.PrependPathDirs, []string{"/opt/bin"}) || !reflect.DeepEqual(got.TemporaryDirectories, []string{"file://otherhost/tmp"}) ||
		!got.Capabilities["fsWatchMissing"] {
		t.Errorf("%+v", got)
	}
	if got := environmentFromWire(wire.EnvironmentInfo{}); got.Cwd != "" || got.Capabilities == nil {
		t.Errorf("empty: %+v", got)
	}
}
