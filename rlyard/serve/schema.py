"""Request models of `rlyard serve` and OpenAI-style errors.

Every request is validated here before it reaches the engine, so a malformed one gets a 400
that names the field (as OpenAI does) instead of a 500 from deep inside generation. Fields are
strict (`n: "2"`, `max_tokens: 1e12` are refused, not coerced) and unknown fields are refused:
a parameter that would be silently ignored changes what the client thinks it sampled.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

MAX_STOPS = 16


class ApiError(Exception):
    """An error the client caused; becomes `{"error": {message, type, param, code}}`."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


class Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    def refuse_unsupported(self) -> None:
        """What validation alone cannot say (a request model overrides it)."""


class StreamOptions(Strict):
    include_usage: bool = False


class FunctionSpec(Strict):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolSpec(Strict):
    type: Literal["function"]
    function: FunctionSpec


class CalledFunction(Strict):
    name: str
    arguments: str


class ToolCall(Strict):
    model_config = ConfigDict(strict=True, extra="ignore")
    id: str | None = None
    type: Literal["function"] = "function"
    function: CalledFunction


class ChatMessage(Strict):
    # clients echo reply messages back with fields of their own (refusal, annotations, audio)
    model_config = ConfigDict(strict=True, extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Any = Field(None, validate_default=True)
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    @field_validator("role")
    @classmethod
    def developer_is_system(cls, role: str) -> str:
        """Current OpenAI clients send `developer` where they used to send `system`: the same
        instructions, rendered by the chat template as its system message."""
        return "system" if role == "developer" else role

    @field_validator("content")
    @classmethod
    def join_text_parts(cls, content: Any) -> str | list:
        """smolagents and others send content as a list of parts; text parts are joined (what
        a text-only template renders). A list with another kind of part is kept as it is, for
        `bad_part` to refuse naming the part (a validator here could name only `content`)."""
        if content is None or isinstance(content, str):
            return content or ""
        if not isinstance(content, list):
            raise ValueError("must be a string or a list of content parts")
        if any(bad_part(content)):
            return content
        return "".join(part["text"] for part in content)


def bad_part(parts: list) -> tuple[str, str] | tuple[()]:
    """(the field of the first part that is no text part, why), or () when every part is text."""
    for j, part in enumerate(parts):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind != "text":
            what = f"a part of type {kind!r}" if isinstance(part, dict) else f"a {type(part).__name__}, not an object"
            return f"content[{j}].type", f"only text content parts are supported (got {what})"
        if not isinstance(part.get("text"), str):
            return f"content[{j}].text", "a text part needs 'text' as a string"
    return ()


class Sampling(Strict):
    """Fields common to chat and text completions."""

    model: str
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=0)  # not OpenAI's; vLLM and others accept it too
    n: int = Field(1, ge=1, le=16)
    max_tokens: int | None = Field(None, ge=1)
    stop: Any = Field(None, validate_default=True)
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, Any] | None = None
    user: str | None = None  # labels the caller for OpenAI's abuse tracking; nothing to do here
    # OpenAI's string map; `rlyard serve --learn` reads `group` (a GRPO group) and `task` (the task the close grader scores)
    metadata: dict[str, str] | None = Field(None, max_length=16)
    stop_token_ids: list[int] | None = None  # vLLM's: end the reply after any of these (besides the server's own)

    @field_validator("stop")
    @classmethod
    def stop_list(cls, stop: Any) -> list[str]:
        if stop is None:
            return []
        stops = [stop] if isinstance(stop, str) else stop
        if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops) or len(stops) > MAX_STOPS:
            raise ValueError(f"must be a non-empty string or a list of at most {MAX_STOPS} non-empty strings")
        return stops

    def refuse_unsupported(self) -> None:
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(self, name):
                raise unsupported(name, "the engine samples from the policy's own distribution (that is what trains)")
        if self.logit_bias:
            raise unsupported("logit_bias", "the engine samples from the policy's own distribution (that is what trains)")
        if self.stream_options is not None and not self.stream:
            raise ApiError(400, "'stream_options' is only allowed when 'stream' is true", "stream_options")


class LoadAdapter(Strict):
    """vLLM's `/v1/load_lora_adapter` body."""

    lora_name: str = Field(min_length=1, max_length=256)
    lora_path: str = Field(min_length=1)
    load_inplace: bool = False


class UnloadAdapter(Strict):
    model_config = ConfigDict(strict=True, extra="ignore")  # vLLM's also carries an unused lora_int_id
    lora_name: str = Field(min_length=1)


class ChatRequest(Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[ToolSpec] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    response_format: dict[str, Any] | None = None

    @field_validator("tool_choice")
    @classmethod
    def choice(cls, value: Any) -> str | None:
        if value is None or value in ("auto", "none"):
            return value
        if value == "required" or isinstance(value, dict):
            raise ValueError("only 'auto' and 'none' are supported: rlyard serve cannot force a tool call")
        raise ValueError("must be 'auto' or 'none'")

    def refuse_unsupported(self) -> None:
        super().refuse_unsupported()
        for i, message in enumerate(self.messages):
            if isinstance(message.content, list) and (found := bad_part(message.content)):
                field, why = found
                raise ApiError(400, f"Invalid value for 'messages[{i}].{field}': {why}", f"messages[{i}].{field}",
                               "unsupported_content_part")
        if self.top_logprobs:
            raise unsupported("top_logprobs", "the engine reports the logprob of the sampled token only")
        if self.top_logprobs is not None and not self.logprobs:
            raise ApiError(400, "'top_logprobs' needs 'logprobs': true", "top_logprobs")
        if self.response_format and self.response_format.get("type") != "text":
            raise unsupported("response_format", "there is no constrained decoding")


class CompletionRequest(Sampling):
    prompt: Any
    logprobs: int | None = Field(None, ge=0, le=5)
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None
    # vLLM's: a trainer must get the sampled ids exactly, never by re-tokenizing the text
    return_tokens_as_token_ids: bool = False  # logprobs.tokens as "token_id:<id>"
    return_token_ids: bool = False  # each choice's `token_ids` (and `prompt_token_ids`)

    @field_validator("prompt")
    @classmethod
    def one_prompt(cls, prompt: Any) -> str | list[int]:
        """One prompt per request (a list of one is unwrapped): a text or its token ids."""
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if isinstance(prompt, str) and prompt:
            return prompt
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt):
            return prompt
        raise ValueError("must be a non-empty string or a non-empty list of token ids (one prompt per request)")

    def refuse_unsupported(self) -> None:
        super().refuse_unsupported()
        if self.logprobs:
            raise unsupported("logprobs", "the engine reports the logprob of the sampled token only: use logprobs 0")
        if self.suffix:
            raise unsupported("suffix", "there is no fill-in-the-middle")
        if self.best_of not in (None, 1):
            raise unsupported("best_of", "use 'n' and choose on the client")
        if self.echo and self.logprobs is not None:
            raise unsupported("echo", "prompt logprobs are not computed: echo without logprobs")


def unsupported(param: str, why: str) -> ApiError:
    return ApiError(400, f"'{param}' is not supported by rlyard serve: {why}", param, "unsupported_parameter")


def parse(model: type[Strict], body: bytes) -> Any:
    """The request model of `body`, or an ApiError naming the first bad field."""
    try:
        request = model.model_validate_json(body or b"{}")
    except ValidationError as exc:
        raise validation_error(exc) from None
    request.refuse_unsupported()
    return request


def validation_error(exc: ValidationError) -> ApiError:
    error = exc.errors(include_url=False)[0]
    param = "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else str(p)) for i, p in enumerate(error["loc"])) or None
    if error["type"] == "json_invalid":
        return ApiError(400, f"the request body is not valid JSON: {error['msg']}")
    if error["type"] == "model_type" and param is None:
        return ApiError(400, "the request body must be a JSON object")
    if error["type"] == "extra_forbidden":
        return ApiError(400, f"'{param}' is not supported by rlyard serve", param, "unsupported_parameter")
    if error["type"] == "missing":
        return ApiError(400, f"'{param}' is required", param, "missing_required_parameter")
    message = error["msg"].removeprefix("Value error, ")
    return ApiError(400, f"Invalid value for '{param}': {message}", param, "invalid_value")
