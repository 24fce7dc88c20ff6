"""scripts/gpu_check.sh --cpu-dry-run: the GPU check's driver, its GRPO part through rlyard's own
loop on a tiny random Qwen2 (vocabulary larger than the tokenizer, as the 0.5B shape's is), its
figures and the vLLM SKIP line, written as JSON and a log. The FSDP parts are left out here
(two process starts under FSDP cost ~30 s on 2 cores; tests/test_fsdp.py checks the learner on
gloo, and `scripts/gpu_check.sh --cpu-dry-run --parts fsdp1,fsdp2` runs them by hand)."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.timeout(300)


def test_cpu_dry_run_writes_every_part(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--cpu-dry-run", "--out", str(out),
                           "--parts", "env,grpo,vllm", "--steps", "1", "--new-tokens", "4", "--timeout-scale", "3"],
                          capture_output=True, text=True, env=os.environ | {"PYTHON": sys.executable})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    record = json.loads((out / "gpu_check.json").read_text())
    log = (out / "gpu_check.log").read_text()
    assert record["cpu_dry_run"] and set(record["parts"]) == {"env", "grpo", "vllm"}
    env, grpo, vllm = (record["parts"][k] for k in ("env", "grpo", "vllm"))
    assert env["status"] == "ok" and env["torch"]
    assert grpo["status"] == "ok", grpo
    assert grpo["steps_run"] == 1 and grpo["params"] > 0 and grpo["per_step"][0]["skipped_sequences"] < 1.0
    assert grpo["generated_tokens_per_s"] > 0 and grpo["trained_tokens_per_s"] > 0 and 0 < grpo["mfu"] < 1
    assert "6 * N * trained_tokens + 2 * N * generated_tokens" in grpo["mfu_formula"]
    if importlib.util.find_spec("vllm") is None:
        assert vllm["status"] == "skip" and "SKIP vllm: vllm is not installed" in log
    assert "== summary" in log and "OK grpo: 1 steps" in log
