"""`rlyard export`: a trained run as a folder that transformers and PEFT load, giving the policy
rlyard trained: the same greedy tokens as rlyard's engine, the same logits from the adapter.
(vLLM is not installed where these tests run; docs/export.md says so.)

The runs are made through the CLI, as the README does, on the tiny random llama at a high
learning rate, so that the trained policy visibly differs from its base (else an export of the
untouched base would pass too).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import torch

from rlyard.cli import load_policy, main
from rlyard.types import SamplingParams

PROMPTS = ["Say something.", "What is 12+34?", "Name a colour."]
# The quickstart config (what `rlyard train` reads) on the toy family: the reward is a capital "A"
# anywhere in 8 tokens, scored even when cut off, so the first steps have rewards to learn from.
RUN = ["env.name=toy", "env.train_size=4", "rollout.prompts_per_step=2", "rollout.n=8", "rollout.max_new_tokens=8",
       "rollout.temperature=1.0", "rollout.truncated_reward=null", "algo.lr=5e-2", "eval.size=0", "output.progress=false",
       "output.plot=false"]


def rlyard_train(model_dir: Path, run_dir: Path, *overrides: str) -> Path:
    assert main(["train", f"model.name={model_dir}", *RUN, f"output.run_dir={run_dir}", *overrides]) == 0
    return run_dir


def rlyard_export(run: Path, out: Path, *flags: str) -> Path:
    assert main(["export", str(run), "--out", str(out), *flags]) == 0
    return out


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, tiny_model_dir) -> Path:
    return rlyard_train(tiny_model_dir, tmp_path_factory.mktemp("export") / "lora", "train.steps=2", "output.checkpoint_every=1", "model.lora.rank=4",
                        "model.lora.alpha=8")


@pytest.fixture(scope="module")
def merged_export(lora_run, tmp_path_factory) -> Path:
    return rlyard_export(lora_run, tmp_path_factory.mktemp("merged") / "out")


@pytest.fixture(scope="module")
def prompt_ids(tokenizer) -> list[list[int]]:
    from rlyard.orchestrate.rollout import render_prompt

    return [render_prompt(tokenizer, [{"role": "user", "content": text}]) for text in PROMPTS]


def hf_model(folder: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder).eval()


def hf_greedy(model, prompts: list[list[int]], max_new_tokens: int = 8) -> list[list[int]]:
    """transformers' own generate, one prompt at a time (no padding), stopping where the export's
    generation config says."""
    replies = []
    for ids in prompts:
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=max_new_tokens)
        replies.append(out[0, len(ids):].tolist())
    return replies


def logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0]


def test_merged_export_generates_what_rlyard_trained(lora_run, merged_export, prompt_ids, tiny_model_dir):
    # the trained policy inside rlyard, loaded as `rlyard eval --checkpoint RUN` loads it
    _, c, _ = load_policy(argparse.Namespace(config=None, overrides=[], checkpoint=str(lora_run)))
    params = SamplingParams(temperature=0.0, max_new_tokens=8, stop_token_ids=c.stop_token_ids)
    rlyard_tokens = [group[0].token_ids for group in c.engine.generate(prompt_ids, params)]

    exported = hf_model(merged_export)
    assert hf_greedy(exported, prompt_ids) == rlyard_tokens
    base = hf_model(tiny_model_dir)
    assert hf_greedy(base, prompt_ids) != rlyard_tokens  # training changed the policy, so the check could fail
    assert (logits(exported, prompt_ids[0]) - logits(base, prompt_ids[0])).abs().max() > 1e-2


def test_merged_export_is_a_complete_hf_folder(merged_export, tokenizer):
    from transformers import AutoTokenizer

    names = {p.name for p in merged_export.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names
    assert not any(name.startswith(".") for name in (p.name for p in merged_export.parent.iterdir()))  # no staging left
    loaded = AutoTokenizer.from_pretrained(merged_export)
    messages = [{"role": "user", "content": "Hi"}]
    assert loaded.apply_chat_template(messages, tokenize=False) == tokenizer.apply_chat_template(messages, tokenize=False)
    generation = json.loads((merged_export / "generation_config.json").read_text())
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") in generation["eos_token_id"]


def test_dtype_and_force(lora_run, merged_export, tmp_path, capsys):
    from safetensors import safe_open

    out = rlyard_export(lora_run, tmp_path / "bf16", "--dtype", "bfloat16")
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    with safe_open(out / "model.safetensors", "pt") as f:
        assert {f.get_tensor(name).dtype for name in f.keys()} == {torch.bfloat16}
    assert main(["export", str(lora_run), "--out", str(out)]) == 2  # not empty: refused
    err = capsys.readouterr().err
    assert str(out) in err and "--force" in err and "Traceback" not in err
    rlyard_export(lora_run, out, "--force")
    assert json.loads((out / "config.json").read_text())["dtype"] == "float32"
    assert "load it:" in capsys.readouterr().out


def test_adapter_export_loads_with_peft(lora_run, merged_export, prompt_ids, tiny_model_dir, tmp_path, capsys):
    from peft import PeftModel

    out = rlyard_export(lora_run, tmp_path / "adapter", "--adapter")
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json"} <= {p.name for p in out.iterdir()}
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(Path(tiny_model_dir).resolve()) and config["r"] == 4
    assert "PeftModel.from_pretrained" in capsys.readouterr().out
    with_adapter = PeftModel.from_pretrained(hf_model(tiny_model_dir), out).eval()
    assert torch.allclose(logits(with_adapter, prompt_ids[1]), logits(hf_model(merged_export), prompt_ids[1]), atol=1e-5)


def test_checkpoint_adapter_folder_loads_with_peft(lora_run, merged_export, prompt_ids, tiny_model_dir):
    from peft import PeftModel

    step = lora_run / "checkpoints" / "step_000002"
    with_adapter = PeftModel.from_pretrained(hf_model(tiny_model_dir), step / "adapter").eval()
    assert torch.allclose(logits(with_adapter, prompt_ids[2]), logits(hf_model(merged_export), prompt_ids[2]), atol=1e-5)
    assert (step / "weights.pt").exists()  # resume and init_from still read it


def test_one_checkpoint_folder_exports_that_step(lora_run, merged_export, tmp_path, prompt_ids):
    out = rlyard_export(lora_run / "checkpoints" / "step_000001", tmp_path / "step1")
    assert not torch.allclose(logits(hf_model(out), prompt_ids[0]), logits(hf_model(merged_export), prompt_ids[0]))


def test_full_fine_tuning_exports_merged_and_refuses_adapter(tiny_model_dir, tmp_path, prompt_ids, capsys):
    run = rlyard_train(tiny_model_dir, tmp_path / "full", "train.steps=1", "model.lora.enabled=false", "algo.lr=1e-3")
    out = rlyard_export(run, tmp_path / "merged")
    trained = hf_model(tiny_model_dir)
    trained.load_state_dict(torch.load(run / "checkpoints" / "step_000001" / "weights.pt"))
    assert torch.allclose(logits(hf_model(out), prompt_ids[0]), logits(trained, prompt_ids[0]), atol=1e-6)
    assert not (run / "checkpoints" / "step_000001" / "adapter").exists()
    capsys.readouterr()
    assert main(["export", str(run), "--out", str(tmp_path / "adapter"), "--adapter"]) == 2
    err = capsys.readouterr().err
    assert "full fine-tuning" in err and str(run) in err and "Traceback" not in err
    assert not (tmp_path / "adapter").exists()


def test_a_chained_run_exports_the_whole_chain(lora_run, merged_export, tiny_model_dir, tmp_path, prompt_ids, capsys):
    from peft import PeftModel

    from rlyard.config import ModelConfig
    from rlyard.orchestrate.setup import initial_model

    run = rlyard_train(tiny_model_dir, tmp_path / "chained", "train.steps=1", f"model.init_from={lora_run}")
    merged = hf_model(rlyard_export(run, tmp_path / "merged"))
    after_step = initial_model(ModelConfig(name=str(tiny_model_dir), init_from=str(run)))  # the chain, as the next run sees it
    assert torch.allclose(logits(merged, prompt_ids[0]), logits(after_step, prompt_ids[0]), atol=1e-5)

    capsys.readouterr()
    adapter = rlyard_export(run, tmp_path / "adapter", "--adapter")
    out = capsys.readouterr().out
    assert f"model.init_from={lora_run}" in out and f"rlyard export {lora_run} --out BASE_DIR" in out
    base = json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert base == str((lora_run / "checkpoints" / "step_000002").resolve())
    for folder in (adapter, run / "checkpoints" / "step_000001" / "adapter"):  # both name the earlier run as the base
        assert json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"] == base
    on_earlier = PeftModel.from_pretrained(hf_model(merged_export), adapter).eval()  # the adapter on the exported earlier run
    assert torch.allclose(logits(on_earlier, prompt_ids[0]), logits(merged, prompt_ids[0]), atol=1e-5)


@pytest.mark.parametrize("case", ["not a folder", "not a run", "no checkpoint"])
def test_bad_input_is_one_clear_line(case, tmp_path, capsys):
    given = tmp_path / "given"
    if case != "not a folder":
        given.mkdir()
    if case == "no checkpoint":
        (given / "config.yaml").write_text("name: stopped-early\n")
    out = tmp_path / "out"
    assert main(["export", str(given), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    expected = {"not a folder": "is not a folder", "not a run": "no config.yaml", "no checkpoint": "has no checkpoint"}[case]
    assert err.startswith(f"rlyard: {given}") and expected in err and "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize("where", ["above the run", "the run", "its checkpoints"])
def test_out_on_the_run_is_refused_even_with_force(where, lora_run, capsys):
    out = {"above the run": lora_run.parent, "the run": lora_run, "its checkpoints": lora_run / "checkpoints"}[where]
    assert main(["export", str(lora_run), "--out", str(out), "--force"]) == 2
    assert "holds the run" in capsys.readouterr().err
    assert (lora_run / "checkpoints" / "latest").exists()


def test_export_help_explains():
    from test_cli import run_cli

    result = run_cli("export", "--help")
    assert result.returncode == 0, result.stderr
    for fragment in ("--out", "--adapter", "--dtype", "--force", "init_from", "vllm serve", "docs/export.md"):
        assert fragment in result.stdout

