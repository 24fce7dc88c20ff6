"""Grading a proof of concept: a pristine build of the target runs it in a fresh sandbox.

Nothing the agent made is trusted but the PoC's bytes. The binary comes from the target's own
sources outside the workspace, built once per process in a sandbox (`pristine_build`, keyed by
a hash of the tree); each grading copies that build into a new folder with the PoC bytes, and
runs `binary poc` there with fixed sanitizer options. A crash is a run that exits with the
sanitizers' own exit code (set here, so that a program's ordinary error exit is never taken for
one), did not time out, and left a sanitizer report; the report's sanitizer, error type and
first project frame must be the expected ones for reward 1. The sanitizers write their whole
report (both runtimes are linked statically for that: report.py's CFLAGS) to a file of a random
name in a folder of a random name (`log_path`), and only that file is graded, never the
program's stdout or stderr: a program that echoes its input cannot be made to print a report
that counts, and a folder holding anything a sanitizer did not write is refused
(`sanitizer_log`).

The PoC is read by the host from the workspace through `read_poc`: a relative path inside the
workspace, no symbolic link on the way, a regular file, at most `max_bytes`. Anything else is a
0 with the reason, never an error of the grader. A grader that cannot run (no compiler, the
sandbox failing, a pristine build that does not build) is an infra failure, never a 0.
"""
from __future__ import annotations

import atexit
import math
import os
import re
import secrets
import shutil
import stat
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from rlyard.agent.loop import cut_middle
from rlyard.envs.cyber.report import ASAN_OPTIONS, CC, CFLAGS, UBSAN_OPTIONS, Report, parse_report
from rlyard.envs.cyber.targets import PRIVATE, Target
from rlyard.sandbox import Limits, Sandbox, SandboxError
from rlyard.sandbox.fs import MOUNT_POINT
from rlyard.types import Reward

SANITIZER_EXIT = 77  # the sanitizers' exit code on a report (their default, 1, is every program's error exit)
RUN_ENV = {"ASAN_OPTIONS": f"{ASAN_OPTIONS}:exitcode={SANITIZER_EXIT}",
           "UBSAN_OPTIONS": f"{UBSAN_OPTIONS}:exitcode={SANITIZER_EXIT}"}
BUILD_ENV = {"CC": CC, "CFLAGS": CFLAGS}
# ASan reserves terabytes of address space for its shadow: RLIMIT_AS cannot bound it, so the
# process tree's resident memory is watched instead.
LIMITS = Limits(wall_s=60, cpu_s=60, memory_bytes=None, rss_bytes=2 << 30, output_bytes=256 << 10, fsize_bytes=64 << 20)
BUILD_LIMITS = Limits(wall_s=300, cpu_s=300, memory_bytes=None, rss_bytes=4 << 30, output_bytes=256 << 10)
MAX_POC_BYTES = 1 << 20

_builds: dict[str, Path] = {}
_build_locks: dict[str, threading.Lock] = {}
_cache_lock = threading.Lock()


@atexit.register
def _remove_builds() -> None:
    """The pristine builds are this process's own temporary folders (a generated pool holds hundreds)."""
    for folder in list(_builds.values()):
        shutil.rmtree(folder, ignore_errors=True)


class GraderUnavailable(RuntimeError):
    """The target cannot be built or run here: an infra failure, never the policy's fault."""


def env_argv(argv: list[str], env: dict[str, str]) -> list[str]:
    return ["/usr/bin/env", *(f"{k}={v}" for k, v in env.items()), *argv]


def pristine_build(target: Target) -> Path:
    """The target built from its own sources, in a sandbox, once per process and tree."""
    key = f"{target.id}-{target.fingerprint()}"
    with _cache_lock:
        lock = _build_locks.setdefault(key, threading.Lock())
    with lock:
        if key in _builds and _builds[key].is_dir():
            return _builds[key]
        if shutil.which(CC) is None:
            raise GraderUnavailable(f"no {CC} on this machine: the cyber family builds its targets with it (./scripts/setup.sh installs it)")
        folder = Path(tempfile.mkdtemp(prefix=f"rlyard-cyber-build-{target.id}-"))
        shutil.copytree(target.source, folder, dirs_exist_ok=True, ignore=shutil.ignore_patterns(*PRIVATE))
        try:
            result = Sandbox(folder, BUILD_LIMITS).run(env_argv(["/bin/sh", "-c", target.build], BUILD_ENV))
        except SandboxError as error:
            raise GraderUnavailable(f"sandbox: {error}") from None
        if result.exit_code != 0 or not (folder / target.binary).is_file():
            raise GraderUnavailable(f"{target.id}: `{target.build}` did not build {target.binary} "
                                    f"(exit {result.exit_code}):\n{cut_middle(result.text, 3000)}")
        _builds[key] = folder
        return folder


def read_poc(workspace: Path, submitted: object, max_bytes: int = MAX_POC_BYTES) -> tuple[bytes | None, str]:
    """The submitted file's bytes, or (None, why it is refused). `submitted` is whatever the
    policy sent: any type, NUL bytes, text the file system cannot encode; each is refused."""
    if submitted is None or (isinstance(submitted, str) and not submitted.strip()):
        return None, "nothing submitted"
    if not isinstance(submitted, str):
        return None, f"the submitted path is a {type(submitted).__name__}, not text"
    if "\x00" in submitted or len(submitted) > 4096:
        return None, f"{submitted[:200]!r} is not a path (a NUL byte, or longer than 4096 characters)"
    try:
        os.fsencode(submitted)
    except UnicodeError:
        return None, f"{submitted[:200]!r} cannot be encoded as a file name"
    relative = Path(submitted.strip())
    if relative.is_absolute():  # the workspace as the tools see it (the sandbox's cwd) or as the host does
        for top in (Path(MOUNT_POINT), workspace):
            if relative.is_relative_to(top):
                relative = relative.relative_to(top)
                break
        else:
            return None, f"{submitted!r} is outside the workspace"
    if any(part in ("..", "") for part in relative.parts):
        return None, f"{submitted!r} leaves the workspace"
    current = workspace
    for part in relative.parts:
        current = current / part
        try:
            info = os.lstat(current)
        except (OSError, ValueError):
            return None, f"{submitted[:200]!r} does not exist"
        if stat.S_ISLNK(info.st_mode):
            return None, f"{submitted!r} is or passes through a symbolic link"
    if not stat.S_ISREG(info.st_mode):
        return None, f"{submitted!r} is not a regular file"
    if info.st_size > max_bytes:
        return None, f"{submitted!r} has {info.st_size} bytes, more than the {max_bytes} allowed"
    fd = os.open(current, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None, f"{submitted!r} is not a regular file"
        data = os.read(fd, max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        return None, f"{submitted!r} grew past {max_bytes} bytes"
    return data, ""


LOG_MAX_BYTES = 1 << 20  # a sanitizer report is a few KiB; a bigger log is not one
_LOG_SANITIZER = {"asan": "AddressSanitizer", "ubsan": "UndefinedBehaviorSanitizer"}
_SUMMARY_LINE = re.compile(r"^SUMMARY: \S+Sanitizer: ", re.M)


def sanitizer_log(folder: Path, prefix: str) -> tuple[Report | None, str, str]:
    """(the report the sanitizers wrote, its text, why the folder is refused or "").

    Each runtime writes to `<prefix>-asan.<pid>` / `<prefix>-ubsan.<pid>`, created when its
    report is written (a clean run leaves the folder empty), and the process halts right after:
    the program cannot append to it. Anything else in the folder (another name, a second
    report, a link, a file holding two reports) was made by the program, never by a sanitizer,
    and the run is refused: a target that writes files its input names (an extractor) must not
    be able to plant a report. The prefix is random per run, so an input cannot name the file."""
    expected = re.compile(rf"{re.escape(prefix)}-(asan|ubsan)\.\d+")
    try:
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            return None, "", "the sanitizer log folder was replaced (by the program)"
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
        return _one_report(entries, expected)
    except OSError as error:  # removed, or its mode changed, by the program: never a platform fault
        return None, "", f"the sanitizer log folder cannot be read ({error.strerror})"


def _one_report(entries: list[os.DirEntry], expected: re.Pattern) -> tuple[Report | None, str, str]:
    strangers = [e.name for e in entries if not expected.fullmatch(e.name) or not e.is_file(follow_symlinks=False)]
    if strangers:
        return None, "", f"the sanitizer log folder holds files no sanitizer wrote: {[n[:80] for n in strangers[:5]]}"
    if len(entries) > 1:
        return None, "", f"{len(entries)} sanitizer reports in one run (a run halts at its first)"
    if not entries:
        return None, "", ""
    fd = os.open(entries[0].path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        data = f.read(LOG_MAX_BYTES + 1)
    text = data.decode("utf-8", "replace")
    if len(data) > LOG_MAX_BYTES:
        return None, text[:4000], f"the sanitizer log has more than {LOG_MAX_BYTES} bytes"
    if len(_SUMMARY_LINE.findall(text)) > 1:
        return None, text, "the sanitizer log holds more than one report"
    report = parse_report(text)
    runtime = _LOG_SANITIZER[expected.fullmatch(entries[0].name).group(1)]
    if report is not None and report.sanitizer != runtime:
        return None, text, f"a {report.sanitizer} report in the {runtime} log"
    return report, text, ""


@dataclass
class Verdict:
    reward: Reward
    output: str  # the run's stderr (bounded), for validate and for the logs


def grade_bytes(target: Target, data: bytes, timeout_s: float = 60.0) -> Verdict:
    """Run the pristine target on `data` in a fresh sandbox and score its report."""
    try:
        build = pristine_build(target)
    except GraderUnavailable as error:
        return Verdict(Reward(0.0, {}, {"error": str(error)}, infra_error=True), "")
    folder = Path(tempfile.mkdtemp(prefix=f"rlyard-cyber-grade-{target.id}-"))
    try:
        shutil.copytree(build, folder, dirs_exist_ok=True)
        (folder / "poc").write_bytes(data)
        logs, prefix = f".sanitizer-{secrets.token_hex(8)}", secrets.token_hex(8)  # names no input can know
        (folder / logs).mkdir()
        env = {key: f"{value}:log_path={MOUNT_POINT}/{logs}/{prefix}-{key.split('_')[0].lower()}"
               for key, value in RUN_ENV.items()}
        # CPU time above the wall time: a PoC that spins is a timeout, whichever limit a busy machine reaches first
        limits = Limits(**{**LIMITS.__dict__, "wall_s": timeout_s, "cpu_s": 2 * math.ceil(timeout_s) + 1})
        try:
            result = Sandbox(folder, limits).run(env_argv([f"./{target.binary}", "poc"], env))
        except SandboxError as error:
            return Verdict(Reward(0.0, {}, {"error": f"sandbox: {error}"}, infra_error=True), "")
        report, log, refused = sanitizer_log(folder / logs, prefix)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    stderr = result.stderr.decode("utf-8", "replace")  # for the logs and validate only: never graded
    hung = result.timed_out or result.killed_reason == "cpu_time"
    crashed = result.exit_code == SANITIZER_EXIT and not hung and report is not None
    got = {"sanitizer": report.sanitizer, "error_type": report.error_type, "function": report.function} if report else {}
    components = {"crashed": float(crashed), **{k: float(crashed and got.get(k) == v) for k, v in target.expected.items()}}
    value = float(all(components.values()))
    info = {"exit_code": result.exit_code, "timed_out": hung, "killed": result.killed_reason, "report": got,
            "expected": target.expected, "output": cut_middle(log + stderr, 4000)}
    if refused:
        info["refused"] = refused
    return Verdict(Reward(value, components, info), log + stderr)


def grade_submission(target: Target, workspace: Path, submitted: object, timeout_s: float = 60.0,
                     max_bytes: int = MAX_POC_BYTES) -> Reward:
    data, refused = read_poc(workspace, submitted, max_bytes)
    if data is None:
        zero = {"crashed": 0.0, "sanitizer": 0.0, "error_type": 0.0, "function": 0.0}
        return Reward(0.0, {**zero, "poc_refused": 1.0}, {"error": f"poc refused: {refused}"})
    reward = grade_bytes(target, data, timeout_s).reward
    if not reward.infra_error:
        reward.components["poc_refused"] = 0.0
    return reward
