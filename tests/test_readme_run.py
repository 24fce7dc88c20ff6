"""The README's own commands on the README's own run, through the CLI entry point.

`rlyard train configs/quickstart.yaml` (shrunk to one step by overrides) writes a run folder
under runs/; then `rlyard eval --checkpoint RUN`, `rlyard train --resume RUN`, `rlyard export RUN`
and `rlyard serve --checkpoint RUN` read that very folder back with the CLI's own loader. All but
serve run the CLI's `main` in this process; serve is the installed console script, a server
process. The working directory is a fresh folder, so `configs/quickstart.yaml` comes from the
package.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.embedded  # the quickstart's own model (SmolLM2-135M), a few seconds a command

# The quickstart with tiny sizes: one prompt, two samples of four tokens, one step.
TINY = ["train.steps=1", "rollout.prompts_per_step=1", "rollout.n=2", "rollout.max_new_tokens=4", "env.train_size=8",
        "eval.size=2", "eval.max_new_tokens=4", "eval.at_start=false", "eval.at_end=false", "train.threads=1"]


def rlyard_command(*args: str) -> list[str]:
    """The console script of this interpreter's environment when installed, else the module."""
    script = Path(sys.executable).parent / "rlyard"
    return [str(script), *args] if script.exists() else [sys.executable, "-m", "rlyard.cli", *args]


def rlyard_main(cwd: Path, *args: str) -> str:
    """`rlyard ARGS` run from `cwd` through the CLI's own `main` in this process (what the console
    script calls; the serve test below starts the console script itself); what it printed. Another
    process per command would only import torch and the model code again."""
    from rlyard.cli import main

    here, printed = Path.cwd(), io.StringIO()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(printed):
            code = main(list(args))
    finally:
        os.chdir(here)
    assert code == 0, f"rlyard {' '.join(args)} exited {code}:\n{printed.getvalue()[-3000:]}"
    return printed.getvalue()


@pytest.fixture(scope="module")
def readme_run(tmp_path_factory) -> tuple[Path, Path]:
    """(working folder, run folder) of `rlyard train configs/quickstart.yaml` with tiny overrides."""
    cwd = tmp_path_factory.mktemp("readme")
    printed = rlyard_main(cwd, "train", "configs/quickstart.yaml", *TINY)
    runs = sorted((cwd / "runs").glob("quickstart-*"))
    assert len(runs) == 1, printed
    assert f"run folder: runs/{runs[0].name}" in printed
    return cwd, runs[0]


def test_the_saved_config_reads_back_with_the_cli_loader(readme_run):
    from rlyard.config import load_config, load_run_config

    cwd, run = readme_run
    saved = load_run_config(run)
    assert saved.env.options["ops"] == "+"  # the value the old loader read as a float
    assert saved == load_config("configs/quickstart.yaml", TINY)
    assert (run / "checkpoints" / "step_000001" / "weights.pt").exists()


def test_eval_checkpoint_writes_into_the_run_folder(readme_run, capsys):
    cwd, run = readme_run
    printed = rlyard_main(cwd, "eval", "--checkpoint", str(run.relative_to(cwd)), "--samples", "2", "--k", "2")
    bar = capsys.readouterr().err
    outputs = list(run.glob("eval-step_000001-*.json"))
    assert len(outputs) == 1, printed
    assert not list(cwd.glob("*.json"))  # nothing lands in the working folder
    data = json.loads(outputs[0].read_text())
    assert data["tasks"] == 2 and data["infra_errors"] == 0 and 0.0 <= data["pass@2"] <= 1.0
    assert re.search(r"^tasks +2$", printed, re.M) and re.search(r"^infra_errors +0$", printed, re.M)
    assert re.search(r"^accuracy +\d\.\d{4}$", printed, re.M)
    assert "6/6" in bar and "episode" in bar  # the tqdm bar: 2 greedy + 2 x 2 sampled episodes


def test_train_resume_runs_one_more_step(readme_run):
    cwd, run = readme_run
    printed = rlyard_main(cwd, "train", "--resume", str(run.relative_to(cwd)), "train.steps=2")
    assert "resumed from" in printed and "step_000001" in printed
    assert (run / "checkpoints" / "step_000002" / "weights.pt").exists()
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps[-1] == 2


def test_serve_checkpoint_answers_the_openai_client(readme_run):
    openai = pytest.importorskip("openai")
    cwd, run = readme_run
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    server = subprocess.Popen(rlyard_command("serve", "--checkpoint", str(run.relative_to(cwd)), "--port", "0"), cwd=cwd,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        lines, deadline, url = [], time.monotonic() + 240, None
        while url is None and time.monotonic() < deadline:
            line = server.stdout.readline()
            if not line:
                break
            lines.append(line)
            match = re.search(r"serving .* at (http://\S+/v1)", line)
            url = match.group(1) if match else None
        assert url, "rlyard serve did not start:\n" + "".join(lines)
        client = openai.OpenAI(base_url=url, api_key="none", timeout=120)
        assert [model.id for model in client.models.list().data] == ["embedded"]
        reply = client.chat.completions.create(model="embedded", messages=[{"role": "user", "content": "What is 12+34?"}],
                                               max_tokens=4, temperature=0)
        assert reply.choices[0].message.content is not None and reply.usage.completion_tokens <= 4
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        server.stdout.close()


def test_export_loads_in_transformers_with_the_runs_greedy_tokens(readme_run, tmp_path):
    """`rlyard export RUN --out DIR` on the README's run: transformers loads DIR and decodes greedily
    what the run's policy decodes in rlyard (loaded as `rlyard eval --checkpoint RUN` loads it)."""
    import argparse

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlyard.cli import load_policy
    from rlyard.types import SamplingParams

    cwd, run = readme_run
    out = tmp_path / "exported"
    rlyard_main(cwd, "export", str(run.relative_to(cwd)), "--out", str(out))
    model, tokenizer = AutoModelForCausalLM.from_pretrained(out), AutoTokenizer.from_pretrained(out)
    prompt = list(tokenizer.apply_chat_template([{"role": "user", "content": "What is 12+34?"}], add_generation_prompt=True,
                                                tokenize=True, return_dict=False))
    with torch.no_grad():
        exported = model.generate(torch.tensor([prompt]), max_new_tokens=6, do_sample=False)[0, len(prompt):].tolist()
    _, c, _ = load_policy(argparse.Namespace(config=None, overrides=[], checkpoint=str(run)))
    ours = c.engine.generate([prompt], SamplingParams(temperature=0.0, max_new_tokens=6, stop_token_ids=c.stop_token_ids))
    assert exported[: len(ours[0][0].token_ids)] == ours[0][0].token_ids
