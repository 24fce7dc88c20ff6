"""How much of a tune is already in the corpus the bands come from.

The bands pay a tune for looking like the corpus, so the surest way to a high score is to hand
back a corpus tune: the tune's own notes, transposed, under the prompt's header. Every tune
that abc2midi plays from the four collections (all of them, not only the sample the bands are
read from) is cut into n-grams of its melody, each n-gram a run of `N` (interval, duration
ratio) steps: transposing a tune changes no interval, and writing it with another L: or tempo
changes no ratio, so neither hides a copy. `builtin/corpus_ngrams.bin` holds their 32-bit
hashes, sorted and delta-coded, zlib-compressed (`scripts/music/build_corpus.py` writes it).

A tune's `copied` share is the share of its melody notes that lie inside an n-gram found in
the corpus; `copied_run_bars` is the longest stretch of consecutive shared n-grams, in bars.
Folk melody is made of stock figures, so a new tune shares a few n-grams by chance (measured
in docs/music.md); a copy shares nearly all of them, and a part copied note for note shares a
long run. Hash collisions (about one lookup in 4,000 at 1e6 hashes) only ever add a stray note.
"""
from __future__ import annotations

import hashlib
import math
import zlib
from functools import lru_cache
from pathlib import Path

import numpy as np

from rlyard.envs.music.features import Note, melody

N = 8  # steps per n-gram: 9 notes, about a bar of reel or two of an air
MAGIC = b"RLYN1"
NGRAMS_PATH = Path(__file__).parent / "builtin" / "corpus_ngrams.bin"
INTERVAL_CLIP, RATIO_CLIP = 12, 6


def steps(line: list[Note]) -> list[tuple[int, int]]:
    """(interval in semitones, log2 of the duration ratio in half-steps) between successive notes."""
    out = []
    for a, b in zip(line, line[1:]):
        interval = max(-INTERVAL_CLIP, min(INTERVAL_CLIP, b.pitch - a.pitch))
        ratio = max(-RATIO_CLIP, min(RATIO_CLIP, round(2 * math.log2(b.length / a.length))))
        out.append((interval, ratio))
    return out


def ngram_hashes(line: list[Note]) -> list[int]:
    """The hash of every run of `N` steps, in order (so runs of shared n-grams can be found)."""
    tokens = bytes(b for interval, ratio in steps(line) for b in (interval + INTERVAL_CLIP, ratio + RATIO_CLIP))
    return [int.from_bytes(hashlib.blake2b(tokens[2 * i:2 * (i + N)], digest_size=4).digest(), "little")
            for i in range(len(tokens) // 2 - N + 1)]


def encode(hashes: set[int]) -> bytes:
    ordered = np.array(sorted(hashes), dtype=np.uint64)
    deltas = np.diff(ordered, prepend=np.uint64(0)).astype("<u4")
    return MAGIC + bytes([N]) + zlib.compress(deltas.tobytes(), 9)


@lru_cache(maxsize=2)
def load_ngrams(path: str | None = None) -> np.ndarray:
    """The sorted corpus hashes; errors name the file and the script that writes it."""
    source = Path(path) if path else NGRAMS_PATH
    try:
        data = source.read_bytes()
        if not data.startswith(MAGIC) or data[len(MAGIC)] != N:
            raise ValueError(f"not an n-gram file of N={N}")
        deltas = np.frombuffer(zlib.decompress(data[len(MAGIC) + 1:]), dtype="<u4")
    except (OSError, ValueError, zlib.error) as error:
        raise ValueError(f"music corpus n-grams {source}: {error} (scripts/music/build_corpus.py writes them)") from None
    return np.cumsum(deltas, dtype=np.uint64).astype(np.uint32)


def copied(notes: list[Note], bar: float, corpus: np.ndarray | None = None) -> tuple[float, float]:
    """(share of melody notes inside a corpus n-gram, longest run of shared n-grams in bars)."""
    line = melody(notes)
    hashes = ngram_hashes(line)
    if not hashes:
        return 0.0, 0.0
    table = load_ngrams() if corpus is None else corpus
    query = np.array(hashes, dtype=np.uint32)
    at = np.searchsorted(table, query)
    found = (at < len(table)) & (table[np.minimum(at, len(table) - 1)] == query)
    covered = np.zeros(len(line), dtype=bool)
    longest, run_start = 0.0, None
    for i, hit in enumerate([*found.tolist(), False]):
        if hit:
            covered[i:i + N + 1] = True
            run_start = i if run_start is None else run_start
        elif run_start is not None:
            last = line[i - 1 + N]
            longest = max(longest, (last.end - line[run_start].start) / bar)
            run_start = None
    return float(covered.mean()), longest
