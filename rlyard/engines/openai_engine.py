"""`rollout.engine=openai`: sampling from an OpenAI-compatible completions server (vLLM, or
`rlyard serve` itself) behind the same contract as the in-process engine.

The trainer needs the exact sampled token ids and their logprobs, never text it would have to
tokenize again (a different split of the same text is a different sequence to the learner).
So every request is `POST /v1/completions` with the prompt as token ids, `logprobs: 0` and
vLLM's two ways of returning ids: `return_token_ids` (each choice's `token_ids`, vLLM >=
0.10.2) and `return_tokens_as_token_ids` (logprob tokens written "token_id:<id>"); either one
is enough, and both must agree when both come. A server that gives neither, or no logprobs, is
refused when the engine starts (one tiny probe request), with what it lacks named, rather than
after a step of training on guesses.

New weights are LoRA adapters, through vLLM's runtime LoRA API: after each step the learner's
adapter is written with peft's `save_pretrained` and loaded as `POST /v1/load_lora_adapter`
under a new name per version, later requests name it as their `model`, and the previous one is
unloaded. So `policy_version` is exactly the version of the adapter the requests name. Full
weights cannot be sent this way (vLLM's weight-transfer API is another road); the engine
refuses them.
"""
from __future__ import annotations

import math
import shutil
import tempfile
import uuid
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from rlyard.engines.base import fold_seed
from rlyard.models.lora import is_peft, save_adapter
from rlyard.types import Completion, SamplingParams

TOKEN_ID = "token_id:"
# Mean |logprob gap| on the probe beyond which the server is not sampling the trainer's policy.
# bf16 against fp32 weights gives a few hundredths; another model, or logprobs reported before
# the temperature, gives nats.
PROBE_GAP_LIMIT = 0.5
PROBE_TEMPERATURE = 0.7
VLLM_HINT = ("vLLM >= 0.10.2 started with --logprobs-mode processed_logprobs --enable-lora and "
             "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True (docs/engines.md), or rlyard serve")


class ServerError(RuntimeError):
    """The server cannot serve as the engine (unreachable, or missing something it needs)."""


class OpenAIEngine:
    def __init__(self, base_url: str, model, api_key: str | None = None, served_name: str | None = None,
                 probe_prompt: list[int] = (0,), timeout_s: float = 600.0, max_concurrency: int = 64):
        """`model` is the learner's policy: the adapter the server loads comes from it, and the
        probe's logprobs are checked against it. `served_name` picks the base model when the
        server lists several."""
        try:
            import httpx
        except ImportError:
            raise ServerError("rollout.engine=openai needs httpx: pip install 'rlyard[openai]' (or httpx)") from None
        self.url = base_url.rstrip("/")
        if not self.url.endswith("/v1"):
            raise ServerError(f"rollout.base_url={base_url}: must end in /v1, e.g. http://127.0.0.1:8000/v1")
        self.model, self.policy_version = model, 0
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(base_url=self.url, headers=headers, timeout=httpx.Timeout(timeout_s, connect=10.0),
                                   limits=httpx.Limits(max_connections=max_concurrency))
        self.pool = ThreadPoolExecutor(max_concurrency, thread_name_prefix="rlyard-openai")
        self.base_name = self._served_model(served_name)
        self.sampling_name = self.base_name  # the base, then the adapter of the latest version
        self.prefix = f"rlyard-{uuid.uuid4().hex[:8]}"  # adapters of two runs on one server never collide
        self.adapter_dir = Path(tempfile.mkdtemp(prefix="rlyard-adapters-"))
        weakref.finalize(self, shutil.rmtree, self.adapter_dir, True)
        self._probe(list(probe_prompt))
        if is_peft(model):
            self.update_weights(0)  # tries the LoRA calls now, not after the first training step

    # ------------------------------------------------------------------ the Engine contract
    def generate(self, prompts: list[list[int]], params: SamplingParams, n: int = 1) -> list[list[Completion]]:
        """One request per prompt, all in flight together (the server batches them). Each gets
        its own seed (`fold_seed(seed, "prompt", index)`): equal prompts with one seed would sample equal groups."""
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        name, version = self.sampling_name, self.policy_version  # one call samples one version
        seeds = [fold_seed(params.seed, "prompt", i) for i in range(len(prompts))]
        futures = [self.pool.submit(self._complete, p, params, n, seed, name, version) for p, seed in zip(prompts, seeds)]
        return [future.result() for future in futures]

    def update_weights(self, version: int, state_dict: dict | None = None) -> None:
        """Write the learner's adapter and have the server load it as this version's name."""
        if state_dict or not is_peft(self.model):
            raise ServerError("rollout.engine=openai sends LoRA adapters only; full fine-tuning cannot push its weights "
                              "to an external server yet (set model.lora.enabled=true, or use rollout.engine=hf)")
        name = f"{self.prefix}-v{version}"
        folder = self.adapter_dir / name
        save_adapter(self.model, folder)
        if name == self.sampling_name:  # the same version again (a resume at step 0): replace it
            self._admin("unload_lora_adapter", {"lora_name": name})
        self._admin("load_lora_adapter", {"lora_name": name, "lora_path": str(folder)})
        previous, self.sampling_name, self.policy_version = self.sampling_name, name, version
        if previous not in (self.base_name, name):
            self._admin("unload_lora_adapter", {"lora_name": previous})
            shutil.rmtree(self.adapter_dir / previous, ignore_errors=True)

    def close(self) -> None:
        self.pool.shutdown(wait=False)
        self.client.close()

    # ------------------------------------------------------------------ requests
    def _complete(self, prompt: list[int], params: SamplingParams, n: int, seed: int | None, name: str,
                  version: int) -> list[Completion]:
        # top_k always sent (0 = off): vLLM would otherwise apply the model's generation_config default
        body = {"model": name, "prompt": prompt, "n": n, "max_tokens": params.max_new_tokens,
                "temperature": params.temperature, "top_p": params.top_p, "top_k": params.top_k, "logprobs": 0,
                "stop_token_ids": list(params.stop_token_ids), "return_token_ids": True, "return_tokens_as_token_ids": True}
        if seed is not None:
            body["seed"] = seed
        response = self._post("completions", body)
        choices = sorted(response.get("choices") or [], key=lambda c: c.get("index", 0))
        if len(choices) != n:
            raise ServerError(f"{self.url}/completions returned {len(choices)} choices for n={n}")
        out = []
        for choice in choices:
            token_ids, logprobs = sampled_tokens(choice, self.url)
            finish = choice.get("finish_reason")
            if finish not in ("stop", "length"):
                raise ServerError(f"{self.url}/completions ended a completion with finish_reason={finish!r}")
            out.append(Completion(token_ids, logprobs, finish, version))
        return out

    def _post(self, path: str, body: dict) -> dict:
        response = self._send("POST", path, body)
        if response.status_code != 200:
            raise ServerError(f"{self.url}/{path} answered {response.status_code}: {error_message(response)}")
        return response.json()

    def _send(self, method: str, path: str, body: dict | None = None):
        import httpx

        try:
            return self.client.request(method, path, json=body)
        except httpx.TransportError as exc:
            raise ServerError(f"rollout.base_url={self.url}: cannot reach the server ({type(exc).__name__}: {exc}); "
                              "start it (vllm serve / rlyard serve) or fix rollout.base_url") from None

    def _admin(self, call: str, body: dict) -> None:
        response = self._send("POST", call, body)
        if response.status_code in (404, 405):
            raise ServerError(f"the server at {self.url} has no /v1/{call} (runtime LoRA): start vLLM with --enable-lora "
                              "--max-lora-rank <model.lora.rank or more> and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True "
                              "(rlyard serve has it)")
        if response.status_code != 200:
            raise ServerError(f"{self.url}/{call} {body['lora_name']} answered {response.status_code}: "
                              f"{error_message(response)}")

    def _served_model(self, wanted: str | None) -> str:
        """The base model's name: `wanted` when listed, else the one model without a parent."""
        response = self._send("GET", "models")
        if response.status_code != 200:
            raise ServerError(f"rollout.base_url={self.url}: GET /models answered {response.status_code}: "
                              f"{error_message(response)} (is this an OpenAI-compatible server?)")
        listed = response.json().get("data") or []
        ids = [m["id"] for m in listed]
        bases = [m["id"] for m in listed if not m.get("parent")]
        if wanted in ids:
            return wanted
        if len(bases) == 1:
            return bases[0]
        raise ServerError(f"rollout.base_url={self.url} serves {ids or 'no models'}; none is model.name={wanted}")

    def _probe(self, prompt: list[int]) -> None:
        """One small sampled request: are the sampled ids and logprobs returned, and do they match
        the trainer's model (the same weights, logprobs under the temperature)?"""
        params = SamplingParams(temperature=PROBE_TEMPERATURE, max_new_tokens=4, seed=0)
        try:
            [completion] = self._complete(prompt, params, 1, 0, self.base_name, 0)
        except ServerError as exc:
            if "returned no" in str(exc):
                raise
            raise ServerError(f"the server at {self.url} cannot serve as rollout.engine=openai: a token-id completions "
                              f"request failed ({exc}); it needs {VLLM_HINT}") from None
        gap = probe_gap(self.model, prompt, completion, PROBE_TEMPERATURE)
        if gap > PROBE_GAP_LIMIT:
            raise ServerError(f"the server at {self.url} ({self.base_name}) does not sample the trainer's policy: its "
                              f"logprobs differ from model.name's by {gap:.2f} nats per token on a probe. Serve the same "
                              "weights (with model.init_from: `rlyard export` that run) and report logprobs after the "
                              "temperature (vLLM: --logprobs-mode processed_logprobs)")


def sampled_tokens(choice: dict, url: str) -> tuple[list[int], list[float]]:
    """The exact sampled ids and their logprobs of one choice, from `token_ids` or from logprob
    tokens "token_id:<id>"; a server that sends neither, or no logprobs, is refused."""
    logprobs = choice.get("logprobs") or {}
    values = logprobs.get("token_logprobs")
    if not values or any(v is None for v in values):
        raise ServerError(f"the server at {url} returned no logprobs for a token-id prompt (logprobs: 0): the trainer needs "
                          f"the sampled tokens' logprobs; it needs {VLLM_HINT}")
    tokens = logprobs.get("tokens") or []
    from_tokens = [int(t[len(TOKEN_ID):]) for t in tokens] if tokens and all(
        isinstance(t, str) and t.startswith(TOKEN_ID) for t in tokens) else None
    token_ids = choice.get("token_ids")
    if token_ids is None and from_tokens is None:
        raise ServerError(f"the server at {url} returned no sampled token ids: neither `token_ids` (return_token_ids) nor "
                          f"logprob tokens as 'token_id:<id>' (return_tokens_as_token_ids), and rlyard never re-tokenizes "
                          f"text; it needs {VLLM_HINT}")
    if token_ids is not None and from_tokens is not None and list(token_ids) != from_tokens:
        raise ServerError(f"the server at {url} returned token_ids {token_ids[:8]} but logprob tokens {from_tokens[:8]}")
    ids = list(token_ids if token_ids is not None else from_tokens)
    if len(ids) != len(values):
        raise ServerError(f"the server at {url} returned {len(ids)} token ids but {len(values)} logprobs")
    return ids, [float(v) for v in values]


@torch.no_grad()
def probe_gap(model, prompt: list[int], completion: Completion, temperature: float) -> float:
    """Mean |server logprob - the model's own| over the probe's sampled tokens."""
    if not completion.token_ids:
        return 0.0
    was_training = model.training
    model.eval()
    try:
        device = next(model.parameters()).device
        ids = torch.tensor([prompt + completion.token_ids], device=device)
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float() / temperature
        own = torch.log_softmax(logits, dim=-1).gather(-1, ids[0, len(prompt):, None].to(logits.device)).squeeze(-1)
    finally:
        model.train(was_training)
    gaps = [abs(a - b) for a, b in zip(own.tolist(), completion.logprobs)]
    return math.fsum(gaps) / len(gaps)


def error_message(response) -> str:
    """An OpenAI error body's message, else the start of the body."""
    try:
        body = response.json()
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict) and error.get("message"):
            return error["message"]
        if isinstance(body, dict) and body.get("message"):
            return body["message"]
    except ValueError:
        pass
    return response.text[:300]
