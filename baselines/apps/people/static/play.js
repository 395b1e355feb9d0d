// The play page (served with a Content-Security-Policy that allows no inline script).
"use strict";
let game = null, state = null;
const $ = (id) => document.getElementById(id);

async function init() {
  const options = await api("GET", "/api/options");
  for (const name of options.envs) $("env").append(el("option", {}, name));
  for (const spec of options.opponents) $("opponent").append(el("option", {}, spec));
}

function show(newState) {
  state = newState;
  $("title").textContent = `${state.env}: you are the ${state.side} (scenario ${state.scenario_id})`;
  $("system").textContent = state.messages.length ? state.messages[0].content : "";
  renderLog($("conversation"), state.log, state.side, $("show-vs").checked);
  renderTools($("tools"), state.over ? [] : state.tools, callTool);
  $("send").disabled = !state.your_turn;
  $("status").textContent = state.over ? "" : (state.your_turn ? "your turn" : "waiting");
  $("error").textContent = state.error || "";
  $("result").replaceChildren();
  if (state.over) {
    $("result").append(el("h3", {id: "end-reason"}, `ended: ${state.end_reason}`), rewardTable(state.reward_info));
  }
}

async function move(path, body) {
  try { show(await api("POST", `/api/games/${game.game}/${path}`, body, {"X-Token": game.token})); }
  catch (error) { $("error").textContent = error.message; }
}

function callTool(name, args) { move("tool", {name, arguments: args}); }

$("setup").addEventListener("submit", async (event) => {
  event.preventDefault();
  $("error").textContent = "";
  try {
    game = await api("POST", "/api/games", {env: $("env").value, side: $("side").value,
      opponent: $("opponent").value, task_id: $("task").value || null, seed: Number($("seed").value || 0)});
    show(game.state);
  } catch (error) { $("error").textContent = error.message; }
});
$("chat").addEventListener("submit", (event) => {
  event.preventDefault();
  const text = $("message").value;
  if (!text.trim() || !game) return;
  $("message").value = "";
  move("say", {text});
});
$("show-vs").addEventListener("change", () => state && show(state));
init();
