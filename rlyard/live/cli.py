"""`rlyard serve --learn CONFIG [OVERRIDES] --api-key KEY [--run-dir DIR]`: the config and the key
are checked before the model code loads (a typo fails in a second, not after torch's import)."""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from rlyard.config import ConfigError, load_config, split_config_args

API_KEY_ENV = "RLYARD_API_KEY"


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
    from rlyard.live.service import LiveService  # torch, the model code, the server

    service = LiveService(config, run_dir, api_key, args.host, args.port, args.model_name, args.record)
    print(f"[rlyard] live: serving {service.server.model_name} at {service.url}/v1, policy version "
          f"{service.learner.version}, learning into {run_dir} (rewards: POST /v1/sessions/<id>/reward)", flush=True)
    service.serve_forever()
    return 0
