package fsops

import (
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runtimed/runtimed/wire"
)

// FuzzConfinedPath sends arbitrary path arguments to the fs methods over
// the sandbox tree of confine_test.go (a root holding links that lead out
// by absolute and relative targets, chains and dangling links; an outside
// directory and a sibling whose name extends the root's, both holding a
// file named "secret", a name that exists nowhere inside the root). In an
// input, {root}, {base} and {out} stand for the root, its parent and the
// outside directory. Whatever the input, nothing outside the root is
// read or changed, a resolved path lies inside, no method panics, and the
// root handle refuses the raw argument too (no path check before it).
//
//	go test -run '^$' -fuzz FuzzConfinedPath -fuzztime 60s ./actors/fsops
func FuzzConfinedPath(f *testing.F) {
	for _, s := range []string{
		// inside, plainly and through links that stay inside
		"{root}", "{root}/in/ok", "{root}/good-link", "{root}/good-dir-link/ok", "{root}/in/../in/./ok",
		"{root}/new-file", "{root}/in/new/deeper",
		// ".." out of the root, also after a missing component or a link
		"{root}/..", "{root}/../outside/secret", "{root}/in/../../outside/secret",
		"{root}/missing/../../outside/secret", "{root}/good-dir-link/../../outside/secret",
		"{root}/in/ok/..", "{root}/" + strings.Repeat("../", 40) + "etc/passwd",
		// links that lead out: absolute, relative, deep, a chain, dangling
		"{root}/abs/secret", "{root}/abs", "{root}/rel/secret", "{root}/in/deeprel/secret",
		"{root}/hop1/secret", "{root}/dangling-out", "{root}/abs/../outside/secret",
		// outside, and a sibling whose name extends the root's
		"{out}/secret", "{base}/rootevil/secret", "{root}evil/secret", "/", "/etc/passwd",
		// URIs: plain, localhost, another host, encoded dots and slashes, no slashes
		"file://{root}/in/ok", "file://localhost{root}/in/ok", "file://{root}/../outside/secret",
		"file://{root}/%2e%2e/outside/secret", "file://{root}/abs%2Fsecret", "file://evil.example{root}/in/ok",
		"file:{root}/in/ok", "file:///{root}/in/ok", "file://{root}/in/ok?x#y", "file://[::1{root}",
		// trailing and repeated slashes, dots
		"{root}/in/", "{root}/in//ok", "{root}/in/./ok/", "{root}/abs/", "{root}//abs//secret", "{root}/in/ok/.",
		// NUL, relative, empty, very long
		"{root}/in/ok\x00/../../outside/secret", "{root}/a\x00b", "relative/path", "", ".",
		"{root}/" + strings.Repeat("0123456789abcdef/", 260), "{root}/" + strings.Repeat("x", 300), "{root}" + strings.Repeat("/.", 5000),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		base, root, roots := sandbox(t)
		outside, evil := filepath.Join(base, "outside"), filepath.Join(base, "rootevil")
		beforeOut, beforeEvil := outsideState(t, outside), outsideState(t, evil)
		p := strings.NewReplacer("{root}", root, "{base}", base, "{out}", outside).Replace(in)

		// A resolved path lies inside, and maps to a root handle.
		for _, follow := range []bool{true, false} {
			tg, werr := roots.resolveArg(p, follow)
			if werr != nil {
				continue
			}
			if !roots.Contains(tg.phys) || !filepath.IsAbs(tg.phys) || filepath.Clean(tg.phys) != tg.phys {
				t.Fatalf("%q resolved to %q", p, tg.phys)
			}
			if h, _, err := roots.at(tg.phys); err != nil || h == nil {
				t.Fatalf("%q: resolved to %q, which maps to no root: %v", p, tg.phys, err)
			}
		}
		if _, werr := roots.resolveArg(p, true); (werr == nil) != (roots.Allow(p) == nil) {
			t.Fatalf("Allow(%q) disagrees with the resolution", p)
		}

		// The handle alone, with no path check: the raw argument.
		if fh, err := roots.openFile(p, os.O_RDONLY, 0); err == nil {
			data, _ := io.ReadAll(io.LimitReader(fh, 64))
			fh.Close()
			if string(data) == "secret" {
				t.Fatalf("the root handle opened %q outside", p)
			}
		}
		if fh, err := roots.openFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644); err == nil {
			fh.Close()
		}

		// Every method.
		var h Handles
		defer h.CloseAll()
		reqs := []struct {
			method string
			params obj
		}{
			{wire.MethodFsReadFile, obj{"path": p}},
			{wire.MethodFsGetMetadata, obj{"path": p}},
			{wire.MethodFsCanonicalize, obj{"path": p}},
			{wire.MethodFsReadDirectory, obj{"path": p}},
			{wire.MethodFsWalk, obj{"path": p, "options": obj{"maxDepth": 3, "maxDirectories": 50, "maxEntries": 200, "followDirectorySymlinks": true}}},
			{wire.MethodFsOpen, obj{"handleId": "r", "path": p}},
			{wire.MethodFsReadBlock, obj{"handleId": "r", "offset": 0, "len": 64}},
			{wire.MethodFsOpen, obj{"handleId": "w", "path": p, "mode": "replace"}},
			{wire.MethodFsWriteBlock, obj{"handleId": "w", "offset": 0, "chunk": []byte("pwned")}},
			{wire.MethodFsClose, obj{"handleId": "w"}},
			{wire.MethodFsCopy, obj{"sourcePath": p, "destinationPath": root + "/in/copied", "recursive": true}},
			{wire.MethodFsCopy, obj{"sourcePath": root + "/in", "destinationPath": p, "recursive": true}},
			{wire.MethodFsWriteFile, obj{"path": p, "dataBase64": []byte("pwned")}},
			{wire.MethodFsCreateDirectory, obj{"path": p}},
			{wire.MethodFsRemove, obj{"path": p}},
		}
		for _, r := range reqs {
			res, werr := call(t, roots, &h, r.method, r.params)
			if werr != nil {
				continue
			}
			switch v := res.(type) {
			case wire.FsReadFileResult:
				if string(v.DataBase64) == "secret" {
					t.Fatalf("readFile %q served the outside secret", p)
				}
			case wire.FsReadBlockResult:
				if string(v.Chunk) == "secret" {
					t.Fatalf("readBlock %q served the outside secret", p)
				}
			case wire.FsPathResult:
				got := v.Path
				if u, err := url.Parse(got); err == nil && u.Scheme == "file" {
					got = u.Path
				}
				if !roots.Contains(got) {
					t.Fatalf("canonicalize %q = %q, outside", p, v.Path)
				}
			case wire.FsReadDirectoryResult:
				// Every name listed is in the directory inside.
				dir, werr := roots.resolveArg(p, true)
				if werr != nil {
					t.Fatalf("readDirectory %q answered, but the path does not resolve: %s", p, werr.Message)
				}
				for _, e := range v.Entries {
					if _, err := os.Lstat(filepath.Join(dir.phys, e.FileName)); err != nil {
						t.Fatalf("readDirectory %q listed %q, which is not inside", p, e.FileName)
					}
				}
			case wire.FsWalkResult:
				// Every entry resolves inside and exists there.
				for _, e := range v.Entries {
					tg, werr := roots.resolveArg(e.Path, false)
					if werr != nil {
						t.Fatalf("walk %q listed %q: %s", p, e.Path, werr.Message)
					}
					if _, err := os.Lstat(tg.phys); err != nil {
						t.Fatalf("walk %q listed %q, which is not inside", p, e.Path)
					}
				}
			}
		}
		w := NewWorker(roots)
		res, werr := w.Handle(wire.MethodFsWatchMissing, mustJSON(t, obj{"watchId": 1, "missing": []string{p + "/secret", p}}))
		w.Close()
		if werr == nil && !res.(wire.FsWatchMissingResult).Watching {
			if _, err := os.Lstat(root + "/in/ok"); err != nil {
				t.Fatal("the tree changed under the watch")
			}
		}

		if got := outsideState(t, outside); got != beforeOut {
			t.Fatalf("%q changed the outside:\n%s\nwas:\n%s", p, got, beforeOut)
		}
		if got := outsideState(t, evil); got != beforeEvil {
			t.Fatalf("%q changed the root's sibling:\n%s\nwas:\n%s", p, got, beforeEvil)
		}
		if data, err := os.ReadFile(root + "/in/copied"); err == nil && string(data) == "secret" {
			t.Fatalf("copy %q brought the secret in", p)
		}
	})
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	return []byte(jsonString(t, v))
}
