"""music: compose a tune in ABC notation; abc2midi's MIDI scored against a folk-tune corpus and the prompt's constraints."""
from rlyard.environment import Family
from rlyard.envs.music.abc import Abc2MidiMissing, extract_tune
from rlyard.envs.music.env import make_env
from rlyard.envs.music.oracle import oracle
from rlyard.envs.music.tasks import make_tasks
from rlyard.envs.music.validate import validate
from rlyard.envs.music.verify import grade, verify

FAMILY = Family(
    name="music", make_tasks=make_tasks, make_env=make_env, verify=verify, multi_turn=False, validate=validate,
    oracle=oracle, demo_min_reward=0.6,  # the oracle composes; collect keeps its tunes that score in band (validate's bar)
    description="Single-turn: an ABC tune, rejected if abc2midi balks, else scored against corpus bands and the prompt's constraints.",
)

__all__ = ["FAMILY", "Abc2MidiMissing", "extract_tune", "grade", "make_env", "make_tasks", "verify"]
