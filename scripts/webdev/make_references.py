"""Render every webdev task's reference site with the grader's browser and store its screenshot,
reduced for SSIM, as <task>/reference.png (rlyard/envs/webdev/visual.py).

    python scripts/webdev/make_references.py                  # the built-in tasks
    python scripts/webdev/make_references.py --source my_tasks --only landing_page

Run it again after editing a reference site; validate then checks that each reference meets its
own checks. The screenshot depends on the fonts installed (Debian's fonts-dejavu here, as in
scripts/setup.sh): on a machine with other fonts, make the references there.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rlyard.envs.webdev.checks import MEASURE_JS, normalize_checks, probes
from rlyard.envs.webdev.gate import runtime_failure, syntax_errors
from rlyard.envs.webdev.render import WORKERS, render_site
from rlyard.envs.webdev.tasks import BUILTIN
from rlyard.envs.webdev.visual import reference_png

import yaml


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=str(BUILTIN), help="a folder of task folders (default: the built-in set)")
    parser.add_argument("--only", nargs="*", default=None, help="task folder names")
    args = parser.parse_args(argv)
    failed = 0
    for folder in sorted(Path(args.source).iterdir()):
        if not folder.is_dir() or folder.name.startswith(("_", ".")) or (args.only and folder.name not in args.only):
            continue
        site = folder / "reference"
        checks = normalize_checks(yaml.safe_load((folder / "task.yaml").read_text())["checks"], str(folder / "task.yaml"))
        errors = syntax_errors(site)
        rendered = render_site(site, probes(checks), MEASURE_JS, 10.0) if not errors else None
        reason = errors[0] if errors else runtime_failure(rendered)[1]
        if reason or rendered.screenshot is None:
            print(f"FAIL {folder.name}: {reason or 'no screenshot'}")
            failed += 1
            continue
        png = reference_png(rendered.screenshot)
        (folder / "reference.png").write_bytes(png)
        print(f"ok   {folder.name}: {len(png)} bytes")
    WORKERS.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
