// One trajectory as chat: prompt messages, then the turns after the prompt as trained (sampled)
// and untrained (tool output, template) segments, each sampled token a span with its logprob.
"use strict";

// ChatML (<|im_start|>role ... <|im_end|>) and Llama 3 headers; other templates show as one raw block.
const CHAT_PATTERNS = [
  /<\|im_start\|>(\w+)\n?([\s\S]*?)(?:<\|im_end\|>\n?|$)/g,
  /<\|start_header_id\|>(\w+)<\|end_header_id\|>\n*([\s\S]*?)(?:<\|eot_id\|>|$)/g,
];
const TOOL_CALL = /<tool_call>[\s\S]*?(?:<\/tool_call>|$)|```(?:bash|sh|python)?\n[\s\S]*?(?:```|$)/g;

function chatMessages(text) {
  for (const pattern of CHAT_PATTERNS) {
    const found = [...text.matchAll(pattern)].map(m => ({role: m[1], content: m[2]}));
    if (found.length) return found.filter(m => m.content.trim() !== "");
  }
  return text.trim() ? [{role: "text", content: text}] : [];
}

function roleOf(message) {
  return message.role === "user" && /^\s*<tool_response>/.test(message.content) ? "tool" : message.role;
}

function bubble(kind, label, trained, ...body) {
  return el("div", {class: `msg ${kind} ${trained ? "trained" : "untrained"}`},
    el("div", {class: "who"}, label, el("span", {class: "mask-tag"}, trained ? "trained" : "not trained")), el("div", {class: "body"}, ...body));
}

function messageBubble(message) {
  const role = roleOf(message);
  const label = {tool: "tool output", system: "system", user: "user", assistant: "assistant (in prompt)"}[role] || role;
  return bubble(role === "tool" ? "tool" : role === "assistant" ? "model" : "prompt", label, false, message.content);
}

// The character spans of tool calls in the model's text, so their tokens get the tool-call style.
function toolCallSpans(text) {
  return [...text.matchAll(TOOL_CALL)].map(m => [m.index, m.index + m[0].length]);
}

function sampledBubble(segment, turn) {
  const pieces = segment.pieces || [], logprobs = segment.logprobs || [];
  const spans = toolCallSpans(pieces.join(""));
  let at = 0;
  const tokens = pieces.map((piece, i) => {
    const lp = logprobs[i];
    const inCall = spans.some(([a, b]) => at < b && at + piece.length > a);
    at += piece.length;
    const level = lp === undefined ? "" : lp < -2.3 ? " lp-low" : lp < -0.7 ? " lp-mid" : "";
    return el("span", {class: `tok${inCall ? " call" : ""}${level}`, dataset: {lp: lp === undefined ? "" : lp},
      title: lp === undefined ? null : `logprob ${lp.toFixed(3)}  p=${Math.exp(lp).toFixed(3)}`}, piece);
  });
  const calls = spans.length ? el("span", {class: "badge call"}, `${spans.length} tool call${spans.length > 1 ? "s" : ""}`) : null;
  return bubble("model", [`model · turn ${turn} · ${pieces.length} tokens `, calls], true, ...tokens);
}

function untrainedBubbles(segment) {
  const messages = chatMessages(segment.text || "");
  if (!messages.length) return [];
  return messages.map(m => roleOf(m) === "assistant" ? null : messageBubble(m)).filter(Boolean);
}

// Without per-token segments (a run folder from before they were recorded) the completion is shown
// whole, marked as sampled, with tool calls highlighted by text.
function completionBubble(text) {
  const spans = toolCallSpans(text), parts = [];
  let at = 0;
  for (const [a, b] of spans) {
    parts.push(text.slice(at, a), el("span", {class: "tok call"}, text.slice(a, b)));
    at = b;
  }
  parts.push(text.slice(at));
  return bubble("model", "model (no per-token data in this row)", true, ...parts);
}

function conversation(row) {
  const items = chatMessages(row.prompt || "").map(messageBubble);
  if (Array.isArray(row.segments)) {
    let turn = 0;
    for (const segment of row.segments) items.push(...(segment.sampled ? [sampledBubble(segment, ++turn)] : untrainedBubbles(segment)));
  } else {
    items.push(completionBubble(row.completion || ""));
  }
  return el("div", {class: "chat"}, items);
}

function components(row) {
  const entries = Object.entries(row.components || {});
  if (!entries.length) return el("p", {class: "muted"}, "no reward components");
  const scale = Math.max(1, ...entries.map(([, v]) => Math.abs(Number(v)) || 0));
  return el("table", {class: "grid components"}, el("tbody", {}, entries.map(([name, value]) => el("tr", {},
    el("td", {}, name), el("td", {class: "num"}, fmt(value, 3)),
    el("td", {class: "barcell"}, el("span", {class: `bar${value < 0 ? " neg" : ""}`, style: {width: `${Math.round(Math.abs(value) / scale * 100)}%`}}))))));
}

function diffView(text) {
  return el("pre", {class: "diff"}, String(text).split("\n").map(line => el("span", {
    class: line.startsWith("+") && !line.startsWith("+++") ? "add" : line.startsWith("-") && !line.startsWith("---") ? "del"
      : line.startsWith("@@") ? "hunk" : null}, line + "\n")));
}

function graderOutput(row, id) {
  const info = row.info || {};
  const blocks = [];
  if (row._screenshot) blocks.push(el("figure", {class: "screenshot"}, el("img", {src: `/api/trajectory/${id}/screenshot`, alt: "the grader's screenshot"})));
  for (const [key, value] of Object.entries(info)) {
    const body = /diff|patch/.test(key) && typeof value === "string" ? diffView(value)
      : el("pre", {}, typeof value === "string" ? value : JSON.stringify(value, null, 2));
    blocks.push(el("div", {class: "info-item"}, el("h4", {}, key), body));
  }
  return blocks.length ? blocks : [el("p", {class: "muted"}, "the grader returned no details")];
}

function advantageOf(row) {
  if (typeof row.advantage === "number") return [row.advantage, "advantage"];
  const mean = row._group && row._group.mean_reward;
  return typeof mean === "number" && typeof row.reward === "number" ? [row.reward - mean, "reward − group mean"] : [null, "advantage"];
}

function facts(row) {
  const ix = row._index || {};
  const [adv, advLabel] = advantageOf(row);
  const pairs = [["reward", fmt(row.reward)], [advLabel, fmt(adv)], ["finish", row.finish_reason || "–"],
    ["infra error", row.infra_error ? "yes" : "no"], ["step", fmt(row.step)], ["turns", fmt(row.turns)],
    ["sampled tokens", fmt(row.num_tokens)], ["policy versions", (row.policy_versions || []).join(", ") || "–"],
    ["family", ix.family || "–"], ["task", row.task_id], ["group", row.group_id]];
  return el("dl", {class: `facts${row.infra_error ? " infra" : ""}`}, pairs.map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
}

function trajectoryView(row, id) {
  return el("article", {class: "trajectory", dataset: {id}},
    el("h2", {}, `trajectory #${id} `, el("span", {class: `badge ${row.reward > 0 ? "ok" : "fail"}`}, `reward ${fmt(row.reward)}`)),
    facts(row),
    el("section", {}, el("h3", {}, "score breakdown"), components(row)),
    el("section", {}, el("h3", {}, "turns"), conversation(row)),
    el("section", {class: "grader"}, el("h3", {}, "grader output"), graderOutput(row, id)));
}

function maskLegend() {
  const toggle = el("input", {type: "checkbox", id: "mask-toggle", checked: document.body.classList.contains("mask-on"),
    onchange: e => document.body.classList.toggle("mask-on", e.target.checked)});
  return el("div", {class: "legend"}, el("label", {}, toggle, " show loss mask "),
    el("span", {class: "swatch trained"}, "trained (sampled by the policy)"), el("span", {class: "swatch untrained"}, "not trained (prompt, tool output)"),
    el("span", {class: "swatch call"}, "tool call"), el("span", {class: "muted"}, "hover a token for its logprob"));
}

// A fixed strip that names the hovered token: the native tooltip is slow and hard to read.
document.addEventListener("mouseover", event => {
  const inspector = document.getElementById("inspector");
  const token = event.target.closest && event.target.closest(".tok[data-lp]");
  if (!inspector || !token || token.dataset.lp === "") { if (inspector) inspector.hidden = true; return; }
  const lp = Number(token.dataset.lp);
  inspector.replaceChildren(el("code", {}, JSON.stringify(token.textContent)), ` logprob ${lp.toFixed(3)} p = ${Math.exp(lp).toFixed(3)}`);
  inspector.hidden = false;
});
