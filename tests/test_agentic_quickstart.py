"""scripts/agentic_quickstart.sh end to end, shrunk: collect -> eval -> sft -> eval -> RL -> eval.

The README's command with a tiny model and one step a stage: every stage reads the folder the
previous one wrote (the demonstrations, the SFT run as `model.init_from`, each run as
`eval --checkpoint`), and the summary holds one held-out result per stage.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(shutil.which("bash") is None, reason="the script is bash")
def test_the_script_runs_every_stage_on_the_previous_ones_output(tiny_model_dir, tmp_path):
    out = tmp_path / "aq"
    env = {**os.environ, "OUT": str(out), "DEMOS": "4", "RL_SEEDS": "1", "THREADS": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    tiny = [f"model.name={tiny_model_dir}", "model.lora.rank=2", "model.lora.alpha=4", "eval.size=2", "train.steps=1",
            "sft.steps=1", "sft.eval_fraction=0.25", "rollout.prompts_per_step=1", "rollout.n=2", "agent.max_turns=2",
            "rollout.max_new_tokens=4", "agent.max_tokens_per_turn=4", "env.train_size=4", "output.plot=false",
            "output.progress=false"]
    result = subprocess.run([str(ROOT / "scripts" / "agentic_quickstart.sh"), *tiny], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["stages"]) == {"base", "sft", "rl_seed1"}  # RL_SEEDS names the seeds (one: the suite's budget)
    for stage in summary["stages"].values():
        assert stage["tasks"] == 2 and 0.0 <= stage["accuracy"] <= 1.0 and "mean_turns" in stage
    assert len((out / "demos.jsonl").read_text().splitlines()) == 4
    assert (out / "sft" / "checkpoints").is_dir() and (out / "rl_seed1" / "metrics.jsonl").exists()
    saved = (out / "rl_seed1" / "config.yaml").read_text()
    assert f"init_from: {out / 'sft'}" in saved and "seed: 1" in saved
    assert "held-out success" in result.stdout and "rl_seed1" in result.stdout
