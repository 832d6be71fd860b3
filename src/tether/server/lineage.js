"use strict";
// A session's lineage and forking from its steps, served as /ui/lineage.js after /ui/app.js
// (whose helpers it uses). The lineage: the parent a fork came from and where (the poll's
// `forked`), and the session's own forks (GET /v1/sessions?parent=ID, a page of them with a
// link to all). "Fork from here": each turn's start (the message that opened it) and end on
// the event list gets a button that opens a small form and sends
// POST /v1/sessions/{id}/fork at that seq; the child's page opens. Text is set as text only.

const FORKS_SHOWN = 20;  // forks listed on a session's page; the list page has them all
const FORKS_EVERY_MS = 5000;  // how often an open page asks again for its forks

// Nothing of the session opened before (ui.js's clearSession).
function clearLineage() {
  $("lineage-panel").hidden = true;
  $("forked-from").replaceChildren();
  $("forked-from").hidden = true;
  delete $("forked-from").dataset.key;
  $("forks").replaceChildren();
  delete $("forks").dataset.said;
  $("forks-box").hidden = true;
}

class Lineage {
  constructor(sessionId) {
    this.sessionId = sessionId;
    this.asked = 0;  // when the forks were last asked for (ms)
    this.asking = false;
    this.generation = generation;  // ui.js: a later navigation makes this page's answers stale
  }

  // Called with each poll: where this session came from, and now and then its forks.
  show(status) {
    if (this.generation !== generation) return;  // a poll answered after the page changed
    this.showParent(status.forked || null);
    if (!this.asking && Date.now() - this.asked >= FORKS_EVERY_MS) this.showForks();
  }

  showParent(forked) {
    const box = $("forked-from");
    const key = forked ? [forked.parent, forked.parent_seq, forked.kind].join(" ") : "";
    if (box.dataset.key === key) return;  // unchanged: keep the link under a pointer as it is
    box.dataset.key = key;
    box.hidden = !forked;
    if (!forked) { box.replaceChildren(); this.reveal(); return; }
    const parent = sessionLink(forked.parent);  // ui.js
    parent.id = "parent-link";
    box.replaceChildren("forked from ", parent, " at seq " + forked.parent_seq + " (" + forked.kind + ")");
    this.reveal();
  }

  async showForks() {
    this.asking = true;
    const query = new URLSearchParams({ parent: this.sessionId, limit: String(FORKS_SHOWN), sort: "newest" });
    try {
      const data = await api("GET", "/v1/sessions?" + query.toString()).catch(() => null);
      if (!data || this.generation !== generation) return;  // another page is shown now
      const list = $("forks");
      // Rebuilt only when a fork or its state changed: a link under a pointer stays put.
      const said = data.sessions.map((s) => s.session_id + " " + s.state).join(" ");
      if (list.dataset.said !== said) {
        list.dataset.said = said;
        list.replaceChildren(...data.sessions.map((s) => {
          const item = document.createElement("li");
          item.dataset.session = s.session_id;
          item.append(sessionLink(s.session_id), " " + s.state);
          return item;
        }));
      }
      const more = $("forks-more");
      more.hidden = !data.next_cursor;
      more.href = "#/?" + new URLSearchParams({ parent: this.sessionId }).toString();
      $("forks-said").textContent = data.next_cursor
        ? "the newest " + data.sessions.length + " of its forks:"
        : data.sessions.length + " fork" + (data.sessions.length === 1 ? "" : "s") + ":";
      $("forks-box").hidden = data.sessions.length === 0;
      this.reveal();
    } finally {
      this.asked = Date.now();
      this.asking = false;
    }
  }

  reveal() {
    $("lineage-panel").hidden = $("forked-from").hidden && $("forks-box").hidden;
  }
}

// "Fork from here" on the event list. A turn opens with the main thread's first message
// after the end of the turn before it (a message sent during a turn joins that turn), and
// ends at its `turn.ended`; sub-agent threads have no fork points of their own.
class ForkPoints {
  constructor(sessionId, path) {
    this.sessionId = sessionId;
    this.path = path;
    this.turns = 0;
    this.open = false;  // a turn of the main thread is running at this point of the log
  }

  // Called with each event and its line on the event list, in order.
  see(event, item) {
    if (event.thread) return;
    if (event.type === "user.message" && !this.open) {
      this.open = true;
      this.turns += 1;
      this.offer(item, event.seq, "the start of turn " + this.turns,
        "The fork shares this session's log up to this message; its first step answers it again. A message given here joins that turn.");
    } else if (event.type === "turn.ended") {
      this.open = false;
      this.offer(item, event.seq, "the end of turn " + this.turns,
        "The fork shares this session's log up to the end of this turn. A message given here opens its next turn; without one it waits for a message.");
    }
  }

  offer(item, seq, where, how) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "fork";
    button.textContent = "Fork from here";
    button.setAttribute("aria-label", "fork from here: " + where + " (seq " + seq + ")");
    button.setAttribute("aria-expanded", "false");
    button.setAttribute("aria-controls", "fork-" + seq);
    let form = null;
    button.addEventListener("click", () => {
      if (!form) {
        form = this.form(seq, where, how);
        item.appendChild(form);
      }
      form.hidden = !form.hidden;
      button.setAttribute("aria-expanded", String(!form.hidden));
      if (!form.hidden) form.querySelector("textarea").focus();
    });
    item.classList.add("forkable");
    item.insertBefore(button, item.querySelector(".whole"));
  }

  form(seq, where, how) {
    const form = document.createElement("div");
    form.className = "fork-form";
    form.hidden = true;  // opened by its button
    form.id = "fork-" + seq;
    form.dataset.seq = String(seq);
    form.setAttribute("role", "group");
    form.setAttribute("aria-label", "fork at " + where + " (seq " + seq + ")");
    const said = document.createElement("p");
    said.className = "muted";
    said.textContent = "A new session from " + where + " (seq " + seq + "); this one is kept as it is. " + how;
    const message = this.field(form, "textarea", "message", "message for the fork (optional)");
    const model = this.field(form, "input", "model", "model (optional; this session's if left empty)");
    model.setAttribute("list", "models");  // the models of the sessions listed so far
    const system = this.field(form, "textarea", "system", "system prompt (optional; this session's if left empty)");
    const problem = document.createElement("div");
    problem.className = "error fork-problem";
    problem.setAttribute("role", "alert");
    const submit = document.createElement("button");
    submit.type = "button";
    submit.className = "fork-submit";
    submit.textContent = "Fork";
    submit.addEventListener("click", () => this.submit(seq, { message, model, system }, submit, problem));
    form.prepend(said);
    form.append(submit, problem);
    return form;
  }

  field(form, tag, name, label) {
    const input = document.createElement(tag);
    input.id = "fork-" + form.dataset.seq + "-" + name;
    input.dataset.field = name;
    input.autocomplete = "off";
    input.spellcheck = false;
    const caption = document.createElement("label");
    caption.className = "block";
    caption.htmlFor = input.id;
    caption.textContent = label;
    form.append(caption, input);
    return input;
  }

  async submit(seq, fields, submit, problem) {
    const body = { at: { seq } };
    for (const [name, input] of Object.entries(fields)) {
      const value = input.value.trim();
      if (value) body[name] = value;
    }
    submit.disabled = true;  // one fork per press, however often it is pressed
    problem.textContent = "";
    try {
      const forked = await api("POST", this.path + "/fork", body);
      location.hash = "#/s/" + encodeURIComponent(forked.session_id);
    } catch (error) {
      // Another tenant's session is not found, as one that does not exist.
      const why = error.code === "session_not_found" ? "no session " + this.sessionId + " for this token" : error.message;
      problem.textContent = "not forked: " + why;
    } finally {
      submit.disabled = false;
    }
  }
}
