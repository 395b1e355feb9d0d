// The view page (served with a Content-Security-Policy that allows no inline script).
"use strict";
const $ = (id) => document.getElementById(id);
let current = null, facetsFilled = false;

function fill(select, values) { for (const v of values) select.append(el("option", {value: String(v)}, String(v))); }

async function load() {
  const params = new URLSearchParams();
  if ($("f-step").value) params.set("step", $("f-step").value);
  if ($("f-simulator").value) params.set("simulator", $("f-simulator").value);
  if ($("f-end").value) params.set("end_reason", $("f-end").value);
  if ($("f-min").value) params.set("min_reward", $("f-min").value);
  try {
    const data = await api("GET", `/api/run?${params}`);
    $("run").textContent = `run: ${data.run}`;
    if (!facetsFilled) {
      fill($("f-step"), data.facets.steps); fill($("f-simulator"), data.facets.simulators);
      fill($("f-end"), data.facets.end_reasons); facetsFilled = true;
    }
    const table = $("episodes");
    table.replaceChildren(el("tr", {}, ...["#", "step", "scenario", "simulator", "reward", "end"].map((h) => el("th", {}, h))));
    for (const row of data.episodes) {
      const tr = el("tr", {class: "row", "data-index": String(row.index), onclick: () => open(row.index)},
        ...[row.index, row.step, row.scenario_id, row.simulator, row.reward.toFixed(2), row.end_reason].map((v) => el("td", {}, String(v))));
      table.append(tr);
    }
  } catch (error) { $("error").textContent = error.message; }
}

function describe(record) {
  return el("div", {class: "meta"},
    el("div", {}, `step ${record.step} · scenario ${record.scenario_id} · seed ${record.seed}`),
    el("div", {}, `simulator: ${record.simulator} · players: ${JSON.stringify(record.players)}`),
    el("div", {}, `ended: ${record.end_reason} after ${record.turns} turns`),
    rewardTable(record.reward_info));
}

async function open(index) {
  current = await api("GET", `/api/run/episodes/${index}`);
  $("title").textContent = `Episode ${index}`;
  $("meta").replaceChildren(describe(current));
  $("side-by-side").replaceChildren();
  $("compare").hidden = false;
  renderLog($("conversation"), current.log, null, $("show-vs").checked);
}

$("compare").addEventListener("click", async () => {
  const pair = await api("GET", `/api/run/compare?scenario_id=${encodeURIComponent(current.scenario_id)}`);
  $("conversation").replaceChildren();
  const box = $("side-by-side");
  box.replaceChildren();
  for (const [label, record] of [["early", pair.early], ["late", pair.late]]) {
    const log = el("div", {class: "conversation"});
    renderLog(log, record.log, null, $("show-vs").checked);
    box.append(el("div", {id: `compare-${label}`}, el("h3", {}, `${label}: step ${record.step}`), describe(record), log));
  }
});
$("filters").addEventListener("submit", (event) => { event.preventDefault(); load(); });
$("show-vs").addEventListener("change", () => current && renderLog($("conversation"), current.log, null, $("show-vs").checked));
load();
