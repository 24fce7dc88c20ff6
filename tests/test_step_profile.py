"""bench/step_profile.py's clock: a nested phase is counted once, and the rest of a step is what no phase took."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import step_profile  # noqa: E402
from step_profile import PhaseClock  # noqa: E402


class FakeTime:
    """perf_counter that moves only when the test says so."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now


def test_a_nested_phase_is_taken_out_of_its_parent_and_other_is_the_remainder(monkeypatch):
    fake = FakeTime()
    monkeypatch.setattr(step_profile, "time", fake)
    clock = PhaseClock()
    with clock.phase("generate"):
        fake.now += 3.0
        with clock.phase("verify"):
            fake.now += 0.5
        fake.now += 1.0
    clock.end_step(6.0)
    row = clock.steps[0]
    assert row["generate"] == 4.0 and row["verify"] == 0.5  # 4.5 s in generate's block, 0.5 of it verify's
    assert row["other"] == 1.5 and row["backward"] == 0.0 and row["step"] == 6.0


def test_wrap_times_every_call_keeps_the_result_and_the_next_step_starts_at_zero(monkeypatch):
    fake = FakeTime()
    monkeypatch.setattr(step_profile, "time", fake)

    class Engine:
        def generate(self, x):
            fake.now += 2.0
            return x * 2

    clock = PhaseClock()
    clock.wrap(Engine, "generate", "generate")
    assert Engine().generate(3) == 6 and Engine().generate(4) == 8
    clock.end_step(5.0)
    clock.end_step(1.0)
    assert [row["generate"] for row in clock.steps] == [4.0, 0.0]
    assert [row["other"] for row in clock.steps] == [1.0, 1.0]
