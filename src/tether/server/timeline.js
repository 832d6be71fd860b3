"use strict";
// The session timeline, served as /ui/timeline.js before /ui/app.js: a line per event from the
// stream's summaries (`?summary=true`), each opened on demand with its whole event fetched from
// /v1/sessions/{id}/events/{seq}; the steps as a waterfall (model time with the time to first
// token when the answer streamed, tool time, tokens and cost); errors marked and filterable; sub-agent threads folded away. Text is set with
// textContent only; bars are placed through the CSSOM, which the page's policy allows.

const FOLD_TEXT = 400;  // strings longer than this open folded below the JSON

// Sub-agent threads are paths (`researcher-1/critic-2`); "" is the main thread.
function parentOf(thread) {
  const cut = thread.lastIndexOf("/");
  return cut < 0 ? "" : thread.slice(0, cut);
}

function depthOf(thread) {
  return thread ? thread.split("/").length : 0;
}

// Indentation by a class, never a style attribute (the page's policy allows none); the
// deepest threads share the last step.
function depthClass(thread) {
  return "depth-" + Math.min(depthOf(thread), 4);
}

function callOf(parent, callId) {
  const thread = parent ? "[" + parent + "]" : "the main thread";
  return callId ? callId + " of " + thread : thread;
}

function threadLabel(thread) {
  const label = document.createElement("span");
  label.className = "thread";
  label.textContent = thread;
  return label;
}

function text(message) {
  return (message && message.parts || []).filter((p) => p && p.type === "text").map((p) => p.text).join("");
}

function seqs(d) {
  return d.first_seq === d.last_seq ? "event " + d.first_seq : "events " + d.first_seq + "–" + d.last_seq;
}

function describe(event) {
  const d = event.data || {};
  switch (event.type) {
    case "session.created": {
      const tools = Object.keys(d.tools || {});
      return d.model + (tools.length ? " · tools " + tools.join(", ") : " · no tools") + (d.system ? " · system: " + clip(d.system, 80) : "");
    }
    case "user.message": return "user: " + clip(text(d.message), 200);
    case "session.forked":
      return d.kind + " of " + d.parent + " at seq " + d.parent_seq + " · " + d.model + (d.system ? " · system: " + clip(d.system, 80) : "");
    case "model.requested": // tools_digest: the request offered other tools than the one before it
      return d.model + ", ~" + d.input_tokens_estimate + " input tokens"
        + (d.tools_digest ? " · tools now: " + ((d.tools || []).join(", ") || "none") : "");
    case "model.responded": {
      const calls = ((d.message || {}).parts || []).filter((p) => p && p.type === "tool_call");
      const said = text(d.message);
      return (calls.length ? "asks for " + calls.map((c) => c.name + "(" + clip(JSON.stringify(c.arguments), 60) + ")").join(", ") + " " : "")
        + (said ? clip(said, 200) : "") + " [" + d.stop + "]";
    }
    case "tool.started": return d.name + " [" + d.call_id + ", " + d.effect + "]";
    case "tool.finished": return d.outcome + " [" + d.call_id + "] " + clip(d.content, 200);
    case "approval.requested":
      return d.name + "(" + clip(JSON.stringify(d.arguments || {}), 60) + ") waits for a decision [" + d.call_id + "]";
    case "approval.decided":
      return (d.allow ? "allowed" : "denied") + " [" + d.call_id + "]" + (d.reason ? " — " + clip(d.reason, 120) : "");
    case "cancel.requested": return d.scope;
    case "context.compacted": {
      const cost = d.cost_usd == null ? "" : " ($" + d.cost_usd.toFixed(6) + ")";
      if (d.summary != null) return "summarised " + seqs(d) + " into: " + clip(d.summary, 160) + (d.model ? " — by " + d.model + cost : "");
      const ids = d.cleared_call_ids || [];
      return "cleared the results of " + ids.length + " call(s) in " + seqs(d) + ": " + clip(ids.join(", "), 120);
    }
    case "turn.ended": return d.stop_reason + (d.detail ? " — " + clip(d.detail, 120) : "");
    case "session.ended": return d.outcome + (d.detail ? " — " + clip(d.detail, 120) : "");
    case "thread.started": {
      const who = (d.agent || "an agent") + (d.model ? " (" + d.model + ")" : "");
      const where = callOf(parentOf(d.thread), d.parent_call_id);
      return who + (d.handoff ? " takes the turn over from " + where : " runs " + where);
    }
    case "thread.finished":
      return d.stop_reason + (d.detail ? " — " + clip(d.detail, 120) : "") + (d.output ? ": " + clip(d.output, 200) : "");
    case "model.failed": return d.error_class + ": " + clip(d.message, 160) + (d.retrying_in != null ? " (retrying in " + millis(1000 * d.retrying_in) + ")" : "");
    default: return clip(JSON.stringify(d), 160);
  }
}

// What counts as an error: shown in red and kept by the "errors only" filter.
function isError(event) {
  const d = event.data || {};
  switch (event.type) {
    case "model.failed": return true;
    case "tool.finished": return d.outcome !== "ok";
    case "turn.ended": case "thread.finished": return d.stop_reason === "error";
    case "session.ended": return d.outcome === "failed";
    default: return false;
  }
}

function millis(ms) {
  if (ms == null || Number.isNaN(ms)) return "–";
  return ms < 1000 ? Math.round(ms) + " ms" : (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + " s";
}

// A whole event as pretty JSON, its long strings folded out below it (each a <details>).
function renderWhole(box, event) {
  const folds = [];
  const fold = (value, path) => {
    if (typeof value === "string" && value.length > FOLD_TEXT) {
      folds.push([path, value]);
      return "‹" + value.length + " characters: " + path + ", below›";
    }
    if (Array.isArray(value)) return value.map((v, i) => fold(v, path + "[" + i + "]"));
    if (value && typeof value === "object") {
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, fold(v, path + "." + k)]));
    }
    return value;
  };
  const pre = document.createElement("pre");
  pre.className = "json";
  pre.textContent = JSON.stringify(fold(event.data, "data"), null, 2);
  box.replaceChildren(pre);
  for (const [path, value] of folds) {
    const details = document.createElement("details");
    const summary = document.createElement("summary");
    summary.textContent = path + " (" + value.split("\n").length + " lines, " + value.length + " characters)";
    const body = document.createElement("pre");
    body.textContent = value;
    details.append(summary, body);
    box.appendChild(details);
  }
}

class Timeline {
  constructor(path) {
    this.path = path;
    this.list = $("timeline");
    this.steps = $("waterfall");
    this.folded = new Set();  // threads whose events (and their sub-threads') are hidden
    this.open = new Map();  // thread -> its step waiting for a model answer or its tools
    this.calls = new Map();  // thread + " " + call id -> its step
    this.rows = [];  // [step, its row], to place their bars
    this.turn = null;
    this.turns = 0;
    this.first = null;  // the session's first event time (ms), the waterfall's zero
    this.last = null;
    this.errors = 0;
    this.placing = false;
    this.list.replaceChildren();
    this.steps.replaceChildren();
    $("error-count").textContent = "";
  }

  // Adds the event's line and step; gives its line (lineage.js puts a fork point on it).
  add(event) {
    const at = Date.parse(event.time);
    if (this.first == null) this.first = at;
    this.last = Math.max(this.last || at, at);
    const item = this.line(event);
    this.list.appendChild(item);
    this.step(event, at);
    if (!this.placing) {
      this.placing = true;
      requestAnimationFrame(() => { this.placing = false; this.place(); });
    }
    return item;
  }

  line(event) {
    const item = document.createElement("li");
    const thread = event.thread || "";
    item.dataset.type = event.type;
    item.dataset.thread = thread;
    item.dataset.seq = String(event.seq);
    item.className = depthClass(thread);
    if (isError(event)) {
      item.classList.add("err");
      this.errors += 1;
      $("error-count").textContent = " (" + this.errors + ")";
    }
    if (this.hidden(thread)) item.hidden = true;
    const button = document.createElement("button");
    button.className = "line";
    button.setAttribute("aria-expanded", "false");
    button.setAttribute("aria-controls", "event-" + event.seq);
    button.append(String(event.seq).padStart(4) + "  ");
    if (thread) button.append(threadLabel(thread), " ");
    button.append(event.type.padEnd(18) + describe(event));
    if (event.clipped) {
      const size = document.createElement("span");
      size.className = "size";
      size.textContent = "  (cut; whole: " + (event.size < 10240 ? event.size + " bytes" : Math.round(event.size / 1024) + " KB") + ")";
      button.appendChild(size);
    }
    const whole = document.createElement("div");
    whole.className = "whole";
    whole.id = "event-" + event.seq;
    whole.hidden = true;
    button.addEventListener("click", () => this.toggle(event.seq, button, whole));
    item.append(button, whole);
    return item;
  }

  // The whole event is fetched the first time its line is opened, never before.
  async toggle(seq, button, whole) {
    const opening = whole.hidden;
    whole.hidden = !opening;
    button.setAttribute("aria-expanded", String(opening));
    if (!opening || whole.dataset.loaded) return;
    whole.dataset.loaded = "loading";
    whole.textContent = "loading…";
    try {
      renderWhole(whole, await api("GET", this.path + "/events/" + seq));
      whole.dataset.loaded = "yes";
    } catch (error) {
      whole.textContent = "could not load event " + seq + ": " + error.message;
      delete whole.dataset.loaded;
    }
  }

  // Steps: a model call (model.requested → model.responded) and the tools it asked for.
  step(event, at) {
    const d = event.data || {};
    const thread = event.thread || "";
    if (event.type === "user.message" && !thread) {
      this.turns += 1;
      this.turn = { n: this.turns, start: at, end: null, row: this.turnRow(this.turns) };
    } else if (event.type === "turn.ended" && this.turn) {
      this.turn.end = at;
      this.turn.row.querySelector(".took").textContent = millis(at - this.turn.start) + " · " + d.stop_reason;
    } else if (event.type === "model.requested") {
      const step = { thread, start: at, modelEnd: null, latency: null, toolMs: 0, toolEnd: null, failed: false };
      this.open.set(thread, step);
      step.tr = this.stepRow(step, thread);
      this.rows.push([step, step.tr]);
    } else if (event.type === "model.responded" || event.type === "model.failed") {
      const step = this.open.get(thread);
      if (!step) return;
      step.modelEnd = at;
      if (event.type === "model.failed") { step.failed = step.failed || d.retrying_in == null; this.fill(step); return; }
      step.latency = d.latency_ms;
      step.ttft = d.first_token_ms;  // sparse: only a streamed answer has it
      step.usage = d.usage;
      step.cost = d.cost_usd;
      for (const p of ((d.message || {}).parts || [])) {
        if (p && p.type === "tool_call") this.calls.set(thread + " " + p.id, step);
      }
      this.fill(step);
    } else if (event.type === "tool.finished") {
      const step = this.calls.get(thread + " " + d.call_id) || this.open.get(thread);
      if (!step) return;
      step.toolMs += d.duration_ms || 0;
      step.toolEnd = Math.max(step.toolEnd || at, at);
      if (d.outcome !== "ok") step.failed = true;
      this.fill(step);
    }
  }

  turnRow(n) {
    const tr = document.createElement("tr");
    tr.className = "turn";
    const cell = document.createElement("th");
    cell.colSpan = 8;
    cell.scope = "rowgroup";
    const took = document.createElement("span");
    took.className = "took muted";
    cell.append("turn " + n + " ", took);
    tr.appendChild(cell);
    this.steps.appendChild(tr);
    return tr;
  }

  stepRow(step, thread) {
    const tr = document.createElement("tr");
    tr.className = "step " + depthClass(thread);
    tr.dataset.thread = thread;
    if (this.hidden(thread)) tr.hidden = true;
    const n = this.rows.length + 1;
    const first = document.createElement("td");
    first.append(String(n));
    tr.appendChild(first);
    const where = document.createElement("td");
    if (thread) where.appendChild(threadLabel(thread));
    else where.textContent = "main";
    tr.appendChild(where);
    for (const name of ["model", "tools", "tokens", "cost", "bar"]) {
      const cell = document.createElement("td");
      cell.className = name;
      tr.appendChild(cell);
    }
    const bar = tr.querySelector(".bar");
    const track = document.createElement("div");
    track.className = "track";
    const model = document.createElement("span");
    model.className = "model-time";
    const tools = document.createElement("span");
    tools.className = "tool-time";
    track.append(model, tools);
    bar.appendChild(track);
    step.n = n;
    this.steps.appendChild(tr);
    return tr;
  }

  fill(step) {
    const tr = step.tr;
    const modelMs = step.modelEnd == null ? null : step.modelEnd - step.start;
    const said = [];
    if (step.latency != null) said.push("latency " + millis(step.latency));
    if (step.ttft != null) said.push("first token " + millis(step.ttft));
    tr.querySelector(".model").textContent = millis(modelMs) + (said.length ? " (" + said.join(", ") + ")" : "");
    tr.querySelector(".tools").textContent = step.toolEnd == null ? "–" : millis(step.toolMs);
    const u = step.usage;
    tr.querySelector(".tokens").textContent = u ? u.input_tokens + "+" + u.output_tokens : "–";
    tr.querySelector(".cost").textContent = step.cost == null ? (u ? "unknown" : "–") : "$" + step.cost.toFixed(6);
    tr.classList.toggle("err", step.failed);
  }

  // Each bar on the session's time axis: its model time, then its tools' time.
  place() {
    const span = Math.max(1, this.last - this.first);
    const pct = (ms) => Math.max(0, Math.min(100, (100 * ms) / span));
    for (const [step, tr] of this.rows) {
      const model = tr.querySelector(".model-time");
      const tools = tr.querySelector(".tool-time");
      const modelEnd = step.modelEnd == null ? this.last : step.modelEnd;
      model.style.marginLeft = pct(step.start - this.first) + "%";
      model.style.width = Math.max(0.5, pct(modelEnd - step.start)) + "%";
      tools.style.width = step.toolEnd == null ? "0" : Math.max(0.5, pct(step.toolEnd - modelEnd)) + "%";
    }
  }

  hidden(thread) {
    for (let t = thread; t; t = parentOf(t)) if (this.folded.has(t)) return true;
    return false;
  }

  // Folds a thread (and every thread under it) out of the timeline and the waterfall.
  fold(thread, folded) {
    if (folded) this.folded.add(thread); else this.folded.delete(thread);
    for (const el of [...this.list.children, ...this.steps.querySelectorAll("tr.step")]) {
      el.hidden = this.hidden(el.dataset.thread || "");
    }
  }
}
