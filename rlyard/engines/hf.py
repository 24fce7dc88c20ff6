"""A transformers engine: batched sampling with a KV cache, on CPU or one GPU.

Six things make it fast without leaving plain PyTorch: the prompts' common prefix (the chat
template's system prompt, shared instructions) is prefilled once for the batch; each prompt is
prefilled once and its cache shared by its `n` completions; finished sequences leave the batch
(their cache rows are dropped), so the batch shrinks instead of padding to the longest; logits
are computed for the last position only; the KV cache lives in buffers sized for the whole
reply, so a decode step writes one position in place instead of copying the whole cache
(`torch.cat`) in every layer; llama-shaped models decode through a lean step
(`engines/decode.py`) without transformers' per-layer Python. Across the turns of a conversation,
a prompt that extends a sequence the engine finished reuses its keys and values
(`engines/prefix.py`) and prefills only the new tokens.
Logprobs are those of the temperature-scaled full distribution, which is what the learner
recomputes, so the two agree to float precision. With `quantize="int8"` the decode step's
projections run as fused int8 kernels (`engines/quant.py`): faster decoding on a CPU, at the
price of a logprob gap that the learner's TIS weight corrects.
"""
from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicLayer

from rlyard.engines.base import StepHook
from rlyard.engines.decode import LeanDecoder, lean_decode_support
from rlyard.engines.prefix import CachedPrefix, PrefixStore, left_padded, row_prefix
from rlyard.engines.quant import QUANTIZE_MODES
from rlyard.models.loading import autocast
from rlyard.models.lora import FACTOR_DOWN, FACTOR_UP
from rlyard.types import Completion, SamplingParams


class PreallocatedLayer(DynamicLayer):
    """A DynamicLayer whose keys / values are views into buffers of `capacity` positions.

    transformers' DynamicLayer appends with torch.cat, which copies the layer's whole cache at
    every decode step (quadratic in the reply length; 8% of a 32-token decode on 2 cores). Here
    a step writes its position in place and returns views of the filled part; attention never
    sees the unfilled tail. The buffer grows (doubling) only if a caller outruns `capacity`.
    """

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity, self.length = capacity, 0

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        new = key_states.shape[-2]
        if not self.is_initialized:
            self.device, self.is_initialized = key_states.device, True
            self._keys, self._values = self._alloc(key_states, self.capacity), self._alloc(value_states, self.capacity)
        if self.length + new > self._keys.shape[-2]:
            self._reserve(max(2 * self._keys.shape[-2], self.length + new))
        self._keys[:, :, self.length : self.length + new] = key_states
        self._values[:, :, self.length : self.length + new] = value_states
        self.length += new
        return self._views()

    @staticmethod
    def _alloc(like: torch.Tensor, capacity: int) -> torch.Tensor:
        return like.new_empty((like.shape[0], like.shape[1], capacity, like.shape[3]))

    def _reserve(self, capacity: int, keys: torch.Tensor | None = None, values: torch.Tensor | None = None) -> None:
        """Move the filled part (or the given rows of it) into fresh buffers of `capacity` positions."""
        keys = self._keys[:, :, : self.length] if keys is None else keys
        values = self._values[:, :, : self.length] if values is None else values
        self._keys, self._values = self._alloc(keys, capacity), self._alloc(values, capacity)
        self._keys[:, :, : self.length], self._values[:, :, : self.length] = keys, values
        self._views()

    def _views(self) -> tuple[torch.Tensor, torch.Tensor]:
        self.keys, self.values = self._keys[:, :, : self.length], self._values[:, :, : self.length]
        return self.keys, self.values

    def load(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Start from these keys / values (a reused prefix) instead of empty."""
        self.device, self.is_initialized, self.length = keys.device, True, keys.shape[-2]
        self._reserve(max(self.capacity, self.length), keys, values)

    def crop(self, tokens_to_remove: int) -> None:
        super().crop(tokens_to_remove)
        if self.is_initialized:
            self.length = self.keys.shape[-2]

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.length:
            self._reserve(self._keys.shape[-2], self.keys.repeat_interleave(repeats, dim=0), self.values.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.length:
            self._reserve(self._keys.shape[-2], self.keys[indices], self.values[indices])


class HFEngine:
    def __init__(self, model, pad_token_id: int, autocast_dtype: torch.dtype | None = None, quantize: str = "none",
                 prefix_cache_bytes: int = 0):
        """Llama-shaped models decode through `LeanDecoder` (and may use `quantize="int8"`);
        others through transformers' forward. `prefix_cache_bytes` > 0 keeps finished sequences'
        keys / values (for calls with `cache_prefix`) within that many bytes."""
        if quantize not in QUANTIZE_MODES:
            raise ValueError(f"quantize must be one of {', '.join(QUANTIZE_MODES)}, got {quantize!r}")
        self.model = model  # its own copy (LoRA: merged weights pushed each step) or the learner's
        self.pad_token_id = pad_token_id
        self.autocast_dtype = autocast_dtype
        why_not = lean_decode_support(model)
        if quantize == "int8" and why_not:
            raise ValueError(f"rollout.quantize=int8 needs a llama-shaped model: {why_not}")
        self.decoder = None if why_not else LeanDecoder(model, quantize)
        self.policy_version = 0
        # int8: generate packs the layers after the calibrating batch. A caller that runs generate
        # from several threads (SharedEngine) sets this and calls quantize_if_calibrated itself,
        # once no forward pass is in flight: packing mid-forward would switch layers under a batch.
        self.defer_quantization = False
        self.prefix_store = PrefixStore(prefix_cache_bytes) if prefix_cache_bytes > 0 else None

    @property
    def takes_lora_factors(self) -> bool:
        """Whether a push should also carry the LoRA factors (models/lora.py `lora_factors`): the
        int8 projections then keep their packed base and only swap the low-rank term."""
        return self.decoder is not None and bool(self.decoder.int8_projections)

    def update_weights(self, version: int, state_dict: dict | None = None) -> None:
        """Copy `state_dict` (any subset of the weights) into the engine's model, in place; int8
        layers are re-quantized from the pushed float weights, or, for LoRA linears whose factors
        come along (keys ending in FACTOR_DOWN / FACTOR_UP), take the new factors."""
        if state_dict:
            params = dict(self.model.named_parameters(remove_duplicate=False))  # tied weights keep both names
            weights = {k: v for k, v in state_dict.items() if not k.endswith((FACTOR_DOWN, FACTOR_UP))}
            factors = {}
            for module in {k.removesuffix(FACTOR_DOWN).removesuffix(FACTOR_UP) for k in state_dict.keys() - weights.keys()}:
                if module + ".weight" not in params or module + FACTOR_DOWN not in state_dict or module + FACTOR_UP not in state_dict:
                    raise KeyError(f"update_weights: {module} is no linear of the engine's model with both LoRA factors")
                factors[id(params[module + ".weight"])] = (state_dict[module + FACTOR_DOWN], state_dict[module + FACTOR_UP])
            unknown = [name for name in weights if name not in params]
            if unknown:
                raise KeyError(f"update_weights: the engine's model has no weights named {unknown[:3]}")
            with torch.no_grad():
                for name, tensor in weights.items():
                    params[name].copy_(tensor)
            if self.decoder is not None:
                self.decoder.weights_changed({id(params[name]) for name in weights}, factors)
        if self.prefix_store is not None:
            self.prefix_store.clear()  # keys of the old weights (also when the learner's model is ours)
        self.policy_version = version

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], params: SamplingParams, n: int = 1,
                 on_step: StepHook | None = None) -> list[list[Completion]]:
        """`on_step` (optional) sees every decode step as it happens: it is called with
        (output index, token id, logprob) for each live row (output index = prompt * n + sample)
        and returns the output indices to remove from the batch (they finish with "stop"): a
        server streams tokens and ends rows at stop strings or for abandoned requests with it."""
        if not prompts:
            return []
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        was_training = self.model.training
        self.model.eval()
        try:
            with autocast(self.autocast_dtype, next(self.model.parameters()).device):
                flat = self._generate(prompts, params, n, on_step)
            if not self.defer_quantization:
                self.quantize_if_calibrated()  # int8: that batch ran in fp32 and measured the scales
        finally:
            self.model.train(was_training)
        return [flat[i * n : (i + 1) * n] for i in range(len(prompts))]

    @property
    def quantization_pending(self) -> bool:
        """int8: a calibrating batch has measured the scales and the layers are not packed yet."""
        return self.decoder is not None and self.decoder.quantization_pending

    def quantize_if_calibrated(self) -> None:
        """int8: pack the layers once a batch has measured them (a no-op otherwise). Not safe while
        another thread is inside generate: the caller must hold every forward pass back."""
        if self.decoder is not None and self.decoder.quantization_pending:
            self.decoder.quantize_if_calibrated()
            if self.prefix_store is not None:
                self.prefix_store.clear()  # fp32 keys; later turns compute int8 ones

    def _generate(self, prompts: list[list[int]], params: SamplingParams, n: int,
                  on_step: StepHook | None = None) -> list[Completion]:
        device = next(self.model.parameters()).device
        generator = torch.Generator(device="cpu")
        generator.manual_seed(params.seed if params.seed is not None else torch.seed() % (2**63))
        store = self.prefix_store if params.cache_prefix else None
        reusable = [store.longest_prefix(p) for p in prompts] if store is not None else [None] * len(prompts)
        if any(reusable):
            cache, logits, attention = self._prefill_reusing(prompts, reusable, params.max_new_tokens, device)
        else:
            cache, logits, attention = self._prefill(prompts, params.max_new_tokens, device)
        if n > 1:
            cache.batch_repeat_interleave(n)
            logits = logits.repeat_interleave(n, dim=0)
            attention = attention.repeat_interleave(n, dim=0)
        next_position = attention.sum(-1)  # per row: position of the next token
        padded = not bool(attention.all())  # no padding: attention needs no mask

        total = len(prompts) * n
        tokens: list[list[int]] = [[] for _ in range(total)]
        logprobs: list[list[float]] = [[] for _ in range(total)]
        finish = ["length"] * total
        active = torch.arange(total)  # row in the live batch -> output index
        stop_ids = torch.tensor(sorted(set(params.stop_token_ids)), dtype=torch.long)

        def remember(rows: list[int]) -> None:  # before rows leave the cache: prompt + reply but its unfed last token
            for row in rows:
                index = int(active[row])
                prompt, reused = prompts[index // n], reusable[index // n]
                store.put(row_prefix(cache, attention, row, prompt + tokens[index][:-1]), replaces=reused)

        for step in range(params.max_new_tokens):
            sampled, sampled_logprobs = sample(logits, params, generator)
            for row, index in enumerate(active.tolist()):
                tokens[index].append(int(sampled[row]))
                logprobs[index].append(float(sampled_logprobs[row]))
            done = torch.isin(sampled.cpu(), stop_ids) if len(stop_ids) else torch.zeros(len(active), dtype=torch.bool)
            if on_step is not None:
                live = active.tolist()
                removed = set(on_step([(index, tokens[index][-1], logprobs[index][-1]) for index in live]) or ())
                if removed:
                    done = done | torch.tensor([index in removed for index in live], dtype=torch.bool)
            for row in done.nonzero().flatten().tolist():
                finish[int(active[row])] = "stop"
            keep = (~done).nonzero().flatten()
            if step == params.max_new_tokens - 1 or len(keep) == 0:
                if store is not None:
                    remember(list(range(len(active))))
                break
            if len(keep) < len(active):  # finished rows leave the batch and the cache
                if store is not None:
                    remember(done.nonzero().flatten().tolist())
                cache.batch_select_indices(keep.to(device))
                active, attention, next_position = active[keep], attention[keep], next_position[keep]
                sampled = sampled[keep.to(sampled.device)]
            attention = torch.cat([attention, torch.ones((len(active), 1), dtype=torch.long)], dim=1)
            cache, logits = self._forward(cache, sampled.view(-1, 1), next_position.view(-1, 1), attention, device, masked=padded)
            next_position = next_position + 1

        return [
            Completion(token_ids=tokens[i], logprobs=logprobs[i], finish_reason=finish[i], policy_version=self.policy_version)
            for i in range(total)
        ]

    def _prefill(self, prompts: list[list[int]], max_new_tokens: int, device) -> tuple[Cache, torch.Tensor, torch.Tensor]:
        """Cache, last logits [B, V] and attention mask [B, L] after the prompts (left-padded).

        The prompts' common prefix (a system prompt, shared instructions) is prefilled once, then
        each prompt's rest, left-padded after it."""
        shared = common_prefix_length(prompts)
        width = max(len(p) for p in prompts) - shared
        cache = self._new_cache(shared + width + max_new_tokens)
        if shared:
            self.model(input_ids=torch.tensor([prompts[0][:shared]], device=device), cache=cache, use_cache=True, logits_to_keep=1)
            cache.batch_repeat_interleave(len(prompts))
        input_ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), shared + width), dtype=torch.long)
        attention[:, :shared] = 1
        for row, prompt in enumerate(prompts):
            input_ids[row, width - len(prompt) + shared :] = torch.tensor(prompt[shared:])
            attention[row, shared + width - len(prompt) + shared :] = 1
        positions = (attention.cumsum(-1) - 1).clamp(min=0)[:, shared:]
        # After a shared prefix, the tails run through the lean step's projections (int8 when
        # quantized); the prefix (with its attention-sink first token) stayed fp32.
        cache, logits = self._forward(cache, input_ids, positions, attention, device, lean=bool(shared))
        return cache, logits, attention

    def _prefill_reusing(self, prompts: list[list[int]], reusable: list[CachedPrefix | None], max_new_tokens: int,
                         device) -> tuple[Cache, torch.Tensor, torch.Tensor]:
        """`_prefill` for prompts of which some extend a stored sequence: its keys / values are
        copied in, right-aligned in the cached part, and only the rest is fed, right-aligned in the
        new part; the padding between the two is masked."""
        reused = [len(r.tokens) if r else 0 for r in reusable]
        width = max(len(p) - size for p, size in zip(prompts, reused))
        cached = max(reused)
        cache = self._new_cache(cached + width + max_new_tokens)
        if cached:
            for index, layer in enumerate(cache.layers):
                layer.load(*left_padded(reusable, reused, index))
        input_ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), cached + width), dtype=torch.long)
        for row, (prompt, size) in enumerate(zip(prompts, reused)):
            rest = prompt[size:]
            input_ids[row, width - len(rest) :] = torch.tensor(rest)
            attention[row, cached - size : cached] = 1
            attention[row, cached + width - len(rest) :] = 1
        positions = (attention.cumsum(-1) - 1).clamp(min=0)[:, cached:]
        self.prefix_store.count(sum(reused), sum(len(p) for p in prompts) - sum(reused))
        # a row that starts from scratch keeps its first tokens on the fp32 path, as in `_prefill`
        cache, logits = self._forward(cache, input_ids, positions, attention, device, lean=all(reused))
        return cache, logits, attention

    def _new_cache(self, capacity: int) -> Cache:
        layers = self.model.config.get_text_config(decoder=True).num_hidden_layers
        return Cache(layers=[PreallocatedLayer(capacity) for _ in range(layers)])

    def _forward(self, cache: Cache, input_ids: torch.Tensor, positions: torch.Tensor, attention: torch.Tensor,
                 device: torch.device, lean: bool = True, masked: bool = True) -> tuple[Cache, torch.Tensor]:
        """Float logits [B, V] of the last of `input_ids` [B, T], whose keys / values join `cache`:
        through the lean step when the model has one (and `lean`), else transformers' forward.
        `masked=False` tells the lean step that no row is padded."""
        if lean and self.decoder is not None:
            key_mask = attention.bool().to(device) if masked else None
            return cache, self.decoder.forward(cache, input_ids.to(device), positions.to(device), key_mask).float()
        out = self.model(
            input_ids=input_ids.to(device), attention_mask=attention.to(device),
            position_ids=positions.to(device), cache=cache, use_cache=True, logits_to_keep=1,
        )
        return out.cache, out.logits[:, -1, :].float()


def common_prefix_length(prompts: list[list[int]]) -> int:
    """Tokens that every prompt starts with, leaving each prompt at least its last token to prefill."""
    if len(prompts) < 2:
        return 0
    limit = min(len(p) for p in prompts) - 1
    first = prompts[0]
    length = 0
    while length < limit and all(p[length] == first[length] for p in prompts):
        length += 1
    return length


def sample(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row; return it with its logprob under softmax(logits / T).

    top-k / top-p restrict which tokens can be drawn but not the reported logprob, so the
    learner (which sees full-vocabulary logits) recomputes the same number.
    """
    logits = logits.float().cpu()
    if params.temperature <= 0:
        chosen = logits.argmax(dim=-1)
        return chosen, torch.log_softmax(logits, dim=-1).gather(-1, chosen[:, None]).squeeze(-1)
    scaled = logits / params.temperature
    full_logprobs = torch.log_softmax(scaled, dim=-1)
    candidates = scaled.clone()
    if params.top_k and params.top_k < candidates.shape[-1]:
        kth = candidates.topk(params.top_k, dim=-1).values[:, -1:]
        candidates[candidates < kth] = float("-inf")
    if params.top_p < 1.0:
        sorted_logits, order = candidates.sort(dim=-1, descending=True)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        remove = cumulative - sorted_logits.softmax(dim=-1) > params.top_p  # keep the token that crosses p
        sorted_logits[remove] = float("-inf")
        candidates = torch.full_like(candidates, float("-inf")).scatter(-1, order, sorted_logits)
    # Inverse-CDF draw: one uniform number per row. torch.multinomial (or a Gumbel race) needs
    # a random number per vocabulary entry, which costs ~80 ms a step for 32 x 49k on a CPU.
    cdf = candidates.softmax(dim=-1).cumsum(dim=-1)
    uniform = torch.rand((cdf.shape[0], 1), generator=generator) * cdf[:, -1:]
    chosen = torch.searchsorted(cdf, uniform.clamp(min=1e-30)).squeeze(-1).clamp(max=cdf.shape[-1] - 1)
    return chosen, full_logprobs.gather(-1, chosen[:, None]).squeeze(-1)
