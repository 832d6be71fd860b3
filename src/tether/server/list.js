"use strict";
// The session list, served as /ui/list.js after /ui/app.js (whose helpers it uses): search,
// filters and sort sent to GET /v1/sessions, a page at a time by its cursor, with the count
// of sessions per state. The filters live in the page's address (#/?q=…&state=…), so a list
// can be reloaded, bookmarked or opened in another tab as it is. Text is set as text only.

// Each filter: its control, the API's parameter, and how a control's value is sent.
const FILTERS = [
  ["filter-q", "q"],
  ["filter-state", "state"],
  ["filter-stop", "stop_reason"],
  ["filter-model", "model"],
  ["filter-after", "created_after"],
  ["filter-before", "created_before"],
  ["filter-meta", "metadata"],
  ["filter-parent", "parent"],
  ["sort", "sort"],
];
const TIMED = new Set(["created_after", "created_before"]);
const knownModels = new Set();  // the models of the rows seen, offered by the model boxes

// A datetime-local box holds local time without an offset; the API is sent the UTC instant.
function sent(param, value) {
  if (!TIMED.has(param) || !value) return value;
  const at = new Date(value);
  return Number.isNaN(at.getTime()) ? value : at.toISOString();
}

function filterValues() {
  const values = new URLSearchParams();
  for (const [id, param] of FILTERS) {
    const value = $(id).value.trim();
    if (value && !(param === "sort" && value === "updated")) values.set(param, value);
  }
  return values;
}

// The filters into the address without a navigation (replaceState fires no hashchange).
function keepFilters() {
  const values = filterValues().toString();
  history.replaceState(null, "", values ? "#/?" + values : "#/");
}

function readFilters() {
  const query = location.hash.startsWith("#/?") ? location.hash.slice(3) : "";
  const values = new URLSearchParams(query);
  for (const [id, param] of FILTERS) {
    const value = values.get(param);
    $(id).value = value == null ? (param === "sort" ? "updated" : "") : value;
  }
}

function tokensText(n) {
  return Number(n || 0).toLocaleString("en");
}

function costText(s) {
  if (s.cost_usd == null) return s.tokens ? "unknown" : "–";
  return "$" + s.cost_usd.toFixed(s.cost_usd >= 1 ? 2 : 6);
}

// Rows are kept and updated in place, keyed by session: a refresh that replaced them could
// take the row from under a click between its mousedown and mouseup, and the click would be
// lost. The id is a real link, so it opens in a new tab (middle click, or ctrl/cmd).
function renderRows(body, sessions) {
  const old = new Map([...body.children].map((tr) => [tr.dataset.session, tr]));
  let at = 0;
  for (const s of sessions) {
    let tr = old.get(s.session_id);
    old.delete(s.session_id);
    if (!tr) {
      tr = document.createElement("tr");
      tr.dataset.session = s.session_id;
      const link = document.createElement("a");
      link.href = "#/s/" + encodeURIComponent(s.session_id);
      link.className = "mono";
      link.textContent = s.session_id;
      const task = document.createElement("div");
      task.className = "task muted";
      const first = document.createElement("td");
      first.append(link, task);
      tr.appendChild(first);
      for (let i = 0; i < 8; i++) tr.appendChild(document.createElement("td"));
      tr.addEventListener("click", (e) => {
        if (e.target.closest("a")) return;  // the link navigates by itself (or opens a tab)
        location.hash = "#/s/" + encodeURIComponent(s.session_id);
      });
    }
    const task = tr.querySelector(".task");
    const said = clip(s.task || "", 120);
    if (task.textContent !== said) task.textContent = said;
    const values = [s.state, s.stop_reason || "-", String(s.steps), tokensText(s.tokens), costText(s),
      s.model, null, clip(s.last_output, 90)];
    values.forEach((value, i) => {
      const cell = tr.children[i + 1];
      if (value === null) showTime(cell, s.updated);  // ui.js: local time, exact on hover
      else if (cell.textContent !== value) cell.textContent = value;
    });
    if (body.children[at] !== tr) body.insertBefore(tr, body.children[at] || null);
    at += 1;
    if (s.model) knownModels.add(s.model);
  }
  for (const tr of old.values()) tr.remove();
  offerModels();
}

function offerModels() {
  const list = $("models");
  const have = new Set([...list.children].map((o) => o.value));
  for (const model of [...knownModels].sort()) {
    if (have.has(model)) continue;
    const option = document.createElement("option");
    option.value = model;
    list.appendChild(option);
  }
}

// One button per state with its count (of the sessions every other filter lets through);
// pressing one filters by that state, pressing it again clears it. Kept by state, in place.
function renderCounts(counts) {
  const box = $("counts");
  const chosen = $("filter-state").value;
  const states = Object.keys(counts).sort();
  const old = new Map([...box.children].map((b) => [b.dataset.state, b]));
  states.forEach((state, at) => {
    let button = old.get(state);
    old.delete(state);
    if (!button) {
      button = document.createElement("button");
      button.type = "button";
      button.dataset.state = state;
      button.addEventListener("click", () => {
        $("filter-state").value = $("filter-state").value === state ? "" : state;
        filterList();
      });
    }
    const said = state + " " + counts[state];
    if (button.textContent !== said) button.textContent = said;
    button.setAttribute("aria-pressed", String(chosen === state));
    if (box.children[at] !== button) box.insertBefore(button, box.children[at] || null);
  });
  for (const button of old.values()) button.remove();
  const total = states.reduce((n, state) => n + counts[state], 0);
  $("counts-total").textContent = total + " session" + (total === 1 ? "" : "s") + (states.length ? ":" : "");
}

// The list's place, kept across views: the cursor of each page seen so far (pages[0] is null,
// the first). Paging is by the API's cursor, so a page holds the same rows while newer
// sessions come in above it.
const listing = { pages: [null], at: 0, asked: 0 };

function listQuery() {
  const q = new URLSearchParams({ limit: "50" });
  const cursor = listing.pages[listing.at];
  if (cursor) q.set("cursor", cursor);
  for (const [param, value] of filterValues()) q.set(param, sent(param, value));
  if (listing.at === 0) q.set("counts", "true");  // the same on every page: asked on the first
  return "/v1/sessions?" + q.toString();
}

async function refreshList() {
  const asked = ++listing.asked;  // an answer to an older question is dropped
  const data = await api("GET", listQuery()).catch(() => null);
  if (!data || asked !== listing.asked) return;
  listing.pages.length = listing.at + 1;
  if (data.next_cursor) listing.pages.push(data.next_cursor);
  renderRows($("sessions"), data.sessions);
  if (data.counts) renderCounts(data.counts);
  const filtered = [...filterValues().keys()].some((param) => param !== "sort");
  $("empty").textContent = filtered ? "No session matches." : "No sessions yet.";
  $("empty").hidden = data.sessions.length > 0 || listing.at > 0;
  $("page-at").textContent = "page " + (listing.at + 1) + (data.next_cursor ? "" : " (the last)");
  $("page-newer").disabled = listing.at === 0;
  $("page-older").disabled = !data.next_cursor;
  counted("list-view");
}

function turnPage(by) {
  listing.at = Math.max(0, Math.min(listing.pages.length - 1, listing.at + by));
  refreshList();
}

function filterList() {
  listing.pages = [null];
  listing.at = 0;
  keepFilters();
  refreshList();
}

// Typing waits for a pause before asking, so a word is one request, not one per letter.
let typing = null;
function typed() {
  clearTimeout(typing);
  typing = setTimeout(filterList, 250);
}

$("page-older").addEventListener("click", () => turnPage(1));
$("page-newer").addEventListener("click", () => turnPage(-1));
for (const [id] of FILTERS) {
  const control = $(id);
  const text = control.tagName === "INPUT" && control.type !== "datetime-local";
  control.addEventListener(text ? "input" : "change", text ? typed : filterList);
}
$("filter-clear").addEventListener("click", () => {
  for (const [id, param] of FILTERS) $(id).value = param === "sort" ? "updated" : "";
  filterList();
});

async function showList() {
  showView("list-view");
  const before = filterValues().toString();
  readFilters();
  if (filterValues().toString() !== before) {  // other filters: their first page
    listing.pages = [null];
    listing.at = 0;
  }
  const mine = generation;
  await refreshList();
  if (mine !== generation) return;  // navigated away meanwhile: start nothing for this view
  timer = setInterval(refreshList, 2000);
}
