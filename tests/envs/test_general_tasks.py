"""The general family's built-in tasks: every folder well formed, every answer key recomputed
from the task's own data (CSV, JSON, SQLite) by code written apart from the generator, every
reference answer passing its rule items, and the obvious hacks (hedging between alternatives,
pasting the documents back, contradicting a gate) failing."""
from __future__ import annotations

import csv
import datetime as dt
import functools
import json
import math
import re
import sqlite3
import statistics
import tempfile
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator

BUILTIN = Path(__file__).resolve().parents[2] / "rlyard" / "envs" / "general" / "builtin"
KINDS = ("sql_tool", "csv_compute", "json_report", "summarise", "policy_qa")
METHODS = ("regex", "contains", "not_contains", "number", "json_schema", "word_count", "file", "judge")
FOLDERS = sorted(p for p in BUILTIN.iterdir() if p.is_dir())
IDS = [p.name for p in FOLDERS]


@functools.cache
def task_spec(folder: Path) -> dict:
    return yaml.safe_load((folder / "task.yaml").read_text())


@functools.cache
def rubric_raw(folder: Path) -> dict:
    return yaml.safe_load((folder / "verifier" / "rubric.yaml").read_text())


def items_by_id(folder: Path) -> dict[str, dict]:
    return {item["id"]: item for item in rubric_raw(folder)["items"]}


def database(folder: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(":memory:")
    connection.executescript((folder / task_spec(folder)["database"]).read_text())
    return connection


def rows(task_id: str, name: str) -> list[dict[str, str]]:
    with open(BUILTIN / task_id / "workspace" / name, newline="") as f:
        return list(csv.DictReader(f))


def workspace_text(folder: Path) -> str:
    root = folder / "workspace"
    return "\n".join(p.read_text() for p in sorted(root.rglob("*")) if p.is_file()) if root.is_dir() else ""


# ---------------------------------------------------------------------------------- shape of the set

def test_the_set_has_enough_tasks_of_every_kind_and_enough_rule_only_tasks():
    kinds = [task_spec(f)["kind"] for f in FOLDERS]
    assert len(FOLDERS) >= 32
    assert {k: kinds.count(k) for k in KINDS} == {k: max(6, kinds.count(k)) for k in KINDS}
    rule_only = [f.name for f in FOLDERS if all(i["method"] != "judge" for i in rubric_raw(f)["items"])]
    assert 3 * len(rule_only) >= len(FOLDERS), rule_only
    assert set(kinds) == set(KINDS)


@pytest.mark.parametrize("folder", FOLDERS, ids=IDS)
def test_task_folder_is_well_formed(folder):
    spec = task_spec(folder)
    assert {"id", "kind", "statement"} <= set(spec) <= {"id", "kind", "statement", "tools", "database"}
    assert spec["id"] == folder.name and spec["kind"] in KINDS and folder.name.startswith(spec["kind"] + "_")
    assert len(spec["statement"].split()) >= 30
    assert (folder / "verifier" / "reference.md").read_text().strip()
    if spec["kind"] == "sql_tool":
        assert spec.get("tools") and not (folder / "workspace").exists()
    else:
        assert "tools" not in spec and any((folder / "workspace").iterdir())
    # nothing of the verifier leaks into what the agent sees
    shown = workspace_text(folder) + spec["statement"]
    assert "rubric" not in shown.lower()

    raw = rubric_raw(folder)
    assert set(raw) <= {"items", "binary", "length_penalty"}
    ids = [item["id"] for item in raw["items"]]
    assert len(ids) == len(set(ids))
    rule_weight = judge_weight = 0.0
    for item in raw["items"]:
        assert item["method"] in METHODS, item
        assert isinstance(item["weight"], (int, float)) and item["weight"] > 0, item
        if item["method"] == "judge":
            judge_weight += item["weight"]
            assert item["criterion"].strip() and item.get("key", "").strip(), item
        else:
            rule_weight += item["weight"]
        if item["method"] in ("regex", "number"):
            re.compile(item.get("pattern", item.get("label", "")))
        if item["method"] == "number":
            label = item["label"].rstrip(":")
            assert label.lower() in spec["statement"].lower(), f"the statement never asks for {label!r}"
        if item["method"] == "regex" and item["pattern"].startswith("(?m)^"):
            label = re.search(r"\]\*(.+?)\[", item["pattern"]).group(1)
            assert label.lower() in spec["statement"].lower(), f"the statement never asks for {label!r}"
        if item["method"] == "json_schema":
            Draft202012Validator.check_schema(item["schema"])
            if item.get("gate"):  # the report's shape: every key it requires is named in the statement
                missing = [key for key in item["schema"].get("required", []) if f'"{key}"' not in spec["statement"]]
                assert not missing, missing
    assert rule_weight > 2 * judge_weight, "rule items must carry most of the weight"
    assert any(item.get("gate") for item in raw["items"]), "a gate that an empty answer fails keeps it at 0"


@pytest.mark.parametrize("folder", [f for f in FOLDERS if (f / "task.yaml").read_text().count("sql:")], ids=lambda f: f.name)
def test_tools_run_against_their_database(folder):
    spec = task_spec(folder)
    connection = database(folder)
    tables = {name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert len(tables) == 3
    total = sum(connection.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in tables)
    assert 40 <= total <= 300, total
    names = [tool["name"] for tool in spec["tools"]]
    assert len(names) == len(set(names)) and not set(names) & {"bash", "read_file", "write_file", "edit_file", "grep", "glob", "submit"}
    for tool in spec["tools"]:
        assert tool["description"].strip() and tool["parameters"], tool["name"]
        assert tool["sql"].lstrip().upper().startswith("SELECT"), tool["name"]
        assert set(re.findall(r":(\w+)", tool["sql"])) == set(tool["parameters"]), tool["name"]
        # every parameter documents an example value; with those the tool finds something
        example = {name: re.search(r"e\.g\. (\S+)", p["description"]).group(1) for name, p in tool["parameters"].items()}
        assert connection.execute(tool["sql"], example).fetchall(), (tool["name"], example)
        assert connection.execute(tool["sql"], {name: "no-such-value" for name in example}).fetchall() == []


# ------------------------------------------------------------ answer keys recomputed from the data

def csv_expected(task_id: str) -> dict[str, object]:
    """{rubric item id: value} computed from the task's CSV with the csv module."""
    if task_id == "csv_compute_01_region_revenue":
        kept = [r for r in rows(task_id, "sales.csv")
                if r["region"] == "North" and "2026-04-01" <= r["order_date"] <= "2026-06-30" and r["status"] != "cancelled"]
        return {"revenue": sum(int(r["units"]) * float(r["unit_price"]) for r in kept), "orders": len(kept)}
    if task_id == "csv_compute_02_travel_median":
        amounts = [float(r["amount"]) for r in rows(task_id, "expenses.csv")
                   if (r["department"], r["category"], r["status"]) == ("Engineering", "Travel", "approved")]
        return {"median": statistics.median(amounts), "claims": len(amounts)}
    if task_id == "csv_compute_03_carrier_late_rate":
        counts: dict[str, list[int]] = {}
        for r in rows(task_id, "deliveries.csv"):
            n = counts.setdefault(r["carrier"], [0, 0])
            n[0] += 1
            n[1] += dt.date.fromisoformat(r["delivered_date"]) > dt.date.fromisoformat(r["promised_date"])
        rates = {c: late / n for c, (n, late) in counts.items() if n >= 20}
        best = max(rates, key=rates.get)
        assert sorted(rates.values())[-2] < rates[best], "a tie would make two answers right"
        return {"carrier": best, "late_rate": 100 * rates[best]}
    if task_id == "csv_compute_04_mrr_snapshot":
        day = dt.date(2026, 6, 30)
        active = [r for r in rows(task_id, "subscriptions.csv") if dt.date.fromisoformat(r["start_date"]) <= day
                  and (not r["end_date"] or dt.date.fromisoformat(r["end_date"]) > day)]
        return {"mrr": sum(float(r["monthly_fee"]) for r in active), "active": len(active)}
    if task_id == "csv_compute_05_sensor_stats":
        temps = [float(r["temp_c"]) for r in rows(task_id, "readings.csv") if r["sensor_id"] == "S-03" and r["status"] == "ok"]
        return {"mean": statistics.fmean(temps), "max": max(temps)}
    if task_id == "csv_compute_06_category_margin":
        money: dict[str, list[float]] = {}
        for r in rows(task_id, "order_lines.csv"):
            if r["returned"] == "no":
                m = money.setdefault(r["category"], [0.0, 0.0])
                m[0] += int(r["qty"]) * float(r["unit_price"])
                m[1] += int(r["qty"]) * float(r["unit_cost"])
        margins = {c: (revenue - cost) / revenue for c, (revenue, cost) in money.items()}
        best = max(margins, key=margins.get)
        return {"category": best, "margin": 100 * margins[best]}
    if task_id == "csv_compute_07_overtime_pay":
        pay = sum(max(0.0, float(r["hours"]) - 40) * 1.5 * float(r["hourly_rate"]) for r in rows(task_id, "timesheets.csv")
                  if r["department"] == "Warehouse" and "2026-W10" <= r["week"] <= "2026-W13")
        return {"overtime": pay}
    raise KeyError(task_id)


def sql_expected(task_id: str) -> dict[str, object]:
    """{rubric item id: value} from SQL over the task's database, joins the agent has to do by hand."""
    db = database(BUILTIN / task_id)
    one = lambda sql: db.execute(sql).fetchone()[0]  # noqa: E731
    if task_id == "sql_tool_01_refund_total":
        base = ("SELECT ROUND(SUM(r.amount), 2) FROM refunds r JOIN orders o ON o.order_id = r.order_id "
                "JOIN customers c ON c.customer_id = o.customer_id WHERE c.email = 'maria.okafor@example.net' AND r.status = ")
        return {"refunded": one(base + "'issued'"), "pending": one(base + "'pending'")}
    if task_id == "sql_tool_02_missing_shipment":
        shipment, carrier, promised = db.execute(
            "SELECT s.shipment_id, c.name, s.promised_date FROM shipments s JOIN carriers c ON c.carrier_id = s.carrier_id "
            "WHERE s.order_ref = 'PO-7731' AND s.status != 'delivered'").fetchall()[0]
        last = one(f"SELECT location FROM tracking_events WHERE shipment_id = '{shipment}' ORDER BY event_time DESC LIMIT 1")
        return {"shipment": shipment, "carrier": carrier, "last_scan": last,
                "days_late": (dt.date(2026, 10, 16) - dt.date.fromisoformat(promised)).days}
    if task_id == "sql_tool_03_reorder_check":
        available = one("SELECT SUM(on_hand - reserved) FROM stock_levels WHERE sku = 'HX-2231'")
        point, supplier, lead = db.execute("SELECT p.reorder_point, s.name, s.lead_time_days FROM products p "
                                           "JOIN suppliers s ON s.supplier_id = p.supplier_id WHERE p.sku = 'HX-2231'").fetchone()
        return {"available": available, "reorder": "yes" if available < point else "no", "supplier": supplier, "lead_time": lead}
    if task_id == "sql_tool_04_ticket_sla":
        created, answered, target, agent = db.execute(
            "SELECT t.created_at, t.first_response_at, s.first_response_hours, a.name FROM tickets t "
            "JOIN sla_policies s ON s.priority = t.priority JOIN agents a ON a.agent_id = t.agent_id WHERE t.ticket_id = 'TCK-5520'").fetchone()
        hours = (dt.datetime.fromisoformat(answered) - dt.datetime.fromisoformat(created)).total_seconds() / 3600
        return {"response_hours": hours, "target_hours": target, "sla_met": "yes" if hours <= target else "no", "agent": agent}
    if task_id == "sql_tool_05_leave_balance":
        (employee,) = db.execute("SELECT employee_id FROM employees WHERE first_name = 'Priya' AND last_name = 'Raman' "
                                 "AND department = 'Finance'").fetchall()[0]
        entitled = one(f"SELECT annual_days + carried_over FROM entitlements WHERE employee_id = '{employee}' AND year = 2026")
        taken = one(f"SELECT SUM(days) FROM leave_requests WHERE employee_id = '{employee}' AND status = 'approved' "
                    "AND leave_type = 'annual' AND start_date LIKE '2026-%'")
        return {"remaining": entitled - taken}
    if task_id == "sql_tool_06_client_balance":
        open_ = db.execute("SELECT i.invoice_id, i.issue_date, i.amount - COALESCE((SELECT SUM(p.amount) FROM payments p "
                           "WHERE p.invoice_id = i.invoice_id), 0) FROM invoices i JOIN clients c ON c.client_id = i.client_id "
                           "WHERE c.name = 'Halvorsen Marine AS' AND i.status != 'void'").fetchall()
        owing = sorted((date, invoice) for invoice, date, left in open_ if left > 0.005)
        return {"outstanding": sum(left for *_, left in open_), "oldest": owing[0][1]}
    raise KeyError(task_id)


def assert_key_matches(task_id: str, expected: dict[str, object]) -> None:
    items = items_by_id(BUILTIN / task_id)
    for item_id, value in expected.items():
        item = items[item_id]
        if item["method"] == "number":
            tolerance = item.get("tolerance", 0)
            assert abs(float(item["value"]) - float(value)) <= tolerance + 1e-9, (item_id, item["value"], value)
            # an agent rounds to the tolerance's step, up or down at a tie: both must pass, as the engine compares
            for rounded in (math.floor(value / tolerance) * tolerance, math.ceil(value / tolerance) * tolerance) if tolerance else ():
                if abs(rounded - value) <= tolerance / 2 + 1e-9:
                    assert abs(rounded - float(item["value"])) <= tolerance, (item_id, rounded, item["value"])
        else:  # a whole-line regex: the recomputed value written on its line must match
            label = re.search(r"\]\*(.+?)\[", item["pattern"]).group(1)
            assert re.search(item["pattern"], f"{label}: {value}", re.I | re.M), (item_id, item["pattern"], value)


@pytest.mark.parametrize("task_id", [i for i in IDS if i.startswith("csv_compute_")])
def test_csv_answer_keys_match_the_data(task_id):
    assert 40 <= sum(len(rows(task_id, p.name)) for p in (BUILTIN / task_id / "workspace").glob("*.csv")) <= 200
    assert_key_matches(task_id, csv_expected(task_id))


@pytest.mark.parametrize("task_id", [i for i in IDS if i.startswith("sql_tool_")])
def test_sql_answer_keys_match_the_database(task_id):
    assert_key_matches(task_id, sql_expected(task_id))


def json_expected(task_id: str) -> dict:
    """The report each json_report task asks for, computed from its input file."""
    ws = BUILTIN / task_id / "workspace"
    if task_id == "json_report_01_incident_month":
        october = [r for r in rows(task_id, "incidents.csv") if r["opened"].startswith("2026-10")]
        minutes = {r["incident_id"]: (dt.datetime.fromisoformat(r["resolved"]) - dt.datetime.fromisoformat(r["opened"])).total_seconds() / 60
                   for r in october}
        sev1 = [minutes[r["incident_id"]] for r in october if r["severity"] == "SEV1"]
        return {"month": "2026-10", "total_incidents": len(october),
                "by_severity": {s: sum(r["severity"] == s for r in october) for s in ("SEV1", "SEV2", "SEV3")},
                "longest_incident": max(minutes, key=minutes.get), "sev1_mean_minutes": round(statistics.fmean(sev1), 1)}
    if task_id == "json_report_02_vendor_scorecard":
        vendors = json.loads((ws / "vendors.json").read_text())
        rate = {v["vendor"]: 100 * sum(d["on_time"] for d in v["deliveries"]) / len(v["deliveries"]) for v in vendors}
        every = [d for v in vendors for d in v["deliveries"]]
        return {"best_vendor": max(rate, key=rate.get), "worst_vendor": min(rate, key=rate.get),
                "vendors_below_90": sorted(v for v, r in rate.items() if r < 90),
                "overall_on_time_pct": round(100 * sum(d["on_time"] for d in every) / len(every), 1),
                "total_defective_units": sum(d["defective_units"] for d in every)}
    if task_id == "json_report_03_budget_variance":
        q3 = [r for r in rows(task_id, "budget.csv") if r["quarter"] == "2026-Q3"]
        variance = {r["department"]: float(r["actual"]) - float(r["budget"]) for r in q3}
        return {"quarter": "2026-Q3", "over_budget": sorted(d for d, v in variance.items() if v > 0),
                "total_variance": round(sum(variance.values()), 2), "largest_overrun": max(variance, key=variance.get)}
    if task_id == "json_report_04_access_review":
        active = [a for a in json.loads((ws / "accounts.json").read_text()) if a["status"] == "active"]
        return {"review_date": "2026-11-30", "active_accounts": len(active),
                "stale_accounts": sorted(a["user"] for a in active if dt.date.fromisoformat(a["last_login"]) < dt.date(2026, 9, 1)),
                "admins_without_mfa": sorted(a["user"] for a in active if a["role"] == "admin" and not a["mfa_enabled"])}
    if task_id == "json_report_05_release_summary":
        section = (ws / "CHANGELOG.md").read_text().split("## 3.8.0")[1].split("\n## ")[0]
        entries = re.findall(r"^- #(\d+) \[(\w+)\] .* \(@([\w.-]+)\)$", section, re.M)
        return {"version": "3.8.0", "features": sum(e[1] == "feature" for e in entries), "fixes": sum(e[1] == "fix" for e in entries),
                "breaking_changes": sorted(int(e[0]) for e in entries if e[1] == "breaking"), "contributors": len({e[2] for e in entries})}
    if task_id == "json_report_06_nps_survey":
        answers = rows(task_id, "survey.csv")

        def nps(group):
            scores = [int(r["score"]) for r in group]
            return round(100 * (sum(s >= 9 for s in scores) - sum(s <= 6 for s in scores)) / len(scores))
        segments = {r["segment"] for r in answers}
        by_segment = {s: nps([r for r in answers if r["segment"] == s]) for s in segments}
        scores = [int(r["score"]) for r in answers]
        return {"responses": len(scores), "promoters": sum(s >= 9 for s in scores), "passives": sum(7 <= s <= 8 for s in scores),
                "detractors": sum(s <= 6 for s in scores), "nps": nps(answers), "lowest_nps_segment": min(by_segment, key=by_segment.get)}
    if task_id == "json_report_07_meeting_actions":  # read off the notes by hand
        return {"meeting_date": "2026-11-18", "next_meeting": "2026-11-25", "decisions": 2, "action_items": [
            {"owner": "Rafael Osei", "task": "annual-plan banner", "due": "2026-11-25"},
            {"owner": "Tobias Brandt", "task": "release Android 5.2.1", "due": "2026-11-27"},
            {"owner": "Mei Lin Zhou", "task": "rewrite the SSO guide", "due": "2026-12-04"},
            {"owner": "Ingrid Solberg", "task": "setup wizard proposal", "due": "2026-12-08"}]}
    raise KeyError(task_id)


# --------------------------------------------------------------- graded with the family's rubric engine

@pytest.fixture(scope="module")
def engine():
    rubric = pytest.importorskip("rlyard.envs.general.rubric", reason="rlyard/envs/general/rubric.py is not there yet")
    return rubric


def graded(engine, folder: Path, tmp_path: Path, answer: str, files: dict[str, str] | None = None, reference_files: bool = False):
    workspace = Path(tempfile.mkdtemp(dir=tmp_path))  # fresh each time: no file left over from another answer
    for source in [folder / "workspace"] + [folder / "verifier" / "reference_files"] * reference_files:
        if source.is_dir():
            for path in source.rglob("*"):
                if path.is_file():
                    (workspace / path.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
                    (workspace / path.relative_to(source)).write_text(path.read_text())
    for name, content in (files or {}).items():
        (workspace / name).write_text(content)
    (workspace / "answer.md").write_text(answer)
    return engine.grade_rubric(loaded_rubric(engine, folder), workspace, answer, rules_only=True)


@functools.cache
def loaded_rubric(engine, folder: Path):
    return engine.load_rubric(folder / "verifier" / "rubric.yaml")


@pytest.mark.parametrize("folder", FOLDERS, ids=IDS)
def test_reference_passes_and_empty_answer_scores_zero(engine, folder, tmp_path):
    reference = (folder / "verifier" / "reference.md").read_text()
    good = graded(engine, folder, tmp_path, reference, reference_files=True)
    failed = {k: v["why"] for k, v in good.info["rubric"].items() if v["score"] < 1}
    assert good.value >= 0.9 and not failed, failed
    assert graded(engine, folder, tmp_path, "").value == 0.0


@pytest.mark.parametrize("task_id", [i for i in IDS if i.startswith("json_report_")])
def test_json_report_computed_from_the_inputs_passes_every_item(engine, task_id, tmp_path):
    report = json.dumps(json_expected(task_id))
    result = graded(engine, BUILTIN / task_id, tmp_path, "report.json is written.", files={"report.json": report})
    assert result.value == 1.0, {k: v["why"] for k, v in result.info["rubric"].items() if v["score"] < 1}
    wrong = json.loads(report)
    key = next(k for k in wrong if isinstance(wrong[k], (int, list)) and not isinstance(wrong[k], bool))
    wrong[key] = wrong[key] + 1 if isinstance(wrong[key], int) else wrong[key][:-1]
    off = graded(engine, BUILTIN / task_id, tmp_path, "done", files={"report.json": json.dumps(wrong)})
    assert off.value < 1.0 and off.info["rubric"][key]["score"] == 0.0, key
    # the input file handed back as the report fails the shape gate
    dump = workspace_text(BUILTIN / task_id)
    assert graded(engine, BUILTIN / task_id, tmp_path, "done", files={"report.json": dump}).value == 0.0


# ------------------------------------------------------------------------ what a hostile policy tries

@pytest.mark.parametrize("folder", FOLDERS, ids=IDS)
def test_pasting_the_documents_and_the_statement_back_scores_zero(engine, folder, tmp_path):
    dump = task_spec(folder)["statement"] + "\n" + workspace_text(folder)
    assert graded(engine, folder, tmp_path, dump).value == 0.0


@pytest.mark.parametrize("folder", FOLDERS, ids=IDS)
def test_hedging_between_answers_fails_the_item(engine, folder, tmp_path):
    """On each answer line the key checks, a wrong value first (or an alternative after the right
    one) fails that item: the number is read first-after-label, the line regexes are anchored."""
    reference = (folder / "verifier" / "reference.md").read_text()
    hedged = 0
    for item in rubric_raw(folder)["items"]:
        if item["method"] == "number":
            pattern = re.compile(rf"^({re.escape(item['label'])}\s*)(.*)$", re.M | re.I)
            answer = pattern.sub(lambda m: f"{m.group(1)}{float(item['value']) + 7:.2f} or {m.group(2)}", reference, count=1)
        elif item["method"] == "regex" and item["pattern"].startswith("(?m)^") and not item.get("gate"):
            match = re.search(item["pattern"], reference, re.M | re.I)
            end = match.start() + len(match.group(0).rstrip())
            answer = reference[:end] + " or perhaps something else" + reference[end:]
        else:
            continue
        result = graded(engine, folder, tmp_path, answer, reference_files=True)
        assert result.info["rubric"][item["id"]]["score"] == 0.0, (item["id"], answer)
        hedged += 1
    assert hedged or task_spec(folder)["kind"] in ("summarise", "json_report")


@pytest.mark.parametrize("folder", [f for f in FOLDERS if any(i["method"] == "not_contains" and i.get("gate") for i in rubric_raw(f)["items"])],
                         ids=lambda f: f.name)
def test_saying_the_forbidden_alternative_too_zeroes_the_reward(engine, folder, tmp_path):
    reference = (folder / "verifier" / "reference.md").read_text()
    for item in rubric_raw(folder)["items"]:
        if item["method"] == "not_contains" and item.get("gate"):
            texts = item["text"] if isinstance(item["text"], list) else [item["text"]]
            answer = reference.rstrip() + "\n" + texts[0] + "\n"
            assert graded(engine, folder, tmp_path, answer, reference_files=True).value == 0.0, (item["id"], texts[0])


def test_summaries_over_length_or_with_extra_bullets_score_zero(engine, tmp_path):
    for folder in [f for f in FOLDERS if task_spec(f)["kind"] == "summarise"]:
        reference = (folder / "verifier" / "reference.md").read_text()
        padded = reference + "\n" + "Moreover, this matters a great deal. " * 30
        extra_bullet = reference.rstrip() + "\n- And everything else in the document is also important.\n"
        worst = min(graded(engine, folder, tmp_path, padded).value, graded(engine, folder, tmp_path, extra_bullet).value)
        assert worst == 0.0, folder.name
