package fsops

import (
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/runtimed/runtimed/wire"
)

// The cost of confinement: fs/readFile and fs/writeFile of a 4 KiB file
// three directories below the root, with no roots (the whole filesystem)
// and with the directory as the only root (every operation beneath its
// handle). Figures before and after the root handles: BENCHMARKS.md.
//
//	go test -run '^$' -bench 'ReadFile|WriteFile' -count 5 ./actors/fsops

func benchSetup(b *testing.B) (file string, none, rooted Roots) {
	b.Helper()
	dir, err := filepath.EvalSymlinks(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	sub := filepath.Join(dir, "a", "b", "c")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		b.Fatal(err)
	}
	file = filepath.Join(sub, "file")
	if err := os.WriteFile(file, make([]byte, 4096), 0o644); err != nil {
		b.Fatal(err)
	}
	rooted, err = NewRoots([]string{dir})
	if err != nil {
		b.Fatal(err)
	}
	return file, Roots{}, rooted
}

func benchRequest(b *testing.B, roots Roots, method string, params any) {
	b.Helper()
	raw, err := json.Marshal(params)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	// CPU time (user and system, the whole process) per request as well:
	// on a shared machine it varies much less than the wall clock.
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	for b.Loop() {
		if _, werr := Handle(method, raw, roots, nil); werr != nil {
			b.Fatalf("%s: %s", method, werr.Message)
		}
	}
	syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano()
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
}

func BenchmarkReadFile(b *testing.B) {
	file, none, rooted := benchSetup(b)
	b.Run("no-roots", func(b *testing.B) { benchRequest(b, none, wire.MethodFsReadFile, obj{"path": file}) })
	b.Run("root", func(b *testing.B) { benchRequest(b, rooted, wire.MethodFsReadFile, obj{"path": file}) })
}

func BenchmarkWriteFile(b *testing.B) {
	file, none, rooted := benchSetup(b)
	data := make([]byte, 4096)
	b.Run("no-roots", func(b *testing.B) {
		benchRequest(b, none, wire.MethodFsWriteFile, wire.FsWriteFileParams{Path: file, DataBase64: data})
	})
	b.Run("root", func(b *testing.B) {
		benchRequest(b, rooted, wire.MethodFsWriteFile, wire.FsWriteFileParams{Path: file, DataBase64: data})
	})
}
