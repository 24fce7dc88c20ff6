"""`rlyard view` on the run folder of a real (tiny) training run, driven in Debian's chromium.

One module-scoped run (`rlyard train configs/files.yaml` with the tiny random llama, 2 steps) and
one `rlyard view` subprocess serve every browser test. Two crafted rows are appended while the
viewer runs: a multi-turn episode with a tool call, built by `trajectory_row` with the real
tokenizer (so it carries per-token segments), whose text also tries HTML injection; and its
group sibling. They show the live index, the mask, the logprob hover and that model text is
only ever text. Screenshots go to a temp folder, or to RLYARD_VIEWER_SCREENSHOTS when set.
"""
from __future__ import annotations

import json
import math
import os
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zlib
from pathlib import Path

import pytest

from rlyard.observe.store import trajectory_row
from rlyard.observe.viewer.index import TrajectoryIndex
from rlyard.testing.loopback import read_until
from rlyard.types import Trajectory

playwright = pytest.importorskip("playwright.sync_api")
CHROMIUM = "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium")

INJECTION = '<script>window.__pwned = 1; alert(1)</script><img src="x" onerror="window.__pwned = 2">'
CALL = '<tool_call>\n{"name": "grep", "arguments": {"pattern": "coral"}}\n</tool_call><|im_end|>'
TOOL_OUTPUT = "\n<|im_start|>user\n<tool_response>\ninventory/coral.txt:serial: SN-123456\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
ANSWER = f"The serial is SN-123456 {INJECTION}<|im_end|>"


def solid_png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A real PNG file of one colour (what a webdev grader's screenshot would be, only plainer)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


PNG = solid_png(160, 60, (37, 99, 235))


def rlyard_command(*args: str) -> list[str]:
    script = Path(sys.executable).parent / "rlyard"
    return [str(script), *args] if script.exists() else [sys.executable, "-m", "rlyard.cli", *args]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_viewer(*args: str) -> tuple[subprocess.Popen, str]:
    """A `rlyard view` subprocess and all it printed up to its URL line."""
    proc = subprocess.Popen(rlyard_command("view", *args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    printed = read_until(proc, "http://", 60)
    if "http://" not in printed:
        proc.kill()
        raise AssertionError(f"rlyard view did not start:\n{printed}")
    return proc, printed


def crafted_rows(tokenizer) -> list[dict]:
    """A prompt, a sampled tool call, the tool's output (not sampled), a sampled answer; logprob -0.5 per token
    except -3.0 on the answer's first token."""
    prompt = tokenizer.encode("<|im_start|>user\nWhat is the serial of coral?<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    call, tool, answer = (tokenizer.encode(text, add_special_tokens=False) for text in (CALL, TOOL_OUTPUT, ANSWER))
    mask = [0] * len(prompt) + [1] * len(call) + [0] * len(tool) + [1] * len(answer)
    logprobs = [-0.5 if m else 0.0 for m in mask]
    logprobs[len(prompt) + len(call) + len(tool)] = -3.0
    rows = []
    for reward in (1.0, 0.5):
        traj = Trajectory(task_id=f"crafted {INJECTION}", group_id="crafted-group", token_ids=prompt + call + tool + answer,
                          loss_mask=mask, behaviour_logprobs=logprobs, policy_versions=[1 if m else -1 for m in mask],
                          reward=reward, components={"correct": reward, "tool_calls": 1.0}, finish_reason="done",
                          completion_text=ANSWER, turns=2,
                          info={"output": f"grader saw {INJECTION}", "diff": "--- a/x\n+++ b/x\n-old\n+new", "screenshot": "shots/page.png"})
        rows.append({**trajectory_row(traj, tokenizer.decode(prompt), tokenizer=tokenizer), "step": 2})
    return rows


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tiny_model_dir) -> Path:
    cwd = tmp_path_factory.mktemp("viewer-run")
    tiny = [f"model.name={tiny_model_dir}", "train.steps=2", "rollout.prompts_per_step=2", "rollout.n=2", "rollout.max_new_tokens=16",
            "agent.max_turns=2", "agent.max_tokens_per_turn=16", "env.train_size=4", "eval.at_start=false", "eval.at_end=false",
            "eval.size=2", "train.threads=1", "output.plot=false", "model.lora.rank=2", "model.lora.alpha=4"]
    result = subprocess.run(rlyard_command("train", "configs/files.yaml", *tiny), cwd=cwd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    (run,) = (cwd / "runs").glob("files-*")
    (run / "shots").mkdir()
    (run / "shots" / "page.png").write_bytes(PNG)
    return run


@pytest.fixture(scope="module")
def viewer(run_dir, tokenizer):
    """Base URL of `rlyard view run_dir`; the crafted rows are appended after it started, as a trainer would."""
    port = free_port()
    proc, _ = start_viewer(str(run_dir), "--port", str(port))
    real_rows = len((run_dir / "trajectories.jsonl").read_text().splitlines())
    with open(run_dir / "trajectories.jsonl", "a") as f:
        f.write("".join(json.dumps(row) + "\n" for row in crafted_rows(tokenizer)))
    base = f"http://127.0.0.1:{port}"
    yield base, real_rows
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="module")
def browser():
    with playwright.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    return Path(os.environ.get("RLYARD_VIEWER_SCREENSHOTS") or tmp_path_factory.mktemp("viewer-shots"))


@pytest.fixture
def page(browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.dialogs = []
    page.on("dialog", lambda dialog: (page.dialogs.append(dialog.message), dialog.dismiss()))
    yield page
    page.close()


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def wait_for_rows(base: str, total: int) -> None:
    deadline = time.monotonic() + 15
    while get_json(f"{base}/api/trajectories")["total"] < total:
        assert time.monotonic() < deadline, "the appended rows never reached the index"
        time.sleep(0.2)


def crafted_ids(base: str) -> list[int]:
    return sorted(r["id"] for r in get_json(f"{base}/api/trajectories?group=crafted-group")["rows"])


# --------------------------------------------------------------------------- the CLI
def test_a_host_other_than_loopback_needs_allow_remote(run_dir, tmp_path, capsys):
    from rlyard.cli import main

    assert main(["view", str(run_dir), "--host", "0.0.0.0"]) == 2
    assert "--allow-remote" in capsys.readouterr().err
    assert main(["view", str(tmp_path)]) == 2
    assert "is it a run folder" in capsys.readouterr().err
    proc, printed = start_viewer(str(run_dir), "--host", "0.0.0.0", "--allow-remote", "--port", str(free_port()))
    proc.terminate()
    proc.wait(10)
    assert "WARNING" in printed and "without authentication" in printed


# --------------------------------------------------------------------------- the pages
def test_overview_draws_the_curves_of_metrics_jsonl(viewer, page, shots, run_dir):
    base, _ = viewer
    page.goto(f"{base}/#/")
    page.wait_for_selector('.chart[data-key="reward/mean"] path.line', state="attached")  # a flat line has no height
    keys = page.eval_on_selector_all(".chart", "nodes => nodes.map(n => n.dataset.key)")
    assert {"reward/mean", "loss/kl", "loss/entropy", "loss/clip_fraction", "time/step", "rollout/response_tokens"} <= set(keys)
    # one point per logged step: metrics.jsonl has steps 1 and 2
    assert page.eval_on_selector('.chart[data-key="time/step"] path.line', "p => p.getAttribute('d').split(/[ML]/).length - 1") == 2
    page.select_option("#more-curves", "train/lr")
    page.wait_for_selector('.chart[data-key="train/lr"]')
    assert "files" in page.inner_text("dl.facts") and run_dir.name in page.inner_text("h2")
    page.screenshot(path=str(shots / "viewer_overview.png"), full_page=True)


def test_steps_lead_to_groups_and_their_trajectories(viewer, page):
    base, _ = viewer
    page.goto(f"{base}/#/steps")
    page.click("table.grid tbody tr >> nth=0")
    page.wait_for_selector("text=step 1: 2 groups")
    page.click("table.grid tbody tr >> nth=0")
    page.wait_for_selector("#trajectories")
    assert page.inner_text("#count").startswith("2 trajectories")  # rollout.n = 2 samples per group


def test_filter_to_failed_trajectories_and_open_one(viewer, page, shots, run_dir):
    base, real_rows = viewer
    wait_for_rows(base, real_rows + 2)
    rows = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    failed = sum(row["reward"] <= 0 for row in rows)
    assert failed < len(rows)  # the crafted rows score 1.0 and 0.5: the filter has something to drop
    page.goto(f"{base}/#/list")
    page.wait_for_selector("#trajectories")
    assert page.inner_text("#count").startswith(f"{len(rows)} trajectories")
    page.click("#failed-only")
    page.wait_for_selector(f"#count:has-text('{failed} trajectories')")
    rewards = page.eval_on_selector_all("#trajectories tbody tr td:nth-child(5)", "cells => cells.map(c => Number(c.textContent))")
    assert len(rewards) == failed and all(r <= 0 for r in rewards)
    page.screenshot(path=str(shots / "viewer_failed.png"), full_page=True)
    page.click("#trajectories tbody tr >> nth=0")
    page.wait_for_selector("article.trajectory")
    assert page.locator(".msg.prompt.untrained").count() >= 2  # the files prompt: system and user messages
    assert page.locator(".msg.model.trained").count() >= 1
    assert page.evaluate("document.body.classList.contains('mask-on')")
    page.uncheck("#mask-toggle")
    assert not page.evaluate("document.body.classList.contains('mask-on')")


def test_a_multi_turn_row_shows_tool_call_tool_output_mask_and_logprobs(viewer, page, shots):
    base, real_rows = viewer
    wait_for_rows(base, real_rows + 2)
    first, _ = crafted_ids(base)
    page.goto(f"{base}/#/t/{first}")
    page.wait_for_selector("article.trajectory")
    turns = page.eval_on_selector_all(".chat .msg", "nodes => nodes.map(n => n.className)")
    assert turns == ["msg prompt untrained", "msg model trained", "msg tool untrained", "msg model trained"]
    assert "SN-123456" in page.inner_text(".msg.tool") and "not trained" in page.inner_text(".msg.tool .who")
    assert page.locator(".msg.model >> nth=0").locator(".tok.call").count() > 5  # every token of the <tool_call> block
    low = page.locator(".msg.model >> nth=1").locator(".tok >> nth=0")
    assert low.get_attribute("title") == f"logprob -3.000  p={math.exp(-3):.3f}" and "lp-low" in low.get_attribute("class")
    low.hover()
    assert page.inner_text("#inspector") == f'"The" logprob -3.000 p = {math.exp(-3):.3f}'
    assert page.inner_text(".components").split() == ["correct", "1", "tool_calls", "1"]
    assert page.locator("pre.diff .add").inner_text().strip() == "+new"
    assert page.eval_on_selector(".screenshot img", "img => img.complete && img.naturalWidth") == 160
    page.screenshot(path=str(shots / "viewer_trajectory.png"), full_page=True)


def test_compare_two_trajectories_of_a_group(viewer, page, shots):
    base, real_rows = viewer
    wait_for_rows(base, real_rows + 2)
    page.goto(f"{base}/#/list?group=crafted-group")
    page.wait_for_selector("#trajectories")
    assert page.is_disabled("#compare")
    page.check("#trajectories tbody tr >> nth=0 >> .pick")
    page.check("#trajectories tbody tr >> nth=1 >> .pick")
    page.click("#compare")
    page.wait_for_selector(".compare article.trajectory >> nth=1")
    assert "both from group crafted-group" in page.inner_text("main")
    left, right = page.locator(".compare article.trajectory").all()
    assert left.locator("h2").inner_text().endswith("reward 1") and right.locator("h2").inner_text().endswith("reward 0.500")
    # reward − group mean, the group's mean being 0.75
    assert "0.250" in left.locator("dl.facts").inner_text() and "-0.250" in right.locator("dl.facts").inner_text()
    page.screenshot(path=str(shots / "viewer_compare.png"), full_page=True)


def test_model_html_is_shown_as_text_and_never_runs(viewer, page):
    base, real_rows = viewer
    wait_for_rows(base, real_rows + 2)
    first, second = crafted_ids(base)
    for url in (f"{base}/#/list?group=crafted-group", f"{base}/#/t/{first}", f"{base}/#/compare/{first}/{second}"):
        page.goto(url)
        page.wait_for_selector("table.grid, article.trajectory")
        page.wait_for_timeout(200)  # an onerror handler would have fired by now
        assert INJECTION in page.inner_text("main")
        assert page.evaluate("window.__pwned") is None and page.dialogs == []
        assert page.locator('main script, main img[src="x"]').count() == 0


# --------------------------------------------------------------------------- the HTTP side
def test_screenshots_are_served_only_from_inside_the_run_folder(viewer, run_dir, tmp_path):
    base, real_rows = viewer
    wait_for_rows(base, real_rows + 2)
    first, _ = crafted_ids(base)
    with urllib.request.urlopen(f"{base}/api/trajectory/{first}/screenshot", timeout=10) as response:
        assert response.read() == PNG and response.headers["Content-Type"] == "image/png"
    index = TrajectoryIndex(run_dir / "trajectories.jsonl", tmp_path / "probe.sqlite")
    outside = tmp_path / "secret.png"
    outside.write_bytes(PNG)
    with open(run_dir / "trajectories.jsonl", "a") as f:
        for path in (str(outside), "../" * 12 + str(outside), "shots/../../secret.png", "config.yaml"):
            f.write(json.dumps({"task_id": "probe", "group_id": "probe", "reward": 0.0, "step": 3, "info": {"screenshot": path}}) + "\n")
    wait_for_rows(base, real_rows + 6)
    probes = get_json(f"{base}/api/trajectories?group=probe")["rows"]
    assert len(probes) == 4
    for probe in probes:
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{base}/api/trajectory/{probe['id']}/screenshot", timeout=10)
        assert refused.value.code == 404
    index.close()


def test_requests_for_another_host_name_are_refused(viewer):
    base, _ = viewer
    request = urllib.request.Request(f"{base}/api/overview", headers={"Host": "attacker.example"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 400
    assert "default-src 'none'" in urllib.request.urlopen(f"{base}/", timeout=10).headers["Content-Security-Policy"]


# --------------------------------------------------------------------------- the index
def test_index_takes_only_whole_lines_and_starts_over_on_a_rewritten_file(tmp_path):
    jsonl = tmp_path / "trajectories.jsonl"
    line = lambda i, reward: json.dumps({"task_id": f"t{i}", "group_id": "g", "reward": reward, "step": 1, "completion": f"answer {i}"})
    jsonl.write_text(line(1, 1.0) + "\n" + line(2, 0.0) + "\n" + line(3, 0.5)[:20])  # the trainer is mid-write
    index = TrajectoryIndex(jsonl, tmp_path / "index.sqlite", family="arith")
    assert index.update() == 2 and index.count() == 2
    with open(jsonl, "a") as f:
        f.write(line(3, 0.5)[20:] + "\n{not json\n")
    assert index.update() == 1 and index.count() == 3 and index.facets()["bad_lines"] == [4]
    assert index.row(3)["task_id"] == "t3" and index.row(3)["_index"]["family"] == "arith"
    assert [r["task_id"] for r in index.query(reward_max=0.5)["rows"]] == ["t3", "t2"]
    assert [r["task_id"] for r in index.query(text="answer 2")["rows"]] == ["t2"]
    assert index.query(text='") OR *')["total"] == 0  # search text is a phrase, never FTS syntax
    index.close()
    reopened = TrajectoryIndex(jsonl, tmp_path / "index.sqlite")
    assert reopened.update() == 0 and reopened.count() == 3  # the offset survives a restart of the viewer
    tmp = tmp_path / "rewritten"
    tmp.write_text(line(1, 1.0) + "\n")
    os.replace(tmp, jsonl)  # what a resumed run's truncate_after does
    assert reopened.update() == 1 and reopened.count() == 1
    reopened.close()



def test_steps_and_groups_sum_what_the_rows_say(tmp_path):
    """The per-group sums kept while indexing, against counts made by hand."""
    jsonl = tmp_path / "trajectories.jsonl"
    rows = [("a", 1, 1.0, 10, False), ("a", 1, 0.0, 20, False), ("b", 1, 0.5, 30, True), ("a", 2, 0.0, 40, False)]
    jsonl.write_text("".join(json.dumps({"task_id": f"task-{g}", "group_id": g, "step": step, "reward": reward, "num_tokens": tokens,
                                         "infra_error": infra}) + "\n" for g, step, reward, tokens, infra in rows))
    index = TrajectoryIndex(jsonl, tmp_path / "index.sqlite")
    index.update()
    assert index.steps() == [
        {"step": 1, "n": 3, "groups": 2, "mean_reward": 0.5, "failed": 1, "infra": 1, "mean_tokens": 20.0},
        {"step": 2, "n": 1, "groups": 1, "mean_reward": 0.0, "failed": 1, "infra": 0, "mean_tokens": 40.0}]
    first, second = index.groups(1)
    assert (first["group_id"], first["n"], first["mean_reward"], first["min_reward"], first["max_reward"]) == ("a", 2, 0.5, 0.0, 1.0)
    assert (second["group_id"], second["infra"], second["first_id"]) == ("b", 1, 3)
    assert [r["group_mean"] for r in index.query(step_max=1)["rows"]] == [0.5, 0.5, 0.5]
    assert index.facets()["step_min"] == 1 and index.facets()["step_max"] == 2 and index.count() == 4
    index.close()
