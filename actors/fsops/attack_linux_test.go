package fsops

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runtimed/runtimed/wire"
)

// The race of issue 14: a process that can write inside the root swaps a
// directory there with a link to the outside while a client's requests
// name paths under it. The path check may see the directory and the
// operation the link; confinement must hold anyway.

const (
	insideData  = "inside"
	outsideData = "SECRET-outside" // another length: a size reveals it too
	outsideOnly = "outside-only"   // a name that exists outside only
)

// swapTree lays out base/root with the directory root/d and the link
// root/d-swap to base/outside, which holds the same names with other
// contents plus outsideOnly. It returns the root, the outside directory
// and the number of victim files (root/d/victim-N, also outside).
func swapTree(t testing.TB, base string, victims int) (root, outside string) {
	root = filepath.Join(base, "root")
	outside = filepath.Join(base, "outside")
	for _, d := range []string{root + "/d/sub", root + "/in/tree/deep", outside + "/sub"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, data string) {
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(root+"/d/f", insideData)
	write(root+"/d/sub/g", insideData)
	write(outside+"/f", outsideData)
	write(outside+"/sub/g", outsideData)
	write(outside+"/"+outsideOnly, outsideData)
	write(root+"/in/src", insideData)
	write(root+"/in/tree/deep/t", insideData)
	for i := range victims {
		write(fmt.Sprintf("%s/d/victim-%d", root, i), insideData)
		write(fmt.Sprintf("%s/victim-%d", outside, i), outsideData)
	}
	if err := os.Symlink(outside, root+"/d-swap"); err != nil {
		t.Fatal(err)
	}
	return root, outside
}

// swapper exchanges root/d and root/d-swap (renameat2 RENAME_EXCHANGE,
// atomic) until stop is closed, and leaves the directory at root/d.
func swapper(root string, stop <-chan struct{}, swaps *atomic.Int64) error {
	a, b := root+"/d", root+"/d-swap"
	for {
		select {
		case <-stop:
			if fi, err := os.Lstat(a); err == nil && fi.Mode()&os.ModeSymlink != 0 {
				return unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
			}
			return nil
		default:
		}
		if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
			return err
		}
		swaps.Add(1)
	}
}

// attackTally counts the answers of the attack loop.
type attackTally struct {
	ops, served, refused, other int
	fired                       int            // fs/missingChanged notifications
	violations                  map[string]int // kind of escape -> count
	examples                    []string
	otherErrs                   map[string]int
}

func (a *attackTally) answer(what string, werr *wire.Error) bool {
	a.ops++
	switch {
	case werr == nil:
		a.served++
		return true
	case werr.Code == wire.CodeInvalidRequest && strings.HasSuffix(werr.Message, "is outside the allowed roots"):
		a.refused++
	default:
		a.other++
		if a.otherErrs == nil {
			a.otherErrs = map[string]int{}
		}
		a.otherErrs[what+": "+werr.Message]++
	}
	return false
}

// violate records an escape of the given kind.
func (a *attackTally) violate(kind, format string, args ...any) {
	if a.violations == nil {
		a.violations = map[string]int{}
	}
	a.violations[kind]++
	if len(a.examples) < 10 {
		a.examples = append(a.examples, fmt.Sprintf(format, args...))
	}
}

// diffOutside records every entry outside that appeared, went away or
// changed as a write outside.
func (a *attackTally) diffOutside(before, after string) {
	was := map[string]bool{}
	for _, l := range strings.Split(before, "\n") {
		was[l] = true
	}
	now := map[string]bool{}
	for _, l := range strings.Split(after, "\n") {
		now[l] = true
		if !was[l] {
			a.violate("written outside", "outside now has %s", l)
		}
	}
	for l := range was {
		if !now[l] {
			a.violate("written outside", "outside no longer has %s", l)
		}
	}
}

// TestRaceSwapDirectoryForLink runs every fs method on paths under root/d
// while another goroutine keeps swapping root/d with a link to the
// outside: no file may be written, created, renamed or removed outside,
// and no answer may carry anything from outside (contents, sizes, names,
// a watch that fires). Bounded: 3 s or 6000 requests.
func TestRaceSwapDirectoryForLink(t *testing.T) {
	base := tmp(t)
	const victims = 300
	root, outside := swapTree(t, base, victims)
	roots, err := NewRoots([]string{root})
	if err != nil {
		t.Fatal(err)
	}
	before := outsideState(t, outside)

	stop := make(chan struct{})
	var swaps atomic.Int64
	var wg sync.WaitGroup
	var swapErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		swapErr = swapper(root, stop, &swaps)
	}()

	w := NewWorker(roots)
	tally := attackLoop(t, w, root, victims, 3*time.Second, 6000)
	w.Close()
	close(stop)
	wg.Wait()
	if swapErr != nil {
		t.Fatalf("swapper: %v", swapErr)
	}

	tally.diffOutside(before, outsideState(t, outside))
	// What copies brought in from root/d must be inside data.
	ents, _ := os.ReadDir(root + "/in")
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "c-") {
			if data, _ := os.ReadFile(root + "/in/" + e.Name()); string(data) != insideData {
				tally.violate("read outside", "copy %s brought in %q", e.Name(), data)
			}
		}
	}
	t.Logf("%d swaps; %d requests: %d served inside, %d refused as outside the roots, %d other errors, %d watches fired",
		swaps.Load(), tally.ops, tally.served, tally.refused, tally.other, tally.fired)
	if len(tally.violations) > 0 {
		t.Errorf("escapes %v; for example:\n%s", tally.violations, strings.Join(tally.examples, "\n"))
	}
	if tally.served == 0 || tally.refused == 0 {
		t.Fatalf("the race was not exercised: %d served, %d refused", tally.served, tally.refused)
	}
}

// attackLoop sends requests naming paths under root/d, round robin over
// the fs methods, until limit has passed or maxOps requests were made,
// and checks every answer for data from outside.
func attackLoop(t *testing.T, w *Worker, root string, victims int, limit time.Duration, maxOps int) *attackTally {
	t.Helper()
	d := root + "/d"
	tally := &attackTally{}
	do := func(method string, params any) (any, *wire.Error) {
		raw, err := json.Marshal(params)
		if err != nil {
			t.Fatal(err)
		}
		res, werr := w.Handle(method, raw)
		// Drain watch events as the connection's fs worker would.
		for done := false; !done; {
			select {
			case ev, ok := <-w.Events():
				w.Event(ev, ok)
			case err, ok := <-w.Errors():
				w.Error(err, ok)
			default:
				done = true
			}
		}
		// A watch may fire here: one that cannot be armed while its
		// directory keeps being swapped tells the client to look again.
		// What it sees when it does is what watchMissing answers below.
		tally.fired += len(w.Notifications())
		return res, werr
	}
	noOutsideName := func(what string, names []string) {
		for _, n := range names {
			if strings.HasSuffix(n, outsideOnly) {
				tally.violate("read outside", "%s listed %s", what, n)
			}
		}
	}
	deadline := time.Now().Add(limit)
	victim := 0
	for i := 0; i < maxOps && time.Now().Before(deadline); i++ {
		switch i % 13 {
		case 0:
			res, werr := do(wire.MethodFsReadFile, obj{"path": d + "/f"})
			if tally.answer("readFile", werr) && string(res.(wire.FsReadFileResult).DataBase64) != insideData {
				tally.violate("read outside", "readFile served %q", res.(wire.FsReadFileResult).DataBase64)
			}
		case 1:
			_, werr := do(wire.MethodFsWriteFile, obj{"path": fmt.Sprintf("%s/w-%d", d, i), "dataBase64": "cHduZWQ="})
			tally.answer("writeFile", werr)
		case 2:
			_, werr := do(wire.MethodFsCreateDirectory, obj{"path": fmt.Sprintf("%s/m-%d/x", d, i)})
			tally.answer("createDirectory", werr)
		case 3:
			id := fmt.Sprint("r", i)
			if _, werr := do(wire.MethodFsOpen, obj{"handleId": id, "path": d + "/sub/g"}); !tally.answer("open read", werr) {
				continue
			}
			res, werr := do(wire.MethodFsReadBlock, obj{"handleId": id, "offset": 0, "len": 64})
			if tally.answer("readBlock", werr) && string(res.(wire.FsReadBlockResult).Chunk) != insideData {
				tally.violate("read outside", "readBlock served %q", res.(wire.FsReadBlockResult).Chunk)
			}
			do(wire.MethodFsClose, obj{"handleId": id})
		case 4:
			id := fmt.Sprint("w", i)
			if _, werr := do(wire.MethodFsOpen, obj{"handleId": id, "path": fmt.Sprintf("%s/rep-%d", d, i), "mode": "replace"}); !tally.answer("open replace", werr) {
				continue
			}
			if _, werr := do(wire.MethodFsWriteBlock, obj{"handleId": id, "offset": 0, "chunk": []byte("pwned")}); !tally.answer("writeBlock", werr) {
				continue
			}
			_, werr := do(wire.MethodFsClose, obj{"handleId": id})
			tally.answer("close replace", werr)
		case 5:
			_, werr := do(wire.MethodFsCopy, obj{"sourcePath": d + "/f", "destinationPath": fmt.Sprintf("%s/in/c-%d", root, i)})
			tally.answer("copy from", werr)
		case 6:
			_, werr := do(wire.MethodFsCopy, obj{"sourcePath": root + "/in/src", "destinationPath": fmt.Sprintf("%s/cp-%d", d, i)})
			tally.answer("copy to", werr)
		case 7:
			_, werr := do(wire.MethodFsCopy, obj{"sourcePath": root + "/in/tree", "destinationPath": fmt.Sprintf("%s/ct-%d", d, i), "recursive": true})
			tally.answer("copy tree", werr)
		case 8:
			if victim < victims {
				_, werr := do(wire.MethodFsRemove, obj{"path": fmt.Sprintf("%s/victim-%d", d, victim)})
				if tally.answer("remove", werr) {
					victim++
				}
			}
			_, werr := do(wire.MethodFsRemove, obj{"path": d + "/sub-copy", "recursive": true})
			tally.answer("remove tree", werr)
		case 9:
			res, werr := do(wire.MethodFsWalk, obj{"path": d, "options": obj{"maxDepth": 1, "maxDirectories": 8, "maxEntries": 64, "followDirectorySymlinks": true}})
			if tally.answer("walk", werr) {
				var names []string
				for _, e := range res.(wire.FsWalkResult).Entries {
					names = append(names, e.Path)
				}
				noOutsideName("walk", names)
			}
		case 10:
			res, werr := do(wire.MethodFsReadDirectory, obj{"path": d})
			if tally.answer("readDirectory", werr) {
				var names []string
				for _, e := range res.(wire.FsReadDirectoryResult).Entries {
					names = append(names, e.FileName)
				}
				noOutsideName("readDirectory", names)
			}
		case 11:
			res, werr := do(wire.MethodFsGetMetadata, obj{"path": d + "/f"})
			if tally.answer("getMetadata", werr) && res.(wire.FsMetadataResult).Size != uint64(len(insideData)) {
				tally.violate("read outside", "getMetadata reported size %d", res.(wire.FsMetadataResult).Size)
			}
		case 12:
			res, werr := do(wire.MethodFsWatchMissing, obj{"watchId": 1, "missing": []string{d + "/" + outsideOnly, d + "/sub/" + outsideOnly}})
			if tally.answer("watchMissing", werr) && !res.(wire.FsWatchMissingResult).Watching {
				tally.violate("read outside", "watchMissing saw %s", outsideOnly)
			}
			// A copy to remove in case 8: a recursive remove of a tree.
			_, werr = do(wire.MethodFsCopy, obj{"sourcePath": d + "/sub", "destinationPath": d + "/sub-copy", "recursive": true})
			tally.answer("copy sub", werr)
		}
	}
	return tally
}
