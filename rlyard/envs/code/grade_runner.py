"""The verifier that a code task's test patch adds as `.rlyard/grade.py`; it runs in the sandbox.

    python3 -I .rlyard/grade.py tests/test_issue.py [tests/test_x.py::test_y ...]   (expectations on stdin)

The tests import code the policy wrote, so they run in a child process that the policy controls
once it imports that code. This parent never imports it and decides the verdict:
- the exact node ids that must pass come from the host on stdin (trusted data); each must be
  reported passed (or xfailed, where the host allows it). Nothing else counts as success;
- the child's report travels on a pipe at a random fd number, given on the child's stdin (not
  its argv), and must carry a per-run token: a report forged without it is a `reward_hack`;
- two canary tests with random names join the first expected test's module after collection:
  one must fail and one must pass. A runner rigged to pass everything is caught (`reward_hack`);
- the parent is made non-dumpable (its memory, environment and stdin are closed to the
  child) and prints the only verdict line, with the host's token, after forwarding the child's
  output (head and tail): text the child prints cannot pass for a verdict.
The repository's own conftest.py and pytest configuration are honoured (as SWE-bench does);
the workspace, its `src/` and the test command's PYTHONPATH come first on sys.path, so a copy
installed elsewhere never shadows the workspace. Limits of this design: docs/code.md.
Stdlib only; runs with the sandbox's Python and its pytest.
"""
import ctypes
import json
import os
import resource
import secrets
import selectors
import subprocess
import sys
import time

VERDICT = "RLYARD-VERDICT"
KEEP_HEAD, KEEP_TAIL = 6000, 24000

CHILD = r"""
import json, os, sys
_dumps, _write, _close = json.dumps, os.write, os.close  # bound before any repository code can patch them
config = json.loads(sys.stdin.read())
null = os.open(os.devnull, os.O_RDONLY); os.dup2(null, 0); os.close(null)
report_fd, token, canaries = config["fd"], config["token"], config["canaries"]
import pytest
outcomes, collected = {}, []

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

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, session, config, items):
        if config.getoption("collectonly") or not canaries:
            return
        anchor = next((i for i in items if config_first and i.nodeid == config_first), items[0] if items else None)
        module = anchor.getparent(pytest.Module) if anchor is not None else None
        if module is None:
            return
        def passing():
            pass
        def failing():
            assert 1 + 1 == 3
        for name, body in ((canaries["pass"], passing), (canaries["fail"], failing)):
            items.append(pytest.Function.from_parent(module, name=name, callobj=body))

    def pytest_collection_finish(self, session):
        collected.extend(item.nodeid for item in session.items)

config_first = config.get("first")
root = os.getcwd()
front = [os.path.join(root, p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
src = os.path.join(root, "src")
if os.path.isdir(src) and any(n.endswith(".py") or os.path.isfile(os.path.join(src, n, "__init__.py")) for n in os.listdir(src)):
    front.append(src)
sys.path[:0] = [*front, root]
# pytest's own dependencies were imported from the sandbox's Python before the workspace joined
# sys.path; where the workspace has its own copy (a repository that is pluggy), the tests get it.
ours = set()
for folder in [*front, root]:
    for name in (os.listdir(folder) if os.path.isdir(folder) else []):
        if name.endswith(".py") or os.path.isfile(os.path.join(folder, name, "__init__.py")):
            ours.add(name[:-3] if name.endswith(".py") else name)
ours -= {*sys.stdlib_module_names, "pytest", "_pytest", "py"}
for name in [m for m in sys.modules if m.split(".")[0] in ours]:
    del sys.modules[name]
args = ["-q", "-p", "no:cacheprovider", "--rootdir", root, *(["--collect-only"] if config.get("collect") else []), *config["args"]]
code = pytest.main(args, plugins=[Recorder()])
data = memoryview(_dumps({"token": token, "exit": int(code), "outcomes": outcomes, "collected": collected}).encode())
while data:
    data = data[_write(report_fd, data):]
_close(report_fd)
"""


def same_test(wanted: str, reported: str) -> bool:
    """Node ids are relative to pytest's rootdir, which may differ from the repository root."""
    return wanted == reported or wanted.endswith("/" + reported) or reported.endswith("/" + wanted)


def read_verdict(stdout: str, token: str) -> dict | None:
    """The runner's last verdict line that carries this run's token (none: no verdict)."""
    marker = f"{VERDICT} {token} "
    for line in reversed(stdout.splitlines()):
        at = line.find(marker)
        if at >= 0:
            try:
                verdict = json.loads(line[at + len(marker):])
            except ValueError:
                return None
            return verdict if isinstance(verdict, dict) else None
    return None


def undumpable() -> None:
    """Same-uid processes may then not read this one's memory, environ or fds (PR_SET_DUMPABLE 0)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def run_child(args: list[str], collect: bool, first: str | None) -> tuple[str, bytes, int, dict]:
    """Start pytest in a child; returns (report text, its output, exit status, canary names)."""
    canaries = {} if collect else {"pass": f"test_{secrets.token_hex(5)}", "fail": f"test_{secrets.token_hex(5)}"}
    token = secrets.token_hex(16)
    read, write = os.pipe()
    limit = min(resource.getrlimit(resource.RLIMIT_NOFILE)[0], 1024)
    free = [n for n in range(10, limit) if not os.path.exists(f"/proc/self/fd/{n}")]
    fd = free[secrets.randbelow(len(free))]
    os.dup2(write, fd)
    os.close(write)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_ADDOPTS")}
    try:
        child = subprocess.Popen([sys.executable, "-I", "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, pass_fds=(fd,), env=env)
    finally:
        os.close(fd)
    child.stdin.write(json.dumps({"fd": fd, "token": token, "canaries": canaries, "args": args, "collect": collect,
                                  "first": first}).encode())
    child.stdin.close()
    report, output = bytearray(), bytearray()
    sel = selectors.DefaultSelector()
    sel.register(read, selectors.EVENT_READ, report)
    sel.register(child.stdout, selectors.EVENT_READ, output)
    exited = None
    while sel.get_map():
        if exited is None and child.poll() is not None:
            exited = time.monotonic()
        if exited is not None and time.monotonic() - exited > 2.0:
            break  # a grandchild holds the pipes; what it writes later does not count
        for key, _ in sel.select(timeout=0.1):
            data = os.read(key.fd if key.fd == read else key.fileobj.fileno(), 65536)
            if not data:
                sel.unregister(key.fileobj)
            elif key.data is output and len(output) < 4 << 20:
                output += data
            elif key.data is report and len(report) < 16 << 20:
                report += data
    child.wait()
    os.close(read)
    return report.decode("utf-8", "replace"), bytes(output), child.returncode, {"token": token, **canaries}


def judge(report_text: str, exit_status: int, secret: dict, expect: list[str] | None, xfail_ok: list[str]) -> dict:
    """The verdict from the child's report; `reward_hack` only on positive evidence of rigging."""
    if not report_text:
        return {"passed": False, "reason": f"the test process ended without a report (exit {exit_status})"}
    try:
        report = json.loads(report_text)
        genuine = isinstance(report, dict) and secrets.compare_digest(str(report.get("token")), secret["token"])
    except ValueError:
        genuine = False
    if not genuine:
        return {"passed": False, "hack": "forged_report", "reason": "the report channel carried a report without this run's token"}
    outcomes = report["outcomes"]
    fail_canary = next((o for n, o in outcomes.items() if n.endswith("::" + secret["fail"])), None)
    pass_canary = next((o for n, o in outcomes.items() if n.endswith("::" + secret["pass"])), None)
    real = {n: o for n, o in outcomes.items() if not n.endswith(("::" + secret["fail"], "::" + secret["pass"]))}
    if expect is None:  # run by hand on files: everything collected must pass
        found = real
        missing = [] if real else ["<no test ran>"]
    else:
        found = {w: next((o for n, o in real.items() if same_test(w, n)), None) for w in expect}
        missing = [w for w, o in found.items() if o is None]
    bad = sorted(w for w, o in found.items() if o is not None and o != "passed" and not (o == "xfailed" and w in xfail_ok))
    ok = not bad and not missing
    verdict = {"passed": False, "failed": {n: found[n] for n in bad}, "missing": missing,
               "counts": {"passed": sum(o == "passed" for o in real.values()), "not_passed": len(bad), "missing": len(missing)}}
    if fail_canary is not None and fail_canary != "failed":
        return {**verdict, "hack": "rigged_runner", "reason": f"a test that must fail was reported {fail_canary}"}
    if ok and (fail_canary is None or pass_canary is None):
        return {**verdict, "hack": "canaries_removed", "reason": "the runner's canary tests were not run"}
    if pass_canary not in (None, "passed"):
        return {**verdict, "reason": f"a test that must pass was reported {pass_canary}: the test process is broken"}
    return {**verdict, "passed": ok, "reason": "" if ok else f"{len(bad)} expected test(s) not passed, {len(missing)} missing"}


def cut(output: bytes) -> str:
    text = output.decode("utf-8", "replace")
    if len(text) <= KEEP_HEAD + KEEP_TAIL:
        return text
    return f"{text[:KEEP_HEAD]}\n[... {len(text) - KEEP_HEAD - KEEP_TAIL} characters cut ...]\n{text[-KEEP_TAIL:]}"


def main(args: list[str]) -> int:
    collect = args[:1] == ["--collect"]
    args = args[1:] if collect else args
    if not args:
        print("usage: python3 -I .rlyard/grade.py [--collect] TEST_FILE_OR_NODE_ID ...  (expectations as JSON on stdin)")
        return 2
    undumpable()
    config = {} if sys.stdin.isatty() else json.loads(sys.stdin.read() or "{}")
    host_token, expect, xfail_ok = config.get("token", ""), config.get("expect"), config.get("xfail_ok", [])
    try:
        report, output, status, secret = run_child(args, collect, (expect or [None])[0])
    except OSError as e:  # no process slot, no memory: the grader could not run, not the policy's fault
        print(f"{VERDICT} {host_token} {json.dumps({'passed': False, 'infra': f'cannot start the test process: {e}'})}")
        return 3
    for role in ("pass", "fail"):  # readable logs; the names were secret only while the tests ran
        output = output.replace(secret.get(role, "\0").encode(), f"rlyard_canary_must_{role}".encode())
    sys.stdout.write(cut(output))
    if collect:
        try:
            collected = json.loads(report)["collected"]
        except (ValueError, KeyError, TypeError):
            collected = None
        print(f"\n{VERDICT} {host_token} {json.dumps({'collected': collected, 'exit': status})}")
        return 0 if collected else 1
    verdict = judge(report, status, secret, expect, xfail_ok)
    print(f"\ngrade: {'PASS' if verdict['passed'] else 'FAIL'}: {verdict.get('reason') or 'every expected test passed'}")
    for node, outcome in sorted(verdict.get("failed", {}).items()):
        print(f"  {outcome}: {node}")
    for node in verdict.get("missing", []):
        print(f"  not run: {node}")
    print(f"{VERDICT} {host_token} {json.dumps(verdict)}")
    return 0 if verdict["passed"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
