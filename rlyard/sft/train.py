"""`rlyard sft`: supervised fine-tuning on conversations, with the run folder of `rlyard train`.

The loss is the mean negative log-likelihood of the assistant tokens (loss_mask 1) of a step's
conversations. Each micro-batch's summed NLL is divided by the whole step's assistant-token
count before its backward, so the gradient is that of the token mean over the step however it
is cut into micro-batches (a plain mean of micro-batch means would weight a short micro-batch's
tokens more). AdamW with a linear warmup, then cosine decay to 0 or a constant rate
(`rlyard.train.schedule`, the RL learner's schedule too); gradients clipped at
`sft.max_grad_norm`. The held-out loss is measured before the first step, every
`sft.eval_every` steps and after the last.

The run folder is `rlyard train`'s: config.yaml, metrics.jsonl (`loss/train`, `eval/loss` ...),
checkpoints/ written atomically (`--resume` continues from the last one with the same data
order, which depends only on the seed and the step), and loss_curve.png. Its last checkpoint
starts an RL run with `model.init_from`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F

from rlyard.agent.loop import AgentLimits, TemplateRenderer
from rlyard.config import ConfigError, RunConfig, SftConfig, dump_config
from rlyard.envs import get_family
from rlyard.models import autocast, autocast_choice, load_tokenizer
from rlyard.observe import MetricsLogger, plot_reward_curve
from rlyard.observe.metrics import METRICS_FILE
from rlyard.observe.store import write_atomic
from rlyard.orchestrate.sampling import agent_limits
from rlyard.orchestrate.setup import policy_model, seed_everything, stop_tokens
from rlyard.sft.batching import DataOrder, Example, Tokenized, ignored_tools_note, tokenize
from rlyard.sft.data import file_digest, load_conversations, split_held_out
from rlyard.train import latest_checkpoint, load_checkpoint, save_checkpoint
from rlyard.train.logprobs import backbone_and_head
from rlyard.train.schedule import lr_at


@dataclass
class SftResult:
    run_dir: Path
    steps: int
    base_eval_loss: float | None  # held-out loss before training (None without a held-out set)
    final_eval_loss: float | None
    final_train_loss: float | None  # the last step's
    train_seconds: float
    wall_seconds: float


@dataclass
class SftData:
    train: Tokenized
    held_out: Tokenized
    digest: str  # of the data files, so a resumed run can tell they changed
    note: str | None  # a warning about the data, e.g. `tools` the chat template ignores


PAD_MULTIPLE = 128  # micro-batch widths: few distinct shapes (token_nll)


def token_nll(model, examples: list[Example], precision: torch.dtype | None = None) -> tuple[torch.Tensor, int]:
    """Summed NLL of the assistant tokens of `examples` (one right-padded forward) and their count.

    Right padding needs no attention mask: causal attention never looks at later pads. The width
    is rounded up to a multiple of PAD_MULTIPLE: on a CPU a new shape builds new oneDNN kernels,
    and with one width per micro-batch the process grew by 2.8 GB in 40 steps while the steps
    slowed from 7.1 to 8.7 s; rounded, it stayed at 5.9 GB and 6.4 s (docs/sft.md; that the
    kernel cache is what grew is likely, not proven).
    The LM head runs only where an assistant token is predicted (a 49k vocabulary costs as much
    as several layers), as in the RL learner's logprobs.
    """
    body, head = backbone_and_head(model)
    device = head.weight.device
    width = -(-max(len(e.token_ids) for e in examples) // PAD_MULTIPLE) * PAD_MULTIPLE
    ids = torch.zeros((len(examples), width), dtype=torch.long)
    rows, cols, targets = [], [], []
    for row, example in enumerate(examples):
        ids[row, : len(example.token_ids)] = torch.tensor(example.token_ids)
        for col in range(1, len(example.token_ids)):
            if example.loss_mask[col]:
                rows.append(row), cols.append(col - 1), targets.append(example.token_ids[col])
    with autocast(precision, device):
        hidden = body(input_ids=ids.to(device), use_cache=False).last_hidden_state
        logits = head(hidden[torch.tensor(rows), torch.tensor(cols)]).float()
    return F.cross_entropy(logits, torch.tensor(targets, device=device), reduction="sum"), len(targets)


@torch.no_grad()
def held_out_loss(model, examples: list[Example], micro_batch_size: int, precision: torch.dtype | None = None) -> float:
    """Mean NLL per assistant token over all of `examples` (micro-batches of similar length)."""
    model.eval()
    order = sorted(range(len(examples)), key=lambda i: len(examples[i].token_ids))
    total, count = 0.0, 0
    for start in range(0, len(order), micro_batch_size):
        nll, n = token_nll(model, [examples[i] for i in order[start:start + micro_batch_size]], precision)
        total, count = total + nll.item(), count + n
    return total / count


def train_step(model, optimizer, micro_batches: list[list[Example]], lr: float, max_grad_norm: float,
               precision: torch.dtype | None = None) -> dict[str, float]:
    """One optimizer step on the token mean of the assistant NLL over all micro-batches."""
    model.train()
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    tokens = sum(e.assistant_tokens for micro in micro_batches for e in micro)
    loss = 0.0
    for micro in micro_batches:
        nll, _ = token_nll(model, micro, precision)
        (nll / tokens).backward()
        loss += nll.item()
    params = [p for group in optimizer.param_groups for p in group["params"]]
    grad_norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
    optimizer.step()
    return {"loss/train": loss / tokens, "loss/grad_norm": float(grad_norm), "train/lr": lr, "train/tokens": float(tokens)}


def sft_limits(config: RunConfig) -> AgentLimits:
    """The rollout's limits, so SFT trains on what an episode would hold. A multi-turn family's
    episode is the agent loop's (agent.*); a single-turn family's is one reply of at most
    rollout.max_new_tokens after its whole prompt, which agent.* never touches."""
    limits = agent_limits(config)
    if get_family(config.env.name).multi_turn:
        return limits
    uncut = 1 << 40
    return replace(limits, max_turns=1, max_tokens_per_turn=config.rollout.max_new_tokens, max_total_tokens=uncut,
                   max_prompt_tokens=uncut)


def prepare_data(config: RunConfig, renderer: TemplateRenderer, stop_id: int) -> SftData:
    """The training and held-out examples: sft.data, and sft.eval_data or a held-out share of sft.data."""
    s, limits = config.sft, sft_limits(config)
    if not s.data:
        raise ConfigError("sft.data: no data file given; run `rlyard sft DATA.jsonl` or set sft.data in the config")
    conversations = load_conversations(s.data)
    if s.eval_data:
        train, held = conversations, load_conversations(s.eval_data)
    else:
        train, held = split_held_out(conversations, s.eval_fraction, s.seed)

    def examples(part):
        return tokenize(part, renderer, stop_id, limits, s.max_length)

    digest = file_digest(s.data) + (file_digest(s.eval_data) if s.eval_data else "")
    return SftData(examples(train), examples(held), digest, ignored_tools_note(train + held, renderer))


def describe(data: SftData, order: DataOrder, total: int, s: SftConfig) -> str:
    train, held = data.train, data.held_out
    tokens = sum(e.assistant_tokens for e in train.examples)
    text = (f"[rlyard] sft on {len(train.examples)} conversations ({tokens} assistant tokens), {len(held.examples)} held out; "
            f"{total} steps of {s.batch_size} conversations ({order.steps_per_epoch} steps an epoch)")
    if train.cut + held.cut:
        text += f"; {train.cut + held.cut} cut to sft.max_length={s.max_length}"
    ended = {reason: train.ended.get(reason, 0) + held.ended.get(reason, 0) for reason in {**train.ended, **held.ended}}
    if ended:
        text += ("; the rollout would end " + ", ".join(f"{n} at {reason}" for reason, n in sorted(ended.items()))
                 + " (agent.*: kept up to there, prompt_too_long dropped)")
    if train.dropped + held.dropped:
        text += f"; {train.dropped + held.dropped} dropped (no reply within agent.max_total_tokens and sft.max_length)"
    return text


def train_sft(config: RunConfig, run_dir: Path, resume: bool = False) -> SftResult:
    """Train `config.model` on `config.sft.data` into `run_dir` (continuing its last checkpoint with `resume`)."""
    wall_started, s, out = time.perf_counter(), config.sft, config.output
    if config.train.threads:
        torch.set_num_threads(config.train.threads)
    seed_everything(s.seed)
    tokenizer = load_tokenizer(config.model.name, config.model.chat_template)
    renderer = TemplateRenderer(tokenizer, stop_tokens(tokenizer))
    data = prepare_data(config, renderer, renderer.reply_stop_id())
    train, held = data.train.examples, data.held_out.examples
    order = DataOrder([len(e.token_ids) for e in train], s.batch_size, s.micro_batch_size, s.length_window, s.seed)
    total = s.steps or s.epochs * order.steps_per_epoch
    model = policy_model(config.model)
    precision, choice = autocast_choice(config.model.autocast, config.model.device)
    if config.model.autocast == "auto":
        print(f"[rlyard] {choice}", flush=True)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=s.lr, weight_decay=s.weight_decay)

    run_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(run_dir / "config.yaml", dump_config(config).encode())
    print(describe(data, order, total, s))
    if data.note:
        print(f"[rlyard] note: {data.note}")
    start, base, train_seconds = 0, None, 0.0
    checkpoint = latest_checkpoint(run_dir) if resume else None
    if resume and checkpoint is None:
        print(f"[rlyard] no checkpoint in {run_dir}; starting from step 0")
    if checkpoint is not None:
        state = load_checkpoint(checkpoint, model, optimizer)
        start, base, train_seconds = state["step"], state.get("base_eval_loss"), state.get("train_seconds", 0.0)
        if state.get("data") != data.digest:
            print("[rlyard] warning: the data files changed since the checkpoint; the data order goes on from the new files")
        print(f"[rlyard] resumed from {checkpoint} at step {start}")
    if start == 0:  # a fresh start in a used folder: no rows of an earlier attempt (its step-0 row would repeat)
        (run_dir / METRICS_FILE).unlink(missing_ok=True)

    final_eval, final_train, since = None, None, []
    with MetricsLogger(run_dir, total, start, out.tensorboard, out.wandb, out.wandb_project,
                       config.model_dump(mode="json"), out.progress, mlflow=out.mlflow,
                       mlflow_tracking_uri=out.mlflow_tracking_uri, mlflow_experiment=out.mlflow_experiment) as logger:
        if held and start == 0 and base is None:
            base = held_out_loss(model, held, s.micro_batch_size, precision)
            logger.log(0, {"eval/loss": base})
            logger.write(f"[rlyard] step 0/{total}: held-out loss {base:.4f}")
        for step in range(start, total):
            started = time.perf_counter()
            micro = [[train[i] for i in indices] for indices in order.step(step)]
            metrics = train_step(model, optimizer, micro, lr_at(step, total, s.lr, s.schedule, s.warmup_steps),
                                 s.max_grad_norm, precision)
            seconds = time.perf_counter() - started
            train_seconds += seconds
            done, final_train = step + 1, metrics["loss/train"]
            since.append(final_train)
            metrics |= {"time/step": seconds, "progress/epoch": done / order.steps_per_epoch}
            due = done == total or (s.eval_every and done % s.eval_every == 0)
            if held and due:
                metrics["eval/loss"] = final_eval = held_out_loss(model, held, s.micro_batch_size, precision)
            logger.log(done, metrics)
            if due:
                held_text = f", held-out loss {metrics['eval/loss']:.4f}" if held else ""
                logger.write(f"[rlyard] step {done}/{total}: train loss {sum(since) / len(since):.4f}{held_text}")
                since = []
            if (out.checkpoint_every and done % out.checkpoint_every == 0) or done == total:
                save_checkpoint(run_dir, done, model, optimizer, {"base_eval_loss": base, "train_seconds": train_seconds,
                                                                  "data": data.digest}, keep=out.keep_checkpoints)
    if held and final_eval is None:  # resumed after the last step: nothing trained, measure what is there
        final_eval = held_out_loss(model, held, s.micro_batch_size, precision)
    if out.plot and start < total:
        plot_reward_curve(run_dir / "metrics.jsonl", run_dir / "loss_curve.png", key="loss/train")
    return SftResult(run_dir, total, base, final_eval, final_train, train_seconds, time.perf_counter() - wall_started)
