"""`rlyard view RUN_DIR`: argument parsing and the server start, wired into `rlyard/cli.py` with
`add_parser(subparsers)` and `run(args)`. Starlette and uvicorn load only when a viewer starts."""
from __future__ import annotations

import argparse
import hashlib
import ipaddress
import os
import sys
import tempfile
import time
from pathlib import Path

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
INDEX_FILE = ".viewer_index.sqlite"


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the `view` subcommand to `rlyard`'s subparsers (the object add_subparsers returned)."""
    parser = subparsers.add_parser(
        "view", help="browse a run's curves and trajectories in a local web page (live while it trains)",
        description="Serve a local web viewer over a run folder: config, status and curves from metrics.jsonl; steps, "
                    "groups and trajectories from trajectories.jsonl, with filters, text search, the loss mask, "
                    "per-token logprobs and side-by-side comparison.",
        epilog="examples:\n  rlyard view runs/quickstart-20260101-120000\n  rlyard view runs/files-... --port 9000\n"
               "  rlyard view runs/files-... --host 0.0.0.0 --allow-remote   # reachable from other machines",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run folder (holds metrics.jsonl and trajectories.jsonl)")
    parser.add_argument("--port", type=int, default=8765, help="TCP port (default 8765)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, this machine only)")
    parser.add_argument("--allow-remote", action="store_true",
                        help="allow a --host other than loopback: anyone who can reach it reads the run's trajectories")
    parser.add_argument("--index", metavar="FILE", help=f"the SQLite index file (default RUN_DIR/{INDEX_FILE}, or a "
                                                        "file in the temp folder when the run folder is read-only)")
    return parser


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def index_path(run_dir: Path, given: str | None) -> Path:
    if given:
        return Path(given)
    if os.access(run_dir, os.W_OK):
        return run_dir / INDEX_FILE
    digest = hashlib.sha256(str(run_dir.resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"rlyard-view-{digest}.sqlite"


def run(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        print(f"rlyard view: {run_dir} is not a folder", file=sys.stderr)
        return 2
    if not (run_dir / "metrics.jsonl").exists() and not (run_dir / "trajectories.jsonl").exists():
        print(f"rlyard view: {run_dir} holds neither metrics.jsonl nor trajectories.jsonl; is it a run folder?", file=sys.stderr)
        return 2
    loopback = is_loopback(args.host)
    if not loopback and not args.allow_remote:
        print(f"rlyard view: --host {args.host} is reachable from other machines and serves every trajectory of the run "
              "without authentication; add --allow-remote to do it anyway", file=sys.stderr)
        return 2
    if not loopback:
        print(f"rlyard view: WARNING: serving {run_dir} on {args.host}:{args.port} to the network, without "
              "authentication", file=sys.stderr)

    import uvicorn
    import yaml

    from rlyard.observe.viewer.app import RunFolder, build_app
    from rlyard.observe.viewer.index import TrajectoryIndex

    family = ""
    if (run_dir / "config.yaml").exists():
        config = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
        family = str((config.get("env") or {}).get("name") or "")
    started = time.perf_counter()
    index = TrajectoryIndex(run_dir / "trajectories.jsonl", index_path(run_dir, args.index), family)
    index.update()
    print(f"rlyard view: indexed {index.count()} trajectories in {time.perf_counter() - started:.1f} s", flush=True)
    hosts = [*LOOPBACK_NAMES, "[::1]"] if loopback else None
    app = build_app(RunFolder(run_dir, index), allowed_hosts=hosts)
    shown = f"[{args.host}]" if ":" in args.host else args.host
    print(f"rlyard view: http://{shown}:{args.port}/  (Ctrl-C stops)", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
