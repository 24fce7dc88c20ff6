"""One forward pass for the generate calls of concurrent episodes and rollout threads.

Async mode runs `orchestrate.workers` threads, each playing one group through the agent loop:
without help every thread calls generate on its own, so on one device several small batches
decode side by side (on a CPU their thread pools fight for the same cores) instead of one large
batch that uses the matrix units properly. `CoalescingEngine` queues the calls that arrive
together and makes one underlying generate call for the lot, like `rlyard serve`'s scheduler
does for HTTP requests, then hands each caller its own completions.

Which calls merge: those whose sampling differs at most in `seed` and `max_new_tokens`
(temperature, top-p, top-k, stop ids and `cache_prefix` must be equal). Per-row token limits
ride on the engine's `on_step` hook (a row leaves the batch at its own limit and finishes with
"length", as it would alone); an engine without the hook merges only equal limits. Each call
keeps its `n`: when the merged calls disagree on `n`, prompts are repeated instead (every row
then prefills its own copy, which is what merging different `n` costs).

When a batch starts: at once when every thread seen in the last `peer_horizon_s` is waiting
(so one thread alone waits only on its first call), else after at most `window_s` from the
moment the engine became free or its oldest call arrived, whichever is later; calls that
arrive while a batch runs join the next one. A thread's first call always waits the window:
the threads of a pool start together, and the first of them must not run its first turn alone
while the others queue behind it. A caller thread runs the
merged call itself (the leader); there is no background thread to stop.

Seeds: the merged call runs with the seed of its oldest call, and the engine draws rows in
batch order, so a sampled (temperature > 0) completion depends on which calls shared its
batch, which thread timing decides: with coalescing on, sampled runs are not reproducible from
their seeds; greedy ones are (up to float rounding of the batch shape). A call alone in its
batch runs with its own parameters unchanged, so one thread sees exactly the wrapped engine.
Without the wrapper (`rollout.coalesce=false`) nothing changes.

Weights: `update_weights` waits for the batch in flight and runs before the next one, so every
completion of a batch comes from one policy version. An error of the merged call reaches every
caller of that batch; bad input (an empty prompt, n < 1, a hook the engine cannot take) fails
its own caller before it is queued.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace

from rlyard.engines.base import Engine, StepHook, accepts_hook
from rlyard.types import Completion, SamplingParams


@dataclass(eq=False)
class _Call:
    prompts: list[list[int]]
    params: SamplingParams
    n: int
    on_step: StepHook | None
    thread: int = field(default_factory=threading.get_ident)
    arrived: float = field(default_factory=time.monotonic)
    result: list[list[Completion]] | None = None
    error: BaseException | None = None
    done: bool = False


@dataclass
class _Batch:
    """The calls of one merged generate: call i owns output rows offsets[i] .. offsets[i] + rows."""

    calls: list[_Call]
    limit: int = 0  # the merged call's max_new_tokens: the largest of its calls'
    offsets: list[int] = field(default_factory=list)
    owner: list[int] = field(default_factory=list)  # output row -> call
    counts: list[int] = field(default_factory=list)  # output row -> tokens sampled so far
    cut: set[int] = field(default_factory=set)  # rows removed at their call's own max_new_tokens

    def __post_init__(self) -> None:
        for i, call in enumerate(self.calls):
            self.offsets.append(len(self.owner))
            self.owner += [i] * (len(call.prompts) * call.n)
        self.counts = [0] * len(self.owner)
        self.limit = max(c.params.max_new_tokens for c in self.calls)


class CoalescingEngine:
    """An `Engine` whose concurrent generate calls share one underlying batch (module docstring)."""

    def __init__(self, engine: Engine, window_s: float = 0.1, peer_horizon_s: float = 2.0, max_rows: int | None = None):
        """`max_rows` caps the output rows of a merged call (None: no cap; a call is never split)."""
        self.engine = engine
        self.window_s, self.peer_horizon_s, self.max_rows = window_s, peer_horizon_s, max_rows
        self.hooked = accepts_hook(engine)
        self._cond = threading.Condition()
        self._waiting: list[_Call] = []
        self._leading = False  # a caller is gathering or running a batch
        self._free_since = time.monotonic()  # when the last batch ended
        self._peers: dict[int, float] = {}  # caller thread -> its last call
        self._served: set[int] = set()  # threads that have had a call answered
        self._run_lock = threading.Lock()  # held by the merged call; update_weights takes it between batches
        self.batches = 0  # underlying generate calls made
        self.merged = 0  # calls served by them
        if not self.hooked:  # callers test for the keyword: offer it only when the engine has it
            self.generate = self._generate_plain

    # ------------------------------------------------------------------ the engine contract
    @property
    def policy_version(self) -> int:
        return self.engine.policy_version

    @property
    def defer_quantization(self) -> bool:
        return self.engine.defer_quantization

    @defer_quantization.setter
    def defer_quantization(self, value: bool) -> None:  # SharedEngine packs int8 layers itself
        self.engine.defer_quantization = value

    def __getattr__(self, name: str):
        """Everything else (`model`, `tokenizer`, `prefix_store`, int8 packing) is the engine's."""
        if name.startswith("__") or "engine" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.__dict__["engine"], name)

    def update_weights(self, version: int, state_dict: dict | None = None) -> None:
        with self._run_lock:
            self.engine.update_weights(version, state_dict)

    def generate(self, prompts: list[list[int]], params: SamplingParams, n: int = 1,
                 on_step: StepHook | None = None) -> list[list[Completion]]:
        """The wrapped engine's generate, merged with concurrent calls; `on_step` sees this call's
        rows only, numbered as if the call were alone."""
        if not prompts:
            return []
        if n < 1:
            raise ValueError(f"n must be at least 1, got {n}")
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        if on_step is not None and not self.hooked:
            raise TypeError(f"{type(self.engine).__name__}.generate takes no on_step hook")
        call = _Call([list(p) for p in prompts], params, n, on_step)
        with self._cond:
            self._waiting.append(call)
            self._peers[call.thread] = call.arrived
            self._cond.notify_all()
        try:
            while True:
                with self._cond:
                    while not call.done and self._leading:
                        self._cond.wait()
                    if call.done:
                        break
                    self._leading = True
                self._lead()
        except BaseException:  # Ctrl-C while queued: nobody is left to take the result
            with self._cond:
                if call in self._waiting:
                    self._waiting.remove(call)
            raise
        if call.error is not None:
            raise call.error
        return call.result

    def _generate_plain(self, prompts: list[list[int]], params: SamplingParams, n: int = 1) -> list[list[Completion]]:
        return CoalescingEngine.generate(self, prompts, params, n)

    # ------------------------------------------------------------------ batching
    def _key(self, params: SamplingParams) -> tuple:
        return (params.temperature, params.top_p, params.top_k, frozenset(params.stop_token_ids), params.cache_prefix,
                None if self.hooked else params.max_new_tokens)

    def _take(self) -> list[_Call]:
        """The oldest waiting call and the later ones that can share its batch (under the lock)."""
        key, rows, batch = self._key(self._waiting[0].params), 0, []
        for call in self._waiting:
            size = len(call.prompts) * call.n
            if self._key(call.params) == key and (not batch or self.max_rows is None or rows + size <= self.max_rows):
                batch.append(call)
                rows += size
        self._waiting = [c for c in self._waiting if c not in batch]
        return batch

    def _gather(self) -> list[_Call]:
        """Wait (bounded) for the threads expected back, then take a batch. Called leading."""
        with self._cond:
            deadline = max(self._free_since, self._waiting[0].arrived) + self.window_s
            while True:
                now = time.monotonic()
                self._peers = {t: seen for t, seen in self._peers.items() if now - seen < self.peer_horizon_s}
                waiting = {c.thread for c in self._waiting}
                # a thread's first call may be one of a pool starting up: its peers are not known yet
                known = waiting <= self._served
                if (known and len(self._waiting) >= len(set(self._peers) | waiting)) or now >= deadline:
                    return self._take()
                self._cond.wait(timeout=deadline - now)

    def _lead(self) -> None:
        """Run one merged call and hand out its results; leadership passes on afterwards."""
        batch: _Batch | None = None
        try:
            batch = _Batch(self._gather())
            with self._run_lock:
                results = self._run(batch)
            for i, call in enumerate(batch.calls):
                call.result = results[i]
        except BaseException as error:  # noqa: BLE001 - every caller of the batch gets it (Ctrl-C too)
            for call in batch.calls if batch is not None else []:
                call.error = call.error or error
            if batch is None:
                raise
        finally:
            with self._cond:
                self._free_since = time.monotonic()
                for call in batch.calls if batch is not None else []:
                    call.done = True
                    self._peers[call.thread] = self._free_since  # back soon with its next turn
                    self._served.add(call.thread)
                self._leading = False
                self._cond.notify_all()

    def _run(self, batch: _Batch) -> list[list[list[Completion]]]:
        calls = batch.calls
        self.batches += 1
        self.merged += len(calls)
        if len(calls) == 1 and not self.hooked:
            call = calls[0]
            return [self.engine.generate(call.prompts, call.params, call.n)]
        same_n = all(c.n == calls[0].n for c in calls)
        prompts = [p for c in calls for p in c.prompts] if same_n else [p for c in calls for p in c.prompts for _ in range(c.n)]
        n = calls[0].n if same_n else 1
        params = replace(calls[0].params, max_new_tokens=max(c.params.max_new_tokens for c in calls))
        kwargs = {"on_step": lambda outputs: self._step(batch, outputs)} if self.hooked else {}
        grouped = self.engine.generate(prompts, params, n, **kwargs)
        flat = [c for group in grouped for c in group]
        stops = frozenset(params.stop_token_ids)
        results = []
        for i, call in enumerate(calls):
            rows = flat[batch.offsets[i] : batch.offsets[i] + len(call.prompts) * call.n]
            rows = [replace(c, finish_reason="length") if batch.offsets[i] + j in batch.cut and c.token_ids[-1] not in stops else c
                    for j, c in enumerate(rows)]
            results.append([rows[p * call.n : (p + 1) * call.n] for p in range(len(call.prompts))])
        return results

    def _step(self, batch: _Batch, outputs: list[tuple[int, int, float]]) -> list[int]:
        """The merged call's hook: rows leave at their own call's limit; each caller's hook sees
        its rows under its own numbering. A caller whose hook raises loses its rows, not the batch."""
        removed: list[int] = []
        mine: dict[int, list[tuple[int, int, float]]] = {}
        for index, token, logprob in outputs:
            owner = batch.owner[index]
            call = batch.calls[owner]
            batch.counts[index] += 1
            if call.error is not None:
                removed.append(index)
                continue
            if batch.counts[index] >= call.params.max_new_tokens < batch.limit:
                batch.cut.add(index)
                removed.append(index)
            if call.on_step is not None:
                mine.setdefault(owner, []).append((index - batch.offsets[owner], token, logprob))
        for owner, rows in mine.items():
            call, offset = batch.calls[owner], batch.offsets[owner]
            try:
                removed += [offset + local for local in call.on_step(rows) or ()]
            except Exception as error:  # noqa: BLE001 - raised to that caller alone
                call.error = error
                removed += [index for index, _, _ in outputs if batch.owner[index] == owner]
        return removed
