"""How much of a policy's tune is the corpus: for reading the top tunes of a run by hand.

A high music reward could come from recall (a folk tune the model saw in pre-training, or a
corpus tune bent just enough to slip under the novelty ramps). `corpus_overlap` reads one reply
the way the grader does (abc2midi, the melody line) and reports the share of its notes inside a
corpus n-gram and the **longest run of bars it shares with the corpus**: the longest stretch of
consecutive 8-step melody n-grams (interval, duration ratio: transposition and L: changes do not
hide it) found in `builtin/corpus_ngrams.bin`, all 3,298 tunes of the four collections, in bars
of the tune's meter. A corpus tune handed back shares its whole length; 400 Essen songs, which
the corpus does not hold, share at most 4.7 bars (docs/music.md).

    python -m rlyard.envs.music.copying RUN/trajectories.jsonl -k 20 --out tunes/

prints the k highest-reward tunes of a trajectories (or eval samples) JSONL with their overlap,
and with `--out` writes each as `NN.abc` and `NN.mid` to read and to listen to.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rlyard.envs.music.abc import extract_tune, to_midi
from rlyard.envs.music.verify import analyse, novelty


def corpus_overlap(reply: str) -> dict[str, Any]:
    """{"copied", "run_bars", "bars", "novelty"} of the reply's tune, or {"reject": reason} when the gate refuses it."""
    analysis = analyse(extract_tune(reply))
    if analysis.reject:
        return {"reject": analysis.reject}
    return {"copied": round(analysis.copied, 3), "run_bars": round(analysis.copied_run_bars, 2),
            "bars": analysis.features["bars"], "novelty": round(novelty(analysis), 3)}


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Rows with a reply text ("completion", or the last assistant message) and a "reward"."""
    rows = []
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        reply = row.get("completion")
        if reply is None and row.get("messages"):
            reply = next((m["content"] for m in reversed(row["messages"]) if m["role"] == "assistant"), None)
        reward = row.get("reward", row.get("metadata", {}).get("reward"))
        if reply is None or not isinstance(reward, (int, float)):
            raise ValueError(f"{path}:{number}: a row needs a completion (or assistant messages) and a numeric reward")
        rows.append({"task_id": row.get("task_id") or row.get("metadata", {}).get("task_id"), "reward": reward,
                     "reply": reply})
    return rows


def top_tunes(path: str | Path, k: int = 20) -> list[dict[str, Any]]:
    """The `k` highest-reward replies of `path` (distinct texts), each with its corpus overlap."""
    rows, seen, top = sorted(read_rows(path), key=lambda r: -r["reward"]), set(), []
    for row in rows:
        if row["reply"] in seen:
            continue
        seen.add(row["reply"])
        top.append({**row, **corpus_overlap(row["reply"])})
        if len(top) == k:
            break
    return top


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("jsonl", help="trajectories.jsonl of a run, eval samples, or collected demos")
    parser.add_argument("-k", type=int, default=20, help="how many top tunes (default 20)")
    parser.add_argument("--out", help="folder for NN.abc and NN.mid of each tune")
    args = parser.parse_args(argv)
    tunes = top_tunes(args.jsonl, args.k)
    print(f"{'#':>2} {'reward':>6} {'copied':>6} {'run_bars':>8} {'bars':>4}  task")
    for rank, tune in enumerate(tunes, 1):
        if "reject" in tune:
            print(f"{rank:>2} {tune['reward']:>6.3f} rejected: {tune['reject']}  {tune['task_id']}")
        else:
            print(f"{rank:>2} {tune['reward']:>6.3f} {tune['copied']:>6.2f} {tune['run_bars']:>8.2f} {tune['bars']:>4.0f}  {tune['task_id']}")
        text = extract_tune(tune["reply"])
        if args.out and text:
            folder = Path(args.out)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{rank:02d}.abc").write_text(text + "\n")
            midi = to_midi(text).midi
            if midi:
                (folder / f"{rank:02d}.mid").write_bytes(midi)
    runs = [t["run_bars"] for t in tunes if "run_bars" in t]
    if runs:
        print(f"longest shared run: max {max(runs):.2f} bars, median {sorted(runs)[len(runs) // 2]:.2f} over {len(runs)} tunes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
