package console

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"

	"github.com/runtimed/runtimed/actors"
	"github.com/runtimed/runtimed/actors/audit"
	"github.com/runtimed/runtimed/runtime"
)

//go:embed static
var staticFS embed.FS

// Options configure a Console.
type Options struct {
	// Tokens are the tokens that may log in (the server's); nil: no login
	// is asked for.
	Tokens runtime.TokenSource
	// Control allows attaching to a PTY (input, resize) and terminating.
	Control bool
	// AuditLog receives the console's own events (logins refused, control
	// actions); nil: none are written (the console still shows them).
	AuditLog runtime.Auditor
	// TLS: the console is served over TLS (the cookie is then Secure).
	TLS    bool
	Logger *zap.Logger
	// TerminateGrace is process terminate's SIGTERM-to-SIGKILL grace (0: 2 s).
	TerminateGrace time.Duration
}

// ErrNoProcess: no such process row.
var ErrNoProcess = errors.New("console: no such process")

// Console is the web console. It is a runtime.Auditor and a
// runtime.Watcher: give it to the server's Config (Audit through
// TeeAuditor, Watch) before NewServer.
type Console struct {
	opts   Options
	hub    *hub
	static http.Handler
	mux    *http.ServeMux
}

var (
	_ runtime.Auditor = (*Console)(nil)
	_ runtime.Watcher = (*Console)(nil)
)

const cookieName = "runtimed_console"

// New starts a console's hub.
func New(opts Options) *Console {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.TerminateGrace <= 0 {
		opts.TerminateGrace = 2 * time.Second
	}
	sub, _ := fs.Sub(staticFS, "static")
	c := &Console{opts: opts, hub: newHub(), static: http.FileServer(http.FS(sub))}
	go c.hub.run()
	c.mux = http.NewServeMux()
	c.mux.HandleFunc("POST /login", c.login)
	c.mux.HandleFunc("POST /logout", c.logout)
	c.mux.HandleFunc("GET /api/me", c.authed(c.me))
	c.mux.HandleFunc("GET /api/processes", c.authed(c.list))
	c.mux.HandleFunc("GET /api/stats", c.authed(c.stats))
	c.mux.HandleFunc("GET /api/processes/{n}", c.authed(c.get))
	c.mux.HandleFunc("GET /api/processes/{n}/stream", c.authed(c.stream))
	c.mux.HandleFunc("POST /api/processes/{n}/terminate", c.authed(c.terminate))
	c.mux.HandleFunc("/api/", c.authed(func(w http.ResponseWriter, r *http.Request, _ string) {
		jsonError(w, http.StatusNotFound, "no such API")
	}))
	c.mux.HandleFunc("/", c.page)
	return c
}

// Close stops the hub.
func (c *Console) Close() {
	select {
	case <-c.hub.stop:
	default:
		close(c.hub.stop)
	}
	<-c.hub.done
}

// Audit implements runtime.Auditor (never blocks).
func (c *Console) Audit(e audit.Event) {
	stamp(&e)
	c.hub.post(auditMsg{e: e})
}

func stamp(e *audit.Event) {
	e.V = audit.Version
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
}

// Started implements runtime.Watcher (never blocks).
func (c *Console) Started(ref *actors.ProcessRef, e audit.Event) {
	stamp(&e)
	c.hub.post(startedMsg{ref: ref, e: e})
}

// Handler serves the console.
func (c *Console) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin") // no-referrer would make a form's Origin "null"
		h.Set("Cache-Control", "no-store")
		c.mux.ServeHTTP(w, r)
	})
}

func (c *Console) auditOwn(e audit.Event) {
	c.Audit(e)
	if c.opts.AuditLog != nil {
		c.opts.AuditLog.Audit(e)
	}
}

// identify: the token name of the request (cookie or bearer), ok false
// when a token is required and none valid was given.
func (c *Console) identify(r *http.Request) (string, bool) {
	if c.opts.Tokens == nil {
		return "", true
	}
	if ck, err := r.Cookie(cookieName); err == nil && ck.Value != "" {
		reply := make(chan string, 1)
		tok, _ := ask(c.hub, sessionMsg{id: ck.Value, reply: reply}, reply)
		if tok != "" {
			if name, ok := c.opts.Tokens.Lookup(tok); ok {
				return name, true
			}
		}
	}
	if a := r.Header.Get("Authorization"); a != "" {
		scheme, tok, _ := strings.Cut(strings.TrimSpace(a), " ")
		if strings.EqualFold(scheme, "Bearer") {
			if name, ok := c.opts.Tokens.Lookup(strings.TrimSpace(tok)); ok {
				return name, true
			}
		}
	}
	return "", false
}

type authedFunc func(w http.ResponseWriter, r *http.Request, who string)

func (c *Console) authed(f authedFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		who, ok := c.identify(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="runtimed console"`)
			jsonError(w, http.StatusUnauthorized, "log in first (or send Authorization: Bearer <token>)")
			return
		}
		f(w, r, who)
	}
}

// sameOrigin: a state-changing request must come from the console's own
// pages: its Origin is this host, or the browser says same-origin.
func sameOrigin(r *http.Request) bool {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" {
		return false
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		return err == nil && u.Host == r.Host
	}
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" {
		return s == "same-origin"
	}
	return false // a state change with neither header is refused
}

func jsonError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// page serves the static files; the pages other than the login page ask
// for a login first.
func (c *Console) page(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	p := r.URL.Path
	public := p == "/login.html" || strings.HasPrefix(p, "/vendor/") || p == "/style.css" || p == "/login.js"
	if !public {
		if _, ok := c.identify(r); !ok {
			http.Redirect(w, r, "/login.html", http.StatusSeeOther)
			return
		}
	}
	c.static.ServeHTTP(w, r)
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		jsonError(w, http.StatusForbidden, "cross-origin request refused")
		return
	}
	if c.opts.Tokens == nil {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	tok := strings.TrimSpace(r.PostFormValue("token"))
	if _, ok := c.opts.Tokens.Lookup(tok); !ok || tok == "" {
		c.auditOwn(audit.Event{Type: audit.AuthRefused, Peer: r.RemoteAddr, Reason: "invalid token (console login)"})
		http.Redirect(w, r, "/login.html?failed=1", http.StatusSeeOther)
		return
	}
	reply := make(chan string, 1)
	id, ok := ask(c.hub, loginMsg{token: tok, reply: reply}, reply)
	if !ok {
		jsonError(w, http.StatusServiceUnavailable, "console stopping")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: id, Path: "/", HttpOnly: true, Secure: c.opts.TLS, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		jsonError(w, http.StatusForbidden, "cross-origin request refused")
		return
	}
	if ck, err := r.Cookie(cookieName); err == nil {
		c.hub.post(logoutMsg{id: ck.Value})
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: c.opts.TLS, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/login.html", http.StatusSeeOther)
}

func (c *Console) me(w http.ResponseWriter, r *http.Request, who string) {
	writeJSON(w, map[string]any{"token": who, "control": c.opts.Control, "auth": c.opts.Tokens != nil, "eventsLost": c.hub.dropped.Load()})
}

func (c *Console) list(w http.ResponseWriter, r *http.Request, _ string) {
	reply := make(chan []row, 1)
	rows, ok := ask(c.hub, listMsg{reply: reply}, reply)
	if !ok {
		jsonError(w, http.StatusServiceUnavailable, "console stopping")
		return
	}
	now := time.Now()
	type out struct {
		row
		AgeMs      int64    `json:"ageMs"`
		RSSBytes   *int64   `json:"rssBytes,omitempty"`   // running: the process's resident memory
		CPUSeconds *float64 `json:"cpuSeconds,omitempty"` // running: its user+system CPU time
	}
	res := make([]out, len(rows))
	for i, r := range rows {
		res[i] = out{row: r, AgeMs: now.Sub(r.Started).Milliseconds()}
		if r.State == "running" {
			if rss, cpu, ok := procUsage(r.PID); ok {
				res[i].RSSBytes, res[i].CPUSeconds = &rss, &cpu
			}
		}
	}
	writeJSON(w, map[string]any{"processes": res, "eventsLost": c.hub.dropped.Load()})
}

func (c *Console) stats(w http.ResponseWriter, r *http.Request, _ string) {
	reply := make(chan []point, 1)
	pts, _ := ask(c.hub, statsMsg{reply: reply}, reply)
	writeJSON(w, map[string]any{"points": pts})
}

func (c *Console) row(w http.ResponseWriter, r *http.Request) *row {
	n, err := strconv.ParseUint(r.PathValue("n"), 10, 64)
	if err != nil {
		jsonError(w, http.StatusBadRequest, "bad process number")
		return nil
	}
	reply := make(chan *row, 1)
	rw, ok := ask(c.hub, getMsg{n: n, reply: reply}, reply)
	if !ok || rw == nil {
		jsonError(w, http.StatusNotFound, ErrNoProcess.Error())
		return nil
	}
	return rw
}

func (c *Console) get(w http.ResponseWriter, r *http.Request, _ string) {
	rw := c.row(w, r)
	if rw == nil {
		return
	}
	writeJSON(w, map[string]any{"process": rw, "audit": rw.trail, "control": c.opts.Control})
}

func (c *Console) control(rw *row, who, action string, r *http.Request) {
	e := audit.Event{Type: audit.ProcessControl, Token: who, Peer: r.RemoteAddr, Session: rw.Session, Process: rw.ID, PID: rw.PID, Action: action, Client: "console"}
	c.auditOwn(e)
}

func (c *Console) terminate(w http.ResponseWriter, r *http.Request, who string) {
	if !sameOrigin(r) {
		jsonError(w, http.StatusForbidden, "cross-origin request refused")
		return
	}
	if !c.opts.Control {
		jsonError(w, http.StatusForbidden, "the console is read-only (serve --console-control allows terminate)")
		return
	}
	rw := c.row(w, r)
	if rw == nil {
		return
	}
	c.control(rw, who, "terminate", r)
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if _, err := rw.ref.Terminate(ctx, c.opts.TerminateGrace); err != nil {
		jsonError(w, http.StatusConflict, err.Error())
		return
	}
	writeJSON(w, map[string]any{"terminated": true})
}

// streamQueue is a page's live queue on the process actor (lag mode).
const streamQueue = 256

type clientMsg struct {
	Type string `json:"type"` // input, resize
	Data string `json:"data"`
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// stream is a process page's websocket: output as binary frames, the
// ending and gaps as JSON text frames; with Control, input and resize.
func (c *Console) stream(w http.ResponseWriter, r *http.Request, who string) {
	rw := c.row(w, r)
	if rw == nil {
		return
	}
	ws, err := websocket.Accept(w, r, nil) // same-origin only (the default)
	if err != nil {
		return
	}
	defer ws.CloseNow()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	ref := rw.ref
	attached := false
	go func() {
		defer cancel()
		for {
			_, data, err := ws.Read(ctx)
			if err != nil {
				return
			}
			var m clientMsg
			if json.Unmarshal(data, &m) != nil || !c.opts.Control || !ref.TTY() {
				continue
			}
			if !attached {
				attached = true
				c.control(rw, who, "attach", r)
			}
			wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
			switch m.Type {
			case "input":
				_, _ = ref.Write(wctx, []byte(m.Data), "")
			case "resize":
				if m.Rows > 0 && m.Cols > 0 {
					_ = ref.Resize(wctx, m.Rows, m.Cols)
				}
			}
			wcancel()
		}
	}()
	var after uint64
	for ctx.Err() == nil {
		sub, err := ref.Subscribe(ctx, after, streamQueue)
		if err != nil {
			// The actor has ended: report what the row knows.
			c.sendEnd(ctx, ws, rw)
			<-ctx.Done()
			return
		}
		for _, ev := range sub.History {
			if !c.sendEvent(ctx, ws, ev, &after) {
				return
			}
		}
	live:
		for {
			select {
			case ev, ok := <-sub.Live:
				if !ok {
					break live
				}
				if !c.sendEvent(ctx, ws, ev, &after) {
					return
				}
			case <-ctx.Done(): // the page went away
				return
			}
		}
		select {
		case <-ref.Closed():
			<-ctx.Done()
			return
		default: // lagged: the actor closed the queue; subscribe again from after
		}
	}
}

func (c *Console) sendEnd(ctx context.Context, ws *websocket.Conn, rw *row) {
	b, _ := json.Marshal(map[string]any{"type": "exited", "exitCode": rw.ref.ExitCode(), "limit": rw.ref.Limit()})
	_ = ws.Write(ctx, websocket.MessageText, b)
}

func (c *Console) sendEvent(ctx context.Context, ws *websocket.Conn, ev actors.Event, after *uint64) bool {
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if ev.Seq > *after {
		*after = ev.Seq
	}
	switch ev.Kind {
	case actors.EventOutput:
		return ws.Write(wctx, websocket.MessageBinary, ev.Data) == nil
	case actors.EventExited:
		b, _ := json.Marshal(map[string]any{"type": "exited", "exitCode": ev.ExitCode, "limit": ev.Limit})
		return ws.Write(wctx, websocket.MessageText, b) == nil
	case actors.EventGap:
		if ev.To > *after {
			*after = ev.To
		}
		b, _ := json.Marshal(map[string]any{"type": "gap", "from": ev.Seq, "to": ev.To})
		return ws.Write(wctx, websocket.MessageText, b) == nil
	case actors.EventClosed:
		b, _ := json.Marshal(map[string]any{"type": "closed"})
		return ws.Write(wctx, websocket.MessageText, b) == nil
	}
	return true
}
