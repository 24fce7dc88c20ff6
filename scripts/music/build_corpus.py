#!/usr/bin/env python
"""Build the music family's data from the folk-tune collections music21 ships in ABC.

Writes into rlyard/envs/music/builtin/:
  corpus_stats.json  per-feature [p5, p95] bands, mean histograms and variety limits of the sample's tunes
  corpus_ngrams.bin  the melody n-gram hashes of every tune of the collections that passes the gate
                     (the novelty check: a copy of a corpus tune pays nothing)
  corpus_sample.abc  40 of those tunes, which `rlyard envs validate music` grades again
  prompts.jsonl      the built-in prompts: constraints read off a corpus tune, and that tune, with
                     its header rewritten to meet them, as the prompt's reference answer

Collections: O'Neill's Music of Ireland (1850), Ryan's Mammoth Collection (1883), Aird's Airs
(1782-1797) and the Nottingham sample: printed long ago, public domain. The Essen folksong
collection is left out: its license.txt calls its legal status unclear.

    python scripts/music/build_corpus.py            # deterministic: same music21, same files
"""
from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from collections import Counter
from pathlib import Path

from rlyard.envs.music.abc import parse_key
from rlyard.envs.music.constraints import PITCH_NAMES, Music, check_all
from rlyard.envs.music.corpus import BUILTIN, HIGH, LOW, percentile, split_tunes
from rlyard.envs.music.features import FEATURES
from rlyard.envs.music.novelty import encode, melody, ngram_hashes
from rlyard.envs.music.variety import variety_limits
from rlyard.envs.music.verify import analyse, grade

COLLECTIONS = ("oneills1850", "ryansMammoth", "airdsAirs", "nottingham-dataset")
PER_COLLECTION = 500  # tunes read per collection (a seeded sample), before the gate
PROMPTS = 60
SAMPLE = 40
ADJECTIVES = ("Windy", "Silver", "Lonely", "Merry", "Green", "Hidden", "Morning", "Rising", "Old", "Golden", "Quiet", "Wild")
NOUNS = ("Harbour", "Lark", "Meadow", "Bridge", "Piper", "Lantern", "Orchard", "Ferry", "Hill", "River", "Fiddler", "Road")
INSTRUMENTS = ((73, "flute"), (40, "violin"), (0, "piano"), (71, "clarinet"), (24, "nylon guitar"), (68, "oboe"))
KEEP_FIELDS = "XTMLQK"


def pitch_name(number: int) -> str:
    return f"{PITCH_NAMES[number % 12]}{number // 12 - 1}"


def read_collection(name: str) -> list[tuple[str, str]]:
    import music21

    root = Path(music21.__file__).parent / "corpus" / name
    tunes = []
    for path in sorted(root.glob("*.abc")):
        tunes += [(f"{name}/{path.name}", t) for t in split_tunes(path.read_text(encoding="latin-1"))]
    return tunes


def clean(tune: str) -> str:
    """The tune with only the header fields a prompt can ask for, no words, parts or notes, no comments."""
    lines, in_body = [], False
    for line in tune.splitlines():
        is_field = re.match(r"^[A-Za-z]:", line) is not None
        if line.startswith("%") or not line.strip():
            continue
        if (not in_body and is_field and line[0] not in KEEP_FIELDS) or (in_body and re.match(r"^[wWPNR]:", line)):
            continue
        in_body = in_body or line.startswith("K:")
        lines.append(line)
    return "\n".join(lines)


def with_header(tune: str, title: str, tempo: str | None, program: int | None, voices: int) -> str:
    """The tune with T: replaced, Q: set, and an instrument or a second voice (the melody an octave down)."""
    head, body, seen_key = [], [], False
    for line in tune.splitlines():
        if seen_key:
            body.append(line)
        elif line.startswith("K:"):
            seen_key, key = True, line
        elif not line.startswith(("T:", "Q:")):
            head.append(line)
    head.insert(1, f"T:{title}")
    if tempo:
        head.append(f"Q:{tempo}")
    lines = [*head, key]
    if voices == 2:
        melody = [re.sub(r'"[^"]*"', "", b) for b in body]  # no chord accompaniment: it would play twice
        lines += ["V:1"] + ([f"%%MIDI program {program}"] if program is not None else []) + melody
        lines += ["V:2", "%%MIDI transpose -12"] + melody
    else:
        lines += ([f"%%MIDI program {program}"] if program is not None else []) + body
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(BUILTIN), help="folder to write (default: the package's builtin/)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    out, rng, started = Path(args.out), random.Random(args.seed), time.perf_counter()
    passed: list[tuple[str, str, object]] = []
    rejected: Counter = Counter()
    hashes: set[int] = set()
    hashed = 0
    for name in COLLECTIONS:
        tunes = read_collection(name)
        for source, tune in rng.sample(tunes, min(PER_COLLECTION, len(tunes))):
            tune = clean(tune)
            analysis = analyse(tune, with_novelty=False)
            if analysis.reject:
                rejected[analysis.reject] += 1
            else:
                passed.append((source, tune, analysis))
        for _, tune in tunes:  # every tune, not only the sample: a copy of any of them is caught
            analysis = analyse(clean(tune), with_novelty=False)
            if not analysis.reject:
                hashes.update(ngram_hashes(melody(analysis.midi.notes)))
                hashed += 1
        print(f"{name}: {len(tunes)} tunes, {sum(p[0].startswith(name) for p in passed)} of the sample pass the gate", file=sys.stderr)
    bands = {}
    for feature in FEATURES:
        values = [a.features[feature] for _, _, a in passed]
        bands[feature] = {"low": round(percentile(values, LOW), 4), "median": round(percentile(values, 50), 4),
                          "high": round(percentile(values, HIGH), 4)}
    histograms = {}
    for name, size in (("pitch_class_major", 12), ("pitch_class_minor", 12), ("interval", 25), ("duration", 12)):
        if name.startswith("pitch_class"):
            rows = [a.histograms["pitch_class"] for _, _, a in passed if a.mode_class == name.rsplit("_", 1)[1]]
        else:
            rows = [a.histograms[name] for _, _, a in passed]
        histograms[name] = [round(sum(r[i] for r in rows) / len(rows), 6) for i in range(size)]
    variety = variety_limits([a.variety for _, _, a in passed], percentile)
    stats = {"collections": list(COLLECTIONS), "tunes": len(passed), "rejected": dict(rejected),
             "percentiles": [LOW, HIGH], "bands": bands, "histograms": histograms, "variety": variety,
             "ngram_tunes": hashed, "ngrams": len(hashes)}
    out.mkdir(parents=True, exist_ok=True)
    (out / "corpus_stats.json").write_text(json.dumps(stats, indent=1) + "\n")
    (out / "corpus_ngrams.bin").write_bytes(encode(hashes))
    _invalidate_stats()

    public = [p for p in passed if not p[0].startswith("nottingham")]
    sample = rng.sample(public, SAMPLE)
    (out / "corpus_sample.abc").write_text("".join(f"{_with_source(t, s)}\n\n" for s, t, _ in sample))
    prompts = make_prompts(public, rng)
    (out / "prompts.jsonl").write_text("".join(json.dumps(p) + "\n" for p in prompts))
    print(f"{len(passed)} tunes in the statistics ({dict(rejected)} rejected), {len(prompts)} prompts "
          f"({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    return 0


def _invalidate_stats() -> None:
    from rlyard.envs.music.corpus import load_stats
    from rlyard.envs.music.novelty import load_ngrams

    load_stats.cache_clear()
    load_ngrams.cache_clear()


def _with_source(tune: str, source: str) -> str:
    first, _, rest = tune.partition("\n")
    return f"{first}\n% music21 corpus {source}\n{rest}"


def make_prompts(passed: list, rng: random.Random) -> list[dict]:
    """Prompts whose constraints are read off a corpus tune, so each has a known good answer."""
    candidates = [(s, t, a) for s, t, a in passed if len(t) < 800 and "`" not in t and a.bar_warnings == 0
                  and a.features["bars"] in (8, 12, 16, 24, 32) and parse_key(a.header.first("K"))
                  and a.header.first("M") in ("2/4", "3/4", "4/4", "6/8", "9/8", "C", "C|", "2/2", "12/8")]
    rng.shuffle(candidates)
    prompts, titles = [], set()
    for source, tune, analysis in candidates:
        if len(prompts) == PROMPTS:
            break
        index = len(prompts)
        voices = 2 if index % 5 == 4 else 1
        if voices == 2 and analysis.features["pitch_range"] > 12:
            continue
        title = f"The {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}"
        while title in titles:
            title = f"The {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}"
        titles.add(title)
        meter = {"C": "4/4", "C|": "2/2"}.get(analysis.header.first("M"), analysis.header.first("M"))
        compound = meter in ("6/8", "9/8", "12/8")
        beat, bpm = ("3/8", rng.choice((60, 80, 100, 112))) if compound else ("1/4", rng.choice((72, 96, 108, 120, 132)))
        program, name = rng.choice(INSTRUMENTS)
        key_text = analysis.header.first("K").split()[0]
        tonic, mode = re.match(r"[A-G][#b]?", key_text).group(), parse_key(analysis.header.first("K"))[1]
        constraints = {}
        if rng.random() < 0.85 or voices == 2:
            constraints["key"] = {"tonic": tonic, "mode": mode}
        if rng.random() < 0.8:
            constraints["meter"] = {"meter": meter}
        if rng.random() < 0.5:
            constraints["tempo"] = {"beat": beat, "bpm": bpm}
        if rng.random() < 0.5:
            constraints["bars"] = {"bars": int(analysis.features["bars"])}
        if voices == 2 or rng.random() < 0.1:
            constraints["voices"] = {"voices": voices}
        use_program = rng.random() < 0.3
        if use_program:
            constraints["instrument"] = {"program": program, "name": name}
        if rng.random() < 0.5 or len(constraints) < 3:
            constraints["title"] = {"title": title}
        reference = with_header(clean(tune).replace("M:C|", "M:2/2").replace("M:C\n", "M:4/4\n"), title,
                                f"{beat}={bpm}" if "tempo" in constraints else None, program if use_program else None, voices)
        checked = analyse(reference)
        if checked.reject:
            continue
        pitches = [n.pitch for n in checked.midi.notes]
        if rng.random() < 0.4:
            constraints["range"] = {"low": pitch_name(min(pitches) - rng.randint(0, 3)),
                                    "high": pitch_name(max(pitches) + rng.randint(0, 3))}
        verdicts = check_all(constraints, Music(checked.header, checked.midi, checked.features, checked.bar_warnings))
        # the reference is a corpus tune, so its novelty is 0 by design: the score before it is what must be sound
        if not all(ok for ok, _ in verdicts.values()) or grade(reference, constraints).info["reward_before_novelty"] < 0.6:
            titles.discard(title)
            continue
        prompts.append({"id": f"music-{index + 1:03d}", "constraints": constraints, "source": source, "reference": reference})
    return prompts


if __name__ == "__main__":
    raise SystemExit(main())
