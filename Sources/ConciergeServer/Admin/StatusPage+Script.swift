extension StatusPage {
    /// The page's script: plain JavaScript, no library. It reads `/ui/stream` with `fetch` (so
    /// the token goes in `Authorization`, which `EventSource` cannot send), keeps five minutes
    /// of snapshots for the sparklines and calls the admin API for each confirmed action.
    static let script = #"""
"use strict";
const KEY = "concierge.admin.token";
const HISTORY = 300;            // snapshots kept: five minutes at one a second
const WINDOW = 10;              // seconds the rates and percentiles are taken over
const $ = (id) => document.getElementById(id);
const state = { samples: [], fleet: null, events: [], env: null, abort: null };

function token() { return sessionStorage.getItem(KEY); }

function showLogin(message) {
  if (state.abort) { state.abort.abort(); state.abort = null; }
  $("app").hidden = true; $("login").hidden = false;
  $("login-error").textContent = message || "";
  setConn("off", "signed out");
  $("token").focus();
}

$("login-form").addEventListener("submit", (e) => {
  e.preventDefault();
  sessionStorage.setItem(KEY, $("token").value.trim());
  $("token").value = "";
  start();
});

function setConn(kind, text) {
  $("dot").className = "dot " + (kind === "on" ? "on" : kind === "off" ? "off" : "");
  $("conn").textContent = text;
}

async function api(method, path, body) {
  const init = { method, headers: { Authorization: "Bearer " + token() } };
  if (body !== undefined) { init.headers["Content-Type"] = "application/json"; init.body = JSON.stringify(body); }
  const reply = await fetch(path, init);
  const json = await reply.json().catch(() => ({}));
  if (reply.status === 401) { sessionStorage.removeItem(KEY); showLogin("The token was refused."); }
  if (!reply.ok) throw new Error(json.error || ("HTTP " + reply.status));
  return json;
}

function start() {
  if (!token()) { showLogin(); return; }
  $("login").hidden = true; $("app").hidden = false;
  connect();
}

async function connect() {
  const abort = new AbortController();
  state.abort = abort;
  setConn("", "connecting…");
  try {
    const reply = await fetch("/ui/stream", { headers: { Authorization: "Bearer " + token() }, signal: abort.signal });
    if (reply.status === 401) { sessionStorage.removeItem(KEY); showLogin("The token was refused."); return; }
    if (!reply.ok || !reply.body) throw new Error("HTTP " + reply.status);
    setConn("on", "live");
    const reader = reply.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        frame(buffer.slice(0, end));
        buffer = buffer.slice(end + 2);
      }
    }
  } catch (error) {
    if (abort.signal.aborted) return;
  }
  if (state.abort !== abort) return;
  setConn("off", "reconnecting…");
  setTimeout(() => { if (state.abort === abort) connect(); }, 2000);
}

function frame(text) {
  let type = "message", data = "";
  for (const line of text.split("\n")) {
    if (line.startsWith("event:")) type = line.slice(6).trim();
    else if (line.startsWith("data:")) data += line.slice(5).trim();
  }
  if (!data) return;
  const value = JSON.parse(data);
  if (type === "snapshot") snapshot(value);
  else if (type === "event") event(value);
}

// ---- numbers --------------------------------------------------------------------------
const fmt = {
  n(v) { return v == null || !isFinite(v) ? "–" : v >= 100 ? Math.round(v).toLocaleString() : v >= 10 ? v.toFixed(1) : v.toFixed(2); },
  pct(v) { return v == null || !isFinite(v) ? "–" : (v * 100).toFixed(1) + " %"; },
  ms(v) { return v == null || !isFinite(v) ? "–" : v < 0.001 ? (v * 1e6).toFixed(0) + " µs" : v < 1 ? (v * 1000).toFixed(1) + " ms" : v.toFixed(2) + " s"; },
  bytes(v) { const u = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0; while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; } return v.toFixed(i ? 1 : 0) + " " + u[i]; },
  ago(seconds) { const s = Math.round(seconds); return s < 60 ? s + " s" : s < 3600 ? Math.round(s / 60) + " min" : (s / 3600).toFixed(1) + " h"; },
  clock(t) { return new Date(t * 1000).toLocaleTimeString([], { hour12: false }); },
};

function parseSeries(text) {
  const out = [];
  for (const line of text.split("\n")) {
    const m = /^([a-z_]+)\{([^}]*)\}\s+([0-9.eE+-]+)$/.exec(line);
    if (!m) continue;
    const labels = {};
    for (const pair of m[2].matchAll(/([a-z_]+)="([^"]*)"/g)) labels[pair[1]] = pair[2];
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}

function buckets(series, name) {
  const map = new Map();
  for (const s of series) {
    if (s.name !== name) continue;
    const le = s.labels.le === "+Inf" ? Infinity : Number(s.labels.le);
    map.set(le, (map.get(le) || 0) + s.value);
  }
  return [...map.entries()].sort((a, b) => a[0] - b[0]);
}

function quantile(q, now, then) {
  const counts = now.map(([le, c], i) => [le, c - (then && then[i] ? then[i][1] : 0)]);
  const total = counts.length ? counts[counts.length - 1][1] : 0;
  if (total <= 0) return null;
  const rank = q * total;
  let prevLe = 0, prevCount = 0;
  for (const [le, c] of counts) {
    if (c >= rank) {
      if (le === Infinity) return prevLe;
      return prevLe + (le - prevLe) * ((rank - prevCount) / Math.max(c - prevCount, 1e-9));
    }
    prevLe = le; prevCount = c;
  }
  return prevLe;
}

const noEndpoint = () => ({ total: 0, hits: 0, lookups: 0, errors: 0, latency: [] });

function endpoints(series) {
  const table = new Map();
  for (const s of series) {
    if (s.name !== "concierge_requests_by_endpoint_total") continue;
    const e = table.get(s.labels.endpoint) || noEndpoint();
    e.total += s.value;
    if (s.labels.cache === "HIT" || s.labels.cache === "STALE") e.hits += s.value;
    if (s.labels.cache !== "NONE") e.lookups += s.value;
    if (s.labels.status && s.labels.status[0] === "5") e.errors += s.value;
    table.set(s.labels.endpoint, e);
  }
  for (const [name, e] of table) {
    e.latency = buckets(series.filter((s) => s.labels.endpoint === name), "concierge_request_duration_seconds_bucket");
  }
  return table;
}

function snapshot(s) {
  s.parsed = parseSeries(s.series || "");
  s.latency = buckets(s.parsed, "concierge_request_duration_seconds_bucket");
  s.endpoints = endpoints(s.parsed);
  if (s.fleet) state.fleet = s.fleet;
  const samples = state.samples;
  samples.push(s);
  if (samples.length > HISTORY) samples.shift();
  const prev = samples.length > 1 ? samples[samples.length - 2] : null;
  const back = samples[Math.max(0, samples.length - 1 - WINDOW)];
  const dt = prev ? Math.max(s.time - prev.time, 0.001) : 1;
  const st = s.stats, ps = prev ? prev.stats : null;
  s.rps = ps ? (st.requests - ps.requests) / dt : 0;
  s.errps = ps ? (st.upstream_errors - ps.upstream_errors) / dt : 0;
  const hits = (x) => x.hits + x.stale, looks = (x) => x.hits + x.stale + x.misses + x.bypass;
  const bs = back.stats;
  s.hit = looks(st) - looks(bs) > 0 ? (hits(st) - hits(bs)) / (looks(st) - looks(bs)) : (looks(st) > 0 ? hits(st) / looks(st) : null);
  s.p50 = quantile(0.5, s.latency, back === s ? null : back.latency);
  s.p99 = quantile(0.99, s.latency, back === s ? null : back.latency);
  render(s, back);
}

// ---- drawing --------------------------------------------------------------------------
function spark(id, values) {
  const svg = $(id);
  const finite = values.map((v) => (v == null || !isFinite(v) ? 0 : v));
  const max = Math.max(...finite, 1e-9);
  const step = 120 / Math.max(Math.min(HISTORY, Math.max(finite.length, 60)) - 1, 1);
  const offset = 120 - step * (finite.length - 1);
  const points = finite.map((v, i) => (offset + i * step).toFixed(1) + "," + (31 - (v / max) * 29).toFixed(1));
  svg.replaceChildren();
  if (points.length < 2) return;
  const ns = "http://www.w3.org/2000/svg";
  const area = document.createElementNS(ns, "polygon");
  area.setAttribute("points", offset.toFixed(1) + ",32 " + points.join(" ") + " 120,32");
  const line = document.createElementNS(ns, "polyline");
  line.setAttribute("points", points.join(" "));
  svg.append(area, line);
}

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function facts(id, pairs) {
  const dl = $(id);
  dl.replaceChildren();
  for (const [k, v] of pairs) { dl.append(el("dt", "", k), el("dd", "", v)); }
}

function badge(id, text, kind) { const b = $(id); b.textContent = text; b.className = "badge " + (kind || ""); }

function render(s, back) {
  const samples = state.samples;
  $("k-rps").textContent = fmt.n(s.rps);
  $("k-hit").textContent = fmt.pct(s.hit);
  $("k-lat").textContent = fmt.ms(s.p50) + " · " + fmt.ms(s.p99);
  $("k-err").textContent = fmt.n(s.errps);
  $("k-cache").textContent = Number(s.stats.entries).toLocaleString() + " entries";
  $("k-bytes").textContent = fmt.bytes(s.stats.bytes);
  spark("s-rps", samples.map((x) => x.rps));
  spark("s-hit", samples.map((x) => x.hit));
  spark("s-lat", samples.map((x) => x.p99));
  spark("s-err", samples.map((x) => x.errps));
  $("env").textContent = s.environment.environment;
  $("storage").textContent = "storage " + s.storage;
  renderEndpoints(s, back);
  renderSession(s);
  renderUpstreams(s);
  renderFleet();
}

function renderEndpoints(s, back) {
  const body = $("endpoints").tBodies[0];
  body.replaceChildren();
  const span = Math.max(s.time - back.time, 1);
  const rows = [...s.endpoints.entries()].sort((a, b) => b[1].total - a[1].total);
  for (const [name, e] of rows) {
    const then = back.endpoints.get(name) || noEndpoint();
    const lookups = e.lookups - then.lookups;
    const hit = lookups > 0 ? (e.hits - then.hits) / lookups : (e.lookups > 0 ? e.hits / e.lookups : null);
    // Over the window when it saw requests of this endpoint, else since the start.
    const since = e.total - then.total > 0 && then.latency.length === e.latency.length ? then.latency : null;
    const tr = el("tr");
    tr.append(el("td", "", name), el("td", "r", fmt.n((e.total - then.total) / span)), el("td", "r", fmt.pct(hit)),
              el("td", "r", fmt.ms(quantile(0.5, e.latency, since))), el("td", "r", fmt.ms(quantile(0.99, e.latency, since))),
              el("td", "r", fmt.n((e.errors - then.errors) / span)), el("td", "r", Math.round(e.total).toLocaleString()));
    body.append(tr);
  }
  $("endpoints-empty").hidden = rows.length > 0;
}

function renderSession(s) {
  const x = s.session;
  const now = s.time;
  if (!x.logged_in) {
    badge("session-state", x.kind === "app" ? "no app token yet" : "logged out", "warn");
  } else {
    const expires = x.expires_at ? Date.parse(x.expires_at) / 1000 : null;
    badge("session-state", expires && expires < now ? "expired" : "logged in", expires && expires < now ? "warn" : "good");
  }
  const pairs = [["kind", x.kind]];
  if (x.user_id != null) pairs.push(["user", String(x.user_id)]);
  if (x.access_token) pairs.push(["access token", x.access_token]);
  if (x.set_at) pairs.push(["last login or refresh", fmt.ago(now - Date.parse(x.set_at) / 1000) + " ago"]);
  if (x.expires_at) { const left = Date.parse(x.expires_at) / 1000 - now; pairs.push(["expires", left >= 0 ? "in " + fmt.ago(left) : fmt.ago(-left) + " ago"]); }
  for (const [k, v] of Object.entries(x)) {
    if (["kind", "user_id", "access_token", "refresh_token", "set_at", "expires_at", "logged_in"].includes(k) || v == null) continue;
    pairs.push([k.replaceAll("_", " "), typeof v === "object" ? JSON.stringify(v) : String(v)]);
  }
  facts("session", pairs);
  $("logout").disabled = !x.logged_in;
}

function renderUpstreams(s) {
  const list = $("upstreams");
  list.replaceChildren();
  const down = new Set(s.upstreams_down);
  const names = Object.keys(s.environment.upstreams).sort();
  for (const name of names) {
    const li = el("li");
    const left = el("div");
    left.append(el("div", "", name + (name === s.environment.environment ? " (current)" : "")), el("div", "url", s.environment.upstreams[name]));
    const b = el("span", "badge " + (down.has(name) ? "bad" : "good"), down.has(name) ? "failing" : "up");
    li.append(left, b);
    list.append(li);
  }
  const select = $("env-select");
  if (select.options.length !== names.length) {
    select.replaceChildren(...names.map((n) => { const o = el("option", "", n); o.value = n; return o; }));
  }
  if (document.activeElement !== select && state.env !== s.environment.environment) select.value = s.environment.environment;
  state.env = s.environment.environment;
}

function renderFleet() {
  const f = state.fleet;
  if (!f) return;
  if (f.state === "off") { badge("fleet-state", "alone"); facts("fleet", [["mode", "a single daemon (no fleet:)"]]); $("nodes").replaceChildren(); return; }
  badge("fleet-state", f.state, f.state === "ok" ? "good" : "bad");
  $("node").textContent = f.node;
  facts("fleet", [["fleet", f.name], ["this node", f.node], ["session version", String(f.session_version)],
                  ["invalidations", (f.applied_seq ?? "–") + " applied of " + (f.seq ?? "–")],
                  ["token requests", f.token_requests == null ? "–" : String(f.token_requests)]]);
  const list = $("nodes");
  list.replaceChildren();
  for (const n of f.nodes || []) {
    const lag = f.seq == null ? null : f.seq - n.applied_seq;
    const li = el("li");
    li.append(el("span", "", n.node), el("span", "url", "lag " + (lag == null ? "–" : lag) + " · seen " + fmt.clock(Date.parse(n.last_seen) / 1000)),
              el("span", "badge " + (n.state === "ok" ? "good" : "warn"), n.state));
    list.append(li);
  }
}

const WARN = /down|logout|fail|refused|degraded|warning|error|lost/;
function event(e) {
  if (state.events.some((x) => x.id === e.id)) return;
  state.events.unshift(e);
  if (state.events.length > 50) state.events.pop();
  const list = $("events");
  list.replaceChildren(...state.events.map((x) => {
    const li = el("li", WARN.test(x.type + " " + JSON.stringify(x.data)) ? (/storage|error/.test(x.type) ? "bad" : "warn") : "");
    const { type, time, ...rest } = x.data || {};
    li.append(el("span", "t", fmt.clock(x.time)), el("span", "k", x.type), el("span", "d", JSON.stringify(rest)));
    return li;
  }));
  $("events-empty").hidden = state.events.length > 0;
}

// ---- actions, each behind a confirmation ---------------------------------------------
function confirmAction(title, text, danger) {
  const dialog = $("confirm");
  $("confirm-title").textContent = title;
  $("confirm-text").textContent = text;
  $("confirm-ok").className = danger ? "danger" : "";
  dialog.returnValue = "";
  dialog.showModal();
  return new Promise((resolve) => dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true }));
}

function report(id, text, bad) { const p = $(id); p.textContent = text; p.className = "result" + (bad ? " bad" : ""); }

$("inv-by").addEventListener("change", () => {
  const by = $("inv-by").value;
  $("inv-value").disabled = by === "all";
  $("inv-value").placeholder = { pattern: "regular expression over the cache keys", tags: "tag", endpoint: "endpoint name", all: "every entry" }[by];
});

$("invalidate").addEventListener("submit", async (e) => {
  e.preventDefault();
  const by = $("inv-by").value, value = $("inv-value").value.trim(), soft = $("inv-soft").checked;
  if (by !== "all" && !value) { report("inv-result", "Give a " + by + ".", true); return; }
  const body = by === "all" ? { all: true } : by === "tags" ? { tags: [value] } : { [by]: value };
  if (soft) body.soft = true;
  const what = by === "all" ? "every entry" : "the entries of " + by + " " + JSON.stringify(value);
  if (!(await confirmAction(soft ? "Mark entries stale?" : "Invalidate entries?", (soft ? "Mark " : "Remove ") + what + ".", !soft))) return;
  try {
    const r = await api("POST", "/cache/invalidate", body);
    report("inv-result", soft ? "Marked " + r.marked + " entries stale." : "Removed " + r.removed + " entries.");
  } catch (error) { report("inv-result", error.message, true); }
});

$("logout").addEventListener("click", async () => {
  if (!(await confirmAction("Log the session out?", "The session's tokens are dropped (and revoked where configured); its user's entries are removed.", true))) return;
  try { await api("DELETE", "/session"); } catch (error) { alert(error.message); }
});

$("env-switch").addEventListener("click", async () => {
  const name = $("env-select").value;
  if (!(await confirmAction("Switch the environment?", "Requests go to the upstream " + name + " from now on.", false))) return;
  try { await api("PUT", "/environment", { environment: name }); } catch (error) { alert(error.message); }
});

start();
"""#
}
