"""The multi-turn agent loop, token in and token out.

An episode is one growing token list. Sampled tokens are kept exactly as the engine returned
them (never decoded and re-encoded); what the environment says back is rendered with the chat
template and appended with loss_mask 0. Episodes of a batch advance turn by turn together, so
every turn is one batched `engine.generate` call.
"""
from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field, replace

from rlyard.engines.base import Engine
from rlyard.envs.base import Environment
from rlyard.types import Message, SamplingParams, Task, Trajectory


@dataclass(frozen=True)
class AgentLimits:
    max_turns: int = 8  # model replies per episode
    max_tokens_per_turn: int = 256  # sampled tokens per reply
    max_total_tokens: int = 4096  # prompt + all turns
    max_prompt_tokens: int | None = None  # longer first prompts lose the middle of the task text
    tool_output_chars: int = 8000  # longer tool messages lose their middle


@dataclass(kw_only=True)
class TokenRecord:
    """One growing token list with what the learner needs per token (the shape of a Trajectory)."""

    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)  # 1 = sampled by the policy
    logprobs: list[float] = field(default_factory=list)  # behaviour logprobs; 0.0 where not sampled
    versions: list[int] = field(default_factory=list)  # policy version; -1 where not sampled

    def extend(self, tokens: list[int], sampled: bool, logprobs: list[float] | None = None, version: int = -1) -> None:
        self.token_ids += tokens
        self.loss_mask += [int(sampled)] * len(tokens)
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(tokens)
        self.versions += [version if sampled else -1] * len(tokens)


@dataclass
class Episode(TokenRecord):
    task: Task
    env: Environment
    group_id: str
    replies: list[str] = field(default_factory=list)
    turns: int = 0
    finish_reason: str = ""
    infra_error: bool = False
    error: str = ""


def cut_middle(text: str, limit: int, marker: str = "\n[... {n} characters cut ...]\n") -> str:
    """Keep the head and the tail: both usually matter (a command's start, an error's end)."""
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    return text[: limit // 2] + marker.format(n=cut) + text[len(text) - (limit - limit // 2):]


class TemplateRenderer:
    """Token ids for the parts of a conversation that the policy did not sample."""

    def __init__(self, tokenizer, stop_token_ids: tuple[int, ...]):
        self.tokenizer = tokenizer
        self.stop_token_ids = tuple(stop_token_ids)
        self.stop_texts = [tokenizer.decode([i]) for i in stop_token_ids]

    def prompt(self, messages: list[Message], tools: list[dict] | None = None) -> list[int]:
        kwargs = {"tools": tools} if tools else {}
        return list(self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False, **kwargs))

    def after_reply(self, messages: list[Message]) -> list[int]:
        """What follows a sampled reply (which ends in its stop token): the template's text after
        the end of an assistant message, the new messages, and the next assistant header."""
        probe = [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]
        before = self.tokenizer.apply_chat_template(probe, tokenize=False)
        after = self.tokenizer.apply_chat_template(probe + messages, tokenize=False, add_generation_prompt=True)
        if not after.startswith(before):
            raise ValueError("the chat template re-renders earlier messages when new ones are added; token-in-token-out needs an append-only template")
        stop = next((s for s in self.stop_texts if s and s in before), None)
        bridge = before[before.rindex(stop) + len(stop):] if stop else ""
        return self.tokenizer(bridge + after[len(before):], add_special_tokens=False).input_ids

    def reply_stop_id(self) -> int:
        """The stop token that ends an assistant message in this template (the one the policy
        samples to end its turn): of the stop tokens, the one the template writes after a reply."""
        probe = [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]
        rendered = self.tokenizer.apply_chat_template(probe, tokenize=False)
        ended = [(rendered.rfind(text), token) for token, text in zip(self.stop_token_ids, self.stop_texts) if text and text in rendered]
        if not ended:
            raise ValueError(f"the chat template ends an assistant message with none of the stop tokens {list(self.stop_token_ids)}")
        return max(ended)[1]


def shown_messages(messages: list[Message], tool_output_chars: int) -> list[Message]:
    """What the environment says back, as the policy sees it: long contents lose their middle."""
    return [{**m, "content": cut_middle(str(m.get("content", "")), tool_output_chars)} for m in messages]


def trim_prompt(renderer: TemplateRenderer, messages: list[Message], limit: int | None) -> list[Message]:
    """Cut the middle of the last user message until the rendered prompt fits in `limit` tokens."""
    if limit is None or len(renderer.prompt(messages)) <= limit:
        return messages
    index = max(i for i, m in enumerate(messages) if m["role"] == "user")
    text = messages[index]["content"]
    low, high = 0, len(text)  # binary search on how many characters to keep
    while low < high:
        mid = (low + high + 1) // 2
        trial = [*messages[:index], {**messages[index], "content": cut_middle(text, mid)}, *messages[index + 1:]]
        low, high = (mid, high) if len(renderer.prompt(trial)) <= limit else (low, mid - 1)
    return [*messages[:index], {**messages[index], "content": cut_middle(text, low)}, *messages[index + 1:]]


def conversation_tokens(
    renderer: TemplateRenderer, messages: list[Message], tools: list[dict] | None = None, stop_id: int | None = None,
    tool_output_chars: int = AgentLimits.tool_output_chars, max_prompt_tokens: int | None = None,
) -> TokenRecord:
    """A finished conversation as the token list `run_episodes` builds when the policy writes its
    assistant messages: supervised fine-tuning and RL train on identical sequences.

    The prompt is the messages before the first assistant one (cut like the loop's first prompt);
    each assistant message is its `content` tokenised as is plus `stop_id` (default: the
    template's end of message), loss_mask 1; the messages between two replies are rendered by
    `after_reply` after the loop's cut, loss_mask 0. Messages after the last reply would carry no
    loss and are left out, as the loop stops there. Assistant contents must be the reply text
    (tool calls already written out, e.g. Hermes `<tool_call>` blocks).
    """
    roles = [m["role"] for m in messages]
    if "assistant" not in roles:
        raise ValueError("a conversation without an assistant message has nothing to train on")
    stop = renderer.reply_stop_id() if stop_id is None else stop_id
    first = roles.index("assistant")
    record = TokenRecord()
    record.extend(renderer.prompt(trim_prompt(renderer, messages[:first], max_prompt_tokens), tools), sampled=False)
    between: list[Message] = []
    for index in range(first, len(messages)):
        message = messages[index]
        if message["role"] != "assistant":
            between.append(message)
            continue
        if index > first:
            record.extend(renderer.after_reply(shown_messages(between, tool_output_chars)), sampled=False)
            between = []
        reply = renderer.tokenizer(message["content"], add_special_tokens=False).input_ids
        record.extend([*reply, stop], sampled=True)
    return record


def run_episodes(
    engine: Engine, tokenizer, envs: list[Environment], tasks: list[Task], group_ids: list[str],
    params: SamplingParams, limits: AgentLimits = AgentLimits(), tools: list[dict] | None = None,
) -> list[Trajectory]:
    """Play one episode per (env, task) to the end and return their trajectories."""
    renderer = TemplateRenderer(tokenizer, params.stop_token_ids)
    episodes, started = [], time.perf_counter()
    for env, task, gid in zip(envs, tasks, group_ids):
        episode = Episode(task, env, gid)
        try:
            messages = trim_prompt(renderer, env.reset(task), limits.max_prompt_tokens)
            episode.extend(renderer.prompt(messages, tools), sampled=False)
        except Exception:
            episode.finish_reason, episode.infra_error, episode.error = "infra_error", True, traceback.format_exc(limit=3)
        episodes.append(episode)

    while active := [e for e in episodes if not e.finish_reason]:
        budget = max(limits.max_total_tokens - len(e.token_ids) for e in active)
        turn_params = replace(params, max_new_tokens=max(1, min(limits.max_tokens_per_turn, budget)), cache_prefix=True)
        for episode, completion in zip(active, generate_shared([e.token_ids for e in active], engine, turn_params)):
            advance(episode, completion, renderer, limits)
    return [finish(e, time.perf_counter() - started) for e in episodes]


def generate_shared(prompts: list[list[int]], engine: Engine, params: SamplingParams) -> list:
    """One completion per prompt. When the prompts come in equal runs of identical copies (a
    group's first turn: n samples of one task), each run becomes one prompt with n samples, so
    the engine prefills it once."""
    runs = [1]
    for previous, prompt in zip(prompts, prompts[1:]):
        if prompt == previous:
            runs[-1] += 1
        else:
            runs.append(1)
    k = runs[0]
    if k > 1 and all(r == k for r in runs):
        return [c for group in engine.generate(prompts[::k], params, n=k) for c in group]
    return [group[0] for group in engine.generate(prompts, params, n=1)]


def advance(episode: Episode, completion, renderer: TemplateRenderer, limits: AgentLimits) -> None:
    """Append one sampled reply, let the environment answer, and decide whether the episode ends."""
    room = limits.max_total_tokens - len(episode.token_ids)
    tokens, logprobs = completion.token_ids[:room], completion.logprobs[:room]
    episode.extend(tokens, sampled=True, logprobs=logprobs, version=completion.policy_version)
    episode.turns += 1
    reply = renderer.tokenizer.decode(tokens, skip_special_tokens=True)
    episode.replies.append(reply)
    if len(tokens) < len(completion.token_ids) or (completion.finish_reason == "length" and len(episode.token_ids) >= limits.max_total_tokens):
        episode.finish_reason = "token_budget"
        return
    if completion.finish_reason == "length":  # a reply cut by the per-turn cap cannot be answered
        episode.finish_reason = "turn_token_limit"
        return
    try:
        result = episode.env.step(reply)
    except Exception:
        episode.finish_reason, episode.infra_error, episode.error = "infra_error", True, traceback.format_exc(limit=3)
        return
    if result.done:
        episode.finish_reason = result.reason or "done"
        return
    if episode.turns >= limits.max_turns:
        episode.finish_reason = "turn_limit"
        return
    env_tokens = renderer.after_reply(shown_messages(result.messages, limits.tool_output_chars))
    if len(episode.token_ids) + len(env_tokens) >= limits.max_total_tokens:
        episode.finish_reason = "token_budget"
        return
    episode.extend(env_tokens, sampled=False)


def finish(episode: Episode, seconds: float) -> Trajectory:
    """Score the episode (a grader crash is an infra failure, not a zero) and close its env."""
    reward, components, info = 0.0, {}, episode.error
    if not episode.infra_error:
        try:
            verdict = episode.env.score()
            reward, components, episode.infra_error = verdict.value, dict(verdict.components), verdict.infra_error
        except Exception:
            episode.infra_error, info = True, traceback.format_exc(limit=3)
    try:
        episode.env.close()
    except Exception:
        pass  # a failing cleanup must not lose a finished episode
    text = "\n---\n".join(episode.replies)
    return Trajectory(
        task_id=episode.task.id, group_id=episode.group_id, token_ids=episode.token_ids, loss_mask=episode.loss_mask,
        behaviour_logprobs=episode.logprobs, policy_versions=episode.versions, reward=reward, components=components,
        finish_reason="infra_error" if episode.infra_error else episode.finish_reason, infra_error=episode.infra_error,
        completion_text=text if not info else f"{text}\n[error]\n{info}", turns=episode.turns, timings={"episode": seconds},
    )
