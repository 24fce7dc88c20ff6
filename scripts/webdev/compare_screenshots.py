"""Held-out pages side by side before and after a training stage, as one PNG for the docs.

    python scripts/webdev/compare_screenshots.py OUT/episodes_sft OUT/episodes_rl_seed0 \
        -n 6 --out docs/img/webdev_sft_vs_rl.png

Each row is one held-out task (the first `n` of the eval in its order, so the rows are not
picked by outcome): the reference's stored screenshot, then the desktop screenshot the grader
saved for each stage's page (its greedy one, or its first sample when the evaluation only
sampled), with the reward above it. Screenshots are the grader's own
(`info["screenshot"]` of `rlyard eval --trajectories`), so they must still exist where it wrote them.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

WIDTH = 360  # each tile's width (the reference is stored at this width)
HEIGHT = 300  # each tile cut to this height: header and the first sections
LABEL = 18  # pixels above a tile for its caption


def episodes(folder: Path) -> dict[str, dict]:
    path = folder / "trajectories.jsonl" if folder.is_dir() else folder
    if folder.is_dir() and not path.is_file() and (folder / "sampled" / "trajectories.jsonl").is_file():
        path = folder / "sampled" / "trajectories.jsonl"  # `rlyard eval --no-greedy` keeps only sampled episodes
    if not path.is_file():
        sys.exit(f"compare_screenshots: {path} does not exist (an `rlyard eval --trajectories` folder)")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    first: dict[str, dict] = {}
    for row in rows:  # a sampled evaluation has several episodes a task: its first one
        first.setdefault(row["task_id"], row)
    return first


def tile(png: Path | None):
    from PIL import Image

    if png is None or not png.is_file():
        return Image.new("RGB", (WIDTH, HEIGHT), "#999")
    image = Image.open(png).convert("RGB")
    image = image.resize((WIDTH, max(1, round(image.height * WIDTH / image.width))))
    canvas = Image.new("RGB", (WIDTH, HEIGHT), "white")
    canvas.paste(image.crop((0, 0, WIDTH, min(HEIGHT, image.height))), (0, 0))
    return canvas


def reference_pngs(seed: int, eval_percent: int) -> dict[str, Path]:
    """{task id: its stored reference screenshot} for every held-out spec of the pool, read once."""
    from rlyard.envs.webdev import generate

    specs = generate.specs("eval", generate.POOL_SIZE, seed, eval_percent)
    return {generate.spec_id(spec): generate.reference_folder(spec) / "reference.png" for spec in specs}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stages", nargs="+", type=Path, help="eval trajectory folders, in stage order")
    parser.add_argument("-n", type=int, default=6, help="held-out tasks (rows)")
    parser.add_argument("--out", type=Path, required=True, help="the PNG to write")
    parser.add_argument("--names", default="", help="comma-separated stage names (default: folder names)")
    parser.add_argument("--seed", type=int, default=0, help="the eval pool's seed (for the reference screenshot)")
    parser.add_argument("--eval-percent", type=int, default=25)
    args = parser.parse_args(argv)
    from PIL import Image, ImageDraw

    runs = [episodes(folder) for folder in args.stages]
    names = args.names.split(",") if args.names else [folder.name for folder in args.stages]
    tasks = [task for task in runs[0] if all(task in run for run in runs)][: args.n]
    columns = 1 + len(runs)
    sheet = Image.new("RGB", (columns * (WIDTH + 8), len(tasks) * (HEIGHT + LABEL + 8)), "white")
    draw = ImageDraw.Draw(sheet)
    references = reference_pngs(args.seed, args.eval_percent)
    for r, task in enumerate(tasks):
        y = r * (HEIGHT + LABEL + 8)
        cells = [(f"{task} reference (stored, gray)", references.get(task))]
        for name, run in zip(names, runs):
            row = run[task]
            shot = (row.get("info") or {}).get("screenshot")
            cells.append((f"{name}: reward {row['reward']:.2f}", Path(shot) if shot else None))
        for c, (caption, png) in enumerate(cells):
            x = c * (WIDTH + 8)
            draw.text((x + 2, y + 2), caption, fill="black")
            sheet.paste(tile(png), (x, y + LABEL))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(args.out, optimize=True)
    print(f"wrote {args.out}: {len(tasks)} held-out tasks x {columns} columns ({', '.join(['reference', *names])})")


if __name__ == "__main__":
    main()
