"""mini-swe-agent as a harness arm: its own agent, prompts and config; rlyard's gateway and sandbox.

mini-swe-agent (https://mini-swe-agent.com) plays the episode with its `DefaultAgent` and the
config of its `mini` command (`mini.yaml`: system and instance templates, observation and
format-error templates, bash as a tool call). Two parts are swapped, both through its own
extension points:

- the model is its litellm model class with `api_base` set to the episode's session URL, so
  every reply is sampled by the policy and recorded token by token; a failed call is not
  retried (its default waits up to minutes between ten tries: on a local gateway a failure is
  an infra error, and the episode should leave its group at once);
- the environment is `SandboxEnvironment`: each command goes to the episode's sandbox exec
  function. Nothing mini-swe-agent runs ever reaches the host's shell.

The episode ends the way mini-swe-agent ends one: `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`
as the first line of a successful command's output submits (what follows is the submission),
`step_limit` (set to agent.max_turns) or three format errors in a row stop it, and so does a
request the gateway refuses because the episode's token budget is spent ("token_budget").
"""
from __future__ import annotations

import os
import platform
from typing import Any

# Before the imports: mini-swe-agent prints a banner, and litellm would fetch its model price
# list from the internet, at import time (a training run may have no network).
os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm  # noqa: E402
from minisweagent.agents.default import DefaultAgent  # noqa: E402
from minisweagent.config import get_config_from_spec  # noqa: E402
from minisweagent.exceptions import Submitted  # noqa: E402
from minisweagent.models.litellm_model import LitellmModel  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from rlyard.harness.base import ExecFn, HarnessEpisode, HarnessOutcome  # noqa: E402

litellm.suppress_debug_info = True  # else every reply's cost lookup ("policy" has no price) prints a provider list

CONFIG = "mini.yaml"  # the config of mini-swe-agent's `mini` command, shipped with the package
SUBMIT_LINE = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
ENDINGS = {"Submitted": "submitted", "LimitsExceeded": "turn_limit", "TimeExceeded": "time_limit",
           "RepeatedFormatError": "format_errors"}


class SandboxEnvironmentConfig(BaseModel):
    cwd: str = ""  # a folder inside the workspace to run in ("" = the workspace)
    env: dict[str, str] = {}  # variables exported before each command (mini.yaml sets PAGER=cat ...)
    timeout: int = 30  # seconds per command


class SandboxEnvironment:
    """mini-swe-agent's Environment interface over an rlyard sandbox exec function."""

    def __init__(self, exec_fn: ExecFn, *, config_class: type = SandboxEnvironmentConfig, **kwargs: Any):
        self.exec_fn = exec_fn
        self.config = config_class(**{k: v for k, v in kwargs.items() if k in config_class.model_fields})

    def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        command = str(action.get("command", ""))
        exports = "".join(f"export {k}={_quote(v)}\n" for k, v in self.config.env.items())
        where = cwd or self.config.cwd
        script = f"{exports}cd {_quote(where)} || exit 1\n{command}" if where else f"{exports}{command}"
        result = self.exec_fn(script, timeout or self.config.timeout)
        output = {"output": result.output, "returncode": result.exit_code, "exception_info": ""}
        if result.timed_out:
            output["exception_info"] = f"An error occurred while executing the command: timed out after {timeout or self.config.timeout} seconds"
        self._check_finished(output)
        return output

    def _check_finished(self, output: dict) -> None:
        """mini-swe-agent's submit rule (its LocalEnvironment's): the marker as the output's first line."""
        lines = output.get("output", "").lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == SUBMIT_LINE and output["returncode"] == 0:
            submission = "".join(lines[1:])
            raise Submitted({"role": "exit", "content": submission, "extra": {"exit_status": "Submitted", "submission": submission}})

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        """The config and the kernel's uname (the sandbox shares the host kernel); never the host's
        environment variables, which LocalEnvironment would hand to the prompt."""
        return {**self.config.model_dump(), **platform.uname()._asdict(), **kwargs}

    def serialize(self) -> dict:
        return {"info": {"config": {"environment": self.config.model_dump(mode="json"),
                                    "environment_type": f"{type(self).__module__}.{type(self).__name__}"}}}


class GatewayModel(LitellmModel):
    """Its litellm model class, without retries (see the module docstring)."""

    abort_exceptions = [Exception]


def _quote(text: str) -> str:
    return "'" + str(text).replace("'", "'\"'\"'") + "'"


class MiniSweAgent:
    """The `mini_swe_agent` harness arm."""

    def __init__(self, config: str | dict | None = None):
        self.config = get_config_from_spec(config or CONFIG) if not isinstance(config, dict) else config

    def build(self, episode: HarnessEpisode) -> DefaultAgent:
        """The agent for one episode: mini-swe-agent's config, pointed at the session and the sandbox."""
        model_cfg = dict(self.config.get("model", {}))
        kwargs = {**model_cfg.get("model_kwargs", {}), "api_base": episode.base_url, "api_key": "rlyard",
                  "temperature": episode.temperature, "top_p": episode.top_p, "max_tokens": episode.max_tokens}
        if episode.seed is not None:
            kwargs["seed"] = episode.seed
        model = GatewayModel(**{**model_cfg, "model_name": f"openai/{episode.model}", "model_kwargs": kwargs,
                                "cost_tracking": "ignore_errors"})
        env = SandboxEnvironment(episode.exec, **self.config.get("environment", {}))
        agent_cfg = {**self.config.get("agent", {}), "step_limit": episode.max_turns, "cost_limit": 0.0}
        return DefaultAgent(model, env, **agent_cfg)

    def __call__(self, episode: HarnessEpisode) -> HarnessOutcome:
        agent = self.build(episode)
        try:
            extra = agent.run(episode.task)
        except (litellm.exceptions.ContextWindowExceededError, litellm.exceptions.BadRequestError) as e:
            # the gateway's context window is the episode's token budget; its refusal carries
            # OpenAI's error code, which litellm does not always map to its own class
            if isinstance(e, litellm.exceptions.ContextWindowExceededError) or getattr(e, "code", None) == "context_length_exceeded":
                return HarnessOutcome("token_budget")
            raise
        status = str(extra.get("exit_status", ""))
        submission = extra.get("submission") if status == "Submitted" else None
        return HarnessOutcome(ENDINGS.get(status, status or "done"), submission)
