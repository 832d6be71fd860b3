"use strict";
// The start form, served as /ui/start.js after /ui/app.js (whose helpers it uses): a model, a
// task and tools chosen from what the operator allows (GET /v1/start-options), sent as
// POST /v1/sessions; the new session then opens. What the server refuses is said as it says it.

function splitSpecs(text) {
  return text.split(/[\s,]+/).map((s) => s.trim()).filter(Boolean);
}

// One checkbox per tool spec the server offers, kept by spec (a reload keeps what is ticked).
function offerTools(options) {
  const box = $("start-tools");
  const ticked = new Set([...box.querySelectorAll("input:checked")].map((i) => i.value));
  box.replaceChildren();
  for (const offered of options.tools) {
    const input = document.createElement("input");
    input.type = "checkbox";
    input.value = offered.spec;
    input.checked = ticked.has(offered.spec);
    const names = offered.tools.map((t) => t.name).join(", ");
    const label = document.createElement("label");
    label.className = "check";
    const spec = document.createElement("span");
    spec.className = "mono";
    spec.textContent = offered.spec;
    label.append(input, " ", spec, " — " + (names || "no tools"));
    const item = document.createElement("li");
    item.appendChild(label);
    box.appendChild(item);
  }
  $("start-tools-none").hidden = options.tools.length > 0;
  const patterns = options.allow_code;
  $("start-allowed").textContent = patterns == null
    ? "This server loads any code a spec names."
    : patterns.length
      ? "This server loads only code matching: " + patterns.join(", ") + "."
      : "This server loads no code (tether serve --allow-code): provider models only, no tools.";
}

function startSpec() {
  const spec = { model: $("start-model").value.trim(), task: $("start-task").value.trim() };
  const tools = [...$("start-tools").querySelectorAll("input:checked")].map((i) => i.value);
  tools.push(...splitSpecs($("start-tools-other").value));
  if (tools.length) spec.tools = [...new Set(tools)];
  const system = $("start-system").value.trim();
  if (system) spec.system = system;
  const steps = $("start-steps").value.trim();
  if (steps) spec.limits = { max_steps: Number(steps) };
  if ($("start-end").checked) spec.end_after_turn = true;
  return spec;
}

async function submitStart() {
  const spec = startSpec();
  const missing = !spec.model ? "start-model" : !spec.task ? "start-task" : null;
  if (missing) {
    $("start-problem").textContent = (missing === "start-model" ? "a model" : "a task") + " is needed";
    $(missing).focus();
    return;
  }
  $("start-submit").disabled = true;
  $("start-problem").textContent = "";
  try {
    const started = await api("POST", "/v1/sessions", spec);
    $("start-task").value = "";
    location.hash = "#/s/" + encodeURIComponent(started.session_id);
  } catch (error) {
    $("start-problem").textContent = "not started: " + error.message;
  } finally {
    $("start-submit").disabled = false;
  }
}

$("start-submit").addEventListener("click", submitStart);

async function showStart() {
  showView("start-view");
  $("start-problem").textContent = "";
  offerModels();  // list.js: the models of the sessions listed so far
  const options = await api("GET", "/v1/start-options").catch(() => null);
  if (options) offerTools(options);
  counted("start-view");
}
