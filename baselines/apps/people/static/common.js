// Shared helpers of the SCOPE pages: API calls, conversation rendering, tool forms, reward tables.
"use strict";

async function api(method, path, body, headers) {
  const response = await fetch(path, {
    method,
    headers: Object.assign({"Content-Type": "application/json"}, headers || {}),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    let detail = data.detail;
    if (Array.isArray(detail)) detail = detail.map((d) => `${(d.loc || []).slice(1).join(".")}: ${d.msg}`).join("; ");
    throw new Error(detail || `HTTP ${response.status}`);
  }
  return data;
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child);
  return node;
}

// The conversation: one bubble per log entry; tool calls and results shown as such.
// `otherName` labels the other side (a study says "partner", hiding which side or condition it is).
function renderLog(container, log, mySide, showVs, otherName) {
  container.replaceChildren();
  for (const entry of log) {
    const message = entry.message;
    const who = mySide && entry.side === mySide ? "you" : (otherName || entry.side);
    const bubble = el("div", {class: `turn ${entry.side} ${message.role}`, "data-side": entry.side});
    if (message.role === "tool") {
      bubble.append(el("div", {class: "who"}, `tool result (${message.name || ""}) for ${who}`),
                    el("pre", {class: "tool-result"}, String(message.content ?? "")));
    } else {
      bubble.append(el("div", {class: "who"}, who));
      if (message.content) bubble.append(el("div", {class: "text"}, String(message.content)));
      for (const call of message.tool_calls || []) {
        bubble.append(el("pre", {class: "tool-call"}, `${call.function.name}(${call.function.arguments})`));
      }
    }
    if (entry.vs) {
      const list = el("ol", {class: "vs" + (showVs ? "" : " hidden")});
      entry.vs.candidates.forEach((text, i) => {
        const p = entry.vs.probabilities[i];
        list.append(el("li", {}, `${p === null || p === undefined ? "?" : Number(p).toFixed(2)}  ${text}`));
      });
      bubble.append(el("div", {class: "vs-title" + (showVs ? "" : " hidden")}, "Verbalized Sampling candidates"), list);
    }
    container.append(bubble);
  }
  container.scrollTop = container.scrollHeight;
}

// One form per tool, built from its OpenAI schema; `onCall(name, arguments)` sends it.
function renderTools(container, tools, onCall) {
  container.replaceChildren();
  if (!tools.length) return;
  container.append(el("h3", {}, "Tools"));
  for (const tool of tools) {
    const fn = tool.function;
    const params = fn.parameters || {};
    const required = new Set(params.required || []);
    const form = el("form", {class: "tool", "data-tool": fn.name});
    form.append(el("div", {class: "tool-name"}, fn.name), el("div", {class: "tool-doc"}, fn.description || ""));
    for (const [name, spec] of Object.entries(params.properties || {})) {
      const type = spec.type || "string";
      const input = type === "boolean" ? el("input", {type: "checkbox", name})
        : (type === "array" || type === "object") ? el("textarea", {name, rows: "2", placeholder: "JSON"})
        : el("input", {type: (type === "number" || type === "integer") ? "number" : "text", name,
                       step: type === "number" ? "any" : "1"});
      input.dataset.type = type;
      form.append(el("label", {}, `${name}${required.has(name) ? " *" : ""} (${type})`, input));
    }
    form.append(el("button", {type: "submit"}, `call ${fn.name}`));
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const args = {};
      for (const input of form.querySelectorAll("input, textarea")) {
        const type = input.dataset.type;
        if (type === "boolean") { if (input.checked) args[input.name] = true; continue; }
        if (input.value === "") continue;
        if (type === "number" || type === "integer") args[input.name] = Number(input.value);
        else if (type === "array" || type === "object") {
          try { args[input.name] = JSON.parse(input.value); } catch { args[input.name] = input.value; }
        } else args[input.name] = input.value;
      }
      onCall(fn.name, args);
    });
    container.append(form);
  }
}

function rewardTable(rewardInfo) {
  const table = el("table", {class: "rewards"});
  table.append(el("tr", {}, el("th", {}, "side"), el("th", {}, "reward"), el("th", {}, "components")));
  for (const [side, info] of Object.entries(rewardInfo || {})) {
    const parts = Object.entries(info.components || {}).map(([k, v]) => `${k}: ${v}`).join(", ");
    table.append(el("tr", {"data-side": side}, el("td", {}, side), el("td", {class: "reward"}, String(info.reward)),
                    el("td", {}, parts)));
  }
  return table;
}
