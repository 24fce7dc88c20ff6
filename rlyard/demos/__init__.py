"""Demonstrations for supervised warm-up: oracle episodes and recorded `rlyard serve` sessions.

`rlyard collect` (collect.py, cli.py) writes them as JSONL conversations, one per line, in the
format `rlyard sft` reads (docs/collect.md). `replies.py` writes reply texts in each tool-call
format; the families' oracles (`Family.oracle`) use it. This package imports nothing at import
time, so a family can use `replies` without pulling in the registry.
"""
