"""`rlyard collect`: demonstrations for `rlyard sft`, from a family's oracle or recorded sessions.

Wired into `rlyard/cli.py` with `add_parser(subparsers)` and `run(args)`; it keeps its own
option parsing (the `-o KEY=VALUE` of `rlyard envs`) so this module never imports `rlyard.cli`.
"""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the registry and the families load only when a collection runs
    from rlyard.demos.collect import Report

EXAMPLES = """examples:
  rlyard collect files -n 200 --out demos/files.jsonl             # oracle episodes on 200 train tasks
  rlyard collect files -o hops=2 -n 200 --out demos/files_h2.jsonl
  rlyard collect files -o tool_format=bash_block -n 50 --per-task 2
  rlyard collect code -n 30 --out demos/code.jsonl                 # the built-in code tasks' reference fixes
  rlyard collect --sessions http://127.0.0.1:8000 --out demos/sessions.jsonl   # a running rlyard serve
  rlyard collect --sessions recorded/ --out demos/sessions.jsonl   # a folder of <id>.json session exports
"""


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the `collect` subcommand to `rlyard`'s subparsers (the object add_subparsers returned)."""
    parser = subparsers.add_parser(
        "collect", help="write demonstrations (oracle episodes or recorded serve sessions) as JSONL for rlyard sft",
        description="Play a family's oracle through its environment on train-split tasks (never eval ones) and write "
                    "the episodes that score 1, or convert recorded `rlyard serve` sessions. One conversation per line.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("env", nargs="?", help="environment family (files, code, ...); with --sessions only a label")
    parser.add_argument("-o", "--option", action="append", default=[], metavar="KEY=VALUE",
                        help="a family option (env.options), e.g. hops=2; repeatable")
    parser.add_argument("-n", type=int, default=100, help="train tasks to play (default 100)")
    parser.add_argument("--seed", type=int, default=0, help="task-set seed; also seeds each task's choice of replies")
    parser.add_argument("--per-task", type=int, default=1, metavar="K", help="differently drawn demonstrations per task")
    parser.add_argument("--out", default="demos.jsonl", help="JSONL file to write (replaced atomically; default demos.jsonl)")
    parser.add_argument("--sessions", metavar="DIR_OR_URL",
                        help="convert recorded sessions instead: a rlyard serve URL or a folder of session .json exports")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def parse_options(pairs: list[str]) -> dict:
    """`rlyard envs -o`'s KEY=VALUE reading; a key may also be spelled env.options.KEY, as in a config."""
    from rlyard.envs.splits import parse_option_pairs

    return parse_option_pairs([pair.removeprefix("env.options.") for pair in pairs], "-o")


def run(args: argparse.Namespace) -> int:
    """Collect, write, summarize. 0: every played task gave a demonstration (infra failures are
    reported, not counted against the oracle); 1: an oracle episode scored below 1, or nothing
    was written; 2: a usage error (no such family, no oracle, a bad option)."""
    from rlyard.demos.collect import NoOracle, collect_sessions, write_jsonl
    from rlyard.envs.registry import FamilyNotFound

    try:
        if args.sessions:
            report = collect_sessions(args.sessions, args.env)
            label = f"sessions at {args.sessions}"
        else:
            if not args.env:
                raise ValueError("give an environment (rlyard collect files) or --sessions DIR_OR_URL")
            if args.n < 0 or args.per_task < 1:
                raise ValueError(f"-n must be >= 0 and --per-task >= 1, got {args.n}, {args.per_task}")
            report = collect_with_bar(args)
            label = f"{args.env} oracle, train split"
    except (NoOracle, FamilyNotFound, ValueError, RuntimeError, OSError) as e:
        print(f"rlyard collect: {e}", file=sys.stderr)
        return 2
    count = write_jsonl(args.out, report.demos)
    print(f"[collect] wrote {count} demonstrations ({label}) to {args.out}; mean {report.mean_turns:.2f} turns")
    for title, rows in (("scored below 1 (not written)", report.failed),
                        ("infrastructure failures (not written, not counted as a 0)", report.infra),
                        ("the oracle cannot play (not written)", report.unplayable)):
        if rows:
            print(f"[collect] {len(rows)} {title}:")
            for task_id, why in rows:
                print(f"  {task_id}: {why.splitlines()[0] if why else ''}")
    return 1 if report.failed or not count else 0


def collect_with_bar(args: argparse.Namespace) -> Report:
    """The oracle collection with a tqdm bar (as `rlyard eval` draws one), sized once the tasks are known."""
    from tqdm import tqdm

    from rlyard.demos.collect import collect_oracle, oracle_family

    options = parse_options(args.option)
    oracle_family(args.env)  # a family without an oracle says so before any bar is drawn
    bar = tqdm(total=args.n * args.per_task, unit="episode", desc=f"collect {args.env}", dynamic_ncols=True,
               disable=args.no_progress)

    def tick(done: int, total: int) -> None:
        bar.total = total  # the family may have fewer train tasks than -n
        bar.update(done - bar.n)

    try:
        return collect_oracle(args.env, options, args.n, args.seed, args.per_task, progress=tick)
    finally:
        bar.close()
