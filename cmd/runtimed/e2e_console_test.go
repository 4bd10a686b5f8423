package main_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/runtimed/runtimed/wire/wiretest"
)

// chromiumPath finds Debian's chromium (apt-get install chromium); "" when
// it is not installed.
func chromiumPath() string {
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	return ""
}

// artifactsDir is where the console screenshots go: $RUNTIMED_TEST_ARTIFACTS,
// else $TMPDIR/runtimed-console-screenshots (kept after the test).
func artifactsDir(t *testing.T) string {
	dir := os.Getenv("RUNTIMED_TEST_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "runtimed-console-screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

var consoleURLRE = regexp.MustCompile(`console at (http://127\.0\.0\.1:\d+/)`)

type consoleRow struct {
	N         uint64   `json:"n"`
	ProcessID string   `json:"processId"`
	Token     string   `json:"token"`
	Argv      []string `json:"argv"`
	State     string   `json:"state"`
}

func consoleRows(t *testing.T, base, token string) []consoleRow {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"api/processes", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out struct{ Processes []consoleRow }
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out.Processes
}

// The web console in a real browser (headless Chromium through chromedp)
// against the real binary: login, the live table, streaming output, a PTY
// attached and typed into and resized, script injection through output,
// terminate, and the audit log of it all.
func TestConsoleBrowser(t *testing.T) {
	chrome := chromiumPath()
	if chrome == "" {
		t.Skip("skipping the console browser test: no chromium on PATH (apt-get install -y chromium; .ci/run installs it)")
	}
	dir := t.TempDir()
	const token = "console-alice-token-9f2c"
	tokFile := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokFile, []byte("alice "+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	plainTok := filepath.Join(dir, "token")
	if err := os.WriteFile(plainTok, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	auditPath := filepath.Join(dir, "audit.log")
	srv := wiretest.StartWS(t, bin, "--auth-token-file", tokFile, "--audit-log", auditPath, "--console-listen", "127.0.0.1:0", "--console-control")
	var base string
	if !pollUntil(wait, func() bool {
		m := consoleURLRE.FindStringSubmatch(srv.Stderr())
		if m != nil {
			base = m[1]
		}
		return m != nil
	}) {
		t.Fatalf("no console URL in stderr:\n%s", srv.Stderr())
	}
	shots := artifactsDir(t)
	t.Logf("console screenshots: %s", shots)

	// Without a token: the API answers 401.
	res, err := http.Get(base + "api/processes")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /api/processes without a token: %d, want 401", res.StatusCode)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox,
		chromedp.Flag("headless", "new"), chromedp.WindowSize(1280, 900), chromedp.Flag("disable-dev-shm-usage", true))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer bcancel()
	ctx, cancel := context.WithTimeout(bctx, 40*time.Second)
	defer cancel()
	shot := func(name string) {
		var buf []byte
		if err := chromedp.Run(ctx, chromedp.FullScreenshot(&buf, 100)); err != nil {
			t.Errorf("screenshot %s: %v", name, err)
			return
		}
		p := filepath.Join(shots, name+".png")
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			t.Error(err)
		}
		t.Logf("screenshot: %s", p)
	}
	t0 := time.Now()
	run := func(what string, actions ...chromedp.Action) {
		t.Helper()
		defer func() { t.Logf("%6.2fs %s", time.Since(t0).Seconds(), what) }()
		if err := chromedp.Run(ctx, actions...); err != nil {
			fctx, fcancel := context.WithTimeout(bctx, 10*time.Second)
			defer fcancel()
			var buf []byte
			var body string
			if chromedp.Run(fctx, chromedp.FullScreenshot(&buf, 100), chromedp.Text("body", &body)) == nil {
				_ = os.WriteFile(filepath.Join(shots, "failed.png"), buf, 0o644)
			}
			t.Fatalf("%s: %v (screenshot %s)\npage: %s", what, err, filepath.Join(shots, "failed.png"), trunc(body, 1500))
		}
	}
	// waitText waits (bounded by d) until the page's element sel holds s.
	waitText := func(what, sel, s string, d time.Duration) {
		t.Helper()
		tctx, tcancel := context.WithTimeout(ctx, d)
		defer tcancel()
		js := fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && e.textContent.includes(%q); })()`, sel, s)
		if err := chromedp.Run(tctx, chromedp.Poll(js, nil, chromedp.WithPollingInterval(20*time.Millisecond))); err != nil {
			var body string
			_ = chromedp.Run(ctx, chromedp.Text("body", &body))
			t.Fatalf("%s: %q not in %s within %v: %v\npage: %s", what, s, sel, d, err, trunc(body, 2000))
		}
	}

	// Without a token: the login page.
	var loc string
	run("open the console", chromedp.Navigate(base), chromedp.WaitVisible("#login"), chromedp.Location(&loc))
	if !strings.HasSuffix(loc, "/login.html") {
		t.Fatalf("without a token the console is at %s, want the login page", loc)
	}
	shot("01-login")
	run("log in", chromedp.SendKeys("#token", token), chromedp.Click("#submit"), chromedp.WaitVisible("#procs"))
	waitText("who", "#me", "token: alice", 5*time.Second)

	// A process started with runtimed exec appears in the table within a second.
	gate := filepath.Join(dir, "gate")
	cmd := exec.Command(bin, "exec", "--connect", srv.URL, "--token-file", plainTok, "--", "/bin/sh", "-c",
		`echo first-line-$((1+1)); while [ ! -e `+shq(gate)+` ]; do sleep 0.02; done; echo second-line-$((2+1))`)
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	first, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || first != "first-line-2\n" {
		t.Fatalf("exec's first line %q: %v", first, err)
	}
	waitText("the exec'd process in the table", "#procs tbody", "second-line-$((2+1))", time.Second)
	waitText("its token in the table", "#procs tbody", "alice", time.Second)
	shot("02-table")

	var execRow consoleRow
	for _, r := range consoleRows(t, base, token) {
		if strings.Contains(strings.Join(r.Argv, " "), "first-line") {
			execRow = r
		}
	}
	if execRow.N == 0 || execRow.Token != "alice" {
		t.Fatalf("exec'd process not in the API: %+v", consoleRows(t, base, token))
	}
	// Its output streams into the page: what it printed so far, then what it prints next.
	run("open its page", chromedp.Navigate(fmt.Sprintf("%sprocess.html?n=%d", base, execRow.N)))
	waitText("output so far", "#plain", "first-line-2", 5*time.Second)
	release(t, gate)
	waitText("live output", "#plain", "second-line-3", 5*time.Second)
	waitText("its exit", "#status", "exited 0", 5*time.Second)
	shot("03-pipe-process")
	go func() { _, _ = io.Copy(io.Discard, stdout) }()

	c := dial(t, srv.URL, map[string]string{"Authorization": "Bearer " + token})
	if _, err := c.Initialize(tctx(t, wait)); err != nil {
		t.Fatal(err)
	}
	// A PTY process attached from the browser: type, see 42; resize reaches it.
	pty := shProc("pty", dir, `exec /bin/sh -i`)
	pty.TTY = true
	pty.Env["PS1"] = "$ "
	mustStart(t, c, pty)
	var ptyN uint64
	if !pollUntil(wait, func() bool {
		for _, r := range consoleRows(t, base, token) {
			if r.ProcessID == "pty" {
				ptyN = r.N
			}
		}
		return ptyN != 0
	}) {
		t.Fatal("pty not in the console")
	}
	run("open the pty", chromedp.Navigate(fmt.Sprintf("%sprocess.html?n=%d", base, ptyN)))
	waitText("prompt", ".xterm-rows", "$", 5*time.Second)
	// Key events go to the focused element (the terminal's textarea); chromedp's node queries are
	// avoided after a navigation (they wait for a document node that the new page may not report).
	run("focus", chromedp.Evaluate(`window.consoleTerm.focus(); document.activeElement.className`, new(string)))
	typeText := func(s string) chromedp.Action {
		return chromedp.ActionFunc(func(ctx context.Context) error { return input.InsertText(s).Do(ctx) })
	}
	run("type", typeText("echo $((6*7))"), chromedp.KeyEvent(kb.Enter))
	// waitLine waits until a line of the terminal's buffer, trimmed, is want.
	waitLine := func(what, want string) {
		t.Helper()
		tctx, tcancel := context.WithTimeout(ctx, 5*time.Second)
		defer tcancel()
		js := fmt.Sprintf(`(() => { const b = window.consoleTerm.buffer.active; for (let i = 0; i < b.length; i++) { const l = b.getLine(i); if (l && l.translateToString(true).trim() === %q) return true; } return false; })()`, want)
		if err := chromedp.Run(tctx, chromedp.Poll(js, nil, chromedp.WithPollingInterval(20*time.Millisecond))); err != nil {
			var body string
			_ = chromedp.Run(ctx, chromedp.Evaluate(`document.querySelector(".xterm-rows").innerText`, &body))
			t.Fatalf("%s: no terminal line %q: %v\nterminal: %s", what, want, err, body)
		}
	}
	waitLine("the shell's answer", "42")
	run("resize", chromedp.Evaluate(`window.consoleTerm.resize(100, 17); true`, new(bool)))
	run("type", typeText("stty size"), chromedp.KeyEvent(kb.Enter))
	waitLine("the new size", "17 100")
	shot("05-pty-attached")
	run("terminate", chromedp.Evaluate(`document.getElementById("terminate").click(); true`, new(bool)))
	waitText("terminated", "#status", "exited", 10*time.Second)
	shot("06-pty-terminated")

	// A process printing HTML and escape sequences runs no script in the page.
	evil := `printf '%s\n' '<script>window.pwned=1</script><img src=x onerror="window.pwned=2">'; printf '\033]0;pwned-title\007\033[31mred\033[0m \033]8;;javascript:window.pwned=3\033\\link\033]8;;\033\\\n'; sleep 30`
	for _, tty := range []bool{false, true} {
		id := fmt.Sprintf("evil-%v", tty)
		p := shProc(id, dir, evil)
		p.TTY = tty
		mustStart(t, c, p)
		var n uint64
		if !pollUntil(wait, func() bool {
			for _, r := range consoleRows(t, base, token) {
				if r.ProcessID == id {
					n = r.N
				}
			}
			return n != 0
		}) {
			t.Fatalf("%s not in the console", id)
		}
		run("open "+id, chromedp.Navigate(fmt.Sprintf("%sprocess.html?n=%d", base, n)))
		if tty {
			waitText("pty output", ".xterm-rows", "<script>window.pwned=1</script>", 5*time.Second)
		} else {
			waitText("pipe output", "#plain", "<script>window.pwned=1</script>", 5*time.Second)
		}
		var pwned string
		var imgs int
		run("check "+id, chromedp.Evaluate(`String(window.pwned)`, &pwned), chromedp.Evaluate(`document.querySelectorAll('#plain img, #plain script, .xterm img, .xterm script').length`, &imgs))
		if pwned != "undefined" || imgs != 0 {
			t.Fatalf("%s: output scripted the page: window.pwned=%s, injected elements %d", id, pwned, imgs)
		}
		var title string
		run("title", chromedp.Title(&title))
		if strings.Contains(title, "pwned") {
			t.Errorf("%s: an escape sequence set the page title: %q", id, title)
		}
		shot("04-" + id)
	}

	// The audit log holds the start, the attach, the terminate and the exit, with the token's name.
	for _, want := range []struct {
		what string
		pred func(auditLine) bool
	}{
		{"start", isType("process.start", field("process", "pty"), field("token", "alice"))},
		{"attach", isType("process.control", field("process", "pty"), field("action", "attach"), field("token", "alice"))},
		{"terminate", isType("process.control", field("process", "pty"), field("action", "terminate"), field("token", "alice"))},
		{"exit", isType("process.exit", field("process", "pty"), field("token", "alice"), field("reason", "terminated"))},
	} {
		waitAudit(t, auditPath, "the pty's "+want.what, want.pred)
	}
}
