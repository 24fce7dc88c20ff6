"""Parse tool calls out of a model reply, and tell the model how to make them.

Three formats, chosen per environment (or for all of them by `agent.tool_format`):
- "hermes": JSON `{"name": ..., "arguments": {...}}` inside `<tool_call>...</tool_call>` tags,
  several per reply (the Hermes / Qwen chat-template convention);
- "llama3_json": bare JSON objects `{"name": ..., "parameters": {...}}`, optionally after
  `<|python_tag|>` (the Llama 3.1 / 3.2 chat-template convention), several per reply;
- "bash_block": fenced ```bash (or ```sh) blocks, each one a call of the `bash` tool
  (the minimal-agent convention; by default exactly one block per reply).

Parsing never raises on model output: whatever is wrong goes into `ParseResult.errors` as a
sentence the model can act on, and `format_tool_error` turns those into the reply shown to it.
A malformed tool spec, on the other hand, is a configuration error and raises (`ValueError`,
`TypeError` for a spec that is not a dict or a name).
See docs/tool_calls.md.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

FORMATS = ("hermes", "llama3_json", "bash_block")
BASH_MULTI = ("error", "first", "all")
HERMES_SHAPE = '<tool_call>\n{"name": "<tool name>", "arguments": {<argument name>: <value>, ...}}\n</tool_call>'
LLAMA3_SHAPE = '{"name": "<tool name>", "parameters": {<argument name>: <value>, ...}}'
PYTHON_TAG = "<|python_tag|>"
BASH_SHAPE = "```bash\n<one shell command>\n```"
OPEN, CLOSE = "<tool_call>", "</tool_call>"
JSON_TYPES = {"object": dict, "string": str, "array": list, "boolean": bool, "null": type(None)}


@dataclass(frozen=True)
class ToolCall:
    """One call the model asked for, checked against the tool's schema when one was given."""

    name: str  # tool name, e.g. "bash"
    arguments: dict  # decoded JSON arguments, e.g. {"command": "ls"}
    id: str  # "call_<k>": k counts the call markups of the reply, errors included


@dataclass(frozen=True)
class ParseResult:
    calls: list[ToolCall]  # well-formed calls, in reply order
    errors: list[str]  # one readable sentence per rejected call (shown back to the model)
    text: str  # the reply without the call markup: the model's prose, stripped

    @property
    def ok(self) -> bool:
        return not self.errors


def normalize_tool(spec: dict | str) -> dict:
    """OpenAI `{"type": "function", "function": {...}}`, plain `{"name", ...}` or a bare name
    -> `{"name", "description", "parameters"}` (parameters None when no schema was given)."""
    if isinstance(spec, str):
        return {"name": spec, "description": "", "parameters": None}
    if not isinstance(spec, dict):
        raise TypeError(f"a tool spec must be a dict or a name, got {type(spec).__name__}")
    fn = spec["function"] if spec.get("type") == "function" and "function" in spec else spec
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise ValueError(f"a tool spec needs a non-empty string 'name': {spec!r}")
    params = fn.get("parameters")
    if params is not None and not isinstance(params, dict):
        raise ValueError(f"tool {fn['name']!r}: 'parameters' must be a JSON schema object")
    return {"name": fn["name"], "description": fn.get("description") or "", "parameters": params}


def parse_tool_calls(reply: str, fmt: str, tools: list[dict | str] | None = None, *,
                     bash_multi: str = "error") -> ParseResult:
    """Tool calls in `reply`. `tools` (OpenAI or plain specs, or names) restricts the names and
    checks arguments; `bash_multi` says what several bash blocks mean: "error" (default,
    nothing runs), "first" (only the first runs) or "all"."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown tool-call format {fmt!r}; expected one of {FORMATS}")
    if bash_multi not in BASH_MULTI:
        raise ValueError(f"bash_multi must be one of {BASH_MULTI}, got {bash_multi!r}")
    specs = None if tools is None else {t["name"]: t for t in map(normalize_tool, tools)}
    if fmt == "hermes":
        return _parse_hermes(reply, specs)
    if fmt == "llama3_json":
        return _parse_llama3(reply, specs)
    return _parse_bash(reply, bash_multi)


# ---------------------------------------------------------------- hermes


def _parse_hermes(reply: str, specs: dict[str, dict] | None) -> ParseResult:
    calls, errors, prose, pos, k = [], [], [], 0, 0
    while True:
        start = reply.find(OPEN, pos)
        stray = reply.find(CLOSE, pos, None if start < 0 else start)
        if stray >= 0:  # a closing tag with no opening one: the model meant a call
            errors.append(f"found {CLOSE} without a matching {OPEN} before it. "
                          f"Wrap each call like this:\n{HERMES_SHAPE}")
            prose.append(reply[pos:stray])
            pos = stray + len(CLOSE)
            continue
        if start < 0:
            prose.append(reply[pos:])
            break
        prose.append(reply[pos:start])
        body_start = start + len(OPEN)
        end, next_open = reply.find(CLOSE, body_start), reply.find(OPEN, body_start)
        label = f"tool call {k + 1}"
        if end >= 0 and (next_open < 0 or end < next_open):
            body, pos = reply[body_start:end], end + len(CLOSE)
        elif next_open < 0:  # unclosed at the very end: the model stopped on its stop token
            body, pos = reply[body_start:], len(reply)
        else:  # unclosed, and another call follows: do not guess where this one ended
            errors.append(f"{label}: missing {CLOSE} before the next {OPEN}. "
                          f"Close every call:\n{HERMES_SHAPE}")
            body, pos = None, next_open
        if body is not None:
            call, error = _hermes_call(body, f"call_{k}", label, specs)
            if call is not None:
                calls.append(call)
            if error is not None:
                if end < 0:
                    error += f" (the call also had no closing {CLOSE})"
                errors.append(error)
        k += 1
    return ParseResult(calls, errors, "".join(prose).strip())


def _hermes_call(body: str, id_: str, label: str, specs: dict[str, dict] | None):
    """(ToolCall, None) or (None, error sentence) for the text between the tags."""
    # Some models wrap the JSON in a ```json fence inside the tags; the content is still clear.
    fenced = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", body.strip(), re.DOTALL)
    text = fenced.group(1) if fenced else body.strip()
    if not text:
        return None, f"{label}: the {OPEN} tags are empty. Expected:\n{HERMES_SHAPE}"
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        near = text[max(0, e.pos - 20): e.pos + 20].replace("\n", " ")
        return None, (f"{label}: invalid JSON: {e.msg} at line {e.lineno} column {e.colno} "
                      f"(char {e.pos}, near {near!r}). Expected:\n{HERMES_SHAPE}")
    except RecursionError:
        return None, f"{label}: the JSON is nested too deeply. Expected:\n{HERMES_SHAPE}"
    except ValueError as e:  # an integer past Python's digit limit (4300): not a JSON error, still the reply's
        return None, f"{label}: the JSON cannot be read ({e}). Expected:\n{HERMES_SHAPE}"
    if not isinstance(obj, dict):
        return None, f"{label}: expected a JSON object, got {_json_type(obj)}. Expected:\n{HERMES_SHAPE}"
    return _checked_call(obj, obj.get("arguments", {}), "arguments", id_, label, specs, HERMES_SHAPE)


def _checked_call(obj: dict, args: Any, key: str, id_: str, label: str, specs: dict[str, dict] | None, shape: str):
    """(ToolCall, None) or (None, error sentence) for a decoded call object whose arguments are `args`."""
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        what = "is missing" if name is None else f"must be a non-empty string, got {_json_type(name)}"
        return None, f'{label}: "name" {what}. Expected:\n{shape}'
    name = name.strip()
    label = f"{label} ({name})"
    if isinstance(args, str):  # some templates emit arguments as a JSON-encoded string
        try:
            args = json.loads(args) if args.strip() else {}
        except (ValueError, RecursionError) as e:  # JSONDecodeError, or an integer past the digit limit
            return None, (f'{label}: "{key}" is a string that is not valid JSON ({e}); '
                          f"give an object instead. Expected:\n{shape}")
    if not isinstance(args, dict):
        return None, f'{label}: "{key}" must be a JSON object, got {_json_type(args)}. Expected:\n{shape}'
    if specs is not None:
        if name not in specs:
            return None, (f"{label}: unknown tool {name!r}. Available tools: "
                          f"{', '.join(sorted(specs)) or '(none)'}.")
        schema = specs[name]["parameters"]
        problems = _check(args, schema, "") if schema else []
        if problems:
            return None, (f"{label}: " + "; ".join(problems)
                          + f". Expected arguments: {_signature(schema)}")
    return ToolCall(name, args, id_), None


# ---------------------------------------------------------------- llama3_json

# A call starts like {"name": ... (Llama 3.2 sometimes writes {"type": "function", "name": ...}).
_LLAMA3_START = re.compile(r'\{\s*"(?:name|type)"\s*:')


def _is_llama3_call(obj: Any, specs: dict[str, dict] | None) -> bool:
    """A JSON object the model meant as a call, not data it quotes (a package.json has a "name" too)."""
    if not isinstance(obj, dict) or "name" not in obj:
        return False
    known = specs is not None and isinstance(obj["name"], str) and obj["name"].strip() in specs
    return "parameters" in obj or "arguments" in obj or obj.get("type") == "function" or known


def _parse_llama3(reply: str, specs: dict[str, dict] | None) -> ParseResult:
    """Every JSON object in the reply that is a call, in order; a call that is not valid JSON ends
    the parse (where it stops cannot be known), with an error that says what is wrong."""
    text = reply.replace(PYTHON_TAG, "\n")
    calls, errors, prose, pos, k = [], [], [], 0, 0
    decoder = json.JSONDecoder()
    while (match := _LLAMA3_START.search(text, pos)) is not None:
        start, label = match.start(), f"tool call {k + 1}"
        try:
            obj, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError as e:
            near = text[max(start, e.pos - 20): e.pos + 20].replace("\n", " ")
            ended = " (the reply ended inside the call: close every brace)" if e.pos >= len(text.rstrip()) else ""
            errors.append(f"{label}: invalid JSON: {e.msg} (char {e.pos - start} of the call, near {near!r}){ended}. "
                          f"Expected:\n{LLAMA3_SHAPE}")
            prose.append(text[pos:start])
            pos = len(text)
            break
        except RecursionError:
            errors.append(f"{label}: the JSON is nested too deeply. Expected:\n{LLAMA3_SHAPE}")
            prose.append(text[pos:start])
            pos = len(text)
            break
        except ValueError as e:  # an integer past Python's digit limit
            errors.append(f"{label}: the JSON cannot be read ({e}). Expected:\n{LLAMA3_SHAPE}")
            prose.append(text[pos:start])
            pos = len(text)
            break
        if not _is_llama3_call(obj, specs):
            prose.append(text[pos:end])
            pos = end
            continue
        prose.append(text[pos:start])
        pos = end
        key = "parameters" if "parameters" in obj else "arguments"
        call, error = _checked_call(obj, obj.get(key, {}), key, f"call_{k}", label, specs, LLAMA3_SHAPE)
        if call is not None:
            calls.append(call)
        else:
            errors.append(error)
        k += 1
    prose.append(text[pos:])
    joined = re.sub(r"```(?:json)?\s*```", "", "".join(prose))  # fences that held only a call
    return ParseResult(calls, errors, joined.strip().strip(";").strip())


# ---------------------------------------------------------------- JSON-schema subset


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return next((t for t, cls in JSON_TYPES.items() if isinstance(value, cls)), type(value).__name__)


def _check(value: Any, schema: dict, path: str) -> list[str]:
    """Problems of `value` against type / required / properties / items / enum /
    additionalProperties=false; anything else in the schema is not checked."""
    where = f"argument {path!r}" if path else "arguments"
    types = schema.get("type")
    types = [types] if isinstance(types, str) else types
    actual = _json_type(value)
    if types and not any(t == actual or (t, actual) == ("number", "integer") for t in types):
        return [f"{where} must be {' or '.join(types)}, got {actual}"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{where} must be one of {json.dumps(schema['enum'], ensure_ascii=False)}"]
    problems = []
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        problems += [f"missing required argument {_join(path, r)!r}"
                     for r in schema.get("required") or [] if r not in value]
        for key, sub in value.items():
            if key in props and isinstance(props[key], dict):
                problems += _check(sub, props[key], _join(path, key))
            elif key not in props and schema.get("additionalProperties") is False:
                problems.append(f"unknown argument {_join(path, key)!r}")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            problems += _check(item, schema["items"], f"{path}[{i}]")
    return problems


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _signature(schema: dict) -> str:
    """A one-line reminder of a tool's arguments: {"path": string (required), "limit": integer}."""
    props, required = schema.get("properties") or {}, set(schema.get("required") or [])
    parts = [f'"{k}": {v.get("type", "any") if isinstance(v, dict) else "any"}'
             + (" (required)" if k in required else "") for k, v in props.items()]
    return "{" + ", ".join(parts) + "}"


# ---------------------------------------------------------------- bash blocks

_FENCE_OPEN = re.compile(r"^([ \t]*)(`{3,})[ \t]*([\w+-]*)[^`]*$")
_ONE_LINE = re.compile(r"^[ \t]*```(?i:bash|sh|shell)[ \t]+(.+?)[ \t]*```[ \t]*$")
_HEREDOC = re.compile(r"(?<!<)<<(?!<)(-?)[ \t]*(['\"]?)([A-Za-z_]\w*)\2")
BASH_LANGS = ("bash", "sh", "shell")


def _find_close(lines: list[str], start: int, ticks: str, heredocs: bool) -> int:
    """Index of the line closing a fence opened at lines[start - 1], or -1. With `heredocs`,
    lines inside a heredoc (cat <<'EOF' ... EOF) never close it: they may hold ``` themselves."""
    pending: list[str] = []
    for i in range(start, len(lines)):
        line = lines[i]
        if pending:
            if line.strip() == pending[0]:
                pending.pop(0)
            continue
        stripped = line.strip()
        if stripped.startswith(ticks) and set(stripped) == {"`"}:
            return i
        if heredocs:
            pending += [m.group(3) for m in _HEREDOC.finditer(line)]
    return -1


def _parse_bash(reply: str, bash_multi: str) -> ParseResult:
    lines = reply.split("\n")
    commands, errors, prose, i = [], [], [], 0
    while i < len(lines):
        line = lines[i]
        one = _ONE_LINE.match(line)
        if one:
            commands.append(one.group(1))
            i += 1
            continue
        m = _FENCE_OPEN.match(line)
        if not m:
            prose.append(line)
            i += 1
            continue
        indent, ticks, lang = m.group(1), m.group(2), m.group(3).lower()
        is_bash = lang in BASH_LANGS
        close = _find_close(lines, i + 1, ticks, heredocs=is_bash)
        if close < 0 and is_bash:  # maybe an unclosed heredoc swallowed the fence: retry plainly
            close = _find_close(lines, i + 1, ticks, heredocs=False)
        if close < 0:
            if is_bash:
                errors.append(f"the ```{lang} block is not closed: end it with a line holding only "
                              f"```. Expected:\n{BASH_SHAPE}")
            else:
                prose.extend(lines[i:])
            break
        if not is_bash:
            prose.extend(lines[i: close + 1])
        else:
            body = [b[len(indent):] if b.startswith(indent) else b.lstrip() for b in lines[i + 1: close]]
            command = "\n".join(body).strip("\n")
            if command.strip():
                commands.append(command)
            else:
                errors.append(f"the ```{lang} block is empty. Expected:\n{BASH_SHAPE}")
        i = close + 1
    text = "\n".join(prose).strip()
    if len(commands) > 1 and bash_multi == "error":
        errors.append(f"found {len(commands)} bash blocks; send exactly one command per reply "
                      f"(join steps with && or write a script). Expected:\n{BASH_SHAPE}")
        commands = []
    elif len(commands) > 1 and bash_multi == "first":
        commands = commands[:1]
    calls = [ToolCall("bash", {"command": c}, f"call_{k}") for k, c in enumerate(commands)]
    return ParseResult(calls, errors, text)


# ---------------------------------------------------------------- prompts and errors


def hermes_call(name: str, arguments: dict[str, Any]) -> str:
    """One call in the Hermes markup `_parse_hermes` reads: <tool_call>, a JSON object on its own line, </tool_call>."""
    return f"{OPEN}\n{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}\n{CLOSE}"


def shell_quote(text: str) -> str:
    """`text` as one single-quoted shell word (what a bash tool call or a bash block runs)."""
    return "'" + text.replace("'", "'\"'\"'") + "'"


def render_tool_specs(tools: list[dict | str], fmt: str) -> str:
    """System-prompt text that teaches the model the format and lists the tools."""
    specs = [normalize_tool(t) for t in tools]
    if fmt == "hermes":
        # The wording of Qwen2.5 / Qwen3 chat templates, which their models were trained on.
        lines = [json.dumps({"type": "function", "function": s}, ensure_ascii=False) for s in specs]
        return ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                "You are provided with function signatures within <tools></tools> XML tags:\n"
                "<tools>\n" + "\n".join(lines) + "\n</tools>\n\n"
                "For each function call, return a json object with function name and arguments "
                "within <tool_call></tool_call> XML tags:\n"
                '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')
    if fmt == "llama3_json":
        # The wording of the Llama 3.1 / 3.2 chat templates (their system-prompt variant), spaces and all.
        listed = "\n\n".join(json.dumps({"type": "function", "function": s}, indent=4, ensure_ascii=False) for s in specs)
        return ("You have access to the following functions. To call a function, please respond with JSON for a "
                'function call.Respond in the format {"name": function name, "parameters": dictionary of argument '
                "name and its value}.Do not use variables.\n\n" + listed)
    if fmt == "bash_block":
        others = [s["name"] for s in specs if s["name"] != "bash"]
        if others:
            raise ValueError(f"the bash_block format can only call 'bash', not {others}; use 'hermes'")
        desc = specs[0]["description"] if specs else ""
        return ("# Tools\n\nYou run shell commands with the bash tool"
                + (f": {desc}" if desc else ".") + "\n\nTo run a command, write exactly one fenced "
                "bash block in your reply:\n\n" + BASH_SHAPE + "\n\nIts output comes back in the "
                "next message. Send one command per reply; a reply without a bash block ends "
                "the episode.")
    raise ValueError(f"unknown tool-call format {fmt!r}; expected one of {FORMATS}")


def format_tool_error(errors: list[str]) -> str:
    """The message shown back to the model for a reply whose calls were rejected ("" if none)."""
    unique = list(dict.fromkeys(errors))
    if not unique:
        return ""
    if len(unique) == 1:
        return f"Tool call error: {unique[0]}\nFix the call and try again."
    body = "\n".join(f"{n}. {e}" for n, e in enumerate(unique, 1))
    return f"Tool call errors ({len(unique)}):\n{body}\nFix the calls and try again."
