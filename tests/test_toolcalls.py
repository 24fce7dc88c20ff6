"""Tool-call formats: good calls parse, bad ones come back as errors the model can act on."""
import json
import random

import pytest

from rlyard.agent.toolcalls import (
    ParseResult,
    ToolCall,
    format_tool_error,
    normalize_tool,
    parse_tool_calls,
    render_tool_specs,
)

READ = {"type": "function", "function": {
    "name": "read_file", "description": "Read a text file.",
    "parameters": {"type": "object", "required": ["path"], "properties": {
        "path": {"type": "string"}, "limit": {"type": "integer"}, "ratio": {"type": "number"},
        "follow": {"type": "boolean"}, "globs": {"type": "array", "items": {"type": "string"}},
        "mode": {"type": "string", "enum": ["text", "hex"]},
        "opts": {"type": "object", "required": ["depth"], "properties": {"depth": {"type": "integer"}}}}}}}
BASH = {"name": "bash", "description": "Run a shell command.", "parameters": {
    "type": "object", "required": ["command"], "properties": {"command": {"type": "string"}}}}
TOOLS = [READ, BASH]


def call(name, **arguments):
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


def hermes(reply, tools=TOOLS):
    return parse_tool_calls(reply, "hermes", tools)


def one_error(reply, tools=TOOLS):
    r = hermes(reply, tools)
    assert r.calls == [] and len(r.errors) == 1, r
    return r.errors[0]


# ---------------------------------------------------------------- hermes: good calls


def test_single_call():
    r = hermes(call("bash", command="ls -la"))
    assert r == ParseResult([ToolCall("bash", {"command": "ls -la"}, "call_0")], [], "")
    assert r.ok


def test_several_calls_in_order_with_prose_kept_as_text():
    reply = "Let me look.\n" + call("read_file", path="a.py") + "\nand\n" + call("bash", command="pwd") + "\nDone."
    r = hermes(reply)
    assert [(c.name, c.id) for c in r.calls] == [("read_file", "call_0"), ("bash", "call_1")]
    assert r.errors == []
    assert r.text == "Let me look.\n\nand\n\nDone."


def test_arguments_as_json_string_are_decoded():
    reply = '<tool_call>{"name": "bash", "arguments": "{\\"command\\": \\"echo hi\\"}"}</tool_call>'
    assert hermes(reply).calls[0].arguments == {"command": "echo hi"}


def test_whitespace_newlines_and_json_fence_inside_tags_are_tolerated():
    reply = '<tool_call>\n\n  ```json\n{\n  "name" : "bash",\n  "arguments" : {"command": "ls"}\n}\n```\n</tool_call>'
    assert hermes(reply).calls == [ToolCall("bash", {"command": "ls"}, "call_0")]


def test_nested_json_and_unicode_arguments():
    args = {"path": "données/été.txt", "opts": {"depth": 2}, "globs": ["*.py", "**/ü"]}
    r = hermes("Voilà 🙂 " + call("read_file", **args))
    assert r.calls[0].arguments == args and r.text == "Voilà 🙂"
    raw = '<tool_call>{"name": "read_file", "arguments": {"path": "日本語 ✓"}}</tool_call>'
    assert hermes(raw).calls[0].arguments == {"path": "日本語 ✓"}


def test_missing_closing_tag_at_the_end_is_accepted():
    # The model stopped on its stop token right after the JSON: the call is complete.
    r = hermes('ok\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n')
    assert r.calls == [ToolCall("bash", {"command": "ls"}, "call_0")] and r.errors == [] and r.text == "ok"


def test_missing_arguments_means_no_arguments_and_no_tools_means_any_name():
    r = parse_tool_calls('<tool_call>{"name": "anything"}</tool_call>', "hermes")
    assert r.calls == [ToolCall("anything", {}, "call_0")]


def test_no_tool_call_is_just_text():
    assert hermes("The answer is 4.") == ParseResult([], [], "The answer is 4.")


def test_tools_given_as_names_or_plain_specs():
    assert hermes(call("bash", command=1), tools=["bash"]).calls  # names only: no argument check
    assert normalize_tool(BASH) == normalize_tool({"type": "function", "function": BASH})
    with pytest.raises(ValueError, match="name"):
        normalize_tool({"type": "function", "function": {"description": "x"}})


# ---------------------------------------------------------------- hermes: bad calls


def test_invalid_json_reports_the_position_and_the_expected_shape():
    e = one_error('<tool_call>{"name": "bash" "arguments": {}}</tool_call>')
    assert "tool call 1: invalid JSON" in e and "line 1 column 17" in e and "char 16" in e
    assert '"name": "<tool name>", "arguments"' in e


def test_missing_name():
    e = one_error('<tool_call>{"arguments": {"command": "ls"}}</tool_call>')
    assert '"name" is missing' in e and "<tool_call>" in e
    assert '"name" must be a non-empty string, got integer' in one_error('<tool_call>{"name": 3}</tool_call>')


def test_non_object_arguments_and_non_object_call():
    assert '"arguments" must be a JSON object, got array' in one_error('<tool_call>{"name": "bash", "arguments": [1]}</tool_call>')
    assert "string that is not valid JSON" in one_error('<tool_call>{"name": "bash", "arguments": "ls -la"}</tool_call>')
    assert "expected a JSON object, got array" in one_error("<tool_call>[1, 2]</tool_call>")
    assert "tags are empty" in one_error("<tool_call>  </tool_call>")


def test_unknown_tool_lists_the_available_ones():
    e = one_error(call("rm_rf", path="/"))
    assert "unknown tool 'rm_rf'" in e and "Available tools: bash, read_file" in e


def test_missing_required_argument_and_wrong_types():
    e = one_error(call("read_file", limit="10"))
    assert "(read_file)" in e and "missing required argument 'path'" in e
    assert "argument 'limit' must be integer, got string" in e
    assert 'Expected arguments: {"path": string (required), "limit": integer' in e
    assert "argument 'limit' must be integer, got boolean" in one_error(call("read_file", path="a", limit=True))
    assert "argument 'ratio' must be number, got string" in one_error(call("read_file", path="a", ratio="x"))
    assert hermes(call("read_file", path="a", ratio=1, limit=2, follow=False)).ok  # integer is a number
    assert "argument 'follow' must be boolean" in one_error(call("read_file", path="a", follow="yes"))
    assert "argument 'globs' must be array" in one_error(call("read_file", path="a", globs="*.py"))
    assert "argument 'globs[1]' must be string" in one_error(call("read_file", path="a", globs=["a", 2]))
    assert "argument 'mode' must be one of" in one_error(call("read_file", path="a", mode="bin"))
    assert "missing required argument 'opts.depth'" in one_error(call("read_file", path="a", opts={}))
    assert "argument 'opts' must be object" in one_error(call("read_file", path="a", opts=3))


def test_additional_properties_false_rejects_unknown_arguments():
    strict = {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "string"}},
                                          "additionalProperties": False}}
    assert "unknown argument 'b'" in one_error(call("f", a="x", b=1), tools=[strict])
    assert hermes(call("bash", command="ls", extra=1)).ok  # allowed unless the schema says otherwise


def test_good_calls_survive_next_to_bad_ones():
    r = hermes(call("bash", command="ls") + call("nope") + call("bash", command="pwd"))
    assert [c.id for c in r.calls] == ["call_0", "call_2"]
    assert len(r.errors) == 1 and r.errors[0].startswith("tool call 2 (nope)")


def test_unclosed_call_followed_by_another_and_stray_closing_tag():
    r = hermes('<tool_call>{"name": "bash", "arguments": {"command": "a"}}\n' + call("bash", command="b"))
    assert [c.arguments for c in r.calls] == [{"command": "b"}]
    assert "missing </tool_call> before the next <tool_call>" in r.errors[0]
    r = hermes('{"name": "bash", "arguments": {"command": "ls"}}</tool_call>')
    assert r.calls == [] and "without a matching <tool_call>" in r.errors[0]


def test_unclosed_broken_call_at_the_end_says_so():
    e = one_error('<tool_call>{"name": "bash", "arguments": {"command": "ls"')
    assert "invalid JSON" in e and "no closing </tool_call>" in e


# ---------------------------------------------------------------- bash blocks


def bash(reply, **kw):
    return parse_tool_calls(reply, "bash_block", **kw)


def test_one_bash_block():
    r = bash("I'll list the files.\n\n```bash\nls -la\n```\n")
    assert r == ParseResult([ToolCall("bash", {"command": "ls -la"}, "call_0")], [], "I'll list the files.")


def test_no_block_is_no_call_and_other_fences_stay_prose():
    assert bash("All done, the fix is in.") == ParseResult([], [], "All done, the fix is in.")
    r = bash("Here:\n```python\nprint(1)\n```\n```sh\necho ok\n```")
    assert r.calls[0].arguments == {"command": "echo ok"} and r.text == "Here:\n```python\nprint(1)\n```"


def test_two_blocks_are_an_error_by_default_and_configurable():
    reply = "```bash\ncd src\n```\nthen\n```bash\nls\n```"
    r = bash(reply)
    assert r.calls == [] and len(r.errors) == 1
    assert "found 2 bash blocks; send exactly one command per reply" in r.errors[0] and "```bash" in r.errors[0]
    assert [c.arguments["command"] for c in bash(reply, bash_multi="first").calls] == ["cd src"]
    assert [c.id for c in bash(reply, bash_multi="all").calls] == ["call_0", "call_1"]
    with pytest.raises(ValueError):
        bash(reply, bash_multi="some")


def test_sh_fence_and_one_line_form():
    assert bash("```sh\nmake test\n```").calls[0].arguments == {"command": "make test"}
    assert bash("run:\n```bash ls -la```").calls[0].arguments == {"command": "ls -la"}


def test_unterminated_and_empty_fences_are_errors():
    r = bash("Let me try:\n```bash\nls -la\n")
    assert r.calls == [] and "block is not closed" in r.errors[0] and "only ```" in r.errors[0]
    assert "block is empty" in bash("```bash\n\n```").errors[0]


def test_indentation_is_preserved_and_a_fence_indent_is_removed():
    script = "python - <<'EOF'\nfor i in range(2):\n    if i:\n        print(i)\nEOF"
    assert bash(f"```bash\n{script}\n```").calls[0].arguments["command"] == script
    indented = "1. Run it:\n   ```bash\n   cd app &&\n     make\n   ```"
    assert bash(indented).calls[0].arguments["command"] == "cd app &&\n  make"


def test_heredoc_holding_a_fence_does_not_close_the_block():
    command = "cat > README.md <<'EOF'\n# Title\n```\ncode\n```\nEOF\necho written"
    r = bash(f"Writing the readme.\n```bash\n{command}\n```\nThat's it.")
    assert r.calls == [ToolCall("bash", {"command": command}, "call_0")] and r.errors == []
    assert r.text == "Writing the readme.\nThat's it."
    # A heredoc the model forgot to end must not swallow the closing fence.
    assert bash("```bash\ncat <<EOF\nhello\n```").calls[0].arguments == {"command": "cat <<EOF\nhello"}
    assert bash("```bash\ncat <<< word\n```").calls[0].arguments == {"command": "cat <<< word"}


# ---------------------------------------------------------------- prompts, errors, fuzz


def test_render_tool_specs_lists_every_tool_and_the_format():
    text = render_tool_specs(TOOLS, "hermes")
    assert "<tools>" in text and "<tool_call>" in text
    for line in text.split("<tools>\n")[1].split("\n</tools>")[0].splitlines():
        spec = json.loads(line)["function"]
        assert spec["name"] in ("read_file", "bash") and spec["description"] and spec["parameters"]
    text = render_tool_specs([BASH], "bash_block")
    assert "```bash" in text and "Run a shell command." in text and "one command per reply" in text
    with pytest.raises(ValueError, match="only call 'bash'"):
        render_tool_specs(TOOLS, "bash_block")
    with pytest.raises(ValueError, match="unknown tool-call format"):
        render_tool_specs(TOOLS, "xml")


def test_format_tool_error():
    assert format_tool_error([]) == ""
    assert format_tool_error(["a", "a"]) == "Tool call error: a\nFix the call and try again."
    assert format_tool_error(["a", "b"]).startswith("Tool call errors (2):\n1. a\n2. b\n")


ALPHABET = ['<tool_call>', '</tool_call>', '{', '}', '[', ']', '"', ':', ',', '"name"', '"arguments"',
            '"bash"', '"read_file"', '"command"', '"path"', "```", "```bash", "```sh", "\n", " ", "\\",
            "<<", "EOF", "'", "1", "true", "null", "x", "é", "\ud800", "<<'EOF'", "    "]


@pytest.mark.parametrize("fmt", ["hermes", "bash_block"])
def test_fuzz_random_replies_never_raise(fmt):
    rng = random.Random(0)
    for _ in range(2500):
        reply = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 40)))
        r = parse_tool_calls(reply, fmt, TOOLS if rng.random() < 0.5 else None,
                             bash_multi=rng.choice(["error", "first", "all"]))
        assert isinstance(r.text, str) and all(isinstance(e, str) and e for e in r.errors)
        assert all(isinstance(c.arguments, dict) for c in r.calls)
        format_tool_error(r.errors)


def test_absurdly_deep_json_is_an_error_not_a_crash():
    assert "nested too deeply" in one_error("<tool_call>" + "[" * 100_000 + "</tool_call>")
    deep = json.dumps({"name": "bash", "arguments": "[" * 100_000})
    assert "not valid JSON" in one_error(f"<tool_call>{deep}</tool_call>")


def test_fuzz_random_valid_calls_round_trip():
    rng = random.Random(1)
    atoms = [0, -7, 2.5, True, None, "", "a b", "é\n\"q\"", "</tool_call>", "```", {}, []]

    def value(depth):
        if depth > 2 or rng.random() < 0.5:
            return rng.choice(atoms)
        if rng.random() < 0.5:
            return [value(depth + 1) for _ in range(rng.randint(0, 3))]
        return {f"k{i}": value(depth + 1) for i in range(rng.randint(0, 3))}

    for _ in range(500):
        calls = [(f"t{i}", {f"a{j}": value(0) for j in range(rng.randint(0, 4))}) for i in range(rng.randint(1, 3))]
        # A literal </tool_call> inside a JSON string would end the call early: JSON escapes it.
        body = [json.dumps({"name": n, "arguments": a}).replace("</", "<\\/") for n, a in calls]
        reply = "".join(f"prose {i}\n<tool_call>{b}</tool_call>" for i, b in enumerate(body))
        r = parse_tool_calls(reply, "hermes")
        assert r.errors == [] and [(c.name, c.arguments) for c in r.calls] == calls
