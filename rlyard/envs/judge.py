"""An LLM judge over any OpenAI-compatible endpoint, shared by the families that grade with one.

A judge's verdict is part of the reward, so its failures must never look like the policy's:
an endpoint that cannot be reached, or keeps answering text with no verdict in it, raises
`JudgeUnavailable` after `retries` tries with exponential backoff, and the family turns that
into an infra failure (the episode leaves its group), never a 0.

Verdicts are cached on disk, keyed by (model, prompt version, the caller's key): the same
answer graded twice asks once, and a resumed run does not pay again. Only parsed verdicts are
cached. At most `concurrency` requests are in flight per judge (its semaphore), however many
rollout threads grade at once.

With no `base_url`, `local_judge()` starts `rlyard serve` over the embedded model on a free
loopback port (once per process) and says so in the log: offline, the families still run.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from rlyard.errors import PlatformError

log = logging.getLogger("rlyard.judge")


class JudgeUnavailable(PlatformError):
    """The judge could not be reached, or gave no verdict that parses: an infra failure."""


@dataclass(frozen=True)
class JudgeConfig:
    base_url: str | None = None  # OpenAI-compatible ".../v1"; None: rlyard serve over the embedded model
    model: str = "embedded"
    api_key_env: str | None = None  # the name of the environment variable holding the key (never the key itself)
    timeout_s: float = 60.0
    retries: int = 3  # tries per request before JudgeUnavailable
    backoff_s: float = 1.0  # wait before the second try; doubled after each failure
    concurrency: int = 4  # requests in flight per judge
    cache_dir: str | None = None  # None: ~/.cache/rlyard/judge (RLYARD_CACHE)
    temperature: float = 0.0
    max_tokens: int = 512
    prompt_version: str = "v1"  # the caller's prompt version: part of the cache key
    # "chat": /v1/chat/completions. "completions": /v1/completions over the messages as plain text, with the
    # verdict's opening `{"score":` written for the model (small local models rarely start a JSON object unasked)
    api: str = "chat"


OPENING = '{"score":'
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S)
_SCORE = re.compile(r'"?score"?\s*[:=]\s*(-?\d+(?:\.\d+)?)', re.I)


def parse_json_reply(text: str, required: tuple[str, ...] = ("score",)) -> dict[str, Any]:
    """The verdict in a judge's reply: a fenced JSON block, else the first JSON object in the
    text that has the required keys, else `score: <number>` written loosely. ValueError if none."""
    decoder = json.JSONDecoder()
    for source in [m.group(1) for m in _FENCE.finditer(text)] + [text]:
        for start in (i for i, c in enumerate(source) if c == "{"):
            try:
                found, _ = decoder.raw_decode(source, start)
            except ValueError:
                continue
            if isinstance(found, dict) and all(key in found for key in required):
                return found
    if required == ("score",):
        loose = _SCORE.search(text)
        if loose:
            return {"score": float(loose.group(1)), "reason": text.strip()[:500]}
    raise ValueError(f"no JSON object with {', '.join(required)} in the judge's reply: {text[:200]!r}")


def parse_marked_reply(text: str, marker: str, required: tuple[str, ...] = ("score",)) -> dict[str, Any]:
    """The verdict right after `marker` in the judge's reply, and nothing else of the reply.

    The marker is a nonce made for one request after the graded text was fixed, so a judge that
    quotes the graded text back (with a fenced verdict of its own making in it) quotes no verdict
    that counts: only the JSON object that follows the marker is read. ValueError if none."""
    decoder = json.JSONDecoder()
    at = text.find(marker)
    while at >= 0:
        rest = text[at + len(marker):].lstrip(" \t:=")
        try:
            found, _ = decoder.raw_decode(rest)
        except (ValueError, RecursionError):
            found = None
        if isinstance(found, dict) and all(key in found for key in required):
            return found
        at = text.find(marker, at + len(marker))
    raise ValueError(f"no {marker} followed by a JSON object with {', '.join(required)} in the judge's reply: {text[:200]!r}")


class Judge:
    def __init__(self, config: JudgeConfig):
        self.config = config
        if config.api not in ("chat", "completions"):
            raise ValueError(f"judge.api must be chat or completions, got {config.api!r}")
        self.base_url = config.base_url or local_judge()
        self._slots = threading.Semaphore(max(1, config.concurrency))
        self._client = None
        self._lock = threading.Lock()
        self.requests = self.cache_hits = self.failures = 0  # counters for metrics and tests
        root = config.cache_dir or os.path.join(os.environ.get("RLYARD_CACHE", os.path.expanduser("~/.cache/rlyard")), "judge")
        self.cache_dir = Path(root)

    def client(self):
        with self._lock:
            if self._client is None:
                import openai  # the official client; a test dependency and the `general` extra

                key = os.environ.get(self.config.api_key_env, "") if self.config.api_key_env else ""
                if self.config.api_key_env and not key:
                    raise JudgeUnavailable(f"judge.api_key_env names {self.config.api_key_env!r}, which is not set")
                self._client = openai.OpenAI(base_url=self.base_url, api_key=key or "unused", timeout=self.config.timeout_s,
                                             max_retries=0)  # our own retries, counted and backed off
            return self._client

    def _complete(self, messages: list[dict], marker: str | None = None) -> str:
        if self.config.api == "completions":
            opening = f"{marker} {OPENING}" if marker else OPENING
            prompt = "\n\n".join(f"{m['role'].upper()}:\n{m['content']}" for m in messages) + "\n\nASSISTANT:\n" + opening
            reply = self.client().completions.create(model=self.config.model, prompt=prompt, temperature=self.config.temperature,
                                                     max_tokens=self.config.max_tokens, stop=["}"])
            return opening + (reply.choices[0].text or "") + "}"
        reply = self.client().chat.completions.create(model=self.config.model, messages=messages,
                                                      temperature=self.config.temperature, max_tokens=self.config.max_tokens)
        return reply.choices[0].message.content or ""

    def cache_path(self, cache_key: tuple[str, ...]) -> Path:
        parts = json.dumps([self.config.model, self.config.prompt_version, *cache_key], ensure_ascii=False)
        return self.cache_dir / f"{hashlib.sha256(parts.encode()).hexdigest()}.json"

    def ask_json(self, messages: list[dict], cache_key: tuple[str, ...], required: tuple[str, ...] = ("score",),
                 check: Callable[[dict], Any] | None = None, marker: str | None = None) -> dict:
        """The parsed verdict for these messages, from the cache or the endpoint; JudgeUnavailable
        when every try failed (the last reason in the message). `check(verdict)` raising ValueError
        rejects a verdict (e.g. a score out of range): it is asked again and never cached.
        `marker` (a nonce the messages ask the judge to write before its verdict): only the JSON
        object after it is read (`parse_marked_reply`), never one the graded text could hold."""
        path = self.cache_path(cache_key)
        if path.is_file():
            try:
                verdict = json.loads(path.read_text())
                if check is not None:
                    check(verdict)
                with self._lock:
                    self.cache_hits += 1
                return verdict
            except ValueError:
                pass  # a damaged cache entry is asked again
        wait, reason = self.config.backoff_s, ""
        for attempt in range(max(1, self.config.retries)):
            if attempt:
                time.sleep(wait)
                wait *= 2
            try:
                with self._slots:
                    with self._lock:
                        self.requests += 1
                    text = self._complete(messages, marker)
                verdict = parse_marked_reply(text, marker, required) if marker else parse_json_reply(text, required)
                if check is not None:
                    check(verdict)
            except JudgeUnavailable:
                raise
            except Exception as error:  # unreachable, HTTP error, refused request, unparseable verdict
                reason = f"{type(error).__name__}: {error}"
                continue
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            _write_atomic(path, json.dumps(verdict, ensure_ascii=False))
            return verdict
        with self._lock:
            self.failures += 1
        raise JudgeUnavailable(f"judge {self.config.model} at {self.base_url}: no verdict after "
                               f"{max(1, self.config.retries)} tries ({reason})")


def _write_atomic(path: Path, text: str) -> None:
    """Concurrent graders may write the same entry: each writes its own temp file, then renames it."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".judge-", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


_local: dict[str, Any] = {}
_local_lock = threading.Lock()
_SERVING = re.compile(r"serving .* at (http://\S+/v1)")


def local_judge(timeout_s: float = 300.0) -> str:
    """The base URL of this process's `rlyard serve` over the embedded model, started on first use."""
    with _local_lock:
        if "url" in _local and _local["process"].poll() is None:
            return _local["url"]
        command = [sys.executable, "-m", "rlyard.cli", "serve", "--port", "0", "--model-name", "embedded"]
        log.warning("no judge.base_url: starting a local judge, `rlyard serve` over the embedded model on a free "
                    "loopback port (a 135M model is a weak judge; give judge.base_url for a real one)")
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline, seen = time.monotonic() + timeout_s, []
        url = None
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                if process.poll() is not None:
                    break
                continue
            seen.append(line)
            match = _SERVING.search(line)
            if match:
                url = match.group(1)
                break
        if url is None:
            process.kill()
            raise JudgeUnavailable("the local judge (rlyard serve) did not start:\n" + "".join(seen[-20:]))
        threading.Thread(target=_drain, args=(process,), daemon=True).start()
        atexit.register(process.kill)
        _local.update(url=url, process=process)
        log.warning("local judge: %s (pid %d)", url, process.pid)
        return url


def _drain(process: subprocess.Popen) -> None:
    for _ in process.stdout:
        pass
