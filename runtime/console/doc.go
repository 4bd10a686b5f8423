// Package console is runtimed's web console (runtimed serve
// --console-listen): a live table of the server's processes (token name,
// client, argv, state, sandbox, limits, age, output, exit), a process page
// with its live output (xterm.js for a PTY, plain text for pipes) and its
// audit trail, and, with Options.Control, attaching to a PTY (type,
// resize) and terminating a process, each action audited. The page is at
// "/", its JSON API under "/api/". xterm.js is vendored (static/vendor)
// and embedded; nothing is loaded from elsewhere.
//
// # Usage
//
//	con := console.New(console.Options{Tokens: tokens, Control: false, AuditLog: auditLog, Logger: log})
//	cfg.Audit = runtime.TeeAuditor(con, auditLog) // the console learns starts, exits, controls
//	cfg.Watch = con                               // and gets each started process's ref
//	srv := runtime.NewServer(cfg)
//	go http.Serve(l, con.Handler())
//	defer con.Close()
//
// # Concurrency
//
// One hub goroutine owns the process rows, their audit trails and the
// login sessions; Audit and Started send to it without blocking, handlers
// ask it with a reply channel. A process page's output stream is a
// lag-mode subscription on the process actor (ProcessRef.Subscribe), read
// by that page's handler goroutine.
//
// # Failure semantics
//
// Without Options.Tokens every request is allowed (serve allows that on
// loopback only). With tokens, /api/ answers 401 and pages redirect to the
// login page; a login sets an HttpOnly, SameSite=Strict cookie (Secure
// when served over TLS) naming a console session that holds the token, so
// a token rotated out by SIGHUP ends its console sessions too. A refused
// login is audited (auth.refused). State-changing requests must come from
// the console's own origin (Origin or Sec-Fetch-Site), the output
// websocket too; every page carries a Content-Security-Policy without
// inline scripts, and output is written as text (xterm's terminal, or
// textContent), never as HTML.
//
// # Backpressure
//
// The hub's mailbox holds 4096 events; when full (the hub is behind) an
// event is dropped and counted (shown on the page as "events lost"), never
// blocking a process or a connection. A page's output subscription has a
// queue of 256 events: the process actor closes it when full (a slow
// browser) and the handler subscribes again from its last seq, reporting
// evicted output as a gap; a process is never held back by a browser.
package console
