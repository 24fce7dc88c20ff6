"""The music family with the real abc2midi: hand-counted features, every reject rule, every
constraint met and missed, validate on the built-in data, a machine without abc2midi, and the
tunes a hostile policy would write."""
from __future__ import annotations

import json
import math
import os
import shutil

import pytest

from rlyard.envs import get_family
from rlyard.envs.music.abc import Abc2MidiMissing, extract_tune, parse_header, pickup_quarters, to_midi
from rlyard.envs.music.constraints import note_number
from rlyard.envs.music.features import bar_quarters, features, read_midi
from rlyard.envs.music.tasks import PROMPTS_PATH, make_tasks
from rlyard.envs.music.verify import analyse, grade

pytestmark = pytest.mark.skipif(shutil.which("abc2midi") is None, reason="abc2midi (apt-get install abcmidi) is not installed")

# 4 bars of 4/4 in G, no pickup; bars 1 and 3 are the same
COUNT = """X:1
T:The Lark
M:4/4
L:1/8
Q:1/4=120
K:G
GABc d2 B2|A2 G2 E4|GABc d2 B2|A2 F2 G4|]"""
# an eighth-note pickup; c2 in bars 2 and 4 starts off the beat and sounds across the next one
SYNCOPATED = """X:2
T:Sync
M:4/4
L:1/8
K:C
G|c2 e2 g2 e2|d c2 d e4|c2 e2 g2 e2|d c2 B c3|]"""
# two voices in 3/4, a chord in the first
TWO_VOICES = """X:3
T:Two
M:3/4
L:1/4
K:D
V:1
d e f|[Ad]3|]
V:2
D2 A,|D3|]"""
ALL = {"key": {"tonic": "G", "mode": "major"}, "meter": {"meter": "4/4"}, "tempo": {"beat": "1/4", "bpm": 120},
       "bars": {"bars": 4}, "voices": {"voices": 1}, "range": {"low": "E4", "high": "D5"}, "title": {"title": "the  lark"},
       "instrument": {"program": 73, "name": "flute"}}


def with_program(tune: str, program: int = 73) -> str:
    return tune.replace("K:G\n", f"K:G\n%%MIDI program {program}\n")


def feats(tune: str) -> dict[str, float]:
    analysis = analyse(tune)
    assert not analysis.reject, analysis.detail
    return analysis.features


def test_features_equal_hand_counts() -> None:
    got = feats(COUNT)
    # 18 notes over 16 quarters; durations 8 eighths, 8 quarters, 2 halves
    assert got["note_density"] == pytest.approx(18 / 16)
    assert got["duration_entropy"] == pytest.approx(-(2 * 4 / 9 * math.log2(4 / 9) + 1 / 9 * math.log2(1 / 9)))
    assert got["syncopation"] == 0 and got["silence"] == 0 and got["out_of_scale"] == 0
    assert got["voices"] == 1 and got["polyphony"] == 1
    # pitch classes G 4, A 4, B 4, C 2, D 2, E 1, F# 1 (F is sharp in G)
    counts = [4, 4, 4, 2, 2, 1, 1]
    assert got["pitch_class_entropy"] == pytest.approx(-sum(c / 18 * math.log2(c / 18) for c in counts))
    assert got["pitch_range"] == 74 - 64  # d5 down to E4
    assert got["mean_pitch"] == pytest.approx((424 + 200 + 424 + 202) / 18)
    assert got["bars"] == 4 and got["repetition"] == pytest.approx(1 / 4)
    analysis = analyse(COUNT)
    assert analysis.histograms["pitch_class"][0] == pytest.approx(4 / 18)  # G, the tonic
    assert analysis.histograms["pitch_class"][11] == pytest.approx(1 / 18)  # F#
    # 17 steps: +2 six times, +1 three, -3 four, -2 three, +3 once
    interval = analysis.histograms["interval"]
    assert [round(interval[12 + s] * 17) for s in (2, 1, -3, -2, 3)] == [6, 3, 4, 3, 1]
    assert analysis.features["key_strength"] > 0.7


def test_features_pickup_syncopation_and_voices() -> None:
    header = parse_header(SYNCOPATED)
    assert pickup_quarters(header.body, 1 / 8, 4.0) == 0.5
    # a triplet of eighths is one quarter; a chord lasts as its first note, times its own multiplier
    for body, quarters in (("|:(3ABc d|", 1.5), ('"G"[DF]2 {g}A/B/|', 1.5), ("[|[DF]A/B/|", 1.0), ("[D2F2]A|", 1.5),
                           ("GABc d4|", 0.0)):
        assert pickup_quarters(body, 1 / 8, 4.0) == quarters, body
    got = feats(SYNCOPATED)
    assert got["syncopation"] == pytest.approx(2 / 17)  # 17 notes, the two c2 after an eighth
    assert got["note_density"] == pytest.approx(17 / 16) and got["bars"] == 4
    assert got["repetition"] == pytest.approx(1 / 4)  # bars 1 and 3; the pickup is no bar
    got = feats(TWO_VOICES)
    assert got["voices"] == 2 and got["note_density"] == pytest.approx(8 / (6 * 2))
    assert got["polyphony"] == pytest.approx((3 + 6 + 2 + 1 + 3) / 6)  # the chord counts twice
    assert got["pitch_range"] == 78 - 57 and got["mean_pitch"] == pytest.approx(552 / 8) and got["bars"] == 2
    chords = COUNT.replace("GABc d2 B2|A2", '"G"GABc d2 B2|"D"A2')  # abc2midi's accompaniment is not a voice
    assert feats(chords)["voices"] == 1 and feats(chords)["note_density"] == pytest.approx(18 / 16)


def test_extraction() -> None:
    reply = f"Here:\n```\nno tune\n```\n```abc\n% mine\n{COUNT}\n```\nX:9\nK:C\nC"
    assert extract_tune(reply) == COUNT
    assert extract_tune(f"notes first\n{COUNT}\nX:5\nT:last\nK:C\nCDE|") == "X:5\nT:last\nK:C\nCDE|"
    assert extract_tune("no tune at all") is None
    assert grade("no tune at all", {}).components == {"rejected": 1.0, "gate_no_tune": 1.0}


def test_reject_rules() -> None:
    cases = {
        "no_midi": "X:1\nT:no key field",
        "abc_error": COUNT.replace("GABc d2 B2|A2", '"xyz"GABc d2 B2|A2'),  # MIDI written, and an Error line
        "blank_line": COUNT.replace("K:G\n", "K:G\n\n"),
        "multi_instrument": with_program(COUNT).replace("|A2 F2", "|\n%%MIDI program 40\nA2 F2"),
        "too_long": COUNT + "|" + "G8|" * 30_000,
    }
    # abc2midi lets the first bar pass (it may be a pickup): 11 long bars are 10 warnings, 10 are 9
    ten_long = "X:1\nM:4/4\nL:1/8\nK:C\n" + "CDEF GABcd|" * 11 + "c8|]"
    cases["bar_warnings"] = ten_long
    for reason, tune in cases.items():
        reward = grade(f"```abc\n{tune}\n```", ALL)
        assert reward.value == 0.0 and reward.components == {"rejected": 1.0, f"gate_{reason}": 1.0}, (reason, reward)
        assert reward.info["reject"] == reason and not reward.infra_error
    nine_long = "X:1\nM:4/4\nL:1/8\nK:C\n" + "CDEF GABcd|" * 10 + "c8|]"
    assert analyse(nine_long).reject == "" and analyse(nine_long).bar_warnings == 9
    two_voices = TWO_VOICES.replace("V:1\n", "V:1\n%%MIDI program 73\n").replace("V:2\n", "V:2\n%%MIDI program 32\n")
    assert analyse(two_voices).reject == ""  # one instrument per channel


def test_an_abc2midi_past_its_timeout_is_a_gate_timeout(tmp_path, monkeypatch) -> None:
    """A stand-in abc2midi that hangs (as a tune that makes the real one loop would): the gate says
    timeout after `timeout_s` of wall time. (The real abc2midi under timeout_s=1e-4 once came back
    graded, in a suite under load; likely, not proven: it had finished before communicate() first
    compared the clock with the deadline.)"""
    import time

    from rlyard.envs.music import abc

    hanging = tmp_path / "abc2midi"
    hanging.write_text("#!/bin/sh\nexec sleep 30\n")
    hanging.chmod(0o755)
    monkeypatch.setattr(abc, "require_abc2midi", lambda: str(hanging))
    started = time.monotonic()
    assert grade(COUNT, ALL, timeout_s=0.5).components == {"rejected": 1.0, "gate_timeout": 1.0}
    assert time.monotonic() - started < 10  # killed at the timeout, not waited for


def test_each_constraint_met_and_missed() -> None:
    good = grade(with_program(COUNT), ALL)
    assert good.components["rejected"] == 0.0 and good.components["constraints"] == 1.0 and good.info["unmet"] == {}, good.info
    missed = {
        "key": [COUNT.replace("K:G", "K:D"), COUNT.replace("A2 F2 G4|]", "A2 F2 G2 A2|]"),  # ends on A
                COUNT.replace("K:G", "K:G\nK:G"), COUNT.replace("GABc d2 B2|A2 G2 E4|", "_G_A_B_c _d2 _B2|_A2 _G2 _E4|")],
        "meter": [COUNT.replace("M:4/4", "M:2/4").replace("d2 B2|", "|d2 B2|").replace("E4|", "|E4|").replace("F2 G4", "F2 | G4"),
                  COUNT.replace("|A2 F2 G4|]", "|A2 F2 G4 A|]")],  # a bar too long
        "tempo": [COUNT.replace("Q:1/4=120", "Q:1/4=90"), COUNT.replace("Q:1/4=120\n", "")],
        "bars": [COUNT.replace("|]", "|G8|]")],
        "voices": [TWO_VOICES],
        "range": [COUNT.replace("GABc d2 B2|A2 G2", "GABc e2 B2|A2 G2")],
        "title": [COUNT.replace("T:The Lark", "T:The Larks")],
        "instrument": [COUNT, with_program(COUNT, 40)],
    }
    for kind, tunes in missed.items():
        for tune in tunes:
            reward = grade(with_program(tune) if kind != "instrument" else tune, {kind: ALL[kind]})
            assert reward.components.get(f"constraint_{kind}") == 0.0, (kind, tune, reward)
            assert reward.value <= 0.5 * reward.components["quality"] + 1e-9  # (a 2-bar toy may have no variety: quality 0)
            assert (reward.value > 0) == (reward.components["quality"] > 0), (kind, reward.components)
        met = grade(with_program(COUNT), {kind: ALL[kind]})
        assert met.components[f"constraint_{kind}"] == 1.0, (kind, met.info)
    assert grade(TWO_VOICES, {"voices": {"voices": 2}}).components["constraint_voices"] == 1.0
    inline = "X:1\nT:t\nM:4/4\nL:1/8\nK:G\n[V:1] GABc d2 B2|A2 G2 E4|\n[V:2] G,8|C8|"
    assert grade(inline, {"voices": {"voices": 2}}).components["constraint_voices"] == 1.0  # inline [V:] voices
    assert note_number("C4") == 60 and note_number("F#5") == 78 and note_number("Bb3") == 58


def test_validate_builtin_and_prompt_set() -> None:
    family = get_family("music")
    rows = [json.loads(line) for line in PROMPTS_PATH.read_text().splitlines()]
    assert len(rows) >= 50 and len({r["id"] for r in rows}) == len(rows)
    assert len({tuple(sorted(r["constraints"])) for r in rows}) >= 10  # varied
    train, held = make_tasks("train", 10**9, 0), make_tasks("eval", 10**9, 0)
    assert not {t.id for t in train} & {t.id for t in held} and len(train) + len(held) == len(rows)
    assert "K:" in train[0].prompt[-1]["content"] and "```abc" in train[0].prompt[-1]["content"]
    checks = family.validate(None, None, 2, None)
    assert all(c.ok for c in checks), [(c.task_id, c.error) for c in checks if not c.ok]
    prompts = [c for c in checks if c.task_id.startswith("music-")]
    assert len(prompts) == len(rows) and all(c.base_reward == 0.0 and c.fixed_reward >= 0.6 for c in prompts)
    assert any(c.task_id == "corpus-bands" for c in checks)


def test_abc2midi_missing_is_a_clear_start_up_error(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    family = get_family("music")
    for start in (lambda: family.make_tasks("train", 4, 0), family.make_env):
        with pytest.raises(Abc2MidiMissing, match="apt-get install abcmidi"):
            start()
    reward = grade(COUNT, {})
    assert reward.infra_error and "abcmidi" in reward.info["error"]


def test_attacks_score_low() -> None:
    honest = grade(with_program(COUNT), ALL).value
    head = "X:1\nT:The Lark\nM:4/4\nL:1/8\nQ:1/4=120\nK:G\n%%MIDI program 73\n"
    one_note = head + "|".join(["G8"] * 4) + "|]"
    one_bar = head + "|".join(["GABc dBAG"] * 16) + "|]"
    silent = head + "GABc dBAG|" + "|".join(["z8"] * 14) + "|d2B2 G4|]"
    ask16 = {**ALL, "bars": {"bars": 16}, "range": {"low": "C4", "high": "C6"}}
    for name, tune in (("one note", one_note), ("one bar", one_bar), ("silence", silent)):
        reward = grade(tune, ask16 if name != "one note" else {**ALL, "range": {"low": "C4", "high": "C6"}})
        assert reward.components["constraints"] == 1.0, (name, reward.info["unmet"])  # meets every constraint...
        assert reward.value < 0.35 and reward.value < 0.5 * honest, (name, reward.value, honest)  # ...and still scores low
    # every key and meter in the header: abc2midi plays the last, the constraints fail
    stuffed = COUNT.replace("K:G", "K:G\nK:D\nK:Em\nK:A").replace("M:4/4", "M:4/4\nM:6/8\nM:4/4")
    reward = grade(stuffed, ALL)
    assert reward.components.get("constraint_key", 0.0) == 0.0 and reward.components.get("constraint_meter", 0.0) == 0.0
    assert grade(COUNT.replace("K:G", "K:G Em D major"), ALL).components["constraint_key"] == 0.0
    # shell in the title is only text: nothing runs, the title is simply not the one asked
    canary = f"/tmp/rlyard-music-canary-{os.getpid()}"
    for title in (f"$(touch {canary})", f"`touch {canary}`", f"x; touch {canary}", f"x' && touch {canary} #"):
        reward = grade(COUNT.replace("T:The Lark", f"T:{title}"), ALL)
        assert not reward.infra_error and reward.components["constraint_title"] == 0.0
        assert not os.path.exists(canary)
    # the converter's own limits: a tune run past the timeout or not written is 0, never an error
    assert to_midi(COUNT).midi and to_midi("X:1").midi is None
    midi = read_midi(to_midi(COUNT).midi)
    assert midi.qpm == pytest.approx(120) and bar_quarters(midi.meter) == 4.0
    assert features(midi, 0.0, (7, "major"))[0]["bars"] == 4
