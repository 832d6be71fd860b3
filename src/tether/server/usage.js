"use strict";
// The usage page, served as /ui/usage.js after /ui/app.js (whose helpers it uses): what the
// token's tenant spent, tokens and cost by model over the chosen UTC days and by day and
// model, from GET /v1/usage. A session counts on the UTC day of its last event.

function usageCost(usd, unknown) {
  return "$" + usd.toFixed(6) + (unknown ? " (+" + unknown + " unknown)" : "");
}

function usageRow(label, u) {
  return row([...label, u.sessions, u.input_tokens, u.output_tokens, u.cache_read_tokens,
    u.cache_write_tokens, usageCost(u.cost_usd, u.cost_unknown_sessions)]);
}

// The window's totals per model, summed from its (day, model) groups.
function usageByModel(groups) {
  const totals = new Map();
  for (const g of groups) {
    const t = totals.get(g.model) || { sessions: 0, input_tokens: 0, output_tokens: 0,
      cache_read_tokens: 0, cache_write_tokens: 0, cost_usd: 0, cost_unknown_sessions: 0 };
    for (const key of Object.keys(t)) t[key] += g[key];
    totals.set(g.model, t);
  }
  return [...totals.entries()].sort((a, b) => b[1].cost_usd - a[1].cost_usd || (a[0] < b[0] ? -1 : 1));
}

async function showUsage() {
  showView("usage-view");
  const query = new URLSearchParams();
  if ($("usage-from").value) query.set("from", $("usage-from").value);
  if ($("usage-to").value) query.set("to", $("usage-to").value);
  const asked = query.toString();
  const data = await api("GET", "/v1/usage" + (asked ? "?" + asked : "")).catch(() => null);
  if (!data) return;
  $("usage-from").value = data.from;
  $("usage-to").value = data.to;
  const models = $("usage-models");
  models.replaceChildren();
  for (const [model, t] of usageByModel(data.usage)) {
    const tr = usageRow([model], t);
    tr.dataset.model = model;
    models.appendChild(tr);
  }
  const days = $("usage-days");
  days.replaceChildren();
  for (const g of [...data.usage].reverse()) {  // the latest day first
    const tr = usageRow([g.day, g.model], g);
    tr.dataset.day = g.day;
    tr.dataset.model = g.model;
    days.appendChild(tr);
  }
  $("usage-empty").hidden = data.usage.length > 0;
  $("usage-bounds").textContent = data.bounds.complete ? "" :
    "Only the first " + data.bounds.limit + " (day, model) groups: ask for fewer days.";
  counted("usage-view");
}

$("usage-show").addEventListener("click", () => {
  if (location.hash === "#/usage") showUsage();
  else location.hash = "#/usage";
});
