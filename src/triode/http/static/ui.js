// triode's live page: reads GET /ui/events (server-sent events) with fetch(), so the
// Authorization header can carry the API key (EventSource cannot send one), and draws each
// snapshot. Rows are keyed by response id and updated in place: a focused button stays
// focused while its row's numbers change.
"use strict";

const KEY_STORAGE = "triode.apiKey";
const HISTORY_SECS = 300;          // the plots' window
const WATCHDOG_MS = 12000;         // no frame for this long: the stream is dead
const RETRY_MS = [1000, 2000, 3000, 5000];

const $ = (id) => document.getElementById(id);

const state = {
  snap: null,            // the last snapshot
  receivedAt: 0,         // performance.now() when it came
  samples: [],           // [at, tokens/s, ttft, queue, busy, hit share], oldest first
  retries: 0,
  connected: false,
  lastSeen: null,        // Date of the last frame
  shuttingDown: false,   // the server said it is shutting down
  downReason: null,      // why the page lost the server, until it is back
};

// ---- formatting ------------------------------------------------------------------------

function fmtInt(n) { return n == null ? "–" : Math.round(n).toLocaleString("en-US"); }

function fmtBytes(n) {
  if (n == null) return "–";
  const units = ["B", "kB", "MB", "GB", "TB"];
  let i = 0;
  let v = n;
  while (v >= 1000 && i < units.length - 1) { v /= 1000; i++; }
  return (i === 0 ? String(v) : v.toFixed(1)) + " " + units[i];
}

function fmtSecs(s) {
  if (s == null || !isFinite(s)) return "–";
  if (s < 10) return s.toFixed(2) + " s";
  if (s < 600) return s.toFixed(1) + " s";
  return (s / 60).toFixed(1) + " min";
}

function fmtShare(x) { return x == null ? "–" : (100 * x).toFixed(1) + " %"; }

function fmtClock(at) {
  return new Date(at * 1000).toLocaleTimeString("en-GB", { hour12: false });
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("data-") || k.startsWith("aria-") || k === "title" || k === "role") node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const c of children) if (c != null) node.append(c);
  return node;
}

// The server's clock now, from the last snapshot's and the time since it came.
function serverNow() {
  if (!state.snap) return Date.now() / 1000;
  return state.snap.now + (performance.now() - state.receivedAt) / 1000;
}

// ---- auth ------------------------------------------------------------------------------

function apiKey() { return sessionStorage.getItem(KEY_STORAGE) || ""; }

function authHeaders(extra) {
  const headers = Object.assign({}, extra || {});
  const key = apiKey();
  if (key) headers.Authorization = "Bearer " + key;
  return headers;
}

function askForKey(message) {
  setConn("key", "API key needed");
  showBanner(message);
  $("keyform").hidden = false;
  $("key").focus();
}

// ---- connection state --------------------------------------------------------------------

function setConn(kind, text) {
  const pill = $("conn");
  pill.dataset.state = kind;
  pill.textContent = text;
  $("main").classList.toggle("stale", kind !== "live" && state.snap !== null);
}

function showBanner(text) {
  const banner = $("banner");
  banner.hidden = !text;
  banner.textContent = text || "";
}

function disconnected(reason) {
  // The first reason stays (a shutdown, a lost connection); retries only fail to connect.
  state.downReason = state.downReason || reason;
  reason = state.downReason;
  state.connected = false;
  const delay = RETRY_MS[Math.min(state.retries, RETRY_MS.length - 1)];
  state.retries++;
  setConn("disconnected", "disconnected");
  const since = state.lastSeen ? " Figures below are as of " + state.lastSeen.toLocaleTimeString("en-GB", { hour12: false }) + "." : "";
  showBanner("The server is unreachable (" + reason + "); retrying every few seconds." + since);
  setTimeout(connect, delay);
}

// ---- the stream --------------------------------------------------------------------------

async function connect() {
  const abort = new AbortController();
  let watchdog = null;
  const pet = () => {
    clearTimeout(watchdog);
    watchdog = setTimeout(() => abort.abort(), WATCHDOG_MS);
  };
  let response;
  try {
    pet();
    response = await fetch("/ui/events", {
      headers: authHeaders({ Accept: "text/event-stream" }), signal: abort.signal, cache: "no-store",
    });
  } catch (err) {
    clearTimeout(watchdog);
    disconnected("no connection");
    return;
  }
  if (response.status === 401) {
    clearTimeout(watchdog);
    const refused = apiKey() !== "";
    sessionStorage.removeItem(KEY_STORAGE);
    askForKey(refused ? "That API key was refused." : "Enter the server's API key to see its figures.");
    return;
  }
  if (!response.ok || !response.body) {
    clearTimeout(watchdog);
    disconnected("HTTP " + response.status);
    return;
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let ended = "the stream ended";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      pet();
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        frame(block);
      }
    }
  } catch (err) {
    ended = abort.signal.aborted ? "no data for " + WATCHDOG_MS / 1000 + " s" : "connection lost";
  }
  clearTimeout(watchdog);
  disconnected(state.shuttingDown ? "it is shutting down" : ended);
  state.shuttingDown = false;
}

function frame(block) {
  let kind = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith("event:")) kind = line.slice(6).trim();
    else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
  }
  if (!data.length) return;
  const payload = JSON.parse(data.join("\n"));
  state.lastSeen = new Date();
  if (!state.connected) {
    state.connected = true;
    state.downReason = null;
    state.retries = 0;
    showBanner("");
    $("keyform").hidden = true;
    setConn("live", "live");
  }
  if (kind === "snapshot") {
    if (state.snap === null || payload.started_at !== state.snap.started_at || payload.worker !== state.snap.worker) {
      state.samples = [];    // a fresh server: its history starts over
    }
    if (payload.recent === undefined) payload.recent = state.snap.recent;   // unchanged
    state.snap = payload;
    state.receivedAt = performance.now();
    state.samples.push(...payload.history);
    const oldest = payload.now - HISTORY_SECS;
    while (state.samples.length && state.samples[0][0] < oldest) state.samples.shift();
    render();
  } else if (kind === "shutdown") {
    state.shuttingDown = true;
  } else if (kind === "heartbeat" && state.snap) {
    state.snap.now = payload.now;
    state.receivedAt = performance.now();
  }
}

// ---- drawing -----------------------------------------------------------------------------

function render() {
  const s = state.snap;
  $("model").textContent = s.model;
  $("store").textContent = s.store + (s.shared ? " (shared)" : "");
  $("worker").textContent = s.worker;
  renderTree(s);
  renderModels(s);
  renderLive(s);
  renderRecent(s);
  renderPlots(s);
}

function fig(label, value, attrs) {
  return el("span", { class: "fig" }, el("span", { class: "k", text: label + " " }),
    el("span", Object.assign({ class: "v num", text: value }, attrs || {})));
}

function meter(value, max) {
  return el("meter", { min: 0, max: Math.max(max, 1), value: Math.min(value, Math.max(max, 1)), "aria-hidden": "true" });
}

function node(name, what, figs, children) {
  const li = el("li", {},
    el("div", { class: "node" }, el("span", { class: "name", text: name }), what ? el("span", { class: "what", text: what }) : null),
    el("div", { class: "figs" }, ...figs));
  if (children && children.length) li.append(el("ul", {}, ...children));
  return li;
}

const STORE_NAMES = { responses: "ResponseStore", conversations: "ConversationStore", reasoning_echo: "ReasoningEchoStore" };

function storeNode(name, st) {
  if (st === null) {
    return node(STORE_NAMES[name], "unreachable", [el("span", { class: "fig" }, el("span", { class: "dot down", "aria-hidden": "true" }), " the store cannot be reached")]);
  }
  const ev = st.evictions;
  const figs = [
    fig("entries", fmtInt(st.entries) + " / " + fmtInt(st.max_entries), { "data-store": name, "data-field": "entries", "data-value": st.entries }),
    meter(st.entries, st.max_entries),
    fig("bytes", fmtBytes(st.bytes) + " / " + fmtBytes(st.max_bytes), { "data-store": name, "data-field": "bytes", "data-value": st.bytes }),
    meter(st.bytes, st.max_bytes),
    fig("pinned", fmtInt(st.pinned_entries) + " (" + fmtBytes(st.pinned_bytes) + ")", { "data-store": name, "data-field": "pinned_entries", "data-value": st.pinned_entries }),
    fig("evicted ttl", fmtInt(ev.ttl), { "data-store": name, "data-field": "evictions.ttl", "data-value": ev.ttl }),
    fig("lru", fmtInt(ev.lru), { "data-store": name, "data-field": "evictions.lru", "data-value": ev.lru }),
    fig("bytes", fmtInt(ev.bytes), { "data-store": name, "data-field": "evictions.bytes", "data-value": ev.bytes }),
    fig("oversize", fmtInt(ev.oversize), { "data-store": name, "data-field": "evictions.oversize", "data-value": ev.oversize }),
    fig("deleted", fmtInt(ev.deleted), { "data-store": name, "data-field": "evictions.deleted", "data-value": ev.deleted }),
  ];
  return node(STORE_NAMES[name], st.ttl_secs ? "TTL " + fmtSecs(st.ttl_secs) : "no TTL", figs);
}

const TREE_SUPERVISORS = 12;

// --distributed: each rank under the engine thread rank 0 runs (none in one process).
function rankNodes(d) {
  if (!d) return [];
  return d.ranks.map((r) => node("rank " + r.rank, r.rank === 0 ? d.mode + ", leads" : d.mode + ", follows", [
    el("span", { class: "fig" }, el("span", { class: "dot" + (d.failure ? " down" : ""), "aria-hidden": "true" }), " ", d.failure ? "failed" : "in step"),
    fig("steps", fmtInt(r.steps), { "data-rank": r.rank, "data-field": "steps", "data-value": r.steps }),
    fig("step time", fmtSecs(r.step_seconds)),
    fig("record time", fmtSecs(r.record_seconds)),
  ]));
}

function renderTree(s) {
  const engine = s.engine;
  const cache = s.prompt_cache;
  const model = node("ModelActor", s.model, [
    fig("slots busy", s.slots.busy + " / " + s.slots.total, { "data-field": "slots.busy", "data-value": s.slots.busy }),
    meter(s.slots.busy, s.slots.total),
    fig("free", String(s.slots.total - s.slots.busy)),
    fig("queue", s.queue.depth + " / " + s.queue.max, { "data-field": "queue.depth", "data-value": s.queue.depth }),
    fig("rendering", String(s.rendering)),
    fig("tokens", fmtInt(s.generation.tokens)),
  ], [
    node("engine thread", engine.alive ? "running" : "down", [
      el("span", { class: "fig" }, el("span", { class: "dot" + (engine.alive ? "" : " down"), "aria-hidden": "true" }), " ", engine.alive ? "alive" : "down"),
      fig("restarts", String(engine.restarts), { "data-field": "engine.restarts", "data-value": engine.restarts }),
      engine.error ? fig("last error", engine.error) : null,
    ].filter(Boolean), rankNodes(s.distributed)),
    node("prompt cache", cache.max_bytes ? "" : "off", [
      fig("entries", fmtInt(cache.entries)),
      fig("bytes", fmtBytes(cache.bytes) + " / " + fmtBytes(cache.max_bytes)),
      fig("hits", fmtInt(cache.hits)),
      fig("hit share", fmtShare(cache.hit_share)),
    ]),
  ]);
  const sups = s.live.filter((r) => r.here);
  const supNodes = sups.slice(0, TREE_SUPERVISORS).map((r) =>
    el("li", { class: "sup" }, el("span", { class: "id", title: r.id, text: shortId(r.id) }), " ", statusChip(r.status), " ", el("span", { class: "what", text: r.background ? "background" : "foreground" })));
  if (sups.length > TREE_SUPERVISORS) supNodes.push(el("li", { class: "more", text: "and " + (sups.length - TREE_SUPERVISORS) + " more (below)" }));
  const reg = s.registry;
  const registry = node("Registry", "supervisors, each with its cancel scope", [
    fig("live", String(reg.live), { "data-field": "registry.live", "data-value": reg.live }),
    fig("started", fmtInt(reg.started)),
    fig("background", reg.background_jobs + " / " + reg.background_max_jobs),
  ], supNodes);
  const children = [model, registry, ...Object.entries(s.stores).map(([name, st]) => storeNode(name, st))];
  if (s.shared) {
    const remote = s.live.filter((r) => !r.here);
    const workers = new Set(remote.map((r) => r.worker));
    children.push(node("JobBoard", s.store + ", worker " + s.worker, [
      fig("jobs on other workers", String(remote.length)),
      fig("other workers running", String(workers.size)),
    ]));
  }
  const root = node("root nursery", "trio.run", [fig("trio tasks", fmtInt(s.tasks))], children);
  $("tree").replaceChildren(root);
}

function shortId(id) { return id.length > 18 ? id.slice(0, 17) + "…" : id; }

function statusChip(status) {
  return el("span", { class: "status s-" + status, text: status });
}

// Seconds in each state, from the timeline [[status, entered at], ...].
function timesOf(timeline, now) {
  const out = { queued: 0, in_progress: 0 };
  for (let i = 0; i < timeline.length; i++) {
    const [status, at] = timeline[i];
    const end = i + 1 < timeline.length ? timeline[i + 1][1] : now;
    if (status in out) out[status] += Math.max(0, end - at);
  }
  out.total = Math.max(0, (timeline.length ? now - timeline[0][1] : 0));
  return out;
}

// ---- models: each available model's state, with its load and unload buttons ------------

const modelRows = new Map();    // id → {row, cells}

function modelRow(m) {
  const cells = {};
  const td = (name, cls, label) => (cells[name] = el("td", { class: cls || "", "data-label": label }));
  const row = el("tr", { "data-model": m.id },
    el("td", { class: "id", title: m.id, text: m.id }), td("status", "status-cell"),
    td("memory", "num", "memory"), td("load", "num", "load time"), td("leases", "num", "leases"),
    td("idle", "num", "idle"), td("expires", "num", "unloads in"), td("loadAct"), td("unloadAct"));
  cells.loadButton = el("button", { type: "button", class: "model-load", text: "Load", "aria-label": "Load " + m.id });
  cells.unloadButton = el("button", { type: "button", class: "model-unload", text: "Unload", "aria-label": "Unload " + m.id });
  cells.loadButton.addEventListener("click", () => modelAction(m.id, "load", cells.loadButton));
  cells.unloadButton.addEventListener("click", () => modelAction(m.id, "unload", cells.unloadButton));
  cells.loadAct.append(cells.loadButton);
  cells.unloadAct.append(cells.unloadButton);
  return { row, cells };
}

function renderModels(s) {
  const models = s.models || [];
  const tbody = $("models").tBodies[0];
  for (const m of models) {
    let entry = modelRows.get(m.id);
    if (!entry) {
      entry = modelRow(m);
      modelRows.set(m.id, entry);
      tbody.append(entry.row);
    }
    const c = entry.cells;
    c.status.textContent = m.status;
    c.status.dataset.status = m.status;
    c.status.title = m.error || "";
    c.memory.textContent = fmtBytes(m.memory_bytes) + (m.memory_measured ? "" : " (est.)");
    c.memory.title = "weights; reserved with the KV and prompt-cache budgets: " + fmtBytes(m.reserved_bytes);
    c.load.textContent = fmtSecs(m.load_seconds);
    c.leases.textContent = fmtInt(m.leases) + (m.waiting ? " +" + m.waiting + " waiting" : "");
    c.idle.textContent = fmtSecs(m.idle_seconds);
    c.expires.textContent = m.expires_at == null ? (m.keep_alive < 0 && m.status === "loaded" ? "never" : "–") : fmtSecs(Math.max(0, m.expires_at - serverNow()));
    if (!c.loadButton.dataset.busy) c.loadButton.disabled = !(m.status === "unloaded" || m.status === "failed");
    if (!c.unloadButton.dataset.busy) c.unloadButton.disabled = !(m.status === "loaded" && !m.leases && !m.waiting);
  }
  $("models-count").textContent = String(models.length);
}

async function modelAction(id, action, button) {
  button.dataset.busy = "1";
  button.disabled = true;
  const label = button.textContent;
  button.textContent = action === "load" ? "Loading…" : "Unloading…";
  try {
    const r = await fetch("/v1/models/" + encodeURIComponent(id) + "/" + action, {
      method: "POST", headers: authHeaders(), cache: "no-store",
    });
    const body = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error((body.error && body.error.message) || "HTTP " + r.status);
  } catch (err) {
    showBanner(label + " " + id + " failed: " + err.message);
  } finally {
    delete button.dataset.busy;
    button.textContent = label;
  }
}

const liveRows = new Map();     // id → {row, cells}

function liveRow(r) {
  const cells = {};
  const td = (name, cls, label) => (cells[name] = el("td", { class: cls || "", "data-label": label }));
  const row = el("tr", { "data-id": r.id },
    el("td", { class: "id", title: r.id, text: r.id }), td("status"), td("mode"), td("worker", "", "worker"),
    td("tokens", "num", "tokens"), td("queued", "num", "queued"), td("running", "num", "running"),
    td("total", "num", "total"), td("mcp", "mcp", "MCP calls"), td("client", "", "client"), td("act"));
  const button = el("button", { type: "button", class: "cancel", text: "Cancel", "aria-label": "Cancel " + r.id });
  button.addEventListener("click", () => cancel(r.id, button));
  cells.act.append(button);
  cells.button = button;
  return { row, cells };
}

function renderLive(s) {
  const tbody = $("live").tBodies[0];
  const seen = new Set();
  for (const r of s.live) {
    seen.add(r.id);
    let entry = liveRows.get(r.id);
    if (!entry) {
      entry = liveRow(r);
      liveRows.set(r.id, entry);
      tbody.append(entry.row);
    }
    entry.data = r;
    const c = entry.cells;
    if (c.status.dataset.status !== r.status) {
      c.status.dataset.status = r.status;
      c.status.replaceChildren(statusChip(r.status));
    }
    c.mode.textContent = r.background ? "background" : "foreground";
    c.worker.textContent = r.worker + (r.here ? "" : " (other)");
    c.tokens.textContent = fmtInt(r.tokens);
    const clients = r.connections.map((x) => x.client + " " + x.request);
    c.client.textContent = clients.length ? clients[0] + (clients.length > 1 ? " +" + (clients.length - 1) : "") : "–";
    c.client.title = clients.join("\n");
    const b = c.button;
    if (!b.dataset.busy) {
      b.disabled = !s.cancellable;
      b.title = s.cancellable ? "POST /v1/responses/" + r.id + "/cancel" : "The response store is off (--responses-store-max-entries 0): the cancel route answers 400";
    }
  }
  for (const [id, entry] of liveRows) {
    if (!seen.has(id)) {
      if (entry.row.contains(document.activeElement)) $("live-h").setAttribute("tabindex", "-1"), $("live-h").focus();
      entry.row.remove();
      liveRows.delete(id);
    }
  }
  $("live-count").textContent = String(s.live.length);
  $("live-empty").hidden = s.live.length > 0;
  tickLive();
}

function tickLive() {
  const now = serverNow();
  for (const entry of liveRows.values()) {
    const t = timesOf(entry.data.timeline, now);
    entry.cells.queued.textContent = fmtSecs(t.queued);
    entry.cells.running.textContent = fmtSecs(t.in_progress);
    entry.cells.total.textContent = fmtSecs(t.total);
    entry.cells.mcp.textContent = mcpCalls(entry.data.mcp_calls, now);
  }
}

// A response's MCP calls, in order: "label.tool 0.4s" once done ("✗" when it failed),
// "label.tool running 1.2s" while it runs.
function mcpCalls(calls, now) {
  if (!calls || !calls.length) return "–";
  return calls.map((c) => {
    if (c.ended_at === null) return c.tool + " running " + fmtSecs(now - c.started_at);
    const mark = c.status === "completed" ? "" : " ✗ " + c.status;
    return c.tool + " " + fmtSecs(c.ended_at - c.started_at) + mark;
  }).join(", ");
}

async function cancel(id, button) {
  button.dataset.busy = "1";
  button.disabled = true;
  button.textContent = "Cancelling…";
  try {
    const r = await fetch("/v1/responses/" + encodeURIComponent(id) + "/cancel", {
      method: "POST", headers: authHeaders(), cache: "no-store",
    });
    const body = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error((body.error && body.error.message) || "HTTP " + r.status);
    button.textContent = body.status || "cancelled";
  } catch (err) {
    delete button.dataset.busy;
    button.disabled = false;
    button.textContent = "Cancel";
    showBanner("Cancel " + id + " failed: " + err.message);
  }
}

const recentRows = new Map();

function recentRow(r) {
  const u = r.usage;
  const stored = el("td", {});
  if (r.stored) {
    const open = el("button", { type: "button", class: "link", text: "object", "aria-label": "Open the stored object of " + r.id });
    open.addEventListener("click", () => view(r.id, "/v1/responses/" + encodeURIComponent(r.id), "object"));
    const events = el("button", { type: "button", class: "link", text: "events", "aria-label": "Open the stored events of " + r.id });
    events.addEventListener("click", () => view(r.id, "/v1/responses/" + encodeURIComponent(r.id) + "?stream=true", "events"));
    stored.append(open, events);
  } else {
    stored.textContent = "not stored";
  }
  return el("tr", { "data-id": r.id },
    el("td", { class: "id", title: r.id, text: r.id }),
    el("td", {}, statusChip(r.status)),
    el("td", { text: r.background ? "background" : "foreground" }),
    el("td", { class: "num", "data-label": "input", text: u ? fmtInt(u.input_tokens) : "–" }),
    el("td", { class: "num", "data-label": "cached", text: fmtShare(r.cached_share), title: u ? u.cached_tokens + " cached tokens" : null }),
    el("td", { class: "num", "data-label": "output", text: u ? fmtInt(u.output_tokens) : "–" }),
    el("td", { class: "num", "data-label": "TTFT", text: fmtSecs(r.ttft) }),
    el("td", { class: "num", "data-label": "ended", text: fmtClock(r.ended_at) }),
    el("td", { class: "mcp", "data-label": "MCP calls", text: mcpCalls(r.mcp_calls, 0) }),
    stored);
}

function renderRecent(s) {
  const tbody = $("recent").tBodies[0];
  const ids = s.recent.map((r) => r.id);
  const wanted = new Set(ids);
  for (const [id, row] of recentRows) {
    if (!wanted.has(id)) { row.remove(); recentRows.delete(id); }
  }
  let before = null;   // newest first: insert each new row before the one after it
  for (let i = ids.length - 1; i >= 0; i--) {
    const r = s.recent[i];
    let row = recentRows.get(r.id);
    if (!row) {
      row = recentRow(r);
      recentRows.set(r.id, row);
      tbody.insertBefore(row, before);
    }
    before = row;
  }
  $("recent-empty").hidden = s.recent.length > 0;
  $("recent-note").textContent = s.shared ? "(ended on this worker, " + s.worker + ")" : "";
}

async function view(id, url, what) {
  const dialog = $("viewer");
  $("viewer-title").textContent = id + " · " + what;
  $("viewer-link").href = url;
  $("viewer-body").textContent = "loading…";
  if (!dialog.open) dialog.showModal();
  try {
    const r = await fetch(url, { headers: authHeaders(), cache: "no-store" });
    const text = await r.text();
    let shown = text;
    if (what === "object") {
      try { shown = JSON.stringify(JSON.parse(text), null, 2); } catch (err) { /* shown as sent */ }
    }
    $("viewer-body").textContent = (r.ok ? "" : "HTTP " + r.status + "\n") + shown;
  } catch (err) {
    $("viewer-body").textContent = "could not load: " + err.message;
  }
}

// ---- plots -------------------------------------------------------------------------------

const PLOTS = [
  { id: "plot-tps", col: 1, fmt: (v) => (v == null ? "–" : v.toFixed(1)), floor: 1 },
  { id: "plot-ttft", col: 2, fmt: fmtSecs, floor: 0.01, bars: true },
  { id: "plot-queue", col: 3, fmt: (v) => (v == null ? "–" : String(v)), floor: 1 },
  { id: "plot-cache", col: 5, fmt: fmtShare, fixed: 1 },
];

function renderPlots(s) {
  const now = s.now;
  const samples = state.samples;
  for (const p of PLOTS) {
    const figure = $(p.id);
    const points = samples.filter((x) => x[p.col] != null).map((x) => [x[0], x[p.col]]);
    const max = p.fixed || Math.max(p.floor, ...points.map((x) => x[1]));
    const xy = (at, v) => [(300 * (at - (now - HISTORY_SECS)) / HISTORY_SECS).toFixed(1), (80 - 76 * (v / max)).toFixed(1)];
    let line = "";
    let area = "";
    if (points.length && p.bars) {
      // A mean per interval that had first tokens: one bar each (most intervals have none).
      line = points.map(([at, v]) => { const [x, y] = xy(at, v); return "M" + x + ",80V" + y; }).join("");
    } else if (points.length) {
      const coords = points.map(([at, v]) => xy(at, v));
      line = "M" + coords.map((c) => c.join(",")).join("L");
      area = line + "L" + coords[coords.length - 1][0] + ",80L" + coords[0][0] + ",80Z";
    }
    figure.querySelector(".line").setAttribute("d", line);
    figure.querySelector(".line").classList.toggle("bars", !!p.bars);
    figure.querySelector(".area").setAttribute("d", area);
    // The latest interval's figure; for TTFT and the hit share (intervals without a
    // first token or a prompt have none) the latest one that had one.
    const last = points.length ? points[points.length - 1][1] : null;
    figure.querySelector("[data-now]").textContent = p.fmt(last);
    if (!p.fixed) figure.querySelector("[data-max]").textContent = "max " + p.fmt(max);
  }
}

// ---- start -------------------------------------------------------------------------------

function start() {
  $("keyform").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(KEY_STORAGE, $("key").value.trim());
    $("key").value = "";
    $("keyform").hidden = true;
    showBanner("");
    setConn("connecting", "connecting…");
    connect();
  });
  $("viewer-close").addEventListener("click", () => $("viewer").close());
  setInterval(() => { if (state.connected) tickLive(); }, 250);
  connect();
}

start();
