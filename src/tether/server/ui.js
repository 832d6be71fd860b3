"use strict";
// The web view's script, served as /ui/app.js (the page's policy runs no inline script): its
// helpers, the session and experiment views and the router; the list is list.js, the start
// form start.js, a session's answer and transcript transcript.js, its lineage and "fork from
// here" lineage.js, all loaded after this file.
// Everything shown comes from the API of the server that served this page; text is only ever
// set with textContent, so nothing a model or a tool said can run here.
const $ = (id) => document.getElementById(id);
const tokenInput = $("token");
tokenInput.value = localStorage.getItem("tether-token") || "";
// A `change` fires again when the box loses focus (a click on a row, say), even if the
// token is the one already in use: only a token that differs reloads the view, or that
// reload would rebuild the list under the click and the click would open nothing.
tokenInput.addEventListener("change", () => {
  const token = tokenInput.value.trim();
  if (token === (localStorage.getItem("tether-token") || "")) return;
  localStorage.setItem("tether-token", token);
  route();
});

function headers(extra) {
  const h = Object.assign({}, extra || {});
  const token = tokenInput.value.trim();
  if (token) h["Authorization"] = "Bearer " + token;
  return h;
}

async function api(method, path, body) {
  const init = { method, headers: headers(body ? { "Content-Type": "application/json" } : {}) };
  if (body) init.body = JSON.stringify(body);
  const response = await fetch(path, init);
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const message = (data.error && data.error.message) || response.statusText;
    $("problem").textContent = response.status === 401 ? tokenAdvice() : message;
    const error = new Error(message);
    error.status = response.status;  // a view tells "not found" and "forbidden" apart by it
    error.code = data.error && data.error.code;
    throw error;
  }
  $("problem").textContent = "";
  return data;
}

// What a person in a browser needs to hear when the server wants a token (the API's own
// message is written for HTTP clients).
function tokenAdvice() {
  return tokenInput.value.trim()
    ? "The server does not know this token. Check it, or ask whoever runs the server for yours."
    : "This server asks for a token. Paste the token you were given into the token box above; this browser keeps it for next time.";
}

// A stored time as a person reads it: local, to the second (the title keeps the exact value).
function localTime(iso) {
  const at = new Date(iso);
  if (!iso || Number.isNaN(at.getTime())) return iso || "";
  return at.toLocaleString(undefined, { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

function showTime(cell, iso) {
  const text = localTime(iso);
  if (cell.textContent !== text) cell.textContent = text;
  cell.title = iso || "";
  cell.classList.add("time");
}

function clip(text, n) {
  text = String(text == null ? "" : text).replace(/\s+/g, " ");
  return text.length > n ? text.slice(0, n - 1) + "…" : text;
}

let timer = null;
let generation = 0;  // bumped by each navigation: a view's late work checks it is still current
let stream = null;
let chartUrl = null;

function stopAll() {
  generation += 1;
  if (timer) clearInterval(timer);
  timer = null;
  if (stream) stream.abort();
  stream = null;
  if (chartUrl) URL.revokeObjectURL(chartUrl);
  chartUrl = null;
}

// Each view counts its refreshes on its section (data-refreshes), so a test can wait for one.
function counted(id) {
  const view = $(id);
  view.dataset.refreshes = String(Number(view.dataset.refreshes || 0) + 1);
}

const VIEWS = ["list-view", "session-view", "experiments-view", "experiment-view", "start-view", "usage-view"];

function showView(id) {
  for (const view of VIEWS) $(view).hidden = view !== id;
}

$("errors-only").addEventListener("change", () => {
  $("timeline").classList.toggle("only-errors", $("errors-only").checked);
});


// The tree is kept by thread and updated in place (a refresh must not take the focus from a
// fold button); each thread's button folds its events, and its sub-threads', away.
function showThreads(threads, timeline) {
  const list = $("threads");
  const old = new Map([...list.children].map((li) => [li.dataset.thread, li]));
  let at = 0;
  for (const t of threads) {
    let item = old.get(t.thread);
    old.delete(t.thread);
    if (!item) {
      item = document.createElement("li");
      item.dataset.thread = t.thread;
      item.className = depthClass(t.thread);
      const button = document.createElement("button");
      button.className = "fold";
      button.setAttribute("aria-expanded", "true");
      button.setAttribute("aria-label", "events of thread " + t.thread);
      button.textContent = "▾";
      button.addEventListener("click", () => {
        const open = button.getAttribute("aria-expanded") !== "true";
        button.setAttribute("aria-expanded", String(open));
        button.textContent = open ? "▾" : "▸";
        if (timeline) timeline.fold(t.thread, !open);
      });
      const said = document.createElement("span");
      said.className = "said";
      item.append(button, " ", threadLabel(t.thread), said);
    }
    const status = t.status + (t.stop_reason ? " (" + t.stop_reason + ")" : "");
    const runs = t.handoff ? " takes the turn over from " : " runs ";
    const said = " " + t.agent + " · " + status + " ·" + runs + callOf(t.parent, t.parent_call_id);
    const span = item.querySelector(".said");
    if (span.textContent !== said) span.textContent = said;
    if (list.children[at] !== item) list.insertBefore(item, list.children[at] || null);
    at += 1;
  }
  for (const li of old.values()) li.remove();
  $("threads-panel").hidden = threads.length === 0;
}

// The live panel: the model's text as it streams, its reasoning and each call's input, each
// run of one kind (and call) in a part of its own, labelled by the style sheet.
const LIVE_KINDS = new Set(["text", "reasoning", "tool_input"]);

function showDelta(box, delta) {
  const key = delta.kind + " " + (delta.call_id || "");
  let part = box.lastElementChild;
  if (!part || part.dataset.key !== key) {
    part = document.createElement("div");
    part.className = "live-" + delta.kind;
    part.dataset.key = key;
    if (delta.call_id) part.dataset.call = delta.call_id;
    box.append(part);
  }
  part.textContent += delta.text;
}

async function follow(sessionId, onEvent) {
  // fetch, not EventSource: the stream needs the Authorization header.
  const controller = new AbortController();
  stream = controller;
  let after = 0;
  let answered = true;
  while (!controller.signal.aborted) {
    try {
      const response = await fetch("/v1/sessions/" + encodeURIComponent(sessionId) + "/stream?deltas=true&summary=true",
        { headers: headers({ "Last-Event-ID": String(after), "Accept": "text/event-stream" }), signal: controller.signal });
      if (!response.ok) { $("problem").textContent = "stream: " + response.status; return; }
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const frame = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          let kind = "message", data = "";
          for (const line of frame.split("\n")) {
            if (line.startsWith("event:")) kind = line.slice(6).trim();
            else if (line.startsWith("data:")) data += line.slice(5).trim();
          }
          if (!data) continue;
          if (kind === "end") return;
          if (kind === "delta") {
            const delta = JSON.parse(data);
            if (!LIVE_KINDS.has(delta.kind)) continue;
            // A delta may come before the event that opened its request: the box starts
            // over at the first piece after an answer, not at the request.
            if (answered) { $("live").textContent = ""; answered = false; }
            showDelta($("live"), delta);
            continue;
          }
          const event = JSON.parse(data);
          if (event.seq <= after) continue;
          after = event.seq;
          // A failed attempt that will be retried streams again from its start.
          const retried = event.type === "model.failed" && event.data && event.data.retrying_in != null;
          if (event.type === "model.responded" || retried) answered = true;
          onEvent(event);
        }
      }
    } catch (error) {
      if (controller.signal.aborted) return;
    }
    await new Promise((resolve) => setTimeout(resolve, 500));  // dropped: resume after `after`
  }
}

// -- approvals ------------------------------------------------------------------------------
// A pending call is known by its key (CALL_ID, or THREAD:CALL_ID in a sub-agent's thread:
// thread ids hold no ':'); its tool, arguments and thread come from its `approval.requested`
// in the followed log, its effect from the event when the log carries one, else from an
// earlier `tool.started` of the same tool. Boxes are kept by key: a refresh adds and removes
// boxes but never rebuilds one, so focus and a half-typed reason survive it.
const FOLD_LINES = 12;  // arguments longer than this (or FOLD_CHARS) start folded
const FOLD_CHARS = 600;

function keyOf(thread, callId) {
  return thread ? thread + ":" + callId : callId;
}

class Approvals {
  constructor(box, path, refresh) {
    this.box = box;
    this.path = path;
    this.refresh = refresh;
    this.requested = new Map();  // key -> approval.requested data (whole, or a summary)
    this.clipped = new Map();  // key -> seq of a summary whose whole event is not here yet
    this.effects = new Map();  // thread + " " + tool name -> effect class
  }

  see(event) {
    const thread = event.thread || "";
    const d = event.data || {};
    if (event.type === "approval.requested") {
      this.requested.set(keyOf(thread, d.call_id), d);
      if (event.clipped) this.clipped.set(keyOf(thread, d.call_id), event.seq);
      if (d.effect) this.effects.set(thread + " " + d.name, d.effect);
    } else if (event.type === "tool.started" && d.effect) {
      this.effects.set(thread + " " + d.name, d.effect);
    } else {
      return;
    }
    for (const line of this.box.children) this.fill(line);
  }

  show(pending) {
    const keep = new Set(pending);
    for (const line of [...this.box.children]) {
      if (!keep.has(line.dataset.call)) line.remove();
    }
    const have = new Set([...this.box.children].map((line) => line.dataset.call));
    for (const key of pending) {
      if (!have.has(key)) this.box.appendChild(this.build(key));
    }
  }

  build(key) {
    const cut = key.indexOf(":");
    const thread = cut < 0 ? "" : key.slice(0, cut);
    const callId = cut < 0 ? key : key.slice(cut + 1);
    const line = document.createElement("div");
    line.className = "approval";
    line.dataset.call = key;
    line.dataset.thread = thread;
    line.setAttribute("role", "group");
    line.setAttribute("aria-label", "approval of call " + key);
    const head = document.createElement("div");
    if (thread) head.append(threadLabel(thread), " ");
    const tool = document.createElement("strong");
    tool.className = "tool mono";
    tool.textContent = "…";
    const effect = document.createElement("span");
    effect.className = "effect";
    head.append(tool, " · effect ", effect, " · call " + callId + " waits for a decision");
    const args = document.createElement("div");
    args.className = "arguments";
    const reason = document.createElement("input");
    reason.type = "text";
    reason.className = "reason";
    reason.maxLength = 10000;
    reason.placeholder = "why (optional, kept in the log)";
    const label = document.createElement("label");
    label.append("reason ", reason);
    const controls = document.createElement("div");
    controls.append(label, " ");
    for (const [text, allow] of [["Allow", true], ["Deny", false]]) {
      const button = document.createElement("button");
      button.textContent = text;
      button.className = allow ? "allow" : "deny";
      button.addEventListener("click", () => this.decide(line, key, allow));
      controls.appendChild(button);
    }
    line.append(head, args, controls);
    this.fill(line);
    return line;
  }

  // Fills what the log has told of the call; each part once, so a box being read or typed in
  // does not change under the reader.
  fill(line) {
    const d = this.requested.get(line.dataset.call);
    if (!d) return;
    const tool = line.querySelector(".tool");
    if (tool.textContent !== d.name) tool.textContent = d.name;
    const effect = line.querySelector(".effect");
    const known = d.effect || this.effects.get(line.dataset.thread + " " + d.name);
    const said = known || "not recorded before the call runs";
    if (effect.textContent !== said) { effect.textContent = said; effect.dataset.effect = known || "unknown"; }
    const args = line.querySelector(".arguments");
    if (args.dataset.filled) return;
    if (this.clipped.has(line.dataset.call)) { this.whole(line.dataset.call); return; }
    args.dataset.filled = "yes";
    const pre = document.createElement("pre");
    pre.textContent = JSON.stringify(d.arguments || {}, null, 2);
    const lines = pre.textContent.split("\n").length;
    if (lines > FOLD_LINES || pre.textContent.length > FOLD_CHARS) {
      const fold = document.createElement("details");
      const summary = document.createElement("summary");
      summary.textContent = "arguments (" + lines + " lines, " + pre.textContent.length + " characters)";
      fold.append(summary, pre);
      args.appendChild(fold);
    } else {
      args.append(pre);
    }
  }

  // The stream sends summaries: arguments cut there are fetched whole, once, for the box.
  whole(key) {
    const seq = this.clipped.get(key);
    if (seq == null || this.fetching === seq) return;
    this.fetching = seq;
    api("GET", this.path + "/events/" + seq).then((event) => {
      this.requested.set(key, event.data);
      this.clipped.delete(key);
      for (const line of this.box.children) this.fill(line);
    }).catch(() => {}).finally(() => { if (this.fetching === seq) this.fetching = null; });
  }

  decide(line, key, allow) {
    const buttons = line.querySelectorAll("button");
    for (const b of buttons) b.disabled = true;
    const reason = line.querySelector(".reason").value.trim();
    const body = { call_id: key, allow };
    if (reason) body.reason = reason;
    api("POST", this.path + "/decisions", body)
      .then(() => { line.dataset.decided = allow ? "allowed" : "denied"; this.refresh(); })
      .catch(() => { for (const b of buttons) b.disabled = false; });
  }
}

const CONTROLS = ["interrupt", "cancel", "send", "message"];

// What a session view shows before its first answer, and after a refusal: nothing of the
// session opened before it, every control off.
function clearSession(sessionId) {
  $("session-id").textContent = sessionId;
  for (const id of ["state", "stop", "figures", "waiting", "live", "session-problem"]) $(id).textContent = "";
  $("timeline").replaceChildren();
  $("waterfall").replaceChildren();
  $("approvals").replaceChildren();
  $("transcript").replaceChildren();
  clearAnswer();  // transcript.js
  clearLineage();  // lineage.js
  showThreads([]);
  for (const id of CONTROLS) $(id).disabled = true;
}

// Why the server refused to show a session, said as such: another tenant's session is "not
// found" like a missing one (the server does not tell them apart).
function refusal(error, sessionId) {
  if (error.status === 404) return "not found: no session " + sessionId + " for this token";
  if (error.status === 401 || error.status === 403) return "forbidden: " + error.message;
  return null;
}

async function showSession(sessionId) {
  showView("session-view");
  clearSession(sessionId);
  const path = "/v1/sessions/" + encodeURIComponent(sessionId);
  const approvals = new Approvals($("approvals"), path, () => refresh());
  const timeline = new Timeline(path);
  const transcript = new ThreadTranscript(path, "", $("transcript"));  // transcript.js
  const lineage = new Lineage(sessionId);  // lineage.js
  const forkPoints = new ForkPoints(sessionId, path);
  let lastSeq = 0;
  let refused = null;
  const refresh = async () => {
    let s;
    try {
      s = await api("GET", path);
    } catch (error) {
      refused = refusal(error, sessionId);
      if (refused) { clearSession(sessionId); $("session-problem").textContent = refused; }
      return;
    }
    $("session-problem").textContent = "";
    $("state").textContent = s.state;
    $("stop").textContent = s.stop_reason || "-";
    const cost = s.cost_usd == null ? "cost unknown" : "$" + s.cost_usd.toFixed(6);
    $("figures").textContent = s.steps + " steps · " + s.usage.input_tokens + "+" + s.usage.output_tokens + " tokens · " + cost;
    $("waiting").textContent = s.waiting_reason || "";
    showThreads(s.threads || [], timeline);
    approvals.show(s.pending_approvals);
    showAnswer(s);
    lineage.show(s);
    if (s.last_seq !== lastSeq) { lastSeq = s.last_seq; transcript.refresh(); }
    const ended = ["completed", "failed", "canceled"].includes(s.state);
    for (const id of CONTROLS) $(id).disabled = ended;
    counted("session-view");
  };
  $("interrupt").onclick = () => api("POST", path + "/interrupt", {}).then(refresh).catch(() => {});
  $("cancel").onclick = () => api("POST", path + "/cancel", {}).then(refresh).catch(() => {});
  $("send").onclick = () => {
    const message = $("message").value.trim();
    if (!message) return;
    api("POST", path + "/messages", { text: message }).then(() => { $("message").value = ""; refresh(); }).catch(() => {});
  };
  const mine = generation;
  await refresh();
  if (mine !== generation) return;  // navigated away meanwhile: start nothing for this view
  if (refused) return;  // nothing to follow: the page stays as it is until the next navigation
  timer = setInterval(refresh, 1000);
  follow(sessionId, (event) => { approvals.see(event); forkPoints.see(event, timeline.add(event)); });
}

// -- experiments ---------------------------------------------------------------------------
// What the server says of an experiment is the tenant's own data, and names in it are
// whatever its runs' logs hold: shown with textContent only, like everything else.

function row(values) {
  const tr = document.createElement("tr");
  for (const value of values) {
    const cell = document.createElement("td");
    if (value instanceof Node) cell.appendChild(value);
    else cell.textContent = value;
    tr.appendChild(cell);
  }
  return tr;
}

function figure(metric, value) {
  if (value == null) return "unknown";
  if (metric === "pass_rate") return (100 * value).toFixed(0) + "%";
  if (metric === "cost_usd") return "$" + value.toFixed(6);
  if (metric === "seconds") return value.toFixed(2) + " s";
  return Number.isInteger(value) ? String(value) : value.toFixed(2);
}

function withInterval(metric, value, interval) {
  if (value == null) return "unknown";
  const text = figure(metric, value);
  return interval ? text + " [" + figure(metric, interval.low) + ", " + figure(metric, interval.high) + "]" : text;
}

function summaryText(metric, s) {
  if (!s) return "unknown";
  return withInterval(metric, s.mean, s.interval) + (s.unknown ? " (" + s.unknown + " unknown)" : "");
}

function sessionLink(sessionId) {
  const link = document.createElement("a");
  link.href = "#/s/" + encodeURIComponent(sessionId);
  link.className = "mono";
  link.textContent = sessionId;
  return link;
}

async function showExperiments() {
  showView("experiments-view");
  const refresh = async () => {
    const data = await api("GET", "/v1/experiments").catch(() => null);
    if (!data) return;
    const body = $("experiments");
    body.replaceChildren();
    for (const e of data.experiments) {
      const tr = row([e.experiment_id, e.variants.join(", "), e.tasks.join(", "), e.runs, ""]);
      showTime(tr.lastChild, e.updated);
      tr.dataset.experiment = e.experiment_id;
      tr.firstChild.className = "mono";
      tr.addEventListener("click", () => { location.hash = "#/e/" + encodeURIComponent(e.experiment_id); });
      body.appendChild(tr);
    }
    $("experiments-empty").hidden = data.experiments.length > 0;
    $("experiments-scanned").textContent = data.bounds.complete ? "" :
      "The " + data.bounds.limit + " most recently updated experiments only.";
  };
  const mine = generation;
  await refresh();
  if (mine !== generation) return;  // navigated away meanwhile: start nothing for this view
  timer = setInterval(refresh, 5000);
}

async function showChart(path) {
  // fetch, not <img src>: the chart needs the Authorization header. An SVG shown as an
  // image runs no script, and the page's policy allows blob: images for this alone.
  const metric = $("chart-metric").value;
  const url = path + "/chart.svg" + (metric ? "?metric=" + encodeURIComponent(metric) : "");
  const response = await fetch(url, { headers: headers() }).catch(() => null);
  if (!response || !response.ok) return;
  const picked = $("chart-metric").selectedOptions[0];
  $("chart").alt = "each variant's " + (metric ? picked.textContent : "pass rate (or steps)") + " with its interval";
  $("chart").dataset.metric = metric;
  const blob = await response.blob();
  if (chartUrl) URL.revokeObjectURL(chartUrl);
  chartUrl = URL.createObjectURL(new Blob([blob], { type: "image/svg+xml" }));
  $("chart").src = chartUrl;
}

async function showExperiment(experimentId) {
  showView("experiment-view");
  $("experiment-id").textContent = experimentId;
  for (const id of ["experiment-shape", "experiment-notes", "variants", "comparisons", "runs"]) $(id).replaceChildren();
  $("chart").removeAttribute("src");
  const path = "/v1/experiments/" + encodeURIComponent(experimentId);
  $("chart-metric").value = "";  // each experiment opens on its default metric
  $("chart-metric").onchange = () => showChart(path);
  const r = await api("GET", path).catch(() => null);
  if (!r) return;
  const plan = r.plan;
  $("experiment-shape").textContent = plan.variants.length + " variant(s) × " + plan.tasks.length +
    " task(s) × " + plan.runs + " run(s) · " + Math.round(100 * r.confidence) + "% intervals · spent $" + r.cost.spent_usd.toFixed(6);
  const notes = $("experiment-notes");
  const note = (text) => { const li = document.createElement("li"); li.textContent = text; notes.appendChild(li); };
  for (const [task, how] of Object.entries(r.checks)) {
    if (how !== "run" && how !== "none") note("task " + task + ": check " + how + "; its pass and score are unknown");
  }
  if (r.incomplete) note(r.incomplete);
  if (!r.bounds.complete) {
    note("Reported on the newest " + Math.min(r.bounds.runs, r.bounds.runs_limit) + " of this experiment's " + r.bounds.runs + " runs" +
      (r.bounds.too_long ? "; " + r.bounds.too_long + " run(s) with logs over " + r.bounds.events_limit + " events left out." : "."));
  }
  for (const name of plan.variants) {
    const v = r.variants[name];
    const rate = v.pass_rate == null ? "unknown" + (v.unchecked ? " (checks not run on the server)" : "")
      : withInterval("pass_rate", v.pass_rate, v.pass_interval) + " · " + v.passed + "/" + (v.runs - v.unchecked);
    const tr = row([name, v.runs, rate, ...["score", "steps", "tokens", "cost_usd", "seconds"].map((m) => summaryText(m, v.metrics[m]))]);
    tr.dataset.variant = name;
    $("variants").appendChild(tr);
  }
  for (const c of r.comparisons) {
    const difference = c.verdict == null ? c.note : withInterval(c.metric, c.difference, c.interval);
    const tr = row([c.a + " against " + c.b, c.metric, difference, c.verdict == null ? "-" : c.pairs, c.verdict || "no pairs"]);
    tr.dataset.metric = c.metric;
    tr.lastChild.dataset.verdict = c.verdict || "none";
    $("comparisons").appendChild(tr);
  }
  for (const run of [...r.runs, ...r.aside]) {
    const passed = run.passed == null ? "unknown" : run.passed ? "yes" : "no";
    const tr = row([sessionLink(run.session_id), run.variant, run.task, run.repeat, run.stop_reason || "-", passed,
      run.steps, run.tokens, figure("cost_usd", run.cost_usd), figure("seconds", run.seconds)]);
    tr.dataset.session = run.session_id;
    $("runs").appendChild(tr);
  }
  await showChart(path);
}

function route() {
  stopAll();
  const session = location.hash.match(/^#\/s\/(.+)$/);
  const experiment = location.hash.match(/^#\/e\/(.+)$/);
  if (session) showSession(decodeURIComponent(session[1]));
  else if (experiment) showExperiment(decodeURIComponent(experiment[1]));
  else if (location.hash === "#/experiments") showExperiments();
  else if (location.hash === "#/new") showStart();
  else if (location.hash === "#/usage") showUsage();  // usage.js
  else showList();  // list.js
}
window.addEventListener("hashchange", route);
// The list's and the start form's scripts come after this one: the first view is shown once
// every script has run.
document.addEventListener("DOMContentLoaded", route);
