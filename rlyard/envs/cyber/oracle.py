"""The cyber oracle: replies that reproduce a target's crash through the episode's own tools.

A built-in target (or a row) has only its reference PoC: the oracle writes it with write_file
(as base64 text, since a PoC is bytes), decodes it with bash and submits it. A generated target
(`payload["spec"]`, generate.py) is solved as an agent that read the source would: read the
source (cat or read_file), sometimes look at seed.bin, then write its own PoC for the bug (the
kind's canonical trigger, `bugs.canonical_trigger`: one rule a policy can copy from the source,
such as the buffer's size + 8) as a python one-liner, a printf or a base64 write_file, sometimes
run ./target on it, and submit. The python writes the file field by field as the source names
them (the magic, `bytes([0x64])` for a tag, `(20 + 8).to_bytes(2, 'little')` for a length), so
no sum and no hex-to-decimal is left to the policy. The thought before the PoC states the layout
and the bug in words, from the spec. Every other choice is drawn from `rng`; `rlyard collect
cyber` and validate play these replies.
"""
from __future__ import annotations

import base64
import json
import random
from pathlib import Path

from rlyard.agent.replies import bash_reply, hermes_reply, say
from rlyard.envs.cyber.bugs import KINDS, canonical_trigger
from rlyard.envs.cyber.formats import FORMATS, part_bytes, parts_bytes
from rlyard.types import Reward, Task

SAFE_IN_DOUBLE_QUOTES = set(range(0x20, 0x7F)) - {ord(c) for c in "'\\\"$`"}  # a python b'...' inside sh "..."
SAFE_IN_PRINTF = set(range(0x20, 0x7F)) - {ord(c) for c in "'\\%"}
PRINTF_MAX = 120  # longer PoCs are written with python (b'A' * 60), not spelled out


def oracle(task: Task, rng: random.Random | None = None) -> list[str]:
    rng = rng or random.Random(task.id)
    if "spec" in task.payload:
        return generated_replies(task, rng)
    poc = task.payload["target"].get("poc")
    if not poc or not Path(poc).is_file():
        raise ValueError(f"cyber target {task.id} has no reference PoC")
    encoded = base64.b64encode(Path(poc).read_bytes()).decode()
    calls = [{"name": "write_file", "arguments": {"path": "poc.b64", "content": encoded}},
             {"name": "bash", "arguments": {"command": "base64 -d poc.b64 > poc.bin && ./target poc.bin; echo exit $?"}}]
    submit = {"name": "submit", "arguments": {"answer": "poc.bin"}}
    return ["".join(f"<tool_call>{json.dumps(call)}</tool_call>" for call in calls), f"<tool_call>{json.dumps(submit)}</tool_call>"]


# ---------------------------------------------------------------- writing bytes as a command

def _tokens(part: tuple) -> list[tuple]:
    """One part as ("str", bytes) printable runs, ("nums", [ints]), ("rep", byte, count) or the
    part itself for a number field; runs are merged inside a part, never across two."""
    if part[0] == "uint":
        return [part]
    if part[0] == "run" and part[2] >= 4:
        return [("rep", part[1], part[2])]
    tokens: list[tuple] = []
    for b in part_bytes(part):
        kind, value = ("str", bytes([b])) if b in SAFE_IN_DOUBLE_QUOTES or b == 0x0A else ("nums", [b])
        if tokens and tokens[-1][0] == kind:
            tokens[-1] = (kind, tokens[-1][1] + value)
        else:
            tokens.append((kind, value))
    return tokens


def _py_str(data: bytes) -> str:
    return "b'" + data.decode("ascii").replace("\n", "\\n") + "'"


def _py_uint(value: int, width: int, endian: str, role: str, length: tuple[int, str] | None) -> str:
    if role == "hex":
        number = f"0x{value:02x}"
    elif role == "len" and length and value == length[0]:
        number = length[1]
    else:
        number = str(value)
    return f"bytes([{number}])" if width == 1 else f"({number}).to_bytes({width}, '{endian}')"


def python_expr(parts: list, length: tuple[int, str] | None = None) -> str:
    """The file as a python bytes expression, field by field as the source names them:
    b'MAG' + bytes([0x04]) + (20 + 8).to_bytes(2, 'little') + b'A' * (20 + 8). `length`: the
    field's length and the expression to write it as (python does the sum, not the policy)."""
    pieces = []
    for token in (t for part in parts for t in _tokens(part)):
        if token[0] == "str":
            pieces.append(_py_str(token[1]))
        elif token[0] == "nums":
            pieces.append(f"bytes([{', '.join(f'0x{b:02x}' for b in token[1])}])")  # as C writes a byte
        elif token[0] == "uint":
            pieces.append(_py_uint(*token[1:], length))
        else:
            unit = _py_str(bytes([token[1]])) if token[1] in SAFE_IN_DOUBLE_QUOTES else f"bytes([0x{token[1]:02x}])"
            count = f"({length[1]})" if length and token[2] == length[0] else str(token[2])
            pieces.append(f"{unit} * {count}")
    return " + ".join(pieces) or "b''"


def printf_text(data: bytes) -> str:
    """The bytes as printf's single-quoted format: octal escapes, which sh's own printf reads."""
    out = []
    for b in data:
        out.append("\\n" if b == 0x0A else "%%" if b == 0x25 else chr(b) if b in SAFE_IN_PRINTF else f"\\{b:03o}")
    return "".join(out)


# ---------------------------------------------------------------- a generated target

def _blob_words(kind: str, blob: list | None, noun: str, constants: dict, text: bool, length_expr: str | None) -> str:
    if blob is None:
        return f"a file without the {noun}"
    length = sum(count for _, count in blob)
    if kind == "double_free":
        return f"a {noun} that starts with {constants['reserved_literal']}"
    if kind == "oob_index":
        symbol = blob[-1][0]
        return f"a {noun} holding the symbol " + (f"'{chr(symbol)}'" if text else f"0x{symbol:02x}")
    return f"a {noun} of {'exactly ' if kind == 'off_by_one' else ''}{length_expr or length} byte{'s' if length != 1 else ''}"


def generated_replies(task: Task, rng: random.Random) -> list[str]:
    spec, fmt_name = task.payload["spec"], task.payload.get("tool_format", "hermes")
    fmt, kind = FORMATS[spec["format"]], KINDS[spec["bug"]]
    hermes = (task.metadata.get("tool_format") or fmt_name) != "bash_block"
    source, function, noun = f"src/{spec['stem']}.c", spec["function"], spec["noun"]
    blob, length_expr = canonical_trigger(spec["bug"], spec["constants"], fmt.text)
    parts = fmt.parts(spec["layout"], blob, False)
    data, name = parts_bytes(parts), rng.choice(["poc.bin", "poc.bin", "crash.bin", "input.bin", "poc"])

    def reply(thought: str, command: str, tool: tuple[str, dict] | None = None) -> str:
        if not hermes:
            return bash_reply(thought, command)
        return hermes_reply(thought, [tool if tool and rng.random() < 0.5 else ("bash", {"command": command})])

    replies = [reply(say(rng, ["Let me read the source of `{f}`.", "First the program's source, {s}.",
                               "I'll read {s} to learn the input format and find the bug.", ""], f=function, s=source),
                     f"cat {source}", ("read_file", {"path": source}))]
    if rng.random() < 0.25:
        look = "cat seed.bin" if fmt.text else rng.choice(["od -An -tx1 seed.bin", "xxd seed.bin"])
        replies.append(reply(say(rng, ["Let me compare with the seed input.", "A look at seed.bin, a file it accepts.", ""]),
                             look))
    words = _blob_words(spec["bug"], blob, noun, spec["constants"], fmt.text, length_expr)
    thought = (f"{fmt.explain(spec['layout'], noun)} {kind.explain(function, spec['constants'])} "
               + say(rng, ["So the PoC is {w}.", "I'll write {w}.", "A file with {w} should crash it."], w=words))
    check = rng.choice([" && ./target {n} 2>&1 | grep SUMMARY", " && ./target {n} 2>&1 | grep SUMMARY",
                        " && ./target {n} 2>&1 | tail -n 2", ""]).format(n=name)
    style = rng.choice(["python", "python", "python", "printf"] + (["base64"] if hermes else []))
    if style == "printf" and len(data) > PRINTF_MAX:
        style = "python"
    if style == "base64":
        encoded = base64.b64encode(data).decode()
        replies.append(hermes_reply(thought, [("write_file", {"path": f"{name}.b64", "content": encoded}),
                                              ("bash", {"command": f"base64 -d {name}.b64 > {name}{check}"})]))
    elif style == "printf":
        replies.append(reply(thought, f"printf '{printf_text(data)}' > {name}{check}"))
    else:
        expr = python_expr(parts, (sum(count for _, count in blob), length_expr) if length_expr else None)
        write = rng.choice([f"python3 -c \"import sys; sys.stdout.buffer.write({expr})\" > {name}",
                            f"python3 -c \"open('{name}', 'wb').write({expr})\""])
        replies.append(reply(thought, write + check))
    done = say(rng, ["It crashes in `{f}` as described. Submitting {n}.", "The sanitizer reports the crash; submitting.",
                     "Submitting {n}.", ""], f=function, n=name) if check else say(rng, ["Submitting {n}.", ""], n=name)
    replies.append(bash_reply(done, f"submit {name}") if not hermes else hermes_reply(done, [("submit", {"answer": name})]))
    return replies


def play_oracle(task: Task) -> Reward:
    """One episode that plays `oracle` through the environment's own tools, graded by `score`."""
    from rlyard.envs.checks import play_replies
    from rlyard.envs.cyber.env import CyberEnv

    return play_replies(CyberEnv(), task, oracle(task))
