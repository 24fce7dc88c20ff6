"""The music environment: one prompt, one reply (a tune), graded by `verify`."""
from __future__ import annotations

from rlyard.environment import SingleTurnEnv
from rlyard.envs.music.abc import require_abc2midi
from rlyard.envs.music.verify import verify


def make_env() -> SingleTurnEnv:
    """Raises `Abc2MidiMissing` (naming the package) here, not at the first grade."""
    require_abc2midi()
    return SingleTurnEnv(verify)
