"""The child side of `rlyard.rewards.isolated`: JSON argument lists in, one result line out.

`python -m rlyard.rewards.worker module:function MEMORY_MB`; the address space is capped first,
so a reply that builds a huge number dies with MemoryError (answered as an error) or is killed.
The answers go out on a copy of stdout made first; stdout itself then points at stderr, so
whatever the function or a library prints (Python or C) can never be read as an answer, nor shift
the answers by a line.
"""
from __future__ import annotations

import importlib
import json
import os
import resource
import sys


def main() -> None:
    target, memory_mb = sys.argv[1], int(sys.argv[2])
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    limit = memory_mb << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        module_name, _, attribute = target.partition(":")
        function = getattr(importlib.import_module(module_name), attribute)
    except Exception as error:
        print(json.dumps({"ready": False, "error": f"{type(error).__name__}: {error}"}), file=answers, flush=True)
        return
    print(json.dumps({"ready": True}), file=answers, flush=True)
    for line in sys.stdin:
        try:
            answer = {"result": function(*json.loads(line))}
        except Exception as error:  # MemoryError included: the parent decides what it means
            answer = {"error": f"{type(error).__name__}: {error}"}
        print(json.dumps(answer), file=answers, flush=True)


if __name__ == "__main__":
    main()
