// The study page (served with a Content-Security-Policy that allows no inline script).
"use strict";
const $ = (id) => document.getElementById(id);
const query = new URLSearchParams(location.search);
const pid = query.get("participant"), headers = {"X-Token": query.get("token") || ""};

const seenKey = `scope-study-ended-${pid}`;
let latest = null;

// How a conversation ended, in words (the env's end reason; an opponent that failed is said plainly).
function endingText(last) {
  if (last.end_reason === "opponent_error") return "Your partner could not reply, so the conversation ended there.";
  return `The conversation ended: ${String(last.end_reason || "finished").replaceAll("_", " ")}.`;
}

function endedUnseen(view) {
  return view.last && sessionStorage.getItem(seenKey) !== String(view.last.slot);
}

function show(view) {
  latest = view;
  $("study-name").textContent = view.study;
  for (const box of ["consent-box", "play-box", "tools-box", "ended-box", "questions-box", "thanks-box"]) {
    $(box).hidden = true;
  }
  if (view.consented && endedUnseen(view) && !view.answered) {
    $("ended-box").hidden = false;
    $("ended-reason").textContent = endingText(view.last);
    renderLog($("ended-conversation"), view.last.log, view.last.side, false, "partner");
    return;
  }
  if (!view.consented) {
    $("consent-box").hidden = false;
    $("instructions-text").textContent = view.instructions;
    $("consent-text").textContent = view.consent;
    return;
  }
  if (view.current) {
    const state = view.current.state, done = view.episodes.filter((e) => e.status === "done").length;
    $("play-box").hidden = false;
    $("progress").textContent = `Conversation ${done + 1} of ${view.episodes.length}`;
    $("system").textContent = state.messages.length ? state.messages[0].content : "";
    renderLog($("conversation"), state.log, state.side, false, "partner");
    $("tools-box").hidden = !state.tools.length;
    renderTools($("tools"), state.tools, (name, args) => move("tool", {name, arguments: args}));
    $("send").disabled = !state.your_turn;
    return;
  }
  if (!view.answered) {
    $("questions-box").hidden = false;
    $("last").textContent = view.last ? endingText(view.last) : "";
    const form = $("questions");
    form.replaceChildren();
    for (const q of view.questionnaire) {
      const input = q.scale ? el("input", {type: "number", min: q.scale[0], max: q.scale[1], name: q.id, required: ""})
                            : el("textarea", {name: q.id, maxlength: "4000"});
      form.append(el("label", {}, q.question, el("br"), input), el("br"));
    }
    form.append(el("button", {id: "submit-answers", type: "submit"}, "submit"));
    return;
  }
  $("thanks-box").hidden = false;
}

async function call(method, path, body) {
  try { show(await api(method, `/api/study/${encodeURIComponent(pid)}${path}`, body, headers)); $("error").textContent = ""; }
  catch (error) { $("error").textContent = error.message; $("fatal").textContent = error.message; }
}
function move(path, body) { return call("POST", `/${path}`, body); }

$("consent").addEventListener("click", () => call("POST", "/consent"));
$("continue").addEventListener("click", () => {
  sessionStorage.setItem(seenKey, String(latest.last.slot));
  show(latest);
});
$("chat").addEventListener("submit", (event) => {
  event.preventDefault();
  const text = $("message").value;
  if (!text.trim()) return;
  $("message").value = "";
  move("say", {text});
});
$("questions").addEventListener("submit", (event) => {
  event.preventDefault();
  const answers = {};
  for (const input of $("questions").querySelectorAll("input, textarea")) {
    answers[input.name] = input.type === "number" ? Number(input.value) : input.value;
  }
  move("answers", {answers});
});
call("GET", "");
