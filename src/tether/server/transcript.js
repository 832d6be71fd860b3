"use strict";
// A session's answer and transcript, served as /ui/transcript.js before /ui/app.js. The
// transcript is the fold's (what the model saw), read a page at a time from
// /v1/sessions/{id}/transcript: 50 messages a page, each text cut at 2,000 characters with its
// whole a click away; a sub-agent's thread sits under the call that started it and is read
// when opened. The answer is the poll's `last_output`, whole. Text is set with textContent
// only, so nothing a model or a tool said can run here.

const TRANSCRIPT_LIMIT = 50;
const RUNNING = ["pending", "waiting_model", "waiting_tool", "waiting_approval", "waiting_input", "canceling"];
const ROLES = { user: "user", assistant: "assistant", tool: "tool results", system: "system" };

// Copies what `get` gives (a string, or a promise of one); says so on the button.
function copyButton(what, get) {
  const button = document.createElement("button");
  button.type = "button";
  button.className = "copy";
  button.textContent = "Copy";
  button.setAttribute("aria-label", "copy " + what);
  button.addEventListener("click", async () => {
    try {
      await writeClipboard(await get());
      button.textContent = "Copied";
    } catch (error) {
      button.textContent = "Copy failed";
    }
    setTimeout(() => { button.textContent = "Copy"; }, 1500);
  });
  return button;
}

// The clipboard API exists only on secure origins (https, or loopback): elsewhere a hidden
// box is selected and copied the old way.
async function writeClipboard(text) {
  if (navigator.clipboard && window.isSecureContext) return navigator.clipboard.writeText(text);
  const box = document.createElement("textarea");
  box.value = text;
  box.setAttribute("readonly", "");
  box.className = "offscreen";
  document.body.appendChild(box);
  box.select();
  const done = document.execCommand("copy");
  box.remove();
  if (!done) throw new Error("the browser refused to copy");
}

function showAnswer(status) {
  const shown = !RUNNING.includes(status.state) && Boolean(status.last_output);
  $("answer-panel").hidden = !shown;
  if (!shown) return;
  // An answer is what a turn that ended by itself said; after an error, a limit or a
  // cancel it is only the last thing the model said.
  const answered = status.stop_reason === "end_turn" || status.state === "completed";
  const title = !answered ? "last output (" + [status.state, status.stop_reason].filter(Boolean).join(", ") + ")"
    : status.state === "idle" ? "answer of the last turn" : "answer";
  if ($("answer-title").textContent !== title) $("answer-title").textContent = title;
  if ($("answer").textContent !== status.last_output) $("answer").textContent = status.last_output;
}

$("answer-copy").addEventListener("click", () => {
  writeClipboard($("answer").textContent).then(
    () => { $("answer-copy").textContent = "Copied"; },
    () => { $("answer-copy").textContent = "Copy failed"; });
  setTimeout(() => { $("answer-copy").textContent = "Copy the answer"; }, 1500);
});

function clearAnswer() {
  $("answer-panel").hidden = true;
  $("answer").textContent = "";
}

// One thread's transcript in `box`: its pages in order, a button for the next one.
class ThreadTranscript {
  constructor(path, thread, box) {
    this.path = path;
    this.thread = thread;
    this.list = document.createElement("ol");
    this.list.className = "messages";
    this.list.setAttribute("aria-label", thread ? "transcript of thread " + thread : "transcript");
    this.more = document.createElement("button");
    this.more.type = "button";
    this.more.className = "more";
    this.more.hidden = true;
    this.more.addEventListener("click", () => this.load());
    this.said = document.createElement("p");
    this.said.className = "muted";
    box.replaceChildren(this.said, this.list, this.more);
    this.next = 0;  // the index of the first message not shown
    this.compactions = null;
    this.names = new Map();  // call id -> tool name, to label results
    this.loading = null;
    this.stale = false;
  }

  url(after, limit, clip) {
    const query = new URLSearchParams({ after: String(after), limit: String(limit) });
    if (this.thread) query.set("thread", this.thread);
    if (clip != null) query.set("clip", String(clip));
    return this.path + "/transcript?" + query.toString();
  }

  // The next page; a live session's new messages when every page so far is shown.
  load() {
    if (this.loading) { this.stale = true; return this.loading; }
    this.loading = this.page().finally(() => {
      this.loading = null;
      if (this.stale) { this.stale = false; if (this.more.hidden) this.load(); }
    });
    return this.loading;
  }

  refresh() {
    if (this.more.hidden) this.load();
  }

  async page() {
    let page;
    try {
      page = await api("GET", this.url(this.next, TRANSCRIPT_LIMIT));
    } catch (error) {
      this.said.textContent = "could not load the transcript: " + error.message;
      return;
    }
    // Compaction replaced older messages by a summary: the indices moved, start again.
    if (this.compactions != null && page.compactions !== this.compactions) {
      this.compactions = page.compactions;
      this.next = 0;
      this.list.replaceChildren();
      return this.page();
    }
    this.compactions = page.compactions;
    if (this.next === 0 && page.system && !this.list.children.length) {
      this.list.appendChild(this.item({ index: -1, role: "system", parts: [Object.assign({ type: "text" }, page.system)] }, []));
    }
    const threads = new Map(page.threads.map((t) => [t.thread, t]));
    for (const message of page.messages) this.list.appendChild(this.item(message, threads));
    this.next = page.next == null ? page.total : page.next;
    const left = page.total - this.next;
    this.more.hidden = left <= 0;
    this.more.textContent = "Show the next " + Math.min(left, TRANSCRIPT_LIMIT) + " of " + left + " more messages";
    this.said.textContent = page.total ? "" : "No messages yet.";
    this.list.dataset.total = String(page.total);
  }

  item(message, threads) {
    const li = document.createElement("li");
    li.className = "message role-" + message.role;
    li.dataset.index = String(message.index);
    li.dataset.role = message.role;
    const who = document.createElement("div");
    who.className = "who";
    who.textContent = ROLES[message.role] || message.role;
    li.appendChild(who);
    message.parts.forEach((part, at) => li.appendChild(this.part(part, message.index, at, threads)));
    return li;
  }

  part(part, index, at, threads) {
    const box = document.createElement("div");
    box.className = "part " + part.type;
    box.dataset.type = part.type;
    if (part.type === "text") {
      this.body(box, part, index, at, "div", "text");
    } else if (part.type === "thinking") {
      const fold = document.createElement("details");
      const summary = document.createElement("summary");
      summary.textContent = part.chars ? "reasoning (" + part.chars.toLocaleString() + " characters)" : "reasoning (its text not given by the provider)";
      fold.appendChild(summary);
      if (part.chars) this.body(fold, part, index, at, "div", "reasoning");
      box.appendChild(fold);
    } else if (part.type === "tool_call") {
      this.names.set(part.id, part.name);
      const head = document.createElement("div");
      const name = document.createElement("strong");
      name.className = "mono";
      name.textContent = part.name;
      head.append("calls ", name, " ");
      const id = document.createElement("span");
      id.className = "mono muted";
      id.textContent = part.id;
      head.appendChild(id);
      box.appendChild(head);
      this.body(box, part, index, at, "pre", "the arguments of " + part.name);
      if (part.thread) box.appendChild(this.subagent(part.thread, threads.get(part.thread)));
    } else if (part.type === "tool_result") {
      const head = document.createElement("div");
      const name = document.createElement("strong");
      name.className = "mono";
      name.textContent = this.names.get(part.call_id) || "a call";
      head.append("result of ", name, " ");
      const id = document.createElement("span");
      id.className = "mono muted";
      id.textContent = part.call_id;
      head.appendChild(id);
      if (part.is_error) { box.classList.add("err"); head.append(" (error)"); }
      if (part.images && part.images.length) head.append(" · " + part.images.length + " image(s)");
      box.appendChild(head);
      this.body(box, part, index, at, "pre", "the result of " + (this.names.get(part.call_id) || part.call_id));
    } else if (part.type === "image") {
      box.textContent = "image" + (part.media_type ? " (" + part.media_type + ")" : "") + (part.url ? ", by URL" : "");
    } else {
      box.textContent = part.type;
    }
    return box;
  }

  // A text with its copy button, and when the page cut it, a button that fetches it whole.
  body(box, part, index, at, tag, what) {
    const body = document.createElement(tag);
    body.className = "body";
    body.textContent = part.text;
    const tools = document.createElement("div");
    tools.className = "tools";
    let whole = part.cut ? null : part.text;
    const fetchWhole = async () => {
      if (whole != null) return whole;
      if (index < 0) {  // the system prompt is the page's, not a message's
        const page = await api("GET", this.url(0, 1, 0));
        whole = page.system.text;
      } else {
        const page = await api("GET", this.url(index, 1, 0));
        whole = page.messages[0].parts[at].text;
      }
      return whole;
    };
    if (part.cut) {
      const more = document.createElement("button");
      more.type = "button";
      more.className = "whole";
      more.textContent = "Show all " + part.chars.toLocaleString() + " characters";
      more.addEventListener("click", async () => {
        more.disabled = true;
        try {
          body.textContent = await fetchWhole();
          more.remove();
        } catch (error) {
          more.disabled = false;
        }
      });
      tools.appendChild(more);
    }
    tools.appendChild(copyButton(what, fetchWhole));
    box.append(body, tools);
  }

  // A sub-agent's thread under the call that started it, its transcript read when opened.
  subagent(thread, node) {
    const fold = document.createElement("details");
    fold.className = "subagent";
    fold.dataset.thread = thread;
    const summary = document.createElement("summary");
    summary.append("sub-agent ", threadLabel(thread));
    if (node) summary.append(" " + node.agent + " · " + node.status + (node.stop_reason ? " (" + node.stop_reason + ")" : "") + (node.handoff ? " · took the turn over" : ""));
    const inner = document.createElement("div");
    inner.className = "thread-transcript";
    fold.append(summary, inner);
    let opened = null;
    fold.addEventListener("toggle", () => {
      if (!fold.open || opened) return;
      opened = new ThreadTranscript(this.path, thread, inner);
      opened.load();
    });
    return fold;
  }
}
