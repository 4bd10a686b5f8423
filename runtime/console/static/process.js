"use strict";
// A process page: its facts, its live output (xterm.js for a PTY, text for pipes), its audit trail.
const n = new URLSearchParams(location.search).get("n");
function text(el, s) { el.textContent = s == null ? "" : String(s); return el; }
let info = null, term = null, ws = null;

async function load() {
  const r = await fetch("/api/processes/" + encodeURIComponent(n));
  if (r.status === 401) { location.href = "/login.html"; return null; }
  if (!r.ok) { text(document.getElementById("status"), "no such process"); return null; }
  return r.json();
}

function facts(p) {
  const dl = document.getElementById("facts"); dl.replaceChildren();
  const add = (k, v) => { const dt = document.createElement("dt"); text(dt, k); const dd = document.createElement("dd"); text(dd, v); dl.append(dt, dd); };
  add("process", p.processId); add("pid", p.pid); add("argv", (p.argv || []).join(" ")); add("cwd", p.cwd);
  add("token", p.token); add("client", p.client); add("session", p.session); add("sandbox", p.sandbox);
  add("limits", p.limits ? Object.keys(p.limits).map(k => k + "=" + p.limits[k]).join(" ") : "none");
  if (p.threadId) add("threadId", p.threadId); if (p.toolCallId) add("toolCallId", p.toolCallId);
  add("state", p.state + (p.exitCode == null ? "" : " (exit " + p.exitCode + (p.limit ? ", " + p.limit : "") + ")"));
  text(document.getElementById("title"), "#" + p.n + " " + p.processId);
}

function trail(events) {
  const tb = document.querySelector("#trail tbody"); const rows = [];
  for (const e of events || []) {
    const tr = document.createElement("tr"); tr.className = "audit-" + e.type;
    const d = [];
    if (e.action) d.push(e.action); if (e.exitCode != null) d.push("exit " + e.exitCode); if (e.reason) d.push(e.reason);
    if (e.bytesOut) d.push(e.bytesOut + " bytes out"); if (e.argv) d.push(e.argv.join(" "));
    for (const s of [e.time, e.type, e.token, d.join(" · ")]) { const c = document.createElement("td"); text(c, s); tr.appendChild(c); }
    rows.push(tr);
  }
  tb.replaceChildren(...rows);
}

async function refreshMeta() {
  const d = await load(); if (!d) return;
  facts(d.process); trail(d.audit);
}

async function main() {
  const d = await load(); if (!d) return;
  info = d.process; facts(info); trail(d.audit);
  const control = d.control && info.tty;
  const btn = document.getElementById("terminate");
  // Set once the process's exit is shown: a terminate answer that comes
  // after it (the server answers once the signal is sent, the exit may be
  // streamed first) must not cover it.
  let ended = false;
  if (d.control) {
    btn.hidden = false;
    btn.addEventListener("click", async () => {
      const r = await fetch("/api/processes/" + encodeURIComponent(n) + "/terminate", { method: "POST" });
      if (!ended) text(document.getElementById("status"), r.ok ? "terminate sent" : "terminate refused: " + r.status);
    });
  }
  const proto = location.protocol === "https:" ? "wss://" : "ws://";
  ws = new WebSocket(proto + location.host + "/api/processes/" + encodeURIComponent(n) + "/stream");
  ws.binaryType = "arraybuffer";
  let plain = null; const dec = new TextDecoder();
  if (info.tty) {
    const el = document.getElementById("term"); el.hidden = false;
    term = new Terminal({ convertEol: false, scrollback: 5000, disableStdin: !control });
    const fit = new FitAddon.FitAddon(); term.loadAddon(fit);
    term.open(el); fit.fit();
    window.addEventListener("resize", () => fit.fit());
    if (control) {
      term.onData(data => { if (ws.readyState === 1) ws.send(JSON.stringify({ type: "input", data: data })); });
      term.onResize(sz => { if (ws.readyState === 1) ws.send(JSON.stringify({ type: "resize", rows: sz.rows, cols: sz.cols })); });
      ws.addEventListener("open", () => ws.send(JSON.stringify({ type: "resize", rows: term.rows, cols: term.cols })));
      term.focus();
    }
    window.consoleTerm = term; // for tests: term.resize(rows, cols)
  } else {
    plain = document.getElementById("plain"); plain.hidden = false;
  }
  ws.addEventListener("message", ev => {
    if (typeof ev.data === "string") {
      const m = JSON.parse(ev.data);
      if (m.type === "exited") { ended = true; text(document.getElementById("status"), "exited " + m.exitCode + (m.limit ? " (" + m.limit + ")" : "")); refreshMeta(); }
      if (m.type === "gap") { const s = "[output " + m.from + ".." + m.to + " evicted]\n"; if (term) term.write(s); else plain.append(s); }
      return;
    }
    const bytes = new Uint8Array(ev.data);
    if (term) term.write(bytes); else plain.append(dec.decode(bytes, { stream: true }));
  });
  setInterval(refreshMeta, 1000);
}
main();
