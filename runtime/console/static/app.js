"use strict";
// The process table: refreshed from the console's API (fed by the actors, not by process/list).
function text(el, s) { el.textContent = s == null ? "" : String(s); return el; }
function td(tr, s, cls) { const c = document.createElement("td"); text(c, s); if (cls) c.className = cls; tr.appendChild(c); return c; }
function age(ms) { const s = Math.floor(ms / 1000); if (s < 60) return s + "s"; if (s < 3600) return Math.floor(s / 60) + "m" + (s % 60) + "s"; return Math.floor(s / 3600) + "h" + Math.floor(s % 3600 / 60) + "m"; }
function limits(l) { if (!l) return ""; return Object.keys(l).map(k => k + "=" + l[k]).join(" "); }

async function me() {
  const r = await fetch("/api/me");
  if (r.status === 401) { location.href = "/login.html"; return; }
  const m = await r.json();
  text(document.getElementById("me"), (m.token ? "token: " + m.token : "no auth") + (m.control ? " · control enabled" : " · read-only"));
  if (!m.auth) document.getElementById("logout").hidden = true;
}

async function refresh() {
  const r = await fetch("/api/processes");
  if (r.status === 401) { location.href = "/login.html"; return; }
  const data = await r.json();
  const tbody = document.querySelector("#procs tbody");
  const rows = [];
  for (const p of data.processes) {
    const tr = document.createElement("tr");
    tr.className = p.state;
    tr.dataset.processId = p.processId;
    const a = document.createElement("a"); a.href = "/process.html?n=" + p.n; text(a, p.n);
    const c = document.createElement("td"); c.appendChild(a); tr.appendChild(c);
    td(tr, p.token); td(tr, p.client); td(tr, p.processId);
    td(tr, (p.argv || []).join(" "), "argv");
    td(tr, p.state + (p.tty ? " (pty)" : ""), "state");
    td(tr, p.sandbox); td(tr, limits(p.limits));
    td(tr, p.rssBytes == null ? "" : (p.rssBytes / 1048576).toFixed(1) + " MiB");
    td(tr, p.cpuSeconds == null ? "" : p.cpuSeconds.toFixed(2) + " s");
    td(tr, age(p.ageMs));
    td(tr, p.state === "exited" ? p.bytesOut : "");
    td(tr, p.exitCode == null ? "" : p.exitCode + (p.limit ? " (" + p.limit + ")" : ""), "exit");
    rows.push(tr);
  }
  tbody.replaceChildren(...rows);
  const lost = document.getElementById("lost");
  lost.hidden = !data.eventsLost; text(lost, data.eventsLost ? data.eventsLost + " events lost (the console fell behind)" : "");
}

function chart(id, pts, key) {
  const cv = document.getElementById(id); const g = cv.getContext("2d");
  g.clearRect(0, 0, cv.width, cv.height);
  const vals = pts.map(p => p[key]); const max = Math.max(1, ...vals);
  g.strokeStyle = "#2a62c9"; g.beginPath();
  vals.forEach((v, i) => { const x = cv.width * (i / Math.max(1, vals.length - 1)); const y = cv.height - 4 - (cv.height - 8) * v / max; if (i) g.lineTo(x, y); else g.moveTo(x, y); });
  g.stroke(); g.fillStyle = "#555"; g.fillText("max " + max, 4, 12);
}

async function charts() {
  const r = await fetch("/api/stats"); if (!r.ok) return;
  const pts = (await r.json()).points || [];
  chart("chart-running", pts, "running"); chart("chart-started", pts, "started"); chart("chart-bytes", pts, "bytes");
}

me(); refresh(); charts();
setInterval(refresh, 300);
setInterval(charts, 2000);
