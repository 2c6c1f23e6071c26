// innerloop live view: the run list, and one run's machine, timeline, tools and chart.
// Plain JS, no library: the page is served by `innerloop ui` and works offline.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const RECOVERY = new Set(["backoff", "fallback", "compact", "abort"]);
const LIST_EVERY_MS = 1500;
const DIAGRAM_EVERY_MS = 800;

let selected = null;      // the run id shown
let child = null;         // the path of the child run shown (null: the run itself)
let source = null;        // its EventSource
let diagramKey = null;    // what the drawn diagram shows (transitions, status)
let diagramBusy = false;
let diagramWanted = null;
let lastDetail = null;
// the per-launch token of a server not on loopback (in the page's URL): every API call carries it
const TOKEN = new URL(window.location).searchParams.get("token");

// an API URL: the run id encoded whole (ids may hold "#", "?", "/"), the query's values too
// (a child's path, ?child=, holds "#", "/", "[" as well; null: left out), the token added
function api(path, id, query) {
  const url = new URL(path + (id === undefined ? "" : encodeURIComponent(id)), window.location.origin);
  for (const [k, v] of Object.entries(query || {})) if (v !== null && v !== undefined) url.searchParams.set(k, v);
  if (TOKEN) url.searchParams.set("token", TOKEN);
  return url.toString();
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined) continue;
    // a style through the CSSOM: the page's Content-Security-Policy refuses style attributes
    if (k === "style") node.style.cssText = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c === null || c === undefined ? "" : c);
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  return node;
}

function cost(usd) {
  if (usd === null || usd === undefined) return "–";
  if (usd === 0) return "$0";
  // the terminal's form (six decimals) for small sums, cents for large ones
  return usd < 1 ? "$" + usd.toFixed(6) : "$" + usd.toFixed(2);
}

function seconds(s) {
  if (s === null || s === undefined) return "–";
  if (s < 0.001) return (s * 1e6).toFixed(0) + " µs";
  return s < 1 ? (s * 1000).toFixed(0) + " ms" : s.toFixed(2) + " s";
}

// -- the run list ---------------------------------------------------------------------

async function loadRuns() {
  let data;
  try {
    const response = await fetch(api("/api/runs"));
    data = await response.json();
    document.getElementById("connection").textContent = "connected";
  } catch (err) {
    document.getElementById("connection").textContent = "server unreachable";
    return;
  }
  const body = document.querySelector("#runs tbody");
  body.replaceChildren();
  for (const run of data.runs) {  // the first page (a thousand runs)
    const row = el("tr", { "data-id": run.id, "data-status": run.status },
      el("td", { class: "id" }, run.id),
      el("td", {}, el("span", { class: "badge " + run.status }, run.status)),
      el("td", {}, run.exit_reason || (run.status === "running" ? run.current : "–")),
      el("td", { class: "num" }, String(run.turns)),
      el("td", { class: "num" }, cost(run.cost_usd)));
    if (run.id === selected || (selected && selected.endsWith(":last") && lastDetail && lastDetail.id === run.id)) {
      row.classList.add("selected");
    }
    row.addEventListener("click", () => select(run.id, null));
    body.append(row);
    if (run.error) {
      row.classList.add("problem");
      body.append(el("tr", { class: "log-error-row" }, el("td", { class: "log-error", colspan: "5" }, run.error)));
    }
  }
  document.getElementById("no-runs").hidden = data.runs.length > 0;
}

// -- one run ----------------------------------------------------------------------------

function select(id, path) {
  selected = id;
  child = path;
  diagramKey = null;
  lastDetail = null;
  const url = new URL(window.location);
  url.searchParams.set("run", id);
  if (path === null) url.searchParams.delete("child"); else url.searchParams.set("child", path);
  window.history.replaceState(null, "", url);
  if (source) source.close();
  document.getElementById("run").hidden = false;
  document.getElementById("empty").hidden = true;
  document.getElementById("diagram").replaceChildren();
  const stream = new EventSource(api("/api/events/", id, { child: path }));
  source = stream;
  stream.addEventListener("run", (e) => show(merge(JSON.parse(e.data))));
  stream.addEventListener("end", () => { stream.close(); loadRuns(); });
  stream.onerror = () => {
    // a dropped connection is retried by the EventSource itself; a refused one (a run
    // whose log is not there yet: 404) is asked for again each second
    if (stream.readyState !== EventSource.CLOSED) return;
    fetch(api("/api/run/", id, { child: path })).then((r) => (r.status === 404 ? r.json() : null)).then((d) => {
      if (d && selected === id && child === path && source === stream) showMissing(id, d.error);
    }).catch(() => {});
    setTimeout(() => { if (selected === id && child === path && source === stream) select(id, path); }, 1000);
  };
  loadRuns();
}

// a stream message: the run's latest rows ("append": false), or the rows added since the
// last message, added to those kept (the latest LIST_ROWS of each list)
const LISTS = ["transitions", "tools", "turn_usage", "recoveries", "messages"];
const LIST_ROWS = 500;
function merge(update) {
  if (!update.append || !lastDetail || lastDetail.id !== update.id || lastDetail.child !== update.child) return update;
  const run = { ...update };
  for (const k of LISTS) run[k] = lastDetail[k].concat(update[k]).slice(-LIST_ROWS);
  return run;
}

function showMissing(id, message) {
  if (source) source.close();
  lastDetail = null;
  document.getElementById("run-title").textContent = child === null ? id : child;
  document.getElementById("facts").replaceChildren();
  const error = document.getElementById("run-error");
  error.textContent = message;
  error.hidden = false;
}

function show(run) {
  lastDetail = run;
  document.getElementById("run-title").textContent = run.child === null || run.child === undefined ? run.id : run.child;
  drawCrumbs(run);
  const facts = document.getElementById("facts");
  facts.replaceChildren(
    el("span", {}, el("span", { class: "badge " + run.status, id: "status" }, run.status)),
    el("span", {}, "machine ", el("b", { id: "machine" }, run.machine || "–")),
    el("span", {}, "state ", el("b", { id: "current" }, run.current || "–")),
    el("span", {}, "exit ", el("b", {}, run.exit_reason || "–")),
    el("span", {}, "turns ", el("b", { id: "turns" }, String(run.turns))),
    el("span", {}, "tokens ", el("b", {}, `${run.input_tokens ?? "–"} in / ${run.output_tokens ?? "–"} out`)),
    el("span", {}, "cost ", el("b", {}, cost(run.cost_usd))),
    ...(run.interrupt === undefined ? [] : [el("span", {}, "waits on ", el("b", { id: "interrupt" }, run.interrupt || "–"))]));
  const error = document.getElementById("run-error");
  const problems = [run.error, run.machine_error].filter(Boolean);
  error.textContent = problems.join(" · ");
  error.hidden = problems.length === 0;
  highlight(run.current);
  refreshDiagram(run);
  drawTimeline(run.transitions);
  drawTools(run.tools);
  drawRecoveries(run.recoveries);
  drawChart(run.turn_usage);
  drawChildren(run);
  drawMessages(run.messages);
}

// a child's page: the way up (the run, then each child above it); every part is text
function drawCrumbs(run) {
  const crumbs = document.getElementById("crumbs");
  crumbs.replaceChildren();
  crumbs.hidden = run.child === null || run.child === undefined;
  if (crumbs.hidden) return;
  const up = el("a", { class: "crumb", "data-child": "" }, run.id);
  up.addEventListener("click", () => select(run.id, null));
  crumbs.append(up);
  for (const above of run.above || []) {
    const link = el("a", { class: "crumb", "data-child": above }, above);
    link.addEventListener("click", () => select(run.id, above));
    crumbs.append(" › ", link);
  }
  crumbs.append(" › ", el("span", {}, run.child));
}

// the run's child runs as a tree: each one opens its own page
function drawChildren(run) {
  const rows = run.children || [];
  const body = document.querySelector("#children tbody");
  body.replaceChildren();
  for (const c of rows) {
    const tokens = c.input_tokens === null || c.input_tokens === undefined ? "–" : `${c.input_tokens} / ${c.output_tokens}`;
    // a row names its child from the row above it (the whole path is its tooltip)
    const above = c.parent !== null && c.parent !== undefined ? c.parent : run.child;
    const relative = above && c.path.startsWith(above + "/") ? c.path.slice(above.length + 1) : c.path;
    const row = el("tr", { "data-path": c.path, "data-status": c.status },
      el("td", { class: "path", title: c.path, style: `padding-left: ${6 + 14 * (c.depth || 0)}px` }, relative),
      el("td", {}, el("span", { class: "badge " + c.status }, c.status), " ", c.current || "–"),
      el("td", {}, c.exit_reason || "–"),
      el("td", { class: "num" }, String(c.turns)),
      el("td", { class: "num" }, tokens),
      el("td", { class: "num" }, cost(c.cost_usd)));
    row.addEventListener("click", () => select(run.id, c.path));
    body.append(row);
  }
  const total = run.children_total || 0;
  document.getElementById("children-count").textContent = total > rows.length ? `(${rows.length} of ${total})` : `(${total})`;
  document.getElementById("children-box").hidden = total === 0;
}

function drawMessages(messages) {
  const list = document.getElementById("messages");
  list.replaceChildren();
  for (const m of messages || []) {
    list.append(el("li", { class: m.role }, el("span", { class: "role" }, m.role), m.text));
  }
  if (!(messages || []).length) list.append(el("li", { class: "muted" }, "none yet"));
}

function drawRecoveries(items) {
  const list = document.getElementById("recoveries");
  list.replaceChildren();
  for (const r of items) {
    const figures = Object.entries(r)
      .filter(([k, v]) => k !== "type" && k !== "t" && v !== null && typeof v !== "object")
      .map(([k, v]) => `${k}=${typeof v === "number" && !Number.isInteger(v) ? v.toFixed(3) : v}`);
    const at = r.t === undefined ? "" : r.t.toFixed(3) + " s  ";
    list.append(el("li", { "data-type": r.type }, `${at}${r.type}: ${figures.join(", ")}`));
  }
  document.getElementById("recoveries-box").hidden = items.length === 0;
}

function refreshDiagram(run) {
  const key = run.id + "|" + run.child + "|" + run.totals.transitions + "|" + run.status + "|" + JSON.stringify((run.children || []).map((c) => c.events));
  if (key === diagramKey) return;
  diagramWanted = key;
  if (diagramBusy) return;
  diagramBusy = true;
  const id = run.id, path = run.child;
  fetch(api("/api/diagram/", id, { child: path })).then((r) =>
    r.ok ? r.text() : r.json().then((j) => ({ error: j.error || r.statusText }))
  ).then((text) => {
    if (!lastDetail || id !== lastDetail.id || path !== lastDetail.child) return;
    const box = document.getElementById("diagram");
    if (typeof text !== "string") {  // the run's machine is not at hand: say so, draw nothing
      box.replaceChildren(el("p", { class: "machine-missing" }, text.error));
      diagramKey = key;
      return;
    }
    box.innerHTML = text;
    const drawn = box.querySelector("svg");
    if (drawn) { drawn.removeAttribute("width"); drawn.removeAttribute("height"); }
    diagramKey = key;
    highlight(lastDetail.current);
  }).finally(() => {
    diagramBusy = false;
    if (diagramWanted !== diagramKey && lastDetail) setTimeout(() => refreshDiagram(lastDetail), DIAGRAM_EVERY_MS);
  });
}

function highlight(state) {
  const box = document.getElementById("diagram");
  box.dataset.current = state || "";
  for (const node of box.querySelectorAll("g.node")) {
    const title = node.querySelector("title");
    node.classList.toggle("current", !!title && title.textContent === state);
  }
}

function drawTimeline(transitions) {
  const list = document.getElementById("timeline");
  list.replaceChildren();
  transitions.forEach((t, i) => {
    const guard = t.guard ? ` [${t.guard}]` : "";
    const at = t.t === null || t.t === undefined ? "" : t.t.toFixed(3).padStart(8) + " s  ";
    const item = el("li", { class: RECOVERY.has(t.target) ? "recovery" : "" }, `${at}${t.source} → ${t.target}${guard}`);
    if (i === transitions.length - 1) item.classList.add("last");
    list.append(item);
  });
  list.scrollTop = list.scrollHeight;
}

function drawTools(tools) {
  const body = document.querySelector("#tools tbody");
  body.replaceChildren();
  for (const t of tools) {
    body.append(el("tr", {},
      el("td", {}, t.name),
      el("td", { class: t.outcome }, t.outcome),
      el("td", { class: "num" }, seconds(t.duration)),
      el("td", { class: "output", title: t.output }, t.output)));
  }
  if (!tools.length) body.append(el("tr", {}, el("td", { colspan: "4", class: "muted" }, "none yet")));
}

// -- the chart: tokens (left axis) and cost (right axis) per turn, inline SVG -----------

function drawChart(turns) {
  const W = 460, H = 210, L = 48, R = 56, T = 34, B = 30;
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "tokens and cost per turn" });
  const n = turns.length;
  const maxTokens = Math.max(1, ...turns.map((t) => Math.max(t.input_tokens, t.output_tokens)));
  const costs = turns.map((t) => t.cost_usd);
  const maxCost = Math.max(0, ...costs.filter((c) => c !== null));
  const x = (i) => L + (n <= 1 ? (W - L - R) / 2 : (i * (W - L - R)) / (n - 1));
  const y = (v) => H - B - (v / maxTokens) * (H - T - B);
  const yc = (v) => H - B - (maxCost ? (v / maxCost) * (H - T - B) : 0);
  chart.append(svg("line", { class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B }));
  chart.append(svg("line", { class: "axis", x1: L, y1: T, x2: L, y2: H - B }));
  chart.append(svg("line", { class: "axis", x1: W - R, y1: T, x2: W - R, y2: H - B }));
  label(chart, L - 4, T + 4, String(maxTokens), "end");
  label(chart, L - 4, H - B, "0", "end");
  label(chart, W - R + 4, T + 4, maxCost ? cost(maxCost) : "", "start");
  label(chart, L - 4, T - 8, "tokens", "end");
  label(chart, W - R + 4, T - 8, "cost", "start");
  const series = [
    ["input", (t) => y(t.input_tokens)],
    ["output", (t) => y(t.output_tokens)],
    ["cost", (t) => (t.cost_usd === null ? null : yc(t.cost_usd))],
  ];
  for (const [name, fy] of series) {
    const pts = turns.map((t, i) => [x(i), fy(t)]).filter((p) => p[1] !== null);
    if (pts.length > 1) chart.append(svg("polyline", { class: name, points: pts.map((p) => p.join(",")).join(" ") }));
  }
  turns.forEach((t, i) => {
    const g = svg("g", { class: "turn", "data-turn": String(t.turn) });
    const tip = svg("title", {});
    tip.textContent = `turn ${t.turn} (${t.model}): ${t.input_tokens} in, ${t.output_tokens} out, ${cost(t.cost_usd)}`;
    g.append(tip);
    for (const [name, fy] of series) {
      const v = fy(t);
      if (v !== null) g.append(svg("circle", { class: name, cx: x(i), cy: v, r: 3.2 }));
    }
    label(g, x(i), H - B + 13, String(t.turn), "middle");
    chart.append(g);
  });
  label(chart, (W - L - R) / 2 + L, H - 3, "turn", "middle");
  const legend = [["input", "input tokens"], ["output", "output tokens"], ["cost", "cost"]];
  legend.forEach(([name, text], i) => {
    chart.append(svg("circle", { class: name, cx: L + 40 + i * 110, cy: 10, r: 3.5 }));
    label(chart, L + 47 + i * 110, 13, text, "start");
  });
  document.getElementById("chart").replaceChildren(chart);
}

function label(parent, x, y, text, anchor) {
  const t = svg("text", { x, y, "text-anchor": anchor });
  t.textContent = text;
  parent.append(t);
}

// -- start --------------------------------------------------------------------------------

loadRuns();
setInterval(loadRuns, LIST_EVERY_MS);
const wanted = new URL(window.location).searchParams.get("run");
if (wanted) select(wanted, new URL(window.location).searchParams.get("child"));
