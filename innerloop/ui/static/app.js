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
// this page's key (the server writes it into the page): an answer carries it, so the
// server knows the answer came from its own page, not from another site's
const PAGE_KEY = (document.querySelector('meta[name="innerloop-page"]') || {}).content || "";
const answered = new Set();  // "run|interrupt" answered from this page (until the run goes on)
let listStatus = new Map();  // each run's status in the list, as last seen

// an API URL: the run id encoded whole (ids may hold "#", "?", "/"), the query's values too
// (a child's path, ?child=, holds "#", "/", "[" as well; null: left out; a list: the key
// once per value), the token added
function api(path, id, query) {
  const url = new URL(path + (id === undefined ? "" : encodeURIComponent(id)), window.location.origin);
  for (const [k, v] of Object.entries(query || {})) {
    if (Array.isArray(v)) for (const one of v) url.searchParams.append(k, one);
    else if (v !== null && v !== undefined) url.searchParams.set(k, v);
  }
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

// a time of day (and the date, when not today) for a start time in seconds since the epoch
function when(epoch) {
  if (epoch === null || epoch === undefined) return "";
  const d = new Date(epoch * 1000);
  const time = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23" });
  return d.toDateString() === new Date().toDateString() ? time : `${d.toLocaleDateString()} ${time}`;
}

// a name that may break only after its ":" and "/" (never inside a word): its parts,
// a <wbr> between them
function breaks(text) {
  const out = [];
  String(text).split(/(?<=[:/])/).forEach((p, i) => { if (i) out.push(el("wbr")); out.push(p); });
  return out;
}

function breakable(text) {
  return el("span", { class: "id", title: text }, ...breaks(text));
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
  const before = listStatus;
  listStatus = new Map(data.runs.map((r) => [r.id, r.status]));
  for (const run of data.runs) {  // the first page (a thousand runs)
    const turns = `${run.turns} turn${run.turns === 1 ? "" : "s"}`;
    const about = [run.machine, when(run.started), turns].filter(Boolean).join(" · ");
    const row = el("tr", { "data-id": run.id, "data-status": run.status },
      el("td", { class: "run" }, breakable(run.id),
        about ? el("div", { class: "about" }, about) : null,
        run.prompt ? el("div", { class: "prompt", title: run.prompt }, run.prompt) : null),
      el("td", { class: "state" }, el("span", { class: "badge " + run.status }, run.status),
        el("div", { class: "exit" }, run.exit_reason || (run.status === "running" ? run.current : "–")),
        el("div", { class: "cost" }, cost(run.cost_usd))));
    if (run.id === selected || (selected && selected.endsWith(":last") && lastDetail && lastDetail.id === run.id)) {
      row.classList.add("selected");
    }
    row.addEventListener("click", () => select(run.id, null));
    body.append(row);
    if (run.error) {
      row.classList.add("problem");
      body.append(el("tr", { class: "log-error-row" }, el("td", { class: "log-error", colspan: "2" }, run.error)));
    }
  }
  document.getElementById("no-runs").hidden = data.runs.length > 0;
  // the run shown went on (answered here or elsewhere) after its stream ended: follow it again
  if (selected && source && source.readyState === EventSource.CLOSED && lastDetail) {
    const id = lastDetail.id;
    const now = listStatus.get(id);
    if (before.has(id) && now !== undefined && before.get(id) !== now && now !== lastDetail.status) select(selected, child);
  }
}

// -- one run ----------------------------------------------------------------------------

function select(id, path) {
  selected = id;
  child = path;
  diagramKey = null;
  lastDetail = null;
  opened = new Set();  // a run's child clusters start collapsed
  const url = new URL(window.location);
  url.searchParams.set("run", id);
  if (path === null) url.searchParams.delete("child"); else url.searchParams.set("child", path);
  window.history.replaceState(null, "", url);
  if (source) source.close();
  document.getElementById("run").hidden = false;
  document.getElementById("empty").hidden = true;
  document.getElementById("diagram").replaceChildren();
  resetZoom();
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
  const prompt = document.getElementById("prompt");
  const start = when(run.started);
  prompt.textContent = [start ? `started ${start}` : "", run.prompt ? `“${run.prompt}”` : ""].filter(Boolean).join(" · ");
  prompt.hidden = !prompt.textContent;
  drawAsks(run);
  const error = document.getElementById("run-error");
  const problems = [run.error, run.machine_error].filter(Boolean);
  error.textContent = problems.join(" · ");
  error.hidden = problems.length === 0;
  highlight(run.current);
  refreshDiagram(run);
  drawTimeline(run.transitions);
  const ended = run.status !== "running";
  drawTools(run.tools, ended);
  drawRecoveries(run.recoveries);
  drawChart(run);
  drawChildren(run);
  drawMessages(run.messages, ended);
}

// -- what a suspended run waits on, and the answer from the page ------------------------

function pretty(value) {
  return value === undefined ? "" : JSON.stringify(value, null, 1);
}

function drawAsks(run) {
  const box = document.getElementById("asks");
  const asks = run.status === "suspended" ? (run.interrupts || []) : [];
  box.replaceChildren();
  box.hidden = asks.length === 0;
  if (box.hidden) return;
  box.append(el("h3", {}, "Waits for an answer"));
  for (const a of asks) {
    const item = el("div", { class: "ask" + (a.id ? "" : " next"), "data-interrupt": a.id || "" });
    item.append(el("p", { class: "asked" },
      el("b", {}, a.kind || "question"),
      a.path ? " asked by " : " asked by the run",
      a.path ? el("code", { class: "path" }, a.path) : null,
      a.state ? " in state " : null,
      a.state ? el("code", {}, a.state) : null,
      el("span", { class: "muted" }, a.id ? ` · interrupt ${a.id}` : " · asks next, once the question before it is answered")));
    if (a.calls && a.calls.length) {
      const body = el("tbody");
      for (const c of a.calls) {
        const what = c.question !== undefined ? c.question : c.arguments;
        body.append(el("tr", {}, el("td", { class: "tool" }, c.tool || "–"), el("td", {}, el("pre", {}, pretty(what)))));
      }
      item.append(el("table", { class: "calls" },
        el("thead", {}, el("tr", {}, el("th", {}, "tool"), el("th", {}, a.kind === "question" ? "question" : "arguments"))), body));
    } else {
      item.append(el("pre", { class: "payload" }, pretty(a.payload)));
    }
    if (a.id) item.append(answerForm(run, a));
    box.append(item);
  }
}

function answerForm(run, a) {
  const form = el("div", { class: "answer" });
  const status = el("span", { class: "answer-status muted" });
  if (!run.answerable) {
    form.append(el("p", { class: "muted note" }, run.answer_note || "this page cannot answer it"));
    return form;
  }
  const key = run.id + "|" + a.id;
  if (answered.has(key)) {
    form.append(el("span", { class: "answer-status" }, "answered: the run goes on…"));
    return form;
  }
  const send = (value) => sendAnswer(run, a.id, value, status, form);
  if (a.kind === "approval") {
    const approve = el("button", { type: "button", class: "approve" }, "Approve");
    const deny = el("button", { type: "button", class: "deny" }, "Deny");
    approve.addEventListener("click", () => send(true));
    deny.addEventListener("click", () => send(false));
    form.append(approve, deny);
  }
  const text = el("input", { type: "text", class: "typed", placeholder: a.kind === "approval" ? "or type an answer (JSON, else text)" : "your answer (JSON, else text)" });
  const typed = el("button", { type: "button", class: "send" }, "Send");
  const sendTyped = () => {
    const raw = text.value.trim();
    if (!raw) { status.textContent = "type an answer first"; return; }
    let value;
    try { value = JSON.parse(raw); } catch (err) { value = raw; }  // as innerloop runs resume --answer reads it
    send(value);
  };
  typed.addEventListener("click", sendTyped);
  text.addEventListener("keydown", (e) => { if (e.key === "Enter") sendTyped(); });
  form.append(text, typed, status);
  return form;
}

async function sendAnswer(run, interrupt, value, status, form) {
  for (const b of form.querySelectorAll("button")) b.disabled = true;
  status.classList.remove("error");
  status.textContent = "sending…";
  let response, text;
  try {
    response = await fetch(api("/api/answer/", run.id), {
      method: "POST",
      headers: { "content-type": "application/json", "x-innerloop-page": PAGE_KEY },
      body: JSON.stringify({ interrupt, answer: value }),
    });
    text = await response.text();
  } catch (err) {
    status.textContent = "the server cannot be reached";
    status.classList.add("error");
    for (const b of form.querySelectorAll("button")) b.disabled = false;
    return;
  }
  if (response.status === 202) {
    answered.add(run.id + "|" + interrupt);
    status.textContent = "answered: the run goes on…";
    select(selected, child);  // follow it again from here
    return;
  }
  let message = text;
  try { message = JSON.parse(text).error || text; } catch (err) { /* a plain-text refusal */ }
  status.textContent = `refused (${response.status}): ${message}`;
  status.classList.add("error");
  for (const b of form.querySelectorAll("button")) b.disabled = false;
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
      el("td", { class: "path", title: c.path, style: `padding-left: ${6 + 14 * (c.depth || 0)}px` }, ...breaks(relative)),
      el("td", {}, el("span", { class: "badge " + c.status }, c.status),
        el("div", { class: "exit" }, (c.status === "finished" ? c.exit_reason : c.current) || "–")),
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

function drawMessages(messages, ended) {
  const list = document.getElementById("messages");
  list.replaceChildren();
  for (const m of messages || []) {
    list.append(el("li", { class: m.role }, el("span", { class: "role" }, m.role), m.text));
  }
  if (!(messages || []).length) list.append(el("li", { class: "muted" }, ended ? "none" : "none yet"));
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

// the child clusters drawn open (their ids, "survey__", "survey__web__"); the others are
// one node each, naming the child and where it is: a click opens one, a click on an open
// cluster's title closes it
let opened = new Set();
// the whole machine, or (the default) only the states and edges the run used
let wholeMachine = false;

function refreshDiagram(run) {
  const key = run.id + "|" + run.child + "|" + run.totals.transitions + "|" + run.status + "|" + JSON.stringify((run.children || []).map((c) => c.events)) + "|" + [...opened].sort().join("|") + "|" + wholeMachine;
  if (key === diagramKey) return;
  diagramWanted = key;
  if (diagramBusy) return;
  diagramBusy = true;
  const id = run.id, path = run.child;
  fetch(api("/api/diagram/", id, { child: path, open: ["", ...opened], taken: wholeMachine ? null : "1" })).then((r) =>
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
    if (drawn) {  // as wide as the box, but never past its own size (a short path stays 1:1)
      const natural = drawn.getAttribute("width");
      drawn.removeAttribute("width"); drawn.removeAttribute("height");
      if (natural) {
        drawn.style.maxWidth = natural;
        drawn.dataset.natural = String(parseFloat(natural) * (natural.endsWith("pt") ? 4 / 3 : 1));
      }
    }
    applyZoom();  // a live run's new picture keeps the zoom its reader chose
    diagramKey = key;
    highlight(lastDetail.current);
  }).finally(() => {
    diagramBusy = false;
    if (diagramWanted !== diagramKey && lastDetail) setTimeout(() => refreshDiagram(lastDetail), DIAGRAM_EVERY_MS);
  });
}

// -- the diagram's zoom and pan: the wheel or the buttons zoom, a drag moves it, a double
// click zooms onto a child run's cluster (or back to the whole machine) -----------------

const MAX_ZOOM = 8;
let zoom = { scale: 1, x: 0, y: 0 };

function applyZoom() {
  const box = document.getElementById("diagram");
  box.dataset.zoom = zoom.scale.toFixed(2);
  const drawn = box.querySelector("svg");
  if (drawn) drawn.style.transform = `translate(${zoom.x}px, ${zoom.y}px) scale(${zoom.scale})`;
}

function resetZoom() {
  zoom = { scale: 1, x: 0, y: 0 };
  applyZoom();
}

// zoom by factor, the point (cx, cy) of the box staying where it is
function zoomBy(factor, cx, cy) {
  const scale = Math.min(MAX_ZOOM, Math.max(1, zoom.scale * factor));
  const k = scale / zoom.scale;
  zoom = { scale, x: cx - (cx - zoom.x) * k, y: cy - (cy - zoom.y) * k };
  if (scale === 1) zoom = { scale: 1, x: 0, y: 0 };
  applyZoom();
}

// zoom onto an element of the drawing (a cluster): its width fills the box, its top at
// the box's top (a drag shows the rest of a tall one)
function zoomOnto(node) {
  const box = document.getElementById("diagram").getBoundingClientRect();
  const r = node.getBoundingClientRect();
  const w = r.width / zoom.scale, h = r.height / zoom.scale;
  const ux = (r.left - box.left - zoom.x) / zoom.scale, uy = (r.top - box.top - zoom.y) / zoom.scale;
  // never past half again the drawing's own size: its text at most 18 px, not a poster
  const drawn = document.querySelector("#diagram svg");
  const fitted = drawn ? drawn.getBoundingClientRect().width / zoom.scale : 0;
  const own = drawn && fitted ? Number(drawn.dataset.natural || 0) / fitted : 0;
  const most = own ? Math.min(MAX_ZOOM, Math.max(1, 1.5 * own)) : MAX_ZOOM;
  const scale = Math.min(most, Math.max(1, 0.96 * box.width / w));
  const y = h * scale <= box.height ? box.height / 2 - (uy + h / 2) * scale : 8 - uy * scale;
  zoom = { scale, x: box.width / 2 - (ux + w / 2) * scale, y };
  applyZoom();
}

function setUpZoom() {
  const box = document.getElementById("diagram");
  const centre = () => { const r = box.getBoundingClientRect(); return [r.width / 2, r.height / 2]; };
  document.getElementById("zoom-in").addEventListener("click", () => zoomBy(1.5, ...centre()));
  document.getElementById("zoom-out").addEventListener("click", () => zoomBy(1 / 1.5, ...centre()));
  document.getElementById("zoom-fit").addEventListener("click", resetZoom);
  const whole = document.getElementById("diagram-whole");
  whole.addEventListener("click", () => {
    wholeMachine = !wholeMachine;
    whole.setAttribute("aria-pressed", String(wholeMachine));
    whole.textContent = wholeMachine ? "path taken" : "whole machine";
    resetZoom();
    if (lastDetail) refreshDiagram(lastDetail);
  });
  box.addEventListener("wheel", (e) => {
    e.preventDefault();
    const r = box.getBoundingClientRect();
    zoomBy(e.deltaY < 0 ? 1.25 : 1 / 1.25, e.clientX - r.left, e.clientY - r.top);
  }, { passive: false });
  let drag = null, moved = 0;
  box.addEventListener("pointerdown", (e) => {
    drag = { x: e.clientX - zoom.x, y: e.clientY - zoom.y };
    moved = 0;
    box.setPointerCapture(e.pointerId);
    box.classList.add("dragging");
  });
  box.addEventListener("pointermove", (e) => {
    if (!drag) return;
    moved += Math.abs(e.movementX) + Math.abs(e.movementY);
    zoom = { ...zoom, x: e.clientX - drag.x, y: e.clientY - drag.y };
    applyZoom();
  });
  box.addEventListener("click", (e) => {
    if (moved > 4 || !lastDetail) return;  // the end of a drag
    const hit = (node) => {
      const r = node.getBoundingClientRect();
      return e.clientX >= r.left && e.clientX <= r.right && e.clientY >= r.top && e.clientY <= r.bottom;
    };
    const titled = (node) => (node.querySelector("title") || {}).textContent || "";
    const folded = [...box.querySelectorAll("g.node.collapsed")].find(hit);
    if (folded) {
      opened.add(titled(folded));
      refreshDiagram(lastDetail);
      return;
    }
    for (const c of box.querySelectorAll("g.cluster")) {
      const label = c.querySelector(":scope > text");
      const id = titled(c).replace(/^cluster_child_/, "");
      if (!label || !hit(label) || !opened.has(id)) continue;
      for (const o of [...opened]) if (o.startsWith(id)) opened.delete(o);
      refreshDiagram(lastDetail);
      return;
    }
  });
  const stop = () => { drag = null; box.classList.remove("dragging"); };
  box.addEventListener("pointerup", stop);
  box.addEventListener("pointercancel", stop);
  box.addEventListener("dblclick", (e) => {
    // the smallest cluster under the pointer (found by place: a drag's capture retargets)
    let best = null, area = Infinity;
    for (const c of box.querySelectorAll("g.cluster")) {
      const r = c.getBoundingClientRect();
      const inside = e.clientX >= r.left && e.clientX <= r.right && e.clientY >= r.top && e.clientY <= r.bottom;
      if (inside && r.width * r.height < area) { best = c; area = r.width * r.height; }
    }
    if (best && zoom.scale < MAX_ZOOM * 0.9) zoomOnto(best); else resetZoom();
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

function drawTools(tools, ended) {
  const body = document.querySelector("#tools tbody");
  body.replaceChildren();
  for (const t of tools) {
    body.append(el("tr", {},
      el("td", {}, t.name),
      el("td", { class: t.outcome }, t.outcome),
      el("td", { class: "num" }, seconds(t.duration)),
      el("td", { class: "output", title: t.output }, t.output)));
  }
  if (!tools.length) body.append(el("tr", {}, el("td", { colspan: "4", class: "muted" }, ended ? "none" : "none yet")));
}

// -- the chart: tokens (left axis, input and output stacked) and cost (right axis) per
// turn of the run, then per child run (a parent's tokens are mostly its children's) ------

const CHART_BARS = 48;  // the latest ones drawn

function chartBars(run) {
  const turns = (run.turn_usage || []).map((t) => ({
    kind: "turn", key: String(t.turn), label: String(t.turn), input: t.input_tokens, output: t.output_tokens,
    cost: t.cost_usd, tip: `turn ${t.turn} (${t.model}): ${t.input_tokens} in, ${t.output_tokens} out, ${cost(t.cost_usd)}`,
  }));
  const top = (run.children || []).filter((c) => (c.depth || 0) === 0 && c.input_tokens !== null && c.input_tokens !== undefined);
  const kids = top.map((c) => {
    const name = run.child && c.path.startsWith(run.child + "/") ? c.path.slice(run.child.length + 1) : c.path;
    return {
      kind: "child", key: c.path, label: name, input: c.input_tokens, output: c.output_tokens, cost: c.cost_usd,
      tip: `${c.path} (a child run, ${c.turns} turns): ${c.input_tokens} in, ${c.output_tokens} out, ${cost(c.cost_usd)}`,
    };
  });
  return turns.concat(kids).slice(-CHART_BARS);
}

function drawChart(run) {
  const W = 460, H = 220, L = 48, R = 56, T = 34, B = 40;
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "tokens and cost per turn and per child run" });
  const bars = chartBars(run);
  const n = bars.length;
  const maxTokens = Math.max(1, ...bars.map((b) => b.input + b.output));
  const maxCost = Math.max(0, ...bars.map((b) => b.cost).filter((c) => c !== null && c !== undefined));
  const slot = (W - L - R) / Math.max(1, n);
  const x = (i) => L + slot * (i + 0.5);
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
  const width = Math.max(2, Math.min(28, slot * 0.62));
  const every = Math.ceil(n / 16);  // a label for at most 16 bars
  const firstChild = bars.findIndex((b) => b.kind === "child");
  if (firstChild > 0) chart.append(svg("line", { class: "split", x1: L + slot * firstChild, y1: T, x2: L + slot * firstChild, y2: H - B }));
  bars.forEach((b, i) => {
    const g = svg("g", b.kind === "turn" ? { class: "turn", "data-turn": b.key } : { class: "child", "data-path": b.key });
    const tip = svg("title", {});
    tip.textContent = b.tip;
    g.append(tip);
    // input at the bottom, output stacked on it: neither hides the other
    const x0 = x(i) - width / 2;
    g.append(svg("rect", { class: "input", x: x0, y: y(b.input), width, height: Math.max(0, H - B - y(b.input)) }));
    g.append(svg("rect", { class: "output", x: x0, y: y(b.input + b.output), width, height: Math.max(0, y(b.input) - y(b.input + b.output)) }));
    if (b.cost !== null && b.cost !== undefined) g.append(svg("circle", { class: "cost", cx: x(i), cy: yc(b.cost), r: 3.2 }));
    if (i % every === 0) {
      const text = b.label.length > 9 ? b.label.slice(0, 8) + "…" : b.label;
      label(g, x(i), H - B + 13, text, "middle");
    }
    chart.append(g);
  });
  const costs = bars.map((b, i) => [x(i), b.cost]).filter((p) => p[1] !== null && p[1] !== undefined);
  if (costs.length > 1) chart.append(svg("polyline", { class: "cost", points: costs.map(([px, c]) => `${px},${yc(c)}`).join(" ") }));
  const axis = firstChild > 0 ? "turn · child run" : firstChild === 0 ? "child run" : "turn";
  label(chart, (W - L - R) / 2 + L, H - 6, axis, "middle");
  if (!n) label(chart, (W - L - R) / 2 + L, (H - B + T) / 2, run.status === "running" ? "no model turn yet" : "no model turn", "middle");
  const legend = [["input", "input tokens"], ["output", "output tokens"], ["cost", "cost"]];
  legend.forEach(([name, text], i) => {
    chart.append(svg(name === "cost" ? "circle" : "rect", name === "cost"
      ? { class: name, cx: L + 40 + i * 110, cy: 10, r: 3.5 }
      : { class: name, x: L + 36 + i * 110, y: 6, width: 8, height: 8 }));
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

setUpZoom();
loadRuns();
setInterval(loadRuns, LIST_EVERY_MS);
const wanted = new URL(window.location).searchParams.get("run");
if (wanted) select(wanted, new URL(window.location).searchParams.get("child"));
