"""`rlyard serve --learn CONFIG`: the live learner and the server over its engine, on one port.

Why a flag of `serve` and not a verb of its own: the process is an `rlyard serve` (the same
routes, sessions, streaming, options) that also learns; a client cannot tell the two apart
except for the reward and admin routes. The run folder is that of `rlyard train` (`--run-dir`;
the same folder again resumes from its newest checkpoint and replays the unconsumed rewards).
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from rlyard.config import ConfigError, RunConfig, load_config, split_config_args
from rlyard.live.learner import LiveLearner
from rlyard.live.routes import live_routes
from rlyard.live.serving import LiveServer
from rlyard.serve import serve

API_KEY_ENV = "RLYARD_API_KEY"


class LiveService:
    """`LiveService(config, run_dir, api_key).start()` in a program or a test; `serve_forever()` in the CLI."""

    def __init__(self, config: RunConfig, run_dir: Path, api_key: str, host: str = "127.0.0.1", port: int = 8000,
                 model_name: str | None = None, record_dir: str | Path | None = None):
        self.learner = learner = LiveLearner(config, Path(run_dir))
        c = learner.c
        self.server = LiveServer(c.engine, c.tokenizer, model_name or config.model.name, c.stop_token_ids,
                                 max_tokens_default=config.rollout.max_new_tokens, record_dir=record_dir,
                                 register=learner.register, closed=lambda sid: learner.journal.get(sid) is not None)
        self.httpd = serve(self.server, host, port, live_routes(self.server, learner, api_key))
        self.host, self.port = host, self.httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> "LiveService":
        self.learner.start()
        self.httpd.start()
        return self

    def serve_forever(self) -> None:
        self.learner.start()
        try:
            self.httpd.serve_forever()
        finally:
            self.close()

    def close(self) -> None:
        self.httpd.close()
        self.learner.close()


def run_live(args: argparse.Namespace) -> int:
    """The CLI: `rlyard serve --learn CONFIG [OVERRIDES] --api-key KEY [--run-dir DIR]`."""
    if args.checkpoint:
        raise ConfigError("--learn starts from the config's model; to learn on from a run, set model.init_from=RUN_DIR")
    extra = [a for a in (args.config, *args.overrides) if a is not None]
    path, overrides = split_config_args(args.learn, extra)
    config = load_config(path, overrides)
    api_key = args.api_key or os.environ.get(API_KEY_ENV)
    if not api_key:
        raise ConfigError(f"--learn needs an API key for the reward and admin routes: --api-key KEY or {API_KEY_ENV}")
    run_dir = Path(args.run_dir or config.output.run_dir or f"runs/live-{config.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    service = LiveService(config, run_dir, api_key, args.host, args.port, args.model_name, args.record)
    print(f"[rlyard] live: serving {service.server.model_name} at {service.url}/v1, policy version "
          f"{service.learner.version}, learning into {run_dir} (rewards: POST /v1/sessions/<id>/reward)", flush=True)
    service.serve_forever()
    return 0
