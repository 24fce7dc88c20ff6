"""A plain single-turn run loads only what it uses: no HTTP server (starlette, uvicorn), no harness.

The gateway and the harness runner serve third-party agent harnesses; only a family that plays
harness arms (code, through `Family.play`) loads them. Checked in a fresh interpreter, since this
test process has imported everything already: `rlyard train` on the quickstart config (arith),
with the tiny model in place of the embedded one, one step.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVER_PACKAGES = ("starlette", "uvicorn", "rlyard.harness", "rlyard.serve")

RUN = textwrap.dedent("""
    import json, sys
    from rlyard.cli import main
    code = main(["train", sys.argv[1], *sys.argv[3:]])
    loaded = sorted(m for m in sys.modules if m.startswith({packages!r}))
    with open(sys.argv[2], "w") as out:
        json.dump({{"code": code, "loaded": loaded, "torch": "torch" in sys.modules}}, out)
""").format(packages=SERVER_PACKAGES)


def test_a_single_turn_quickstart_run_imports_no_http_server_and_no_harness(tiny_model_dir, tmp_path):
    report = tmp_path / "report.json"
    overrides = [
        f"model.name={tiny_model_dir}", "model.lora.rank=2", "model.lora.alpha=4", "env.train_size=4",
        "rollout.prompts_per_step=1", "rollout.n=2", "rollout.max_new_tokens=2", "train.steps=1", "eval.size=2",
        "eval.at_start=false", "eval.at_end=false", "output.progress=false", "output.plot=false",
        f"output.run_dir={tmp_path / 'run'}",
    ]
    done = subprocess.run([sys.executable, "-c", RUN, str(ROOT / "configs" / "quickstart.yaml"), str(report), *overrides],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(report.read_text())
    assert result["code"] == 0 and result["torch"]  # it did train
    assert (tmp_path / "run" / "metrics.jsonl").exists()
    assert result["loaded"] == [], f"a single-turn arith run imported {result['loaded']}"


GRADER = textwrap.dedent("""
    import json, random, sys
    from rlyard.config import load_config
    from rlyard.orchestrate.ray_actors import GraderActor
    grader = GraderActor(load_config(None, ["env.name=files"]).model_dump(mode="json"), 0.5)
    task = grader.family.make_tasks("eval", 1, 0)[0]
    env_id = grader.open()
    grader.call(env_id, "reset", task)
    for reply in grader.family.oracle(task, random.Random(0)):
        if grader.call(env_id, "step", reply).done:
            break
    reward = grader.call(env_id, "score").value
    grader.close(env_id)
    print(json.dumps({"reward": reward, "torch": "torch" in sys.modules}))
""")


def test_a_ray_grader_actor_plays_an_episode_without_torch():
    """A grader actor hosts environments only (CPU nodes): building it and grading an episode
    must not import torch, which cost every grader start about 4 s of CPU before
    `orchestrate/family.py`. The actor class is plain Python, so no Ray is needed to check it."""
    done = subprocess.run([sys.executable, "-c", GRADER], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"reward": 1.0, "torch": False}
