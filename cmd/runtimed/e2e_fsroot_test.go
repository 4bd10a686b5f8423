package main_test

// --fs-root against a hostile neighbour (issue 14): a directory inside the
// root is swapped with a link to the outside while a client's requests
// name paths under it; and process/start's cwd is confined as well.

import (
	"encoding/base64"
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

	"github.com/runtimed/runtimed/wire/wiretest"
)

// TestFsRootSwapRace runs the race through the real binary over a
// websocket: one goroutine swaps root/d and root/d-swap (a link to
// outside) with renameat2 RENAME_EXCHANGE while the client writes, reads,
// describes and lists paths under root/d on four connections for 2.5 s
// (at most 4000 requests).
// Nothing may be written outside and no answer may carry outside data.
func TestFsRootSwapRace(t *testing.T) {
	t.Parallel()
	base := physTemp(t)
	root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, d := range []string{root + "/d", outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	const inside, secret = "inside", "SECRET-outside"
	for dir, data := range map[string]string{root + "/d": inside, outside: secret} {
		if err := os.WriteFile(dir+"/f", []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(outside+"/outside-only", []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, root+"/d-swap"); err != nil {
		t.Fatal(err)
	}
	_, srv := fsServer(t, transports[0], "--fs-root", root)

	stop := make(chan struct{})
	var swaps atomic.Int64
	var wg sync.WaitGroup
	var swapErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if swapErr = unix.Renameat2(unix.AT_FDCWD, root+"/d", unix.AT_FDCWD, root+"/d-swap", unix.RENAME_EXCHANGE); swapErr != nil {
				return
			}
			swaps.Add(1)
		}
	}()

	// Four connections, each a loop of requests (the server serves each
	// connection's fs requests on its own worker).
	var mu sync.Mutex
	var served, refused, other, readsOutside int
	var examples []string
	escape := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		readsOutside++
		if len(examples) < 5 {
			examples = append(examples, fmt.Sprintf(format, args...))
		}
	}
	deadline := time.Now().Add(2500 * time.Millisecond)
	var clients sync.WaitGroup
	for k := range 4 {
		c := dial(t, srv.URL, nil)
		if _, err := c.Initialize(tctx(t, wait)); err != nil {
			t.Fatalf("initialize: %v", err)
		}
		clients.Add(1)
		go func() {
			defer clients.Done()
			for i := k; i < 4000 && time.Now().Before(deadline); i += 4 {
				method, params := swapRaceRequest(root, i)
				res, err := call(tctx(t, wait), c, method, params)
				var rpcErr *wiretest.RPCError
				mu.Lock()
				switch {
				case err == nil:
					served++
				case asRPC(err, &rpcErr) && rpcErr.Code == -32600 && strings.HasSuffix(rpcErr.Message, "is outside the allowed roots"):
					refused++
				case asRPC(err, &rpcErr):
					other++
				default:
					mu.Unlock()
					t.Errorf("%s: %v", method, err)
					return
				}
				mu.Unlock()
				if err != nil {
					continue
				}
				var ans struct {
					DataBase64 string `json:"dataBase64"`
					Size       int    `json:"size"`
					Entries    []struct {
						FileName string `json:"fileName"`
					} `json:"entries"`
				}
				if err := json.Unmarshal(res, &ans); err != nil {
					t.Errorf("%s: %s: %v", method, res, err)
					return
				}
				switch method {
				case "fs/readFile":
					if data, _ := base64.StdEncoding.DecodeString(ans.DataBase64); string(data) != inside {
						escape("readFile served %q", data)
					}
				case "fs/getMetadata":
					if ans.Size != len(inside) {
						escape("getMetadata reported size %d", ans.Size)
					}
				case "fs/readDirectory":
					for _, e := range ans.Entries {
						if e.FileName == "outside-only" {
							escape("readDirectory listed %s", e.FileName)
						}
					}
				}
			}
		}()
	}
	clients.Wait()
	close(stop)
	wg.Wait()
	if swapErr != nil {
		t.Fatalf("swapper: %v", swapErr)
	}
	ents, err := os.ReadDir(outside)
	if err != nil {
		t.Fatal(err)
	}
	var written []string
	for _, e := range ents {
		if e.Name() != "f" && e.Name() != "outside-only" {
			written = append(written, e.Name())
		}
	}
	if data, _ := os.ReadFile(outside + "/f"); string(data) != secret {
		written = append(written, "f (changed)")
	}
	t.Logf("%d swaps; %d served inside, %d refused as outside the roots, %d other errors", swaps.Load(), served, refused, other)
	if len(written) > 0 || readsOutside > 0 {
		t.Errorf("%d entries written outside (%.5q), %d reads served from outside %q", len(written), written, readsOutside, examples)
	}
	if served == 0 || refused == 0 {
		t.Fatalf("the race was not exercised: %d served, %d refused", served, refused)
	}
}

// swapRaceRequest is the i-th request of the race: every method that
// reads, writes or lists, on paths under root/d.
func swapRaceRequest(root string, i int) (string, map[string]any) {
	switch i % 5 {
	case 0:
		return "fs/readFile", map[string]any{"path": root + "/d/f"}
	case 1:
		return "fs/writeFile", map[string]any{"path": fmt.Sprintf("%s/d/w-%d", root, i), "dataBase64": base64.StdEncoding.EncodeToString([]byte("pwned"))}
	case 2:
		return "fs/getMetadata", map[string]any{"path": root + "/d/f"}
	case 3:
		return "fs/readDirectory", map[string]any{"path": root + "/d"}
	}
	return "fs/createDirectory", map[string]any{"path": fmt.Sprintf("%s/d/m-%d", root, i)}
}

func asRPC(err error, target **wiretest.RPCError) bool {
	e, ok := err.(*wiretest.RPCError)
	if ok {
		*target = e
	}
	return ok
}

// TestFsRootConfinesCwd: with --fs-root, process/start's cwd must lie
// inside a root (after links are resolved), with the fs methods' error;
// without roots any directory will do.
func TestFsRootConfinesCwd(t *testing.T) {
	t.Parallel()
	base := physTemp(t)
	root := filepath.Join(base, "root")
	if err := os.MkdirAll(root+"/in", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(base, root+"/up"); err != nil {
		t.Fatal(err)
	}
	c, _ := fsServer(t, transports[0], "--fs-root", root)
	ctx := tctx(t, wait)
	for i, cwd := range []string{base, root + "/up", root + "/in/../..", "file://" + base, "/"} {
		err := c.Start(ctx, shProc(fmt.Sprint("out", i), cwd, "pwd"))
		wantRPCError(t, "cwd "+cwd, err, -32600, "path "+cwd+" is outside the allowed roots")
		// The app-server dialect's process/spawn too.
		_, rerr, err := c.Call(ctx, "process/spawn", map[string]any{"processHandle": fmt.Sprint("app", i), "command": []string{"pwd"}, "cwd": cwd})
		if err != nil {
			t.Fatal(err)
		}
		wantRPCError(t, "process/spawn cwd "+cwd, rerr, -32600, "path "+cwd+" is outside the allowed roots")
	}
	for i, cwd := range []string{root, root + "/in", "file://" + root + "/in", root + "/up/root/in"} {
		id := fmt.Sprint("in", i)
		mustStart(t, c, shProc(id, cwd, "pwd -P"))
		l := mustCollect(t, c, id)
		if got := strings.TrimSpace(string(l.Output())); !strings.HasPrefix(got, root) {
			t.Errorf("cwd %s: ran in %q", cwd, got)
		}
	}
	// No roots: the whole filesystem.
	free := session(t, transports[0])
	mustStart(t, free, shProc("free", base, "pwd"))
	if l := mustCollect(t, free, "free"); strings.TrimSpace(string(l.Output())) != base {
		t.Errorf("no roots: ran in %q", l.Output())
	}
}
