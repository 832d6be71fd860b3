"use strict";
// The start form, served as /ui/start.js after /ui/app.js (whose helpers it uses): a model, a
// task, tools, MCP servers and models chosen from what the operator allows
// (GET /v1/start-options), model settings, sub-agents and metadata pairs (rows added and
// removed), sent as POST /v1/sessions; the new session then opens. What the server refuses is said as it says it.

function splitSpecs(text) {
  return text.split(/[\s,]+/).map((s) => s.trim()).filter(Boolean);
}

// A list of checkboxes, one per offered value, kept by value (a reload keeps what is ticked);
// `describe(value)` gives the text after the value.
function offerChecks(listId, values, describe) {
  const box = $(listId);
  const ticked = new Set([...box.querySelectorAll("input:checked")].map((i) => i.value));
  box.replaceChildren();
  for (const value of values) {
    const input = document.createElement("input");
    input.type = "checkbox";
    input.value = value;
    input.checked = ticked.has(value);
    const label = document.createElement("label");
    label.className = "check";
    const name = document.createElement("span");
    name.className = "mono";
    name.textContent = value;
    label.append(input, " ", name, describe(value));
    const item = document.createElement("li");
    item.appendChild(label);
    box.appendChild(item);
  }
}

function checked(listId) {
  return [...$(listId).querySelectorAll("input:checked")].map((i) => i.value);
}

// The tool specs the server offers, each with the names of its tools; the operator's MCP
// servers (tether serve --mcp), by name only.
function offerTools(options) {
  const names = new Map(options.tools.map((o) => [o.spec, o.tools.map((t) => t.name).join(", ")]));
  offerChecks("start-tools", options.tools.map((o) => o.spec), (spec) => " — " + (names.get(spec) || "no tools"));
  const servers = options.mcp || [];
  offerChecks("start-mcp", servers, () => "");
  $("start-mcp-none").hidden = servers.length > 0;
  $("start-tools-none").hidden = options.tools.length > 0;
  const patterns = options.allow_code;
  $("start-allowed").textContent = patterns == null
    ? "This server loads any code a spec names."
    : patterns.length
      ? "This server loads only code matching: " + patterns.join(", ") + "."
      : "This server loads no code (tether serve --allow-code): provider models only, no tools.";
}

// The offered models, one group per provider; a choice fills the model box. Every offered
// model is also a suggestion for a sub-agent's model.
function offerStartModels(groups) {
  const select = $("start-offered");
  select.replaceChildren(select.options[0]);
  const suggestions = $("start-models");
  suggestions.replaceChildren();
  for (const group of groups) {
    const optgroup = document.createElement("optgroup");
    optgroup.label = group.provider;
    for (const model of group.models) {
      optgroup.appendChild(new Option(model, model));
      suggestions.appendChild(new Option(model));
    }
    if (group.template) optgroup.appendChild(new Option(group.template + " (write it below)", group.template));
    if (optgroup.children.length) select.appendChild(optgroup);
  }
}

$("start-offered").addEventListener("change", () => {
  const chosen = $("start-offered").value;
  if (!chosen) return;
  $("start-model").value = chosen;
  if (chosen.includes("MODEL")) $("start-model").focus();  // a template: the name is to write
});

// A row of labelled inputs with a Remove button; `fields` are [name, label, attributes].
function addRow(listId, fields) {
  const item = document.createElement("li");
  item.className = "row";
  for (const [name, label, attributes] of fields) {
    const input = document.createElement("input");
    input.dataset.field = name;
    input.setAttribute("aria-label", label);
    input.placeholder = label;
    input.autocomplete = "off";
    input.spellcheck = false;
    for (const [key, value] of Object.entries(attributes || {})) input.setAttribute(key, value);
    item.appendChild(input);
  }
  const remove = document.createElement("button");
  remove.type = "button";
  remove.textContent = "Remove";
  remove.addEventListener("click", () => {
    const next = item.nextElementSibling || item.previousElementSibling;
    item.remove();
    (next ? next.querySelector("input") : $(listId + "-add")).focus();
  });
  item.appendChild(remove);
  $(listId).appendChild(item);
  item.querySelector("input").focus();
}

$("start-agent-add").addEventListener("click", () => addRow("start-agents", [
  ["name", "sub-agent name"], ["model", "its model", { list: "start-models" }],
  ["description", "what it does (optional)"],
]));
$("start-metadata-add").addEventListener("click", () => addRow("start-metadata", [
  ["key", "metadata key"], ["value", "value"],
]));

// Each row's fields by name, blank rows left out.
function rows(listId) {
  return [...$(listId).children].map((item) => Object.fromEntries(
    [...item.querySelectorAll("input")].map((i) => [i.dataset.field, i.value.trim()]),
  )).filter((row) => Object.values(row).some(Boolean));
}

function startSettings() {
  const settings = {};
  if ($("start-reasoning").value) settings.reasoning = { effort: $("start-reasoning").value };
  const temperature = $("start-temperature").value.trim();
  if (temperature) settings.temperature = Number(temperature);
  const maxOutput = $("start-max-output").value.trim();
  if (maxOutput) settings.max_output_tokens = Number(maxOutput);
  if (!$("start-cache").checked) settings.cache = false;
  return settings;
}

function startSpec() {
  const spec = { model: $("start-model").value.trim(), task: $("start-task").value.trim() };
  const tools = checked("start-tools");
  tools.push(...splitSpecs($("start-tools-other").value));
  if (tools.length) spec.tools = [...new Set(tools)];
  const servers = checked("start-mcp");
  if (servers.length) spec.mcp = servers;
  const system = $("start-system").value.trim();
  if (system) spec.system = system;
  const steps = $("start-steps").value.trim();
  if (steps) spec.limits = { max_steps: Number(steps) };
  if ($("start-end").checked) spec.end_after_turn = true;
  const settings = startSettings();
  if (Object.keys(settings).length) spec.settings = settings;
  const agents = rows("start-agents");
  if (agents.length) {
    spec.agents = Object.fromEntries(agents.map((a) => [a.name, a.description
      ? { model: a.model, description: a.description } : { model: a.model }]));
  }
  const pairs = rows("start-metadata");
  if (pairs.length) spec.metadata = Object.fromEntries(pairs.map((p) => [p.key, p.value]));
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
  if (options) {
    offerTools(options);
    offerStartModels(options.models || []);
  }
  counted("start-view");
}
