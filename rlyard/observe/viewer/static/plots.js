// Line charts drawn as SVG from metrics.jsonl rows: one panel per metric key, x = step.
"use strict";

// Shown first when present, in this order; every other numeric key can be added from a menu.
const PREFERRED_CURVES = [
  "reward/mean", "reward/pass_rate", "eval/accuracy", "eval/mean_reward", "rollout/response_tokens", "rollout/turns",
  "loss/kl", "loss/entropy", "loss/clip_fraction", "rollout/staleness_mean", "rollout/staleness_max",
  "rollout/truncated_fraction", "rollout/infra_errors", "time/step",
];

function numericKeys(rows) {
  const keys = new Set();
  for (const row of rows) for (const [k, v] of Object.entries(row)) if (k !== "step" && typeof v === "number") keys.add(k);
  return [...keys].sort();
}

function defaultCurves(keys) {
  const present = new Set(keys);
  const chosen = PREFERRED_CURVES.filter(k => present.has(k));
  for (const k of keys) if (k.includes("staleness") && !chosen.includes(k)) chosen.push(k);
  return chosen;
}

function niceRange(values) {
  let low = Math.min(...values), high = Math.max(...values);
  if (low === high) { low -= Math.abs(low) * 0.1 || 0.5; high += Math.abs(high) * 0.1 || 0.5; }
  return [low, high];
}

function lineChart(key, rows) {
  const points = rows.filter(r => typeof r[key] === "number" && typeof r.step === "number").map(r => [r.step, r[key]]);
  const W = 320, H = 160, L = 46, R = 10, T = 10, B = 22;
  const last = points.length ? points[points.length - 1][1] : null;
  const panel = el("figure", {class: "chart", dataset: {key}},
    el("figcaption", {}, el("span", {class: "key"}, key), el("span", {class: "last"}, points.length ? fmt(last, 4) : "no data")));
  const plot = svg("svg", {viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img"});
  panel.appendChild(plot);
  if (!points.length) return panel;
  const [x0, x1] = niceRange(points.map(p => p[0])), [y0, y1] = niceRange(points.map(p => p[1]));
  const sx = x => L + (x - x0) / (x1 - x0) * (W - L - R), sy = y => H - B - (y - y0) / (y1 - y0) * (H - T - B);
  plot.appendChild(svg("rect", {x: L, y: T, width: W - L - R, height: H - T - B, class: "frame"}));
  for (const [y, anchor] of [[y0, H - B], [y1, T + 8]]) plot.appendChild(svg("text", {x: L - 4, y: anchor, class: "tick", "text-anchor": "end"}, fmt(y, 3)));
  plot.appendChild(svg("text", {x: L, y: H - 6, class: "tick"}, `step ${fmt(x0)}`));
  plot.appendChild(svg("text", {x: W - R, y: H - 6, class: "tick", "text-anchor": "end"}, fmt(x1)));
  const d = points.map((p, i) => `${i ? "L" : "M"}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join(" ");
  plot.appendChild(svg("path", {d, class: "line"}));
  for (const [x, y] of points.length <= 200 ? points : []) {
    plot.appendChild(svg("circle", {cx: sx(x).toFixed(1), cy: sy(y).toFixed(1), r: 2.5, class: "dot"}, svg("title", {}, `step ${x}: ${fmt(y, 4)}`)));
  }
  return panel;
}
