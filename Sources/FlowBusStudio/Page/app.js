// FlowBus Studio page: draws what the studio streams over its WebSocket (docs/STUDIO.md).
"use strict";
const $ = (id) => document.getElementById(id);
const token = new URLSearchParams(location.search).get("token");
const withToken = (path) => token ? `${path}${path.includes("?") ? "&" : "?"}token=${encodeURIComponent(token)}` : path;
const MAX_EVENTS = 2000; // the page keeps as many events as the studio does

const live = { events: [], statuses: [], states: {}, previous: {} };
let config = { flows: {}, graph: { nodes: [], edges: [] }, reactors: [], allow_publish: false };
let recording = null;       // { events, trees, duration_ns } while scrubbing a recording
let selectedEvent = null;   // an event id: the tree as it was right after it
let socket = null, nextRef = 1;

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v; else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c.nodeType ? c : String(c));
  return node;
}
const text = (v) => JSON.stringify(v);
const paramsText = (p) => p && Object.keys(p).length ? "(" + Object.entries(p).map(([k, v]) => `${k}: ${text(v)}`).join(", ") + ")" : "";

function parseParams(words) {
  const params = {};
  for (const w of words) {
    const i = w.indexOf("="); if (i < 0) continue;
    const key = w.slice(0, i).replace(/:$/, ""), raw = w.slice(i + 1);
    try { params[key] = w.slice(0, i).endsWith(":") || /^-?\d+(\.\d+)?$|^(true|false|null)$/.test(raw) ? JSON.parse(raw) : raw; }
    catch { params[key] = raw; }
  }
  return params;
}

// ---- connection ----
function connect() {
  const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + withToken("/ws");
  socket = new WebSocket(url);
  socket.onopen = () => { $("connection").textContent = "connected"; $("connection").className = "badge ok"; };
  socket.onclose = () => { $("connection").textContent = "disconnected, retrying"; $("connection").className = "badge bad"; setTimeout(connect, 1000); };
  socket.onmessage = (m) => receive(JSON.parse(m.data));
}

function receive(msg) {
  if (msg.type === "hello") {
    live.events = msg.events; live.statuses = msg.statuses; live.states = {}; live.previous = {};
    for (const s of msg.states) noteState(s);
    for (const e of msg.events) if (e.kind === "state" || e.kind === "snapshot") noteState(e);
  } else if (msg.type === "events") {
    for (const e of msg.events) { live.events.push(e); if (e.kind === "state" || e.kind === "snapshot") noteState(e); }
    if (live.events.length > MAX_EVENTS) live.events.splice(0, live.events.length - MAX_EVENTS);
    if (msg.dropped > 0) {
      $("throttle").hidden = false;
      $("throttle").textContent = `throttled: ${msg.dropped} events not shown just now (${msg.throttled_total} in all) — the bus is faster than a page`;
      clearTimeout(receive.timer); receive.timer = setTimeout(() => { $("throttle").hidden = true; }, 3000);
    }
  } else if (msg.type === "status") {
    live.statuses.push({ after: msg.after, status: msg.status });
    if (live.statuses.length > 200) live.statuses.shift();
  } else if (msg.type === "reply") {
    const out = $("publish-result");
    out.textContent = (msg.ok ? "✓ " : "✗ ") + msg.text; out.style.color = msg.ok ? "var(--ok)" : "var(--bad)";
    const pending = pendingReplies[msg.ref]; if (pending) { pending(msg); delete pendingReplies[msg.ref]; }
  }
  if (!recording) render();
}

function noteState(e) {
  const current = live.states[e.reactor];
  if (current && current.seq === e.seq && current.source === e.source) return;
  if (current) live.previous[e.reactor] = current;
  live.states[e.reactor] = e;
}

const pendingReplies = {};
function send(op, body, done) {
  if (!socket || socket.readyState !== 1) return;
  const ref = nextRef++; if (done) pendingReplies[ref] = done;
  socket.send(JSON.stringify({ op, ref, ...body }));
}

// ---- the tree, drawn as the app would look ----
function currentView() {
  if (recording) {
    const t = recording.time;
    const events = recording.events.filter((e) => e.time_ns <= t);
    const lastID = events.length ? events[events.length - 1].id : 0;
    const upTo = selectedEvent ?? lastID;
    let tree = null;
    for (const tr of recording.trees) if (tr.after <= upTo) tree = tr; else break;
    const states = {}, previous = {};
    for (const e of events) if ((e.kind === "state" || e.kind === "snapshot") && e.id <= upTo) { if (states[e.reactor]) previous[e.reactor] = states[e.reactor]; states[e.reactor] = e; }
    return { events, status: tree ? { flows: tree.flows, bindings: [] } : { flows: [], bindings: [] }, states, previous };
  }
  let status = live.statuses.length ? live.statuses[live.statuses.length - 1].status : { flows: [], bindings: [] };
  if (selectedEvent !== null) {
    const after = live.statuses.find((s) => s.after >= selectedEvent);
    if (after) status = after.status;
  }
  return { events: live.events, status, states: live.states, previous: live.previous };
}

function renderTree(status) {
  const box = $("tree"); box.replaceChildren();
  const flows = status.flows || [];
  const byID = Object.fromEntries(flows.map((f) => [f.id, f]));
  const bindings = {};
  for (const b of status.bindings || []) if (b.remote) (bindings[b.presentable] ||= []).push(b.stepper);
  const declared = config.flows;
  const draw = (node, flowName, isModal) => {
    if (node.flow && byID[node.flow] && byID[node.flow].root.id === node.id && !node.__merged) {
      const child = byID[node.flow]; return draw({ ...child.root, __merged: true }, child.name, isModal);
    }
    const steppers = bindings[node.id] || [];
    const declaredStepper = declared[flowName]?.screens?.[node.id];
    const canPublish = config.allow_publish && !recording && steppers.length > 0;
    const steps = declared[flowName]?.steps || [];
    const classes = ["node", node.kind, node.visible ? "visible" : "invisible", isModal ? "modal" : ""].join(" ");
    const view = el("div", { class: classes, "data-id": node.id, "data-visible": String(!!node.visible) },
      isModal ? el("div", { class: "modal-label" }, "presented modally") : null,
      el("div", { class: "title" }, `${node.id}`),
      el("div", { class: "meta" }, `${node.kind}${flowName ? " · " + flowName : ""} · ${node.visible ? "visible" : "not visible"}` +
        (steppers.length ? ` · stepper ${steppers.join(", ")}` : declaredStepper ? ` · stepper ${declaredStepper} (not bound)` : "")));
    if (node.kind === "screen" || steppers.length) {
      view.append(el("div", { class: "steps" }, steps.map((s) => el("button", {
        "data-step": s, "data-stepper": steppers[0] || "", disabled: !canPublish,
        title: canPublish ? `publish ${s} as ${steppers[0]}` : "start the studio with --allow-publish to publish",
        onclick: () => publishStep(steppers[0], s, view),
      }, s))));
    }
    const children = node.children || [];
    if (node.kind === "tabs") {
      view.append(el("div", { class: "tabbar" }, children.map((c, i) => el("span", { class: "tab" + (i === (node.selected ?? 0) ? " selected" : "") }, c.id))));
    }
    const items = el("div", { class: "items" }); view.append(items);
    for (const c of children) items.append(draw(c, c.flow && byID[c.flow] ? byID[c.flow].name : flowName, false));
    if (node.presented) view.append(draw(node.presented, node.presented.flow && byID[node.presented.flow] ? byID[node.presented.flow].name : flowName, true));
    return view;
  };
  for (const f of flows.filter((f) => !f.parent)) box.append(el("div", { class: "window" }, draw(f.root, f.name, false)));
  if (!flows.length) box.append(el("p", { class: "note" }, "no navigation tree yet"));
}

function publishStep(stepper, step, view) {
  const words = $("step-params").value.trim();
  send("step", { stepper, step, params: parseParams(words.split(/\s+/).filter(Boolean)) });
}

// ---- timeline ----
function describe(e) {
  switch (e.kind) {
    case "step": return `${e.step}${paramsText(e.params)} as ${e.stepper}`;
    case "deepLink": return `${e.step}${paramsText(e.params)} to every active flow`;
    case "willNavigate": case "didNavigate": return `${e.flow}: ${e.step}${paramsText(e.params)}${e.presentable ? " from " + e.presentable : ""}`;
    case "command": return `${e.flow}: ${e.verb} ${e.target}${e.container ? " in " + e.container : ""}`;
    case "diagnostic": return `${e.message}`;
    case "action": return `${e.reactor}: ${e.action}${paramsText(e.params)}`;
    case "state": case "snapshot": return `${e.reactor} #${e.seq}`;
    default: return e.kind;
  }
}

function renderTimeline(events) {
  const kind = $("filter-kind").value, flow = $("filter-flow").value.trim(), stepper = $("filter-stepper").value.trim(), reason = $("filter-reason").value.trim();
  const list = $("timeline"); list.replaceChildren();
  let shown = 0;
  for (let i = events.length - 1; i >= 0 && shown < 400; i--) {
    const e = events[i];
    if (kind && e.kind !== kind) continue;
    if (flow && !(e.flow || "").includes(flow)) continue;
    if (stepper && !(e.stepper || "").includes(stepper)) continue;
    if (reason && !(e.reason || "").includes(reason)) continue;
    shown++;
    const refusal = e.kind === "diagnostic";
    list.append(el("li", {
      class: (refusal ? "refusal " : "") + (selectedEvent === e.id ? "selected" : ""), "data-id": e.id, "data-kind": e.kind,
      onclick: () => { selectedEvent = selectedEvent === e.id ? null : e.id; render(); },
    }, el("span", { class: "k" }, e.kind), refusal ? el("span", { class: "reason" }, e.reason + " ") : null, describe(e),
      refusal && e.step ? el("span", { class: "note" }, ` — step ${e.step}${e.stepper ? " from " + e.stepper : ""}`) : null,
      // The trace the message belongs to: look it up in the tracing backend (docs/TRACING.md).
      e.trace_id ? el("span", { class: "trace", title: "trace id", "data-trace": e.trace_id }, ` trace ${e.trace_id}`) : null));
  }
  if (!shown) list.append(el("li", { class: "note" }, "nothing yet"));
}

// ---- reactors ----
function isPulse(v) { return v && typeof v === "object" && !Array.isArray(v) && "updateCount" in v && "value" in v && Object.keys(v).length === 2; }

function diff(before, after, path = "", out = []) {
  if (JSON.stringify(before) === JSON.stringify(after)) return out;
  const objects = before && after && typeof before === "object" && typeof after === "object" && !Array.isArray(before) && !Array.isArray(after);
  if (!objects) { out.push({ path: path || "(state)", before, after }); return out; }
  for (const k of new Set([...Object.keys(before), ...Object.keys(after)])) diff(before[k], after[k], path ? `${path}.${k}` : k, out);
  return out;
}

const forms = {}; // what is typed in each reactor's action form survives re-rendering
function renderReactors(states, previous) {
  const box = $("reactors");
  const active = document.activeElement, focused = active && active.dataset && active.dataset.form;
  box.replaceChildren();
  const ids = [...new Set([...Object.keys(states), ...config.reactors.filter((r) => !r.endsWith("/"))])].sort();
  for (const id of ids) {
    const current = states[id], before = previous[id];
    const card = el("div", { class: "reactor", "data-reactor": id }, el("div", { class: "title" }, id, current ? el("span", { class: "note" }, ` seq ${current.seq}`) : null));
    if (current) {
      card.append(el("pre", { class: "state" }, JSON.stringify(current.state, null, 1)));
      const changes = before ? diff(before.state, current.state) : [];
      card.append(el("div", { class: "diff" }, before ? (changes.length ? changes.map((c) => el("div", {
        class: c.before === undefined ? "added" : c.after === undefined ? "removed" : "changed",
      }, `${c.path}: ${text(c.before)} → ${text(c.after)}`)) : "no change from the previous state") : "first state seen"));
      for (const [k, v] of Object.entries(current.state || {})) if (isPulse(v)) {
        const fired = !before || !isPulse(before.state?.[k]) || before.state[k].updateCount !== v.updateCount;
        card.append(el("div", { class: "pulse" + (fired ? " fired" : "") }, `pulse ${k}: ${text(v.value)} (update ${v.updateCount}${fired ? ", new" : ""})`));
      }
    } else card.append(el("div", { class: "note" }, "no state seen yet"));
    if (config.allow_publish && !recording) {
      const form = (forms[id] ||= { name: "", params: "" });
      const name = el("input", { placeholder: "action", class: "action-name", "data-form": `${id}:name`, oninput: (e) => { form.name = e.target.value; } });
      const params = el("input", { placeholder: "key=value …", class: "action-params", "data-form": `${id}:params`, oninput: (e) => { form.params = e.target.value; } });
      name.value = form.name; params.value = form.params;
      card.append(el("div", { class: "form" }, name, params, el("button", { class: "action-send", onclick: () =>
        send("action", { reactor: id, action: name.value.trim(), params: parseParams(params.value.split(/\s+/).filter(Boolean)) }) }, "Send")));
    }
    box.append(card);
  }
  if (focused) { const again = box.querySelector(`[data-form="${CSS.escape(focused)}"]`); if (again) again.focus(); }
}

// ---- declared flow graph: one column per flow, arrows between ----
function renderGraph() {
  const g = config.graph, groups = [...new Set(g.nodes.map((n) => n.group || ""))];
  const W = 170, H = 34, GAP = 14, pos = {};
  const columns = groups.map(() => 0);
  for (const n of g.nodes) {
    const c = groups.indexOf(n.group || "");
    pos[n.id] = { x: 20 + c * (W + 60), y: 40 + columns[c]++ * (H + GAP) };
  }
  const height = 60 + Math.max(1, ...columns) * (H + GAP);
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${groups.length * (W + 60) + 20} ${height}`);
  const add = (tag, attrs, content) => { const n = document.createElementNS(ns, tag); for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v); if (content) n.textContent = content; svg.append(n); return n; };
  groups.forEach((name, c) => {
    add("rect", { class: "cluster", x: 10 + c * (W + 60), y: 10, width: W + 20, height: height - 20, rx: 8 });
    add("text", { x: 20 + c * (W + 60), y: 28, "font-weight": "bold" }, name || "start");
  });
  for (const e of g.edges) {
    const a = pos[e.from], b = pos[e.to]; if (!a || !b) continue;
    const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2;
    add("path", { class: "edge", d: `M${x1},${y1} C${x1 + 40},${y1} ${x2 - 40},${y2} ${x2},${y2}`, "marker-end": "" });
    if (e.label) add("text", { x: (x1 + x2) / 2, y: (y1 + y2) / 2 - 3, fill: "#64748b" }, e.label);
  }
  for (const n of g.nodes) {
    const p = pos[n.id];
    const grp = document.createElementNS(ns, "g"); grp.setAttribute("class", `gnode ${n.shape}`); svg.append(grp);
    const r = document.createElementNS(ns, "rect"); Object.entries({ x: p.x, y: p.y, width: W, height: H, rx: n.shape === "step" ? 14 : 3 }).forEach(([k, v]) => r.setAttribute(k, v)); grp.append(r);
    n.label.split("\n").forEach((line, i) => { const t = document.createElementNS(ns, "text"); t.setAttribute("x", p.x + 6); t.setAttribute("y", p.y + 14 + i * 12); t.textContent = line; grp.append(t); });
  }
  $("graph").replaceChildren(svg);
}

// ---- recordings ----
async function openRecording(file) {
  const response = await fetch(withToken("/api/recording"), { method: "POST", body: file });
  if (!response.ok) { alert("cannot open the recording: " + await response.text()); return; }
  recording = await response.json();
  recording.time = recording.duration_ns;
  selectedEvent = null;
  $("scrubber").hidden = false; $("back-live").hidden = false;
  $("mode").textContent = "recording"; $("mode").className = "badge warn";
  $("recording-name").textContent = `${file.name}: ${recording.events.length} messages${recording.truncated ? " (cut)" : ""}`;
  $("slider").value = 1000;
  render();
}

function render() {
  const view = currentView();
  renderTree(view.status);
  $("tree-note").textContent = selectedEvent !== null ? `as it was right after event #${selectedEvent} (click it again for now)` :
    recording ? `at ${(recording.time / 1e9).toFixed(3)} s of the recording` : "live";
  renderTimeline(view.events);
  renderReactors(view.states, view.previous);
  $("publish-mode").textContent = config.allow_publish ? "publishing allowed" : "read only";
  $("deeplink-form").hidden = !config.allow_publish || !!recording;
}

async function start() {
  config = await (await fetch(withToken("/api/config"))).json();
  renderGraph();
  for (const id of ["filter-kind", "filter-flow", "filter-stepper", "filter-reason"]) $(id).addEventListener("input", render);
  $("deeplink-send").onclick = () => {
    const words = $("deeplink").value.trim().split(/\s+/).filter(Boolean);
    if (words.length) send("deeplink", { step: words[0], params: parseParams(words.slice(1)) });
  };
  $("recording-file").onchange = (e) => { if (e.target.files[0]) openRecording(e.target.files[0]); };
  $("slider").oninput = () => { recording.time = Math.round(recording.duration_ns * $("slider").value / 1000); $("slider-time").textContent = (recording.time / 1e9).toFixed(3) + " s"; selectedEvent = null; render(); };
  $("back-live").onclick = () => { recording = null; selectedEvent = null; $("scrubber").hidden = true; $("back-live").hidden = true; $("mode").textContent = "live"; $("mode").className = "badge"; render(); };
  render();
  connect();
}
start();
