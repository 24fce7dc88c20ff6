"""The multi-turn agent loop, token in and token out.

An episode is one growing token list. Sampled tokens are kept exactly as the engine returned
them (never decoded and re-encoded); what the environment says back is rendered with the chat
template, in the context of the whole conversation so far, and appended with loss_mask 0.
Episodes of a batch advance turn by turn together, so every turn is one batched
`engine.generate` call. Templates that re-render earlier turns: docs/models.md.
"""
from __future__ import annotations

import os
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from rlyard.engines.base import Engine, turn_seed
from rlyard.environment import Environment
from rlyard.environment.deadline import within
from rlyard.models.templates import MARK, choose_tool_format, end_of_message_id, render, shows_tool_messages, thinks
from rlyard.types import Message, Reward, SamplingParams, Task, Trajectory


@dataclass(frozen=True)
class AgentLimits:
    max_turns: int = 8  # model replies per episode
    max_tokens_per_turn: int = 256  # sampled tokens per reply
    max_total_tokens: int = 4096  # prompt + all turns
    max_prompt_tokens: int | None = None  # longer first prompts lose the middle of the task text; None: `prompt_limit`
    tool_output_chars: int = 8000  # longer tool messages lose their middle
    tool_format: str = "auto"  # agent.tool_format: auto | family | hermes | llama3_json | bash_block (docs/models.md)
    grader_timeout_s: float | None = None  # env.grader_timeout_s: a score() that has not answered by then is infra

    @property
    def prompt_limit(self) -> int:
        """The first prompt's token limit: agent.max_prompt_tokens, by default the episode's budget
        less one reply (at most half of it), so that a long task text is cut to leave room to answer."""
        if self.max_prompt_tokens is not None:
            return self.max_prompt_tokens
        return self.max_total_tokens - min(self.max_tokens_per_turn, self.max_total_tokens // 2)


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


@dataclass(kw_only=True)
class ConversationRecord(TokenRecord):
    """A recorded conversation's tokens, up to where `run_episodes` would have ended the episode."""

    # why the episode would have ended before the conversation did: "" (it did not), "prompt_too_long" (nothing
    # sampled: never trained), "token_budget", "turn_token_limit" (a reply past the per-turn cap, cut there), "turn_limit"
    ended: str = ""


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
    transcript: Transcript | None = None  # None until the first prompt is rendered


def cut_middle(text: str, limit: int, marker: str = "\n[... {n} characters cut ...]\n") -> str:
    """Keep the head and the tail: both usually matter (a command's start, an error's end)."""
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    return text[: limit // 2] + marker.format(n=cut) + text[len(text) - (limit - limit // 2):]


@dataclass
class Transcript:
    """The conversation behind an episode's tokens, kept to render what follows in its context."""

    messages: list[Message]  # as the template sees them: each reply as the text the policy sampled
    text: str  # what the tokens stand for: the template's text, each reply as sampled (its stop token as the template's end of message)
    tools: list[dict] | None = None  # tool specs the chat template renders (None: none, or the environment wrote its own)
    exact: bool = True  # the tokens are the template's rendering of `messages`; False once it re-rendered earlier turns differently


class TemplateRenderer:
    """Token ids for the parts of a conversation that the policy did not sample.

    After a reply, the new messages are rendered by the chat template in the context of the whole
    conversation, each earlier reply given as the text the policy sampled: when the template's
    rendering of it all begins with the text the tokens stand for (append-only templates; Qwen3
    over tool turns, whose reasoning it keeps), the tokens are exactly the template's rendering.
    When it does not (it re-renders earlier turns: Qwen3 drops the reasoning of replies before a
    new user message, Llama 3 trims them), the tokens held stay as they are (the policy saw them)
    and what follows is the template's text after the end of the last reply in that rendering;
    the transcript is then marked not `exact`. See docs/models.md.
    """

    def __init__(self, tokenizer, stop_token_ids: tuple[int, ...]):
        self.tokenizer = tokenizer
        self.end_of_message = end_of_message_id(tokenizer)
        stops = tuple(stop_token_ids)
        if self.end_of_message is not None and self.end_of_message not in stops:
            stops += (self.end_of_message,)  # the template's end of message always ends a reply (Phi-3's <|end|> is no eos)
        self.stop_token_ids, self.stops = stops, frozenset(stops)
        self.stop_texts = [tokenizer.decode([i]) for i in stops]
        self.end_text = tokenizer.decode([self.end_of_message]) if self.end_of_message is not None else ""
        self.tool_role = "tool" if shows_tool_messages(tokenizer) else "user"  # Phi-3 drops tool messages
        self.thinks = thinks(tokenizer)
        added = getattr(tokenizer, "added_tokens_decoder", {}).values()
        self.special_texts = {t.content for t in added if t.special} | set(tokenizer.all_special_tokens)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False).input_ids

    def prompt(self, messages: list[Message], tools: list[dict] | None = None) -> list[int]:
        return self.encode(render(self.tokenizer, messages, tools, generation=True))

    def begin(self, messages: list[Message], tools: list[dict] | None = None) -> tuple[list[int], Transcript]:
        """The first prompt's tokens, and the transcript that renders what follows."""
        text = render(self.tokenizer, messages, tools, generation=True)
        return self.encode(text), Transcript(list(messages), text, tools)

    def add_reply(self, transcript: Transcript, tokens: list[int], ended: bool | None = None) -> None:
        """Note a sampled reply in the transcript (its tokens are kept as sampled by the caller).
        `ended` (default: its last token is a stop token) says it ends the assistant message."""
        ended = bool(tokens) and tokens[-1] in self.stops if ended is None else ended
        body = tokens[:-1] if ended else tokens
        content = self.tokenizer.decode(body, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        transcript.messages.append({"role": "assistant", "content": content})
        transcript.text += content + (self.end_text if ended else "")

    def add_messages(self, transcript: Transcript, messages: list[Message]) -> list[int]:
        """The tokens of `messages` after the transcript's last reply, up to the next assistant header."""
        new = self.as_shown(messages)
        full = render(self.tokenizer, transcript.messages + new, transcript.tools, generation=True)
        if full.startswith(transcript.text):
            bridge = full[len(transcript.text):]
        else:
            bridge, transcript.exact = self.after_last_reply(transcript.messages, new, transcript.tools), False
        transcript.messages += new
        transcript.text += bridge
        return self.encode_after_reply(bridge)

    def after_reply(self, messages: list[Message], history: list[Message] | None = None, tools: list[dict] | None = None) -> list[int]:
        """What follows a sampled reply (which ends in its stop token): the template's text after
        the end of an assistant message, the new messages, and the next assistant header; after
        `history` (ending with that reply), by default after a one-exchange probe."""
        probe = history or [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]
        return self.encode_after_reply(self.after_last_reply(probe, self.as_shown(messages), tools))

    def as_shown(self, messages: list[Message]) -> list[Message]:
        """Tool messages as "user" ones for a template that shows no tool messages."""
        return [{**m, "role": self.tool_role} if m.get("role") == "tool" else m for m in messages]

    def after_last_reply(self, history: list[Message], new: list[Message], tools: list[dict] | None) -> str:
        """The template's text after the end of the last message of `history` (an assistant one)
        when `new` follows it: found by rendering that reply as a marker."""
        marked = [*history[:-1], {**history[-1], "content": MARK}]
        rendered = render(self.tokenizer, marked + new, tools, generation=True)
        at = rendered.rfind(MARK)
        if at < 0:
            raise ValueError("the chat template does not write the content of an assistant message followed by "
                             f"{[m.get('role') for m in new]} messages; set model.chat_template to one that does")
        tail = rendered[at + len(MARK):]
        cut = tail.find(self.end_text) if self.end_text else -1
        return tail[cut + len(self.end_text):] if cut >= 0 else tail

    def encode_after_reply(self, text: str) -> list[int]:
        """`text` tokenised as it reads after the end-of-message token: a sentencepiece tokenizer would
        begin a text of its own with a word-start piece that it does not put after a special token."""
        if self.end_of_message is None:
            return self.encode(text)
        ids = self.encode(self.end_text + text)
        return ids[1:] if ids[:1] == [self.end_of_message] else self.encode(text)

    def encode_reply(self, transcript: Transcript, content: str) -> list[int]:
        """A reply's text tokenised as the template's whole text would tokenise it after the prompt
        (what a model trained on that text writes): a sentencepiece tokenizer starts a text of its
        own with a word-start piece that the same words after the header's newline do not get.
        Byte-level BPE gives `encode(content)` (also where the two would merge, e.g. a reply that
        starts with a newline)."""
        cut = max((transcript.text.rfind(t) + len(t) for t in self.special_texts if t in transcript.text), default=0)
        tail = transcript.text[cut:]
        head, ids = self.encode(tail), self.encode(tail + content)
        return ids[len(head):] if tail and ids[: len(head)] == head else self.encode(content)

    def reply_text(self, tokens: list[int]) -> str:
        """What the environment reads of a reply: its text without special tokens, and for a reasoning
        template only what follows the thinking (calls mentioned while thinking do not run)."""
        text = self.tokenizer.decode(tokens, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        return text.rsplit("</think>", 1)[1].lstrip("\n") if self.thinks and "</think>" in text else text

    def reply_stop_id(self) -> int:
        """The stop token that ends an assistant message in this template (the one the policy
        samples to end its turn): the token written right after a reply's content, else, of the
        stop tokens, the one the template writes after a reply."""
        if self.end_of_message is not None:
            return self.end_of_message
        probe = [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]
        rendered = self.tokenizer.apply_chat_template(probe, tokenize=False)
        ended = [(rendered.rfind(text), token) for token, text in zip(self.stop_token_ids, self.stop_texts) if text and text in rendered]
        if not ended:
            raise ValueError(f"the chat template ends an assistant message with none of the stop tokens {list(self.stop_token_ids)}")
        return max(ended)[1]


def shown_messages(messages: list[Message], tool_output_chars: int) -> list[Message]:
    """What the environment says back, as the policy sees it: long contents lose their middle."""
    return [{**m, "content": cut_middle(str(m.get("content", "")), tool_output_chars)} for m in messages]


def trim_prompt(renderer: TemplateRenderer, messages: list[Message], limit: int | None, tools: list[dict] | None = None) -> list[Message]:
    """Cut the middle of the last user message until the rendered prompt fits in `limit` tokens."""
    if limit is None or len(renderer.prompt(messages, tools)) <= limit:
        return messages
    index = max(i for i, m in enumerate(messages) if m["role"] == "user")
    text = messages[index]["content"]
    low, high = 0, len(text)  # binary search on how many characters to keep
    while low < high:
        mid = (low + high + 1) // 2
        trial = [*messages[:index], {**messages[index], "content": cut_middle(text, mid)}, *messages[index + 1:]]
        low, high = (mid, high) if len(renderer.prompt(trial, tools)) <= limit else (low, mid - 1)
    return [*messages[:index], {**messages[index], "content": cut_middle(text, low)}, *messages[index + 1:]]


def conversation_tokens(
    renderer: TemplateRenderer, messages: list[Message], tools: list[dict] | None = None, stop_id: int | None = None,
    limits: AgentLimits = AgentLimits(),
) -> ConversationRecord:
    """A finished conversation as the token list `run_episodes` builds, under the same `limits`, when
    the policy writes its assistant messages: supervised fine-tuning and RL train on identical sequences.

    The prompt is the messages before the first assistant one, cut like the loop's first prompt
    (`limits.prompt_limit`); each assistant message is its `content` tokenised as the template's
    text reads there (`TemplateRenderer.encode_reply`) plus `stop_id` (default: the template's end
    of message), loss_mask 1; the messages between two replies are rendered as the loop renders
    them (`TemplateRenderer.add_messages`, after the loop's cut), loss_mask 0.
    The record stops where the loop would stop the episode (`ended` says why): a first prompt of
    `max_total_tokens` or more (nothing sampled), a reply past the room left or past
    `max_tokens_per_turn` (cut there, as the engine would), `max_turns` replies, or messages that
    would fill the budget. Messages after the last reply would carry no loss and are left out.
    Assistant contents must be the reply text (tool calls already written out, e.g. Hermes
    `<tool_call>` blocks; a reasoning model's <think> section included).
    """
    roles = [m["role"] for m in messages]
    if "assistant" not in roles:
        raise ValueError("a conversation without an assistant message has nothing to train on")
    stop = renderer.reply_stop_id() if stop_id is None else stop_id
    first = roles.index("assistant")
    record = ConversationRecord()
    prompt, transcript = renderer.begin(trim_prompt(renderer, messages[:first], limits.prompt_limit, tools), tools)
    record.extend(prompt, sampled=False)
    if len(prompt) >= limits.max_total_tokens:
        record.ended = "prompt_too_long"
        return record
    between: list[Message] = []
    turns = 0
    for index in range(first, len(messages)):
        message = messages[index]
        if message["role"] != "assistant":
            between.append(message)
            continue
        if index > first:
            if turns >= limits.max_turns:
                record.ended = "turn_limit"
                return record
            shown = renderer.add_messages(transcript, shown_messages(between, limits.tool_output_chars))
            if len(record.token_ids) + len(shown) >= limits.max_total_tokens:
                record.ended = "token_budget"
                return record
            record.extend(shown, sampled=False)
            between = []
        reply = [*renderer.encode_reply(transcript, message["content"]), stop]
        cap = min(limits.max_tokens_per_turn, limits.max_total_tokens - len(record.token_ids))
        if len(reply) > cap:  # the engine stops at the cap: a reply cut there ends the episode
            record.extend(reply[:cap], sampled=True)
            record.ended = "token_budget" if len(record.token_ids) >= limits.max_total_tokens else "turn_token_limit"
            return record
        renderer.add_reply(transcript, reply, ended=True)
        record.extend(reply, sampled=True)
        turns += 1
    return record


def tool_format_metadata(setting: str, tokenizer) -> dict:
    """What the episodes' tasks carry for `agent.tool_format` (read by `rlyard.envs.tool_env.ToolEnv`):
    the format every tool environment uses and whether the chat template writes the tool
    instructions; {} for each family's own."""
    fmt, template_writes = choose_tool_format(setting, tokenizer)
    return {} if fmt is None else {"tool_format": fmt, "template_tools": template_writes}


def run_episodes(
    engine: Engine, tokenizer, envs: list[Environment], tasks: list[Task], group_ids: list[str],
    params: SamplingParams, limits: AgentLimits = AgentLimits(), tools: list[dict] | None = None,
) -> list[Trajectory]:
    """Play one episode per (env, task) to the end and return their trajectories.

    `tools` are given to the chat template for every episode; an environment that leaves the tool
    instructions to the template (`agent.tool_format`) names its own in `env.template_tools`."""
    renderer = TemplateRenderer(tokenizer, params.stop_token_ids)
    params = replace(params, stop_token_ids=renderer.stop_token_ids)
    metadata = tool_format_metadata(limits.tool_format, tokenizer)
    episodes, started = [], time.perf_counter()
    for env, task, gid in zip(envs, tasks, group_ids):
        episode = Episode(task, env, gid)
        try:
            messages = env.reset(replace(task, metadata={**task.metadata, **metadata}) if metadata else task)
            episode_tools = getattr(env, "template_tools", None) or tools
            prompt, episode.transcript = renderer.begin(trim_prompt(renderer, messages, limits.prompt_limit, episode_tools), episode_tools)
            episode.extend(prompt, sampled=False)
            if len(prompt) >= limits.max_total_tokens:  # even cut, no room for one token: never sampled, never trained
                episode.finish_reason, episode.infra_error = "prompt_too_long", True
                episode.error = (f"the first prompt has {len(prompt)} tokens, agent.max_total_tokens is {limits.max_total_tokens}: "
                                 "raise agent.max_total_tokens or shorten the task (agent.max_prompt_tokens cuts only the last user message)")
        except Exception:
            episode.finish_reason, episode.infra_error, episode.error = "infra_error", True, traceback.format_exc(limit=3)
        episodes.append(episode)

    turn = 0
    while active := [e for e in episodes if not e.finish_reason]:
        budget = max(limits.max_total_tokens - len(e.token_ids) for e in active)
        # each turn its own draws: one seed for every turn would replay the first turn's uniforms
        turn_params = replace(params, max_new_tokens=max(1, min(limits.max_tokens_per_turn, budget)), cache_prefix=True,
                              seed=turn_seed(params.seed, turn))
        for episode, completion in zip(active, generate_shared([e.token_ids for e in active], engine, turn_params)):
            advance(episode, completion, renderer, limits)
        turn += 1
    # graders mostly wait on sandboxed test runs: one per core overlaps them (each env is its own)
    with ThreadPoolExecutor(max_workers=max(1, min(len(episodes), os.cpu_count() or 1)), thread_name_prefix="rlyard-finish") as pool:
        return list(pool.map(lambda e: finish(e, time.perf_counter() - started, limits.grader_timeout_s), episodes))


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
    room = max(0, limits.max_total_tokens - len(episode.token_ids))  # run_episodes never samples without room
    tokens, logprobs = completion.token_ids[:room], completion.logprobs[:room]
    episode.extend(tokens, sampled=True, logprobs=logprobs, version=completion.policy_version)
    episode.turns += 1
    renderer.add_reply(episode.transcript, tokens)
    episode.replies.append(renderer.tokenizer.decode(tokens, skip_special_tokens=True, clean_up_tokenization_spaces=False))
    if len(tokens) < len(completion.token_ids) or (completion.finish_reason == "length" and len(episode.token_ids) >= limits.max_total_tokens):
        episode.finish_reason = "token_budget"
        return
    if completion.finish_reason == "length":  # a reply cut by the per-turn cap cannot be answered
        episode.finish_reason = "turn_token_limit"
        return
    try:
        result = episode.env.step(renderer.reply_text(tokens))
    except Exception:
        episode.finish_reason, episode.infra_error, episode.error = "infra_error", True, traceback.format_exc(limit=3)
        return
    if result.done:
        episode.finish_reason = result.reason or "done"
        return
    if episode.turns >= limits.max_turns:
        episode.finish_reason = "turn_limit"
        return
    env_tokens = renderer.add_messages(episode.transcript, shown_messages(result.messages, limits.tool_output_chars))
    if len(episode.token_ids) + len(env_tokens) >= limits.max_total_tokens:
        episode.finish_reason = "token_budget"
        return
    episode.extend(env_tokens, sampled=False)


def finish(episode: Episode, seconds: float, grader_timeout_s: float | None = None) -> Trajectory:
    """Score the episode (a grader crash is an infra failure, not a zero) and close its env."""
    reward, components, info, details = 0.0, {}, episode.error, {}
    if not episode.infra_error:
        try:
            verdict = within(grader_timeout_s, episode.env.score)
            if not isinstance(verdict, Reward):  # rollout.checked() refuses rewards that are no finite number
                raise TypeError(f"score() returned {verdict!r}, not a Reward")
            reward, components, episode.infra_error = verdict.value, dict(verdict.components), verdict.infra_error
            details = dict(verdict.info)
        except Exception:
            episode.infra_error, info = True, traceback.format_exc(limit=3)
    if episode.transcript is not None and not episode.transcript.exact:
        components["template_mismatch"] = 1.0  # the template re-renders earlier turns otherwise than the policy saw them
    try:
        episode.env.close()
    except Exception:
        pass  # a failing cleanup must not lose a finished episode
    text = "\n---\n".join(episode.replies)
    return Trajectory(
        task_id=episode.task.id, group_id=episode.group_id, token_ids=episode.token_ids, loss_mask=episode.loss_mask,
        behaviour_logprobs=episode.logprobs, policy_versions=episode.versions, reward=reward, components=components,
        finish_reason="infra_error" if episode.infra_error and episode.finish_reason != "prompt_too_long" else episode.finish_reason,
        infra_error=episode.infra_error,
        completion_text=text if not info else f"{text}\n[error]\n{info}", turns=episode.turns, timings={"episode": seconds},
        info=details,
    )
