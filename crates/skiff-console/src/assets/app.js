// Skiff's console: one page that draws the cluster, the queries and one
// query's pipelines and hand-offs from the coordinator's live state
// (server-sent events from /api/events), and asks the coordinator to act
// (/api/actions/NAME, each the SQL function of that name). Text from the
// database is only ever set as text, never parsed as HTML.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
let session = null;   // {user, admin, csrf, users_required}
let state = null;     // what the views draw: {cluster, queries, query}
let live = {};        // the parts the server sent last: cluster, running, ended, pod, query
let source = null;    // the EventSource
let sourceQuery = undefined;

// ---------------------------------------------------------------- helpers

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") el.className = value;
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value !== undefined && value !== null) el.setAttribute(key, String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function bytes(n) {
  if (n === null || n === undefined) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = Number(n);
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i === 0 ? v.toFixed(0) : v.toFixed(1)) + " " + units[i];
}

function ms(n) {
  if (n === null || n === undefined) return "";
  const v = Number(n);
  if (v < 1000) return v.toFixed(0) + " ms";
  if (v < 60000) return (v / 1000).toFixed(1) + " s";
  return Math.floor(v / 60000) + " min " + Math.round((v % 60000) / 1000) + " s";
}

function num(n) {
  return n === null || n === undefined ? "" : Number(n).toLocaleString("en-US");
}

function badge(name) {
  return h("span", { class: "state " + name }, name);
}

function bar(fraction, wide) {
  const f = Math.max(0, Math.min(1, Number(fraction) || 0));
  const fill = h("div", { class: "fill" });
  fill.style.width = (f * 100).toFixed(1) + "%";
  return h("div", { class: wide ? "bar wide" : "bar", role: "progressbar",
    "aria-valuenow": (f * 100).toFixed(0) }, fill, h("span", { class: "text" }, (f * 100).toFixed(0) + "%"));
}

// One colour per worker id, the same on every page.
function colour(id) {
  const hue = (Number(id) * 137.508) % 360;
  return "hsl(" + hue.toFixed(0) + ", 62%, 46%)";
}

// A legend: a swatch of colour(id) and a text for each [id, text].
function legend(items) {
  return h("div", { class: "legend" }, items.map(([id, text]) => {
    const sw = h("span", { class: "swatch" });
    sw.style.background = colour(id);
    return h("span", {}, sw, text);
  }));
}

// ---------------------------------------------------------------- server

async function call(method, path, body) {
  const headers = {};
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET" && session) headers["X-Skiff-CSRF"] = session.csrf;
  const response = await fetch(path, {
    method, headers, credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  let payload = null;
  const text = await response.text();
  if (text) {
    try { payload = JSON.parse(text); } catch (_) { payload = { error: text }; }
  }
  return { ok: response.ok, status: response.status, payload };
}

function refresh() {
  if (!live.cluster || !live.running || !live.ended) return;
  state = { cluster: live.cluster, queries: live.running.concat(live.ended), query: live.query,
    pod: live.pod };
  render();
}

function connect() {
  const query = currentQuery();
  if (source && sourceQuery === query) return;
  if (source) source.close();
  live = {};
  sourceQuery = query;
  const url = "/api/events" + (query === null ? "" : "?query=" + encodeURIComponent(query));
  source = new EventSource(url);
  const light = document.getElementById("live");
  source.addEventListener("open", () => { light.textContent = "live"; light.classList.add("on"); });
  source.addEventListener("error", (event) => {
    if (event.target !== source) return;
    light.textContent = "reconnecting";
    light.classList.remove("on");
    // The browser retries a dropped stream by itself, but gives up on a
    // refusal (a restarted server knows no login of ours): ask who we are.
    if (source.readyState === EventSource.CLOSED) {
      source = null;
      setTimeout(recover, 1000);
    }
  });
  // Each part of the state comes when it changed; the parts of one tick
  // arrive together, and the view redraws once for them.
  for (const name of ["cluster", "running", "ended", "pod", "query"]) {
    source.addEventListener(name, (event) => {
      live[name] = JSON.parse(event.data);
      clearTimeout(connect.redraw);
      connect.redraw = setTimeout(refresh, 0);
    });
  }
  source.addEventListener("failure", (event) => {
    light.textContent = "error: " + JSON.parse(event.data).error;
  });
  source.addEventListener("logout", () => { source.close(); source = null; showLogin(); });
}

// After a refused stream: log in again (a loopback visitor without users
// is let in at once), or show the form; try again while the server is away.
async function recover() {
  let result;
  try { result = await call("GET", "/api/session"); } catch (_) { result = null; }
  if (result && result.ok) start(result.payload);
  else if (result && result.status === 401) showLogin();
  else setTimeout(recover, 1000);
}

// ---------------------------------------------------------------- actions

function confirmThen(text, sql, run) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent = text;
  document.getElementById("confirm-sql").textContent = sql;
  dialog.hidden = false;
  const yes = document.getElementById("confirm-yes");
  const no = document.getElementById("confirm-no");
  const close = () => { dialog.hidden = true; yes.onclick = null; no.onclick = null; };
  yes.onclick = () => { close(); run(); };
  no.onclick = close;
  yes.focus();
}

function showResult(text, failed) {
  const result = document.getElementById("result");
  result.textContent = text;
  result.className = failed ? "failed" : "";
  result.hidden = false;
  clearTimeout(showResult.timer);
  showResult.timer = setTimeout(() => { result.hidden = true; }, 8000);
}

// What the confirmation shows: the SQL the coordinator will run.
function sqlOf(action, args) {
  const w = args.worker === undefined ? "" : "'" + args.worker + "'";
  switch (action) {
    case "cancel": return "SELECT skiff.cancel(" + args.query + ")";
    case "migrate": return args.worker === undefined ? "SELECT skiff.migrate(" + args.query + ")"
      : "SELECT skiff.migrate(" + args.query + ", " + w + ", 'finish')";
    case "suspend": return "SELECT skiff.suspend(" + args.query + ", 'finish')";
    case "resume": return "SELECT skiff.resume(" + args.query + ")";
    case "drain": return "SELECT skiff.drain(" + w + ", 'finish')";
    case "undrain": return "SELECT skiff.undrain(" + w + ")";
    case "add_workers": return "SELECT skiff.add_workers(" + args.count + ")";
    case "remove_worker": return "SELECT skiff.remove_worker(" + w + ")";
    default: return action;
  }
}

function act(action, args, text) {
  confirmThen(text, sqlOf(action, args), async () => {
    const result = await call("POST", "/api/actions/" + action, args);
    if (result.ok) {
      showResult(result.payload.sql + " → " + (result.payload.done ? "done" : "nothing to do"), false);
    } else {
      showResult((result.payload && result.payload.error) || ("failed: " + result.status), true);
    }
  });
}

function actionButton(label, action, args, text, danger) {
  return h("button", {
    type: "button", class: danger ? "small danger" : "small",
    "data-action": action, "data-query": args.query, "data-worker": args.worker,
    onclick: (event) => { event.stopPropagation(); act(action, args, text); },
  }, label);
}

// ---------------------------------------------------------------- views

function currentView() {
  const hash = location.hash || "#/cluster";
  if (hash.startsWith("#/query/")) return "query";
  if (hash === "#/queries") return "queries";
  if (hash === "#/pod") return "pod";
  return "cluster";
}

// The query a page's address names, or null when it names none (no id,
// or not a number a query id can be: at most 19 digits fit one).
function currentQuery() {
  const m = /^#\/query\/(\d{1,19})$/.exec(location.hash);
  return m ? m[1] : null;
}

// A statement as the queries list shows it: its leading comments (a
// script's "-- TPC-H q1" header, say) and blank lines left out, so that the
// row starts with what the statement does.
function statementStart(sql) {
  let rest = sql || "";
  for (;;) {
    const trimmed = rest.replace(/^\s+/, "");
    if (trimmed.startsWith("--")) {
      const end = trimmed.indexOf("\n");
      rest = end < 0 ? "" : trimmed.slice(end + 1);
    } else if (trimmed.startsWith("/*")) {
      const end = trimmed.indexOf("*/");
      rest = end < 0 ? "" : trimmed.slice(end + 2);
    } else {
      return trimmed || (sql || "");
    }
  }
}

function render() {
  const view = document.getElementById("view");
  // Redrawing under a field the visitor is using would close it: wait.
  const focused = document.activeElement;
  if (focused && view.contains(focused) && ["SELECT", "INPUT"].includes(focused.tagName)) {
    if (!render.waiting) {
      render.waiting = true;
      focused.addEventListener("blur", () => { render.waiting = false; render(); }, { once: true });
    }
    return;
  }
  for (const id of ["cluster", "queries", "pod"]) {
    document.getElementById("nav-" + id).classList.toggle("current",
      currentView() === id || (id === "queries" && currentView() === "query"));
  }
  if (!state) { view.replaceChildren(h("p", { class: "muted" }, "Waiting for the coordinator…")); return; }
  const draw = { cluster: clusterView, queries: queriesView, query: queryView, pod: podView }[currentView()];
  // Keep a select's choice and the scroll position across redraws.
  const chosen = {};
  for (const sel of view.querySelectorAll("select[id]")) chosen[sel.id] = sel.value;
  const scrollY = window.scrollY;
  view.replaceChildren(draw());
  for (const [id, value] of Object.entries(chosen)) {
    const sel = document.getElementById(id);
    if (sel && [...sel.options].some((o) => o.value === value)) sel.value = value;
  }
  window.scrollTo(0, scrollY);
}

function liveWorkers() {
  return state.cluster.nodes.filter((n) => n.role === "worker" && n.state === "alive");
}

function clusterView() {
  const c = state.cluster.coordinator;
  const nodes = state.cluster.nodes;
  const workers = nodes.filter((n) => n.role === "worker");
  const cards = h("div", { class: "cards" },
    card("Coordinator", "v" + c.version),
    card("Up", ms(c.uptime_ms)),
    card("Workers alive", workers.filter((n) => n.state === "alive").length + " / " + workers.length),
    card("Memory nodes", nodes.filter((n) => n.role !== "worker" && n.state === "alive").length),
    card("Running queries", c.running_queries),
    card("Sessions", c.open_sessions));
  const doors = h("p", { class: "muted" },
    "PostgreSQL " + (c.pg || "off") + " · Flight SQL " + (c.flight || "off") + " · cluster " + c.cluster);

  const head = ["id", "role", "address", "state", "cores", "memory used / limit", "running", "cache", "heartbeat", ""];
  const rows = nodes.map((n) => {
    const state = n.draining && n.state === "alive" ? "draining" : n.state;
    const limit = Number(n.memory);
    const used = Number(n.memory_used);
    const memory = limit > 0
      ? h("div", {}, bar(used / limit), h("span", { class: "muted" }, bytes(used) + " / " + bytes(limit)))
      : h("span", {}, bytes(used) + " / unbounded");
    const actions = h("td", { class: "actions" });
    if (session.admin && n.role === "worker" && n.state === "alive") {
      if (n.draining) actions.append(actionButton("Undrain", "undrain", { worker: String(n.id) }, "Let worker " + n.id + " take queries again?"));
      else actions.append(actionButton("Drain", "drain", { worker: String(n.id) }, "Drain worker " + n.id + " (" + n.address + ")? Its queries migrate to the others.", true));
      actions.append(" ", actionButton("Remove", "remove_worker", { worker: String(n.id) }, "Remove worker " + n.id + " from the cluster?", true));
    }
    return h("tr", { "data-node": n.id },
      h("td", { class: "num" }, n.id),
      h("td", {}, n.role),
      h("td", {}, n.address),
      h("td", {}, badge(state)),
      h("td", { class: "num" }, n.cores),
      h("td", {}, memory),
      h("td", { class: "num" }, n.running_queries),
      h("td", { class: "num" }, bytes(n.cache_bytes)),
      h("td", { class: "num" }, ms(n.last_heartbeat_ms) + " ago"),
      actions);
  });
  const table = h("table", { id: "nodes" },
    h("thead", {}, h("tr", {}, head.map((x) => h("th", {}, x)))),
    h("tbody", {}, rows));

  const toolbar = h("div", { class: "toolbar" });
  if (session.admin) {
    const count = h("input", { id: "add-count", type: "number", min: 1, max: 64, value: 1 });
    toolbar.append(h("span", {}, "Add"), count, h("span", {}, "workers"),
      h("button", { type: "button", id: "add-workers", onclick: () => {
        const n = Number(count.value);
        act("add_workers", { count: n }, "Start " + n + " new worker(s)?");
      } }, "Add"));
  }
  return h("div", {}, h("h1", {}, "Cluster"), cards, doors, h("h2", {}, "Nodes"), table, toolbar,
    partitionsView());
}

function card(label, value) {
  return h("div", { class: "card" }, h("div", { class: "label" }, label), h("div", { class: "value" }, value));
}

function partitionsView() {
  const rows = state.cluster.partitions;
  if (!rows.length) {
    return h("div", {}, h("h2", {}, "Partition map"),
      h("p", { class: "muted" }, "No hash-partitioned tables (skiff gen --partitions N makes some)."));
  }
  const classes = new Map();
  for (const r of rows) {
    if (!classes.has(r.partitions)) classes.set(r.partitions, []);
    classes.get(r.partitions).push(r);
  }
  const owners = [...new Set(rows.map((r) => r.worker))].sort((a, b) => a - b);
  const blocks = [...classes.entries()].map(([p, cells]) => {
    const grid = h("div", { class: "grid", "data-class": p }, cells.map((r) => {
      const cell = h("div", { class: r.moved ? "cell moved" : "cell",
        title: "partition " + r.partition + " → worker " + r.worker + (r.moved ? " (moved this epoch)" : "") }, r.partition);
      cell.style.background = colour(r.worker);
      return cell;
    }));
    return h("div", {}, h("p", {}, h("strong", {}, p + " partitions"), " · " + (cells[0].tables || "no table yet")), grid);
  });
  return h("div", {}, h("h2", {}, "Partition map · epoch " + rows[0].epoch),
    legend(owners.map((w) => [w, "worker " + w])), blocks);
}

function progressOf(q) {
  if (q.state === "finished") return 1;
  return q.progress === null ? 0 : q.progress;
}

function queryActions(q) {
  const cell = h("td", { class: "actions" });
  if (!session.admin || !["running", "planning", "suspended"].includes(q.state)) return cell;
  if (q.state === "suspended") {
    cell.append(actionButton("Resume", "resume", { query: q.id }, "Resume query " + q.id + "?"));
  } else if (q.worker) {
    cell.append(actionButton("Migrate", "migrate", { query: q.id }, "Migrate query " + q.id + " to another worker?"),
      " ", actionButton("Suspend", "suspend", { query: q.id }, "Suspend query " + q.id + "?"));
  }
  cell.append(" ", actionButton("Cancel", "cancel", { query: q.id }, "Cancel query " + q.id + "?", true));
  return cell;
}

function queriesView() {
  const queries = [...state.queries].sort((a, b) => b.id - a.id);
  const running = queries.filter((q) => !["finished", "failed", "canceled"].includes(q.state));
  const head = ["id", "user", "SQL", "worker", "state", "progress", "elapsed", "rows", "moves", "state bytes", "error", ""];
  const rows = queries.map((q) => h("tr", { class: "clickable", "data-query": q.id,
      onclick: () => { location.hash = "#/query/" + q.id; } },
    h("td", { class: "num" }, q.id),
    h("td", {}, q.user),
    h("td", { class: "sql", title: q.sql }, statementStart(q.sql)),
    h("td", {}, q.worker || (q.tasks ? "distributed" : "")),
    h("td", { class: "state-cell" }, badge(q.state)),
    h("td", { class: "progress" }, bar(progressOf(q))),
    h("td", { class: "num" }, ms(q.elapsed_ms)),
    h("td", { class: "num" }, num(q.rows_sent)),
    h("td", { class: "num", title: "migrations / suspensions / restarts" },
      q.migrations + " / " + q.suspensions + " / " + q.restarts),
    h("td", { class: "num" }, bytes(q.state_bytes)),
    h("td", { class: "error" }, q.error || ""),
    queryActions(q)));
  return h("div", {}, h("h1", {}, "Queries"),
    h("p", { class: "muted" }, running.length + " running · " + (queries.length - running.length) + " recent"),
    h("table", { id: "queries" }, h("thead", {}, h("tr", {}, head.map((x) => h("th", {}, x)))), h("tbody", {}, rows)));
}

function queryView() {
  const page = state.query;
  const id = currentQuery();
  if (id === null) {
    let named = location.hash.slice("#/query/".length);
    try { named = decodeURIComponent(named); } catch (_) { /* shown as typed */ }
    return h("div", { id: "no-query" }, h("h1", {}, "No such query"),
      h("p", { class: "muted" }, (named ? "“" + named + "” is not a query id" : "This address names no query") +
        ": a query's page is #/query/ and its id, a number the Queries page lists."));
  }
  if (page === undefined) return h("div", {}, h("h1", {}, "Query " + id), h("p", { class: "muted" }, "Loading…"));
  if (!page) return h("div", { id: "no-query" }, h("h1", {}, "No query " + id),
    h("p", { class: "muted" }, "The coordinator knows no query " + id +
      ": it keeps the queries running and the last ones that ended, and forgets older ones."));
  const q = page.query || {};
  const toolbar = h("div", { class: "toolbar" });
  if (session.admin && ["running", "planning"].includes(q.state) && q.worker) {
    const targets = liveWorkers().filter((w) => w.address !== q.worker);
    const select = h("select", { id: "migrate-target" }, h("option", { value: "" },"any other worker"),
      targets.map((w) => h("option", { value: String(w.id) }, "worker " + w.id + " (" + w.address + ")")));
    toolbar.append(h("button", { type: "button", "data-action": "migrate", onclick: () => {
      const args = select.value ? { query: q.id, worker: select.value } : { query: q.id };
      act("migrate", args, "Migrate query " + q.id + (select.value ? " to worker " + select.value : "") + "?");
    } }, "Migrate to"), select,
    actionButton("Suspend", "suspend", { query: q.id }, "Suspend query " + q.id + "?"));
  }
  if (session.admin && q.state === "suspended") {
    toolbar.append(actionButton("Resume", "resume", { query: q.id }, "Resume query " + q.id + "?"));
  }
  if (session.admin && ["running", "planning", "suspended"].includes(q.state)) {
    toolbar.append(actionButton("Cancel", "cancel", { query: q.id }, "Cancel query " + q.id + "?", true));
  }
  const distributed = page.stages && page.stages.length > 0;
  const cards = h("div", { class: "cards" },
    card("State", badge(q.state || "")),
    card("Worker", q.worker || (q.tasks ? "distributed" : "—")),
    card("Elapsed", ms(q.elapsed_ms)),
    card("Rows sent", num(q.rows_sent)),
    card("Pipelines", (q.pipelines_done ?? "–") + " / " + (q.pipelines_total ?? "–")),
    card("Moves", q.migrations + " migrations · " + q.suspensions + " suspensions · " + q.restarts + " restarts"),
    card("State shipped", bytes(q.state_bytes)));
  return h("div", { id: "query-detail", "data-query": q.id },
    h("h1", {}, "Query " + q.id + " · " + q.user),
    h("div", { id: "query-progress" }, bar(progressOf(q), true)),
    cards, toolbar,
    h("pre", { class: "sql" }, q.sql || ""),
    q.error ? h("p", { class: "error", id: "query-error" }, q.error) : null,
    q.decision ? h("p", { class: "muted" }, "Decision: " + q.decision) : null,
    // A distributed query runs as stages of tasks on several workers and
    // does not move: its stages take the place of pipelines and timeline.
    distributed ? stagesView(page, q) : [
      h("h2", {}, "Pipelines"), reportedNote(page, q), pipelineGraph(page.pipelines), pipelineTable(page.pipelines),
      h("h2", {}, "Timeline"), timelineView(page)],
    q.offload ? h("div", {}, h("h2", {}, "Offloaded fragments"), h("p", {}, q.offload)) : null);
}

// Pipelines come with a worker's heartbeat: say whose and when, and that a
// query continued elsewhere runs its remaining plan there, numbered anew.
function reportedNote(page, q) {
  if (!page.pipelines.length) return null;
  const who = page.pipelines_worker === null ? "its worker" : "worker " + page.pipelines_worker;
  const ended = ["finished", "failed", "canceled"].includes(q.state);
  const before = Math.max(0, page.elapsed_ms - page.pipelines_reported_ms);
  let text = ended && before === 0 ? "As they were when the query ended on " + who
    : "As " + who + " reported them at " + ms(page.pipelines_reported_ms)
      + (ended ? ", " + ms(before) + " before the query ended" : "");
  if (q.migrations > 0 || q.restarts > 0) text += "; after a hand-off a worker runs the remaining plan, its pipelines numbered anew";
  return h("p", { class: "muted", id: "pipelines-reported" }, text + ".");
}

// The pipeline graph: a pipeline sits one column right of the pipelines
// whose outputs it reads; edges run from producer to consumer.
function pipelineGraph(pipelines) {
  if (!pipelines.length) {
    return h("p", { class: "muted", id: "pipeline-graph-empty" },
      "No pipeline report yet (a worker reports a query's pipelines with its heartbeat; queries the coordinator answers itself have none).");
  }
  const byId = new Map(pipelines.map((p) => [p.id, p]));
  const depth = new Map();
  const depthOf = (id, seen) => {
    if (depth.has(id)) return depth.get(id);
    if (seen.has(id)) return 0;
    seen.add(id);
    const p = byId.get(id);
    const d = p && p.inputs.length ? 1 + Math.max(...p.inputs.map((i) => depthOf(i, seen))) : 0;
    depth.set(id, d);
    return d;
  };
  pipelines.forEach((p) => depthOf(p.id, new Set()));
  const columns = [];
  for (const p of pipelines) {
    const d = depth.get(p.id);
    (columns[d] = columns[d] || []).push(p);
  }
  const W = 210, H = 62, GX = 60, GY = 18;
  const at = new Map();
  columns.forEach((col, c) => col.forEach((p, r) => at.set(p.id, { x: 10 + c * (W + GX), y: 10 + r * (H + GY) })));
  const width = 20 + columns.length * (W + GX) - GX;
  const height = 20 + Math.max(...columns.map((c) => c.length)) * (H + GY) - GY;
  const svg = s("svg", { id: "pipeline-graph", width, height, viewBox: "0 0 " + width + " " + height });
  svg.append(s("defs", {}, s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
    s("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#64748b" }))));
  for (const p of pipelines) {
    for (const i of p.inputs) {
      const from = at.get(i), to = at.get(p.id);
      if (!from || !to) continue;
      const x1 = from.x + W, y1 = from.y + H / 2, x2 = to.x, y2 = to.y + H / 2;
      svg.append(s("path", { class: "edge", d: "M" + x1 + "," + y1 + " C" + (x1 + GX / 2) + "," + y1 + " " + (x2 - GX / 2) + "," + y2 + " " + x2 + "," + y2, "marker-end": "url(#arrow)" }));
    }
  }
  for (const p of pipelines) {
    const { x, y } = at.get(p.id);
    const stored = p.status !== "finished" ? "" : p.spilled_bytes > 0 ? " · spilled " + bytes(p.spilled_bytes) : " · in memory";
    const figures = p.status === "finished" ? num(p.output_rows) + " rows · " + bytes(p.output_bytes) : p.status === "running" ? "running " + ms(p.elapsed_ms) : "waiting";
    svg.append(s("g", { class: "node " + p.status, "data-pipeline": p.id },
      s("title", {}, "P" + p.id + " " + p.breaker + " (" + p.status + ")" + (p.group ? " group " + p.group : "")),
      s("rect", { x, y, width: W, height: H, rx: 6 }),
      s("text", { x: x + 8, y: y + 17, "font-size": 12, "font-weight": 600 }, "P" + p.id + " · " + clip(p.breaker, 24)),
      s("text", { x: x + 8, y: y + 35, "font-size": 11 }, figures),
      s("text", { x: x + 8, y: y + 51, "font-size": 10, fill: "#475569" }, (p.status === "finished" ? ms(p.elapsed_ms) : "") + stored + (p.group ? " · " + p.group : ""))));
  }
  return h("div", { class: "scroll" }, svg);
}

function clip(text, n) {
  return text.length > n ? text.slice(0, n - 1) + "…" : text;
}

function pipelineTable(pipelines) {
  if (!pipelines.length) return null;
  const head = ["pipeline", "breaker", "reads", "status", "output rows", "output bytes", "stored", "elapsed", "group"];
  return h("table", { id: "pipelines" },
    h("thead", {}, h("tr", {}, head.map((x) => h("th", {}, x)))),
    h("tbody", {}, pipelines.map((p) => h("tr", { "data-pipeline": p.id },
      h("td", {}, "P" + p.id), h("td", {}, p.breaker), h("td", {}, p.inputs.map((i) => "P" + i).join(", ")),
      h("td", {}, badge(p.status === "finished" ? "finished" : p.status === "running" ? "running" : "planning")),
      h("td", { class: "num" }, num(p.output_rows)), h("td", { class: "num" }, bytes(p.output_bytes)),
      h("td", {}, p.status !== "finished" ? "" : p.spilled_bytes > 0 ? "disk (" + bytes(p.spilled_bytes) + ")" : "memory"),
      h("td", { class: "num" }, ms(p.elapsed_ms)), h("td", {}, p.group)))));
}

const HOP_TEXT = {
  runs: "runs on", migrated: "handed off (migration)", suspended: "suspended", resumed: "resumed",
  snapshot: "snapshot", worker_lost: "worker lost", started_over: "started over",
};

// A distributed query's stages, in the order they were routed: a row per
// stage, a box per task coloured by the worker it runs on.
function stagesView(page, q) {
  const workers = [...new Set(page.stages.flat())].sort((a, b) => a - b);
  const key = legend(workers.map((w) => {
    const tasks = page.stages.flat().filter((x) => x === w).length;
    return [w, "worker " + w + (page.workers[w] ? " (" + page.workers[w] + ")" : "") +
      ": " + tasks + " task" + (tasks === 1 ? "" : "s")];
  }));
  const rows = page.stages.map((tasks, i) => h("div", { class: "stage", "data-stage": i + 1 },
    h("span", { class: "stage-name" }, "stage " + (i + 1)),
    h("div", { class: "grid" }, tasks.map((w, t) => {
      const cell = h("div", { class: "cell task", "data-worker": w,
        title: "stage " + (i + 1) + ", task " + t + " on worker " + w }, t);
      cell.style.background = colour(w);
      return cell;
    }))));
  return h("div", { id: "stages" }, h("h2", {}, "Stages and tasks"),
    h("p", { class: "muted" }, q.tasks), key, rows);
}

// The timeline: a lane per worker the query ran on, a bar while it ran
// there, an arrow for each hand-off from one worker to the next.
function timelineView(page) {
  const hops = page.timeline;
  if (!hops.length) return h("p", { class: "muted", id: "timeline-empty" }, "The query has not run on a worker (yet).");
  const end = Math.max(page.elapsed_ms, ...hops.map((x) => x.at_ms)) || 1;
  const lanes = [...new Set(hops.filter((x) => x.worker !== null).map((x) => x.worker))];
  const L = 120, W = 760, LH = 34;
  const width = L + W + 20, height = 26 + lanes.length * LH + 10;
  const xOf = (t) => L + (t / end) * W;
  const yOf = (w) => 20 + lanes.indexOf(w) * LH;
  const svg = s("svg", { id: "timeline", width, height, viewBox: "0 0 " + width + " " + height });
  svg.append(s("defs", {}, s("marker", { id: "hop-arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
    s("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#d97706" }))));
  for (const w of lanes) {
    const y = yOf(w);
    svg.append(s("rect", { class: "lane", x: L, y, width: W, height: LH - 8, rx: 4 }),
      s("text", { x: 6, y: y + 17, "font-size": 12 }, "worker " + w + (page.workers[w] ? "" : " (gone)")));
  }
  svg.append(s("text", { x: L, y: 12, "font-size": 10, fill: "#667085" }, "0"),
    s("text", { x: L + W - 40, y: 12, "font-size": 10, fill: "#667085" }, ms(end)));
  // Runs: from each `runs` step to the next step that ends it.
  hops.forEach((hop, i) => {
    if (hop.kind !== "runs") return;
    const next = hops.slice(i + 1).find((x) => x.kind !== "snapshot");
    const stop = next ? next.at_ms : end;
    const bar = s("rect", { class: "run", x: xOf(hop.at_ms), y: yOf(hop.worker) + 5, width: Math.max(2, xOf(stop) - xOf(hop.at_ms)), height: LH - 18, rx: 3 });
    bar.style.fill = colour(hop.worker);
    svg.append(bar);
  });
  // Hand-offs: an arrow from the worker that handed off to the next one.
  hops.forEach((hop, i) => {
    if (hop.kind === "snapshot" && hop.worker !== null) {
      svg.append(s("circle", { class: "mark", cx: xOf(hop.at_ms), cy: yOf(hop.worker) + 13, r: 4 }, s("title", {}, "snapshot " + bytes(hop.state_bytes))));
    }
    if (!["migrated", "worker_lost", "suspended"].includes(hop.kind) || hop.worker === null) return;
    const next = hops.slice(i + 1).find((x) => x.kind === "runs");
    if (!next) return;
    const x1 = xOf(hop.at_ms), y1 = yOf(hop.worker) + 13, x2 = xOf(next.at_ms), y2 = yOf(next.worker) + 13;
    svg.append(s("path", { class: "hop", d: "M" + x1 + "," + y1 + " L" + Math.max(x2, x1 + 6) + "," + y2, "marker-end": "url(#hop-arrow)" },
      s("title", {}, HOP_TEXT[hop.kind] + ": " + bytes(hop.state_bytes) + " in " + ms(hop.took_ms))));
  });
  const head = ["at", "step", "worker", "state bytes", "took", "pipelines done"];
  const table = h("table", { id: "timeline-steps" },
    h("thead", {}, h("tr", {}, head.map((x) => h("th", {}, x)))),
    h("tbody", {}, hops.map((hop) => h("tr", { "data-kind": hop.kind },
      h("td", { class: "num" }, ms(hop.at_ms)), h("td", {}, HOP_TEXT[hop.kind] || hop.kind),
      h("td", {}, hop.worker === null ? "" : "worker " + hop.worker + (page.workers[hop.worker] ? " (" + page.workers[hop.worker] + ")" : "")),
      h("td", { class: "num" }, hop.state_bytes ? bytes(hop.state_bytes) : ""),
      h("td", { class: "num" }, hop.took_ms ? ms(hop.took_ms) : ""),
      h("td", { class: "num" }, hop.pipelines_total ? hop.pipelines_finished + " / " + hop.pipelines_total : "")))));
  return h("div", {}, h("div", { class: "scroll" }, svg), table);
}

const KIND_TEXT = { new_order: "NewOrder", payment: "Payment", delivery: "Delivery",
  order_status: "OrderStatus", stock_level: "StockLevel" };

function rate(v) {
  if (v === null || v === undefined) return "–";
  return v >= 100 ? Number(v).toFixed(0) : Number(v).toFixed(1);
}

function share(part, whole) {
  return whole > 0 ? (100 * part / whole).toFixed(1) + "%" : "–";
}

// The pods --pod names: each one's run, a minute of throughput per host,
// and per host and transaction type what it committed and aborted and the
// CXL misses it cost. The pod runs on its own (skiff pod run); its hosts
// publish running totals in the pod file, which the coordinator reads.
function podView() {
  const watched = (state.pod && state.pod.pods) || [];
  if (!watched.length) {
    return h("div", {}, h("h1", {}, "Pod"), h("p", { class: "muted", id: "pod-none" },
      "No pod is watched. Start the server with --pod PATH, then run skiff pod run --shm PATH: " +
      "its hosts' throughput, aborts and CXL misses appear here as it runs."));
  }
  return h("div", {}, h("h1", {}, "Pod"), watched.map(podSection));
}

function podSection(w) {
  const title = h("h2", {}, w.path);
  if (!w.pod) {
    return h("div", { class: "pod", "data-pod": w.path }, title,
      h("p", { class: "muted pod-waiting" }, "No pod here yet (" + w.error + ")."));
  }
  const p = w.pod;
  const running = p.state === "running" || p.state === "stopping";
  const sum = (field) => w.hosts.reduce((a, x) => a + x.kinds.reduce((b, k) => b + Number(k[field]), 0), 0);
  const committed = sum("committed"), aborted = sum("aborted"), misses = sum("misses");
  const rated = w.hosts.some((x) => x.commits_per_s !== null);
  const tps = w.hosts.reduce((a, x) => a + (x.commits_per_s || 0), 0);
  const cards = h("div", { class: "cards" },
    card("State", badge(p.state)),
    card("Architecture", p.arch + " · " + p.cc),
    card("Mix", p.mix),
    card("Hosts × workers", w.hosts.length + " × " + p.workers_per_host),
    card("Warehouses", p.warehouses + " · " + p.multi_warehouse_pct + "% multi"),
    card("Commits/s", running && rated ? rate(tps) : "–"),
    card("Committed", num(committed)),
    card("Aborted attempts", share(aborted, committed + aborted)),
    card("CXL misses/commit", committed ? (misses / committed).toFixed(1) : "–"));
  const reason = p.stop_reason ? h("p", { class: "error" }, "Stopped early: " + p.stop_reason) : null;
  const head = ["host", "life", "transaction", "committed", "commits/s", "aborts/s", "aborted", "misses/commit"];
  const rows = [];
  for (const host of w.hosts) {
    const life = host.life + (host.incarnation > 1 ? " (restarted " + (host.incarnation - 1) + "×)" : "");
    const kinds = host.kinds.filter((k) => k.committed > 0 || k.aborted > 0);
    kinds.forEach((k, i) => {
      rows.push(h("tr", { "data-host": host.host, "data-kind": k.name },
        h("td", { class: "num" }, i === 0 ? host.host : ""),
        h("td", {}, i === 0 ? badge(life) : ""),
        h("td", {}, KIND_TEXT[k.name] || k.name),
        h("td", { class: "num" }, num(k.committed)),
        h("td", { class: "num commits-per-s" }, rate(k.commits_per_s)),
        h("td", { class: "num" }, rate(k.aborts_per_s)),
        h("td", { class: "num" }, share(k.aborted, k.committed + k.aborted)),
        h("td", { class: "num" }, k.misses_per_commit === null ? "–" : k.misses_per_commit.toFixed(1))));
    });
    if (!kinds.length) {
      rows.push(h("tr", { "data-host": host.host }, h("td", { class: "num" }, host.host),
        h("td", {}, badge(life)), h("td", { class: "muted", colspan: 6 }, "nothing committed yet")));
    }
  }
  const table = h("table", { class: "pod-hosts" },
    h("thead", {}, h("tr", {}, head.map((x) => h("th", {}, x)))), h("tbody", {}, rows));
  return h("div", { class: "pod", "data-pod": w.path }, title, cards, reason,
    h("h2", {}, "Commits per second, each host"), throughputChart(w), h("h2", {}, "Hosts"), table);
}

// A line per host over the last minute of readings.
function throughputChart(w) {
  const points = w.series;
  if (points.length < 2) return h("p", { class: "muted pod-chart-empty" }, "The chart fills in while the pod runs.");
  const L = 56, W = 1000, H = 160, T = 10;
  const width = L + W + 20, height = T + H + 24;
  // The last minute, or since the run's first reading when it is younger.
  const end = points[points.length - 1][0];
  const span = Math.min(60, Math.max(5, end - points[0][0]));
  const start = end - span;
  const top = Math.max(1, ...points.filter((p) => p[0] >= start).flatMap((p) => p[1]));
  const xOf = (t) => L + ((t - start) / span) * W;
  const yOf = (v) => T + H - (v / top) * H;
  const svg = s("svg", { class: "pod-chart", width, height, viewBox: "0 0 " + width + " " + height });
  svg.append(s("rect", { class: "lane", x: L, y: T, width: W, height: H }),
    s("text", { x: 4, y: T + 10, "font-size": 10, fill: "#667085" }, rate(top)),
    s("text", { x: 4, y: T + H, "font-size": 10, fill: "#667085" }, "0"),
    s("text", { x: L, y: T + H + 16, "font-size": 10, fill: "#667085" }, "-" + span.toFixed(0) + " s"),
    s("text", { x: L + W - 24, y: T + H + 16, "font-size": 10, fill: "#667085" }, "now"));
  w.hosts.forEach((host, i) => {
    const line = points.filter((p) => p[0] >= start && p[1][i] !== undefined)
      .map((p) => xOf(p[0]).toFixed(1) + "," + yOf(p[1][i]).toFixed(1)).join(" ");
    const path = s("polyline", { class: "series", "data-host": host.host, points: line },
      s("title", {}, "host " + host.host));
    path.style.stroke = colour(host.host);
    svg.append(path);
  });
  return h("div", {}, legend(w.hosts.map((host) => [host.host, "host " + host.host])),
    h("div", { class: "scroll" }, svg));
}

// ---------------------------------------------------------------- login

function showLogin() {
  session = null;
  state = null;
  if (source) { source.close(); source = null; }
  document.getElementById("view").replaceChildren();
  document.getElementById("login-view").hidden = false;
  document.getElementById("logout").hidden = true;
  document.getElementById("whoami").textContent = "";
  document.getElementById("login-user").focus();
}

function start(info) {
  session = info;
  document.getElementById("login-view").hidden = true;
  document.getElementById("whoami").textContent = info.user + (info.admin ? " (admin)" : " (read-only)");
  document.getElementById("logout").hidden = !info.users_required;
  render();
  connect();
}

async function boot() {
  document.getElementById("login").addEventListener("submit", async (event) => {
    event.preventDefault();
    const error = document.getElementById("login-error");
    error.textContent = "";
    const result = await call("POST", "/api/login", {
      user: document.getElementById("login-user").value,
      password: document.getElementById("login-password").value,
    });
    if (result.ok) {
      document.getElementById("login-password").value = "";
      start(result.payload);
    } else {
      error.textContent = (result.payload && result.payload.error) || "login failed";
    }
  });
  document.getElementById("logout").addEventListener("click", async () => {
    await call("POST", "/api/logout");
    showLogin();
  });
  window.addEventListener("hashchange", () => {
    if (!session) return;
    connect();
    if (state) state.query = undefined;
    render();
  });
  const result = await call("GET", "/api/session");
  if (result.ok) start(result.payload);
  else showLogin();
}

document.addEventListener("DOMContentLoaded", boot);
