"""The verifier script that a built-in test patch adds as `.rlyard/grade.py`; it runs in the sandbox.

    python3 -P .rlyard/grade.py tests/test_issue.py [tests/test_x.py::test_y ...]

Exit 0 only when every test collected from the given files / node ids ran and passed. A bare
`pytest` exit code is easy to game from inside the repository, so:
- `-P` and imports before the repository joins sys.path: a `pytest.py` or `json.py` written by
  the policy cannot shadow the runner's modules;
- `--noconftest`, an empty ini (`-c /dev/null`) and no PYTEST_* variables: a conftest.py,
  pytest.ini or setup.cfg that skips or deselects everything has no effect;
- skipped, xfailed and xpassed tests count as failures, and at least one test must run;
- pytest runs in a child process that reports each outcome over a pipe: code that calls
  `os._exit(0)` ends the child before it reports, which fails the grade.
Runs with the sandbox's Python 3.11 and its pytest (Debian python3-pytest); stdlib otherwise.
"""
import json
import os
import subprocess
import sys

CHILD = r"""
import json, os, sys
fd = int(sys.argv[1]); args = sys.argv[2:]
import pytest
outcomes = {}
class Recorder:
    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.outcome != "passed":
            key = report.nodeid
            if report.when == "call" and hasattr(report, "wasxfail"):
                outcomes[key] = "xfailed" if report.skipped else "xpassed"
            elif outcomes.get(key) in (None, "passed"):
                outcomes[key] = report.outcome if report.when == "call" else report.when + "_" + report.outcome
    def pytest_collectreport(self, report):
        if report.outcome != "passed":
            outcomes[report.nodeid or "<collection>"] = "collect_" + report.outcome
sys.path.append(os.getcwd())
code = pytest.main(["-q", "-p", "no:cacheprovider", "--noconftest", "-c", os.devnull, "--rootdir", os.getcwd(), *args],
                   plugins=[Recorder()])
with os.fdopen(fd, "w") as pipe:
    pipe.write(json.dumps({"exit": int(code), "outcomes": outcomes}))
"""


def same_test(wanted: str, reported: str) -> bool:
    """Node ids are relative to pytest's rootdir, which may differ from the repository root."""
    return wanted == reported or wanted.endswith("/" + reported) or reported.endswith("/" + wanted)


def main(args: list[str]) -> int:
    if not args:
        print("usage: python3 -P .rlyard/grade.py TEST_FILE_OR_NODE_ID ...")
        return 2
    read, write = os.pipe()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST") and k != "PYTHONPATH"}
    child = subprocess.Popen([sys.executable, "-I", "-c", CHILD, str(write), *args], pass_fds=(write,), env=env)
    os.close(write)
    with os.fdopen(read) as pipe:
        text = pipe.read()
    child.wait()
    try:
        report = json.loads(text)
    except ValueError:
        print(f"grade: FAIL: the test process ended without a report (exit {child.returncode})")
        return 1
    outcomes = report["outcomes"]
    bad = {node: outcome for node, outcome in outcomes.items() if outcome != "passed"}
    wanted = [a for a in args if "::" in a]
    missing = [node for node in wanted if not any(same_test(node, key) for key in outcomes)]
    ok = report["exit"] == 0 and outcomes and not bad and not missing
    print(f"grade: {'PASS' if ok else 'FAIL'}: {sum(o == 'passed' for o in outcomes.values())} passed, "
          f"{len(bad)} not passed, {len(missing)} missing, pytest exit {report['exit']}")
    for node, outcome in sorted(bad.items()):
        print(f"  {outcome}: {node}")
    for node in missing:
        print(f"  not run: {node}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
