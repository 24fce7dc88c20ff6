// The page: a hash router over overview, steps -> groups -> trajectories, one trajectory, and a comparison.
"use strict";

const main = document.getElementById("main");
const state = {extraCurves: [], timer: null};
const LIST_FILTERS = ["family", "finish", "reward_min", "reward_max", "step_min", "step_max", "infra", "group", "q", "offset"];

// replaceChildren would write a skipped (null) part as the text "null"
function show(...children) {
  main.replaceChildren();
  append(main, children);
}

function route() {
  const [path, query] = (location.hash.slice(1) || "/").split("?");
  return {parts: path.split("/").filter(Boolean), params: new URLSearchParams(query || "")};
}

async function render() {
  clearInterval(state.timer);
  const {parts, params} = route();
  try {
    const [page] = parts;
    if (!page) await overviewPage();
    else if (page === "steps") await stepsPage();
    else if (page === "groups") await groupsPage(Number(parts[1]));
    else if (page === "list") await listPage(params);
    else if (page === "t") await trajectoryPage(Number(parts[1]));
    else if (page === "compare") await comparePage(Number(parts[1]), Number(parts[2]));
    else show(el("p", {class: "error"}, `no page ${location.hash}`));
  } catch (error) {
    show(el("p", {class: "error"}, String(error.message || error)));
  }
}

// Overview and steps refresh while the run trains; the other pages stay put while being read.
function header(overview) {
  document.getElementById("run-name").textContent = overview.run;
  document.getElementById("live").replaceChildren(el("span", {class: `badge status-${overview.status}`}, overview.status));
}

function refreshWhileLive(overview, again) {
  header(overview);
  if (overview.status === "running") state.timer = setInterval(again, 3000);
}

async function overviewPage() {
  const [overview, metrics] = await Promise.all([api("/api/overview"), api("/api/metrics")]);
  const rows = metrics.rows, keys = numericKeys(rows);
  const chosen = [...defaultCurves(keys), ...state.extraCurves.filter(k => keys.includes(k))];
  const s = overview.summary;
  const more = el("select", {id: "more-curves", onchange: e => { if (e.target.value) { state.extraCurves.push(e.target.value); render(); } }},
    el("option", {value: ""}, "add a curve…"), keys.filter(k => !chosen.includes(k)).map(k => el("option", {value: k}, k)));
  const bad = overview.facets.bad_lines.length ? el("p", {class: "error"}, `unreadable lines in trajectories.jsonl: ${overview.facets.bad_lines.join(", ")}`) : null;
  show(
    el("h2", {}, overview.run),
    el("dl", {class: "facts"}, [["status", overview.status], ["family", s.env], ["model", s.model], ["algorithm", s.algo],
      ["steps", `${fmt(s.last_step)} / ${fmt(s.total_steps)}`], ["trajectories", overview.trajectories], ["folder", overview.path]]
      .map(([k, v]) => [el("dt", {}, k), el("dd", {}, fmt(v))])),
    bad,
    el("section", {}, el("h3", {}, "curves ", more),
      rows.length ? el("div", {class: "charts", id: "charts"}, chosen.map(k => lineChart(k, rows))) : el("p", {class: "muted"}, "no metrics yet")),
    el("section", {}, el("h3", {}, "steps"), el("p", {}, el("a", {href: "#/steps"}, "steps → groups → trajectories"), " · ",
      el("a", {href: "#/list?reward_max=0"}, "failed trajectories"))),
    el("details", {}, el("summary", {}, "config.yaml"), el("pre", {class: "config"}, overview.config_text || "(no config.yaml)")));
  refreshWhileLive(overview, overviewPage);
}

async function stepsPage() {
  const [{steps}, overview] = await Promise.all([api("/api/steps"), api("/api/overview")]);
  const view = table(["step", "trajectories", "groups", "mean reward", "reward ≤ 0", "infra errors", "mean tokens"],
    steps.map(s => [fmt(s.step), s.n, s.groups, fmt(s.mean_reward), s.failed, s.infra, fmt(s.mean_tokens, 1)]),
    i => { location.hash = `#/groups/${steps[i].step}`; });
  show(el("h2", {}, "steps"), steps.length ? view : el("p", {class: "muted"}, "no trajectories yet"));
  refreshWhileLive(overview, stepsPage);
}

async function groupsPage(step) {
  const {groups} = await api(`/api/groups?step=${step}`);
  const view = table(["group", "task", "family", "samples", "mean reward", "min", "max", "infra errors"],
    groups.map(g => [g.group_id, g.task_id, g.family, g.n, fmt(g.mean_reward), fmt(g.min_reward), fmt(g.max_reward), g.infra]),
    i => { location.hash = `#/list?${new URLSearchParams({group: groups[i].group_id, step_min: step, step_max: step})}`; });
  show(el("h2", {}, `step ${step}: ${groups.length} groups`), el("p", {}, el("a", {href: "#/steps"}, "← steps")), view);
}

function filterForm(params, facets) {
  const input = (name, attrs) => el("input", {name, value: params.get(name) || "", ...attrs});
  const choice = (name, options, label) => el("select", {name}, el("option", {value: ""}, label),
    options.map(o => el("option", {value: o, selected: params.get(name) === o}, o)));
  const form = el("form", {class: "filters", id: "filters"},
    input("q", {type: "search", placeholder: "search text", size: 24}),
    choice("family", facets.families, "any family"), choice("finish", facets.finish_reasons, "any finish reason"),
    el("label", {}, "reward ", input("reward_min", {size: 4, placeholder: "min"}), "–", input("reward_max", {size: 4, placeholder: "max"})),
    el("label", {}, "step ", input("step_min", {size: 4, placeholder: fmt(facets.step_min)}), "–", input("step_max", {size: 4, placeholder: fmt(facets.step_max)})),
    el("select", {name: "infra"}, [["", "infra: any"], ["1", "infra errors"], ["0", "no infra errors"]].map(([v, t]) => el("option", {value: v, selected: params.get("infra") === v}, t))),
    params.get("group") ? el("input", {type: "hidden", name: "group", value: params.get("group")}) : null,
    el("button", {type: "submit"}, "filter"),
    el("button", {type: "button", id: "failed-only", onclick: () => { location.hash = "#/list?reward_max=0"; }}, "failed only"),
    el("button", {type: "button", onclick: () => { location.hash = "#/list"; }}, "clear"));
  form.addEventListener("submit", event => {
    event.preventDefault();
    const chosen = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (String(v).trim()) chosen.set(k, String(v).trim());
    location.hash = `#/list?${chosen}`;
  });
  return form;
}

async function listPage(params) {
  const query = new URLSearchParams();
  for (const k of LIST_FILTERS) if (params.get(k)) query.set(k, params.get(k));
  const [page, overview] = await Promise.all([api(`/api/trajectories?${query}`), api("/api/overview")]);
  header(overview);
  const picked = new Set();
  const compare = el("button", {id: "compare", disabled: true, onclick: () => { location.hash = `#/compare/${[...picked].sort((a, b) => a - b).join("/")}`; }}, "compare 2 selected");
  const pick = id => el("input", {type: "checkbox", class: "pick", onclick: e => {
    e.stopPropagation();
    e.target.checked ? picked.add(id) : picked.delete(id);
    compare.disabled = picked.size !== 2;
  }});
  const rows = page.rows;
  const view = table(["", "#", "step", "task", "reward", "adv.", "finish", "turns", "tokens", "versions", "infra"],
    rows.map(r => [pick(r.id), r.id, fmt(r.step), r.task_id, fmt(r.reward), fmt(r.advantage ?? (r.reward - r.group_mean)),
      r.finish_reason, fmt(r.turns), fmt(r.num_tokens), r.versions || "–", r.infra_error ? "infra" : ""]),
    i => { location.hash = `#/t/${rows[i].id}`; });
  view.id = "trajectories";
  const offset = Number(params.get("offset") || 0);
  const move = delta => { const next = new URLSearchParams(params); next.set("offset", Math.max(0, offset + delta)); location.hash = `#/list?${next}`; };
  show(el("h2", {}, "trajectories"), filterForm(params, overview.facets),
    el("p", {class: "count", id: "count"}, `${page.total} trajectories`, rows.length ? ` · showing ${offset + 1}–${offset + rows.length}` : "", " ",
      offset > 0 ? el("button", {onclick: () => move(-100)}, "← newer") : null,
      offset + rows.length < page.total ? el("button", {onclick: () => move(100)}, "older →") : null, " ", compare),
    el("p", {class: "muted"}, "adv.: the stored advantage, else reward − group mean"),
    rows.length ? view : el("p", {class: "muted"}, "nothing matches"));
}

async function trajectoryPage(id) {
  const row = await api(`/api/trajectory/${id}`);
  const others = row._group.members.filter(m => m !== id);
  const siblings = el("p", {class: "siblings"}, `group ${row.group_id}: `, row._group.members.map(m => m === id ? el("b", {}, `#${m} `)
    : el("span", {}, el("a", {href: `#/t/${m}`}, `#${m}`), " ", el("a", {href: `#/compare/${id}/${m}`, class: "cmp"}, "compare"), " ")));
  show(el("p", {}, el("a", {href: "#/list"}, "← trajectories")), siblings, maskLegend(), trajectoryView(row, id),
    others.length ? null : el("p", {class: "muted"}, "alone in its group"));
}

async function comparePage(a, b) {
  const [left, right] = await Promise.all([api(`/api/trajectory/${a}`), api(`/api/trajectory/${b}`)]);
  const same = left.group_id === right.group_id && left.step === right.step;
  show(el("h2", {}, `compare #${a} and #${b}`),
    same ? el("p", {}, `both from group ${left.group_id} (step ${fmt(left.step)})`) : el("p", {class: "error"}, "these trajectories are from different groups"),
    maskLegend(), el("div", {class: "compare"}, trajectoryView(left, a), trajectoryView(right, b)));
}

document.body.classList.add("mask-on");
api("/api/overview").then(header).catch(() => {});
window.addEventListener("hashchange", render);
render();
