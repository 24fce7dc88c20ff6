"""`rlyard serve --learn CONFIG`: the live learner and the server over its engine, on one port.

Why a flag of `serve` and not a verb of its own: the process is an `rlyard serve` (the same
routes, sessions, streaming, options) that also learns; a client cannot tell the two apart
except for the reward and admin routes. The run folder is that of `rlyard train` (`--run-dir`;
the same folder again resumes from its newest checkpoint and replays the unconsumed rewards).
The command line is `rlyard.live.cli` (the config checked before torch loads).
"""
from __future__ import annotations

from pathlib import Path

from rlyard.config import RunConfig
from rlyard.live.learner import LiveLearner
from rlyard.live.routes import live_routes
from rlyard.live.serving import LiveServer
from rlyard.serve import serve


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
