"""`rlyard agent`: a minimal agent that works on a task in a workspace through tools.

It talks to any OpenAI-compatible endpoint (`rlyard serve`, vLLM, a hosted API) with the
standard `tools` parameter, runs each tool call in a sandbox on the workspace, and stops when
the model submits, stops calling tools, or runs out of turns. Point it at
`rlyard serve`'s session URL (`/sessions/<id>/v1`) and the episode is recorded for training.
"""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from rlyard.agent.tools import ToolBox
from rlyard.sandbox import Limits, Sandbox

SYSTEM = ("You are a software agent working in a folder. Use the tools to inspect and change files. "
          "When the task is done, call submit with a one-line summary.")


@dataclass
class AgentResult:
    finish_reason: str  # "submitted", "no_tool_call", "turn_limit", "endpoint_error"
    turns: int
    submitted: str | None
    messages: list[dict] = field(default_factory=list)


def chat(base_url: str, model: str, messages: list[dict], tools: list[dict], api_key: str, max_tokens: int, temperature: float) -> dict:
    body = {"model": model, "messages": messages, "tools": tools, "max_tokens": max_tokens, "temperature": temperature}
    request = urllib.request.Request(f"{base_url.rstrip('/')}/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {api_key}"})
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.loads(response.read())


def run_agent(task: str, workspace: Path, base_url: str, model: str = "default", api_key: str = "none",
              max_turns: int = 10, max_tokens: int = 512, temperature: float = 0.0,
              tools: tuple[str, ...] = ("bash", "read_file", "write_file", "edit_file", "grep", "glob", "submit"),
              limits: Limits = Limits(), isolation: str = "auto", log=print) -> AgentResult:
    toolbox = ToolBox(Sandbox(Path(workspace), limits, isolation), tools)
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]
    for turn in range(1, max_turns + 1):
        try:
            reply = chat(base_url, model, messages, toolbox.specs(), api_key, max_tokens, temperature)["choices"][0]["message"]
        except (urllib.error.URLError, KeyError, json.JSONDecodeError) as exc:
            log(f"[agent] endpoint error: {exc}")
            return AgentResult("endpoint_error", turn - 1, None, messages)
        messages.append({"role": "assistant", "content": reply.get("content"), **({"tool_calls": reply["tool_calls"]} if reply.get("tool_calls") else {})})
        log(f"[agent] turn {turn}: {reply.get('content') or ''}".rstrip())
        if not reply.get("tool_calls"):
            return AgentResult("no_tool_call", turn, None, messages)
        for call in reply["tool_calls"]:
            name = call["function"]["name"]
            try:
                arguments = json.loads(call["function"].get("arguments") or "{}")
            except json.JSONDecodeError as exc:
                arguments, output = None, f"error: arguments are not valid JSON: {exc}"
            if arguments is not None:
                result = toolbox.call(name, arguments if isinstance(arguments, dict) else {})
                if result.submitted is not None:
                    log(f"[agent] submitted: {result.submitted}")
                    return AgentResult("submitted", turn, result.submitted, messages)
                output = result.content
            log(f"[agent]   {name}({json.dumps(arguments)}) -> {output[:200]}")
            messages.append({"role": "tool", "tool_call_id": call.get("id", ""), "content": output})
    return AgentResult("turn_limit", max_turns, None, messages)
