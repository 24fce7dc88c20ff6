"""Rerun the whole test suite exactly as CI does and commit where its time goes.

    python bench/test_durations.py                     # writes bench/results/test_durations.json

Runs `scripts/test.sh` (setup, then the suite under pytest-xdist) with `--durations-json`, and
records the commit, the machine, the whole run's wall seconds (`total_seconds`: setup included,
as CI sees it), pytest's own seconds, the outcome counts, the 30 slowest tests, every module's
seconds and the seconds of each test of the modules spread test by test (tests/conftest.py's
SPREAD_MODULES). tests/conftest.py reads them back to start the slowest units first. Run
it on an idle machine at a clean commit: a figure is as old as its commit.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from provenance import commit  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def machine() -> dict:
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout.splitlines()
    model = next((line.split(":", 1)[1].strip() for line in lscpu if line.startswith("Model name")), "unknown")
    return {"cpu": model, "cores": len(os.sched_getaffinity(0)), "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
            "python": sys.version.split()[0], "workers": os.environ.get("RLYARD_TEST_WORKERS", "default")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "test_durations.json")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (a subset for a quick check)")
    args = parser.parse_args()
    record = {"commit": commit(), "machine": machine(), "command": "./scripts/test.sh"}
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "durations.json"
        start = time.monotonic()
        code = subprocess.call([str(ROOT / "scripts" / "test.sh"), "--durations-json", str(raw), *args.pytest_args], cwd=ROOT)
        record["total_seconds"] = round(time.monotonic() - start, 1)
        record["exit_code"] = code
        record.update(json.loads(raw.read_text()) if raw.exists() else {"error": "pytest wrote no durations"})
    args.json.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = args.json.with_suffix(".tmp")
    tmp_out.write_text(json.dumps(record, indent=1) + "\n")
    tmp_out.replace(args.json)
    print(f"[durations] {record.get('tests')} tests, {record.get('outcomes')}, total {record['total_seconds']} s "
          f"(pytest {record.get('pytest_seconds')} s) -> {args.json.relative_to(ROOT) if args.json.is_relative_to(ROOT) else args.json}")
    return code


if __name__ == "__main__":
    sys.exit(main())
