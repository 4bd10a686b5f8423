package main_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/runtimed/runtimed/wire/wiretest"
)

type auditLine map[string]any

func readAudit(t *testing.T, path string) []auditLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []auditLine
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l auditLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("audit line %q is not JSON: %v", sc.Text(), err)
		}
		if l["v"] != float64(1) || l["time"] == nil || l["type"] == nil {
			t.Fatalf("audit line without v/time/type: %s", sc.Text())
		}
		out = append(out, l)
	}
	return out
}

// waitAudit waits (bounded) until the log holds a line matching pred.
func waitAudit(t *testing.T, path string, what string, pred func(auditLine) bool) auditLine {
	t.Helper()
	var found auditLine
	if !pollUntil(wait, func() bool {
		for _, l := range readAuditQuiet(path) {
			if pred(l) {
				found = l
				return true
			}
		}
		return false
	}) {
		b, _ := os.ReadFile(path)
		t.Fatalf("audit log has no %s:\n%s", what, b)
	}
	return found
}

func readAuditQuiet(path string) []auditLine {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []auditLine
	for _, s := range strings.Split(string(b), "\n") {
		var l auditLine
		if json.Unmarshal([]byte(s), &l) == nil {
			out = append(out, l)
		}
	}
	return out
}

func isType(typ string, more ...func(auditLine) bool) func(auditLine) bool {
	return func(l auditLine) bool {
		if l["type"] != typ {
			return false
		}
		for _, m := range more {
			if !m(l) {
				return false
			}
		}
		return true
	}
}

func field(k string, v any) func(auditLine) bool {
	return func(l auditLine) bool { return l[k] == v }
}

// Named tokens and the audit log, through the real binary: the token's
// name goes with the session into process/list and every audit line; the
// audit log holds starts (env names, never values), exits, fs changes and
// refusals, never output or tokens; SIGHUP reloads the tokens and reopens
// the log.
func TestAuditLogAndNamedTokens(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const aliceTok, bobTok, bobTok2 = "alice-token-5f3a9c", "bob-token-77e1d0", "bob-token-rotated-2b9e"
	tokFile := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokFile, []byte("# who may connect\nalice "+aliceTok+"\nbob "+bobTok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	auditPath := filepath.Join(dir, "audit.log")
	srv := wiretest.StartWS(t, bin, "--auth-token-file", tokFile, "--audit-log", auditPath)

	wantHandshakeStatus(t, "wrong token", srv.URL, http.Header{"Authorization": {"Bearer nope"}}, http.StatusUnauthorized)
	waitAudit(t, auditPath, "auth.refused", isType("auth.refused", field("reason", "invalid bearer token")))

	c := dial(t, srv.URL, map[string]string{"Authorization": "Bearer " + aliceTok})
	if err := c.CallResult(tctx(t, wait), "initialize", map[string]any{"clientName": "audit-e2e"}, new(struct{})); err != nil {
		t.Fatal(err)
	}
	if err := c.Notify(tctx(t, wait), "initialized", map[string]any{}); err != nil {
		t.Fatal(err)
	}
	p := shProc("p1", dir, `echo OUTPUT-$((40+2))-NOT-AUDITED; exit 7`)
	p.Env["SECRET_NAME"] = "secret-value-never-logged"
	raw, err := call(tctx(t, wait), c, "process/start", map[string]any{"processId": p.ProcessID, "argv": p.Argv, "cwd": p.Cwd, "env": p.Env,
		"tty": false, "metadata": map[string]any{"threadId": "thread-1", "toolCallId": "call-9"}})
	if err != nil {
		t.Fatalf("start: %v %s", err, raw)
	}
	l := mustCollect(t, c, "p1")
	if code := exitCodeOf(t, l); code != 7 {
		t.Fatalf("exit %d", code)
	}
	var list struct {
		Processes []struct {
			ProcessID string `json:"processId"`
			TokenName string `json:"tokenName"`
		} `json:"processes"`
	}
	raw, err = call(tctx(t, wait), c, "process/list", map[string]any{})
	if err != nil || json.Unmarshal(raw, &list) != nil || len(list.Processes) != 1 || list.Processes[0].TokenName != "alice" {
		t.Fatalf("process/list: %s %v; want p1 with tokenName alice", raw, err)
	}
	wfile := filepath.Join(dir, "written.txt")
	if _, err := call(tctx(t, wait), c, "fs/writeFile", map[string]any{"path": wfile, "dataBase64": "aGVsbG8="}); err != nil {
		t.Fatal(err)
	}
	// A refused start (the argv is empty) is audited with the check.
	if _, err := call(tctx(t, wait), c, "process/start", map[string]any{"processId": "bad", "argv": []string{}, "cwd": dir, "env": p.Env, "tty": false}); err == nil {
		t.Fatal("empty argv started")
	}

	// http/request: the method and host are audited, never the path or query.
	_, _ = call(tctx(t, wait), c, "http/request", map[string]any{"method": "GET", "url": "http://127.0.0.1:1/private/path?key=query-secret-77", "requestId": "r1", "headers": []any{}})
	hl := waitAudit(t, auditPath, "http.request", isType("http.request", field("host", "127.0.0.1:1")))
	if hl["method"] != "GET" || hl["token"] != "alice" {
		t.Errorf("http.request: %v", hl)
	}

	start := waitAudit(t, auditPath, "process.start of p1", isType("process.start", field("process", "p1")))
	if start["token"] != "alice" || start["client"] != "audit-e2e" || start["threadId"] != "thread-1" || start["toolCallId"] != "call-9" ||
		start["sandbox"] != "none" || start["cwd"] != dir || start["session"] == nil || start["peer"] == nil {
		t.Errorf("process.start: %v", start)
	}
	names, _ := start["envNames"].([]any)
	if !strings.Contains(jsonStr(names), `"SECRET_NAME"`) {
		t.Errorf("envNames %v: want SECRET_NAME", names)
	}
	exit := waitAudit(t, auditPath, "process.exit of p1", isType("process.exit", field("process", "p1")))
	if exit["exitCode"] != float64(7) || exit["token"] != "alice" || exit["bytesOut"] != float64(len("OUTPUT-42-NOT-AUDITED\n")) || exit["reason"] != "exit" {
		t.Errorf("process.exit: %v", exit)
	}
	fsl := waitAudit(t, auditPath, "fs.change", isType("fs.change", field("path", wfile)))
	if fsl["op"] != "write" || fsl["size"] != float64(5) || fsl["token"] != "alice" {
		t.Errorf("fs.change: %v", fsl)
	}
	ref := waitAudit(t, auditPath, "process.refused", isType("process.refused", field("process", "bad")))
	if !strings.HasPrefix(ref["check"].(string), "argv") || ref["token"] != "alice" {
		t.Errorf("process.refused: %v", ref)
	}
	waitAudit(t, auditPath, "conn.open", isType("conn.open", field("token", "alice")))
	waitAudit(t, auditPath, "session.create", isType("session.create", field("token", "alice"), field("client", "audit-e2e")))

	// Rotate: bob's token changes, the log is moved away; SIGHUP.
	if err := os.WriteFile(tokFile, []byte("alice "+aliceTok+"\nbob "+bobTok2+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(auditPath, auditPath+".1"); err != nil {
		t.Fatal(err)
	}
	if err := srv.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if !pollUntil(wait, func() bool {
		return strings.Contains(srv.Stderr(), "tokens reloaded") && strings.Contains(srv.Stderr(), "audit log reopened")
	}) {
		t.Fatalf("no reload logged:\n%s", srv.Stderr())
	}
	wantHandshakeStatus(t, "bob's old token", srv.URL, http.Header{"Authorization": {"Bearer " + bobTok}}, http.StatusUnauthorized)
	b := dial(t, srv.URL, map[string]string{"Authorization": "Bearer " + bobTok2})
	if _, err := b.Initialize(tctx(t, wait)); err != nil {
		t.Fatal(err)
	}
	waitAudit(t, auditPath, "bob's session in the reopened log", isType("session.create", field("token", "bob")))
	c.Close()
	waitAudit(t, auditPath, "alice's conn.close", isType("conn.close", field("token", "alice")))
	waitAudit(t, auditPath, "alice's session.detach", isType("session.detach", field("token", "alice")))

	// Never output, env values or tokens.
	for _, f := range []string{auditPath, auditPath + ".1"} {
		bs, _ := os.ReadFile(f)
		for _, secret := range []string{"OUTPUT-42-NOT-AUDITED", "secret-value-never-logged", "query-secret-77", "/private/path", aliceTok, bobTok, bobTok2, "aGVsbG8="} {
			if strings.Contains(string(bs), secret) {
				t.Errorf("%s holds %q", f, secret)
			}
		}
	}
	_ = readAudit(t, auditPath+".1")
	_ = readAudit(t, auditPath)
}

func jsonStr(v any) string { b, _ := json.Marshal(v); return string(b) }
