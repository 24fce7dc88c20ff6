"""Live RL: `rlyard serve --learn` serves the policy and trains it on the sessions it serves (docs/live.md).

A package of its own, at the top of the import graph: it joins the server (rlyard.serve) and the
training loop's pieces (rlyard.orchestrate), which must not import each other (the harness sits
between them: orchestrate -> envs -> harness -> serve).
"""
