"""`rlyard agent` against `rlyard serve`: the loop, the sandboxed tools and the session record.

A random tiny model never writes a tool call, so the test first teaches one (plain
cross-entropy on two replies, a few seconds): the agent, the server and the tools then run
for real, and the session's recorded tokens are checked against the conversation.
"""
import json
import threading
import urllib.request

import torch

from rlyard.agent.loop import TemplateRenderer
from rlyard.agent.minimal import SYSTEM, run_agent
from rlyard.agent.toolcalls import render_tool_specs
from rlyard.agent.tools import ToolBox
from rlyard.engines import HFEngine
from rlyard.sandbox import Sandbox
from rlyard.serve import RlyardServer, serve
from rlyard.serve.sessions import with_system

STOP = (2,)
TASK = "Create hello.txt containing hi."
WRITE = '<tool_call>{"name": "write_file", "arguments": {"path": "hello.txt", "content": "hi"}}</tool_call>'
SUBMIT = '<tool_call>{"name": "submit", "arguments": {"answer": "done"}}</tool_call>'


def teach(model, tokenizer, examples, steps=80, margin=2.0):
    """Cross-entropy on (prompt tokens, reply text) pairs until greedy decoding repeats them.

    Stops early once every reply token is the argmax after its teacher-forced prefix by `margin`
    logits: then greedy decoding writes exactly the reply (the margin covers the engine's other
    batch shapes), and the remaining steps would only cost suite time.
    """
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    batch = []
    for prompt, reply in examples:
        target = tokenizer(reply, add_special_tokens=False).input_ids + [STOP[0]]
        batch.append((torch.tensor([prompt + target]), len(prompt)))
    for _ in range(steps):
        optimizer.zero_grad()
        learnt = True
        for ids, start in batch:
            logits = model(input_ids=ids, logits_to_keep=ids.shape[1] - start + 1).logits[0, :-1]
            torch.nn.functional.cross_entropy(logits, ids[0, start:]).backward()
            target_logit = logits.gather(1, ids[0, start:, None])[:, 0]
            runner_up = logits.scatter(1, ids[0, start:, None], float("-inf")).max(dim=1).values
            learnt = learnt and bool((target_logit - runner_up > margin).all())
        if learnt:
            break
        optimizer.step()
    model.eval()


def test_the_agent_writes_a_file_and_submits_through_rlyard_serve(tiny_model, tokenizer, tmp_path):
    specs = ToolBox(Sandbox(tmp_path), ("bash", "read_file", "write_file", "edit_file", "grep", "glob", "submit")).specs()
    renderer = TemplateRenderer(tokenizer, STOP)
    first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
    prompt1 = renderer.prompt(with_system(first, render_tool_specs(specs, "hermes")))
    reply1 = tokenizer(WRITE, add_special_tokens=False).input_ids + [STOP[0]]
    prompt2 = prompt1 + reply1 + renderer.after_reply([{"role": "tool", "content": "wrote 2 characters to hello.txt"}])
    teach(tiny_model, tokenizer, [(prompt1, WRITE), (prompt2, SUBMIT)])

    app = RlyardServer(HFEngine(tiny_model, tokenizer.pad_token_id), tokenizer, "tiny", STOP, max_tokens_default=64)
    httpd = serve(app, "127.0.0.1", 0)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    try:
        result = run_agent(TASK, workspace, f"{base}/sessions/job-1/v1", model="tiny", max_turns=4, max_tokens=64, log=lambda _: None)
        rows = json.loads(urllib.request.urlopen(f"{base}/sessions/job-1/trajectories").read())["trajectories"]
    finally:
        httpd.shutdown()
        httpd.server_close()

    assert result.finish_reason == "submitted" and result.submitted == "done" and result.turns == 2
    assert (workspace / "hello.txt").read_text() == "hi"  # written inside the sandbox, in the workspace
    assert result.messages[2]["tool_calls"][0]["function"]["name"] == "write_file"
    assert result.messages[3] == {"role": "tool", "tool_call_id": result.messages[2]["tool_calls"][0]["id"],
                                  "content": "wrote 2 characters to hello.txt"}
    [traj] = rows
    assert traj["turns"] == 2
    # the record is the first prompt, the sampled call, the rendered tool message, the sampled submit
    assert traj["token_ids"] == prompt2 + tokenizer(SUBMIT, add_special_tokens=False).input_ids + [STOP[0]]
    sampled = [t for t, m in zip(traj["token_ids"], traj["loss_mask"]) if m]
    assert sampled == reply1 + tokenizer(SUBMIT, add_special_tokens=False).input_ids + [STOP[0]]
