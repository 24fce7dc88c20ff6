"""Parse an AddressSanitizer / UndefinedBehaviorSanitizer report out of the text a sanitizer wrote.

The cyber family rewards a proof of concept only when the sanitizer reports exactly the
expected crash: sanitizer, error type and crash function. This module turns the report text of
one run (at grading, the sanitizers' own log file; in tests and by hand, stderr) into a
:class:`Report` (or ``None`` when there is no sanitizer report at all) and holds the fixed build
and run settings that every target is built and graded with, so that the grader, ``validate``
and the tests all use the same ones.

Where each field comes from, and why:

* sanitizer and error type: the ``SUMMARY: <Sanitizer>: <type> ...`` line, the one line every
  sanitizer prints in a fixed form (``print_summary=1``; UBSan needs ``report_error_type=1`` to
  put the check name there instead of ``undefined-behavior``). When the output was cut before
  it, the ``ERROR: AddressSanitizer: <type>`` header or UBSan's ``runtime error:`` message are
  used instead.
* crash function and file: the first frame of the *crash* stack (the first block of ``#N 0x..``
  frames after the error header, never the "freed by" / "previously allocated by" stacks) whose
  source file lies under the target's ``src/``. Frames of the sanitizer runtime (interceptors,
  ``__asan_*``, ``__ubsan_*``, whose paths also contain ``src/libsanitizer``), of libc
  (``../sysdeps``, ``../csu``) and unsymbolised ``(module+0x..)`` frames are skipped: for a
  ``memcpy`` overflow the SUMMARY line names ``__interceptor_memcpy``, and the function that
  matters is its caller in the project. Absolute paths are normalised to ``src/...``.
* UBSan without a stack trace: the ``src/a.c:12:5: runtime error:`` line gives file and line
  (no function).

Only the text passed in is read: the grader passes the sanitizers' log file, never the
program's stdout or stderr, where an input-echoing program could print a report that counts.
ANSI colour codes are removed first, and truncated output gives what it can.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

CC = "gcc"
"""The compiler targets are built with (``CC`` for ``build.sh``)."""

CFLAGS = ("-g -O0 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all"
          " -static-libasan -static-libubsan")
"""Flags for ``build.sh``: debug info and frame pointers for exact stacks, no optimisation (so a
bug is not folded away or inlined into another function), ASan and UBSan together, every UBSan
check fatal (otherwise UBSan prints and carries on, and the exit status stays 0), and both
runtimes linked statically. gcc links two runtimes, each with its own copy of sanitizer_common;
with both shared, the one that loses the symbol interposition writes its report to stderr and
only its SUMMARY line to its ``log_path`` (UBSan, when both are shared; ASan, with only UBSan
static). Linked statically, each writes its whole report to its own ``log_path`` file, which is
where the grader reads it (measured with gcc 12.2: docs/cyber.md)."""

ASAN_OPTIONS = (
    "detect_leaks=0:halt_on_error=1:abort_on_error=0:symbolize=1:allocator_may_return_null=1"
    ":detect_stack_use_after_return=0:print_summary=1"
)
"""Run-time options for ASan: no leak reports (a leak is not the bug asked for), stop at the first
error with exit status 1 (not an abort, which would leave a core file), symbolised frames,
``malloc`` of an absurd size returns NULL instead of reporting ``allocation-size-too-big``."""

UBSAN_OPTIONS = "halt_on_error=1:print_stacktrace=1:report_error_type=1:print_summary=1"
"""Run-time options for UBSan: stop at the first error, print the stack (for the function) and
the check name on the SUMMARY line (for the error type)."""

SANITIZERS = (
    "AddressSanitizer",
    "UndefinedBehaviorSanitizer",
    "LeakSanitizer",
    "MemorySanitizer",
    "ThreadSanitizer",
)


def sanitizer_env() -> dict[str, str]:
    """The environment variables a target must run with (merge them into a clean environment)."""
    return {"ASAN_OPTIONS": ASAN_OPTIONS, "UBSAN_OPTIONS": UBSAN_OPTIONS}


@dataclass(frozen=True)
class Report:
    """One sanitizer report. ``function``/``file``/``line`` are None when no frame of the
    project's sources was found (the crash is in a library, or the output was cut)."""

    sanitizer: str
    error_type: str
    function: str | None
    file: str | None
    line: int | None
    summary: str

    def key(self) -> tuple[str, str, str | None, str | None]:
        """(sanitizer, error type, function, file): what the grader compares."""
        return (self.sanitizer, self.error_type, self.function, self.file)


_SAN = "|".join(SANITIZERS)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_SUMMARY = re.compile(rf"SUMMARY: ({_SAN}): (\S+)(.*)$")
_ERROR = re.compile(rf"ERROR: ({_SAN}): (.*)$")
_RUNTIME = re.compile(r"(?:^|\s)(\S+?):(\d+)(?::(\d+))?: runtime error: (.*)$")
_FRAME = re.compile(r"^\s*#(\d+)\s+0x[0-9a-fA-F]+\s+(?:in\s+(.+?)\s+)?(\S+)\s*$")
_LOC = re.compile(r"^(.*?)(?::(\d+))?(?::(\d+))?$")
# lines that open the secondary parts of an ASan report: stacks after them are not the crash's
_SECONDARY = re.compile(
    r"freed by thread|previously allocated by|allocated by thread|is located|"
    r"^Address 0x|^Shadow bytes|SUMMARY: "
)
_RUNTIME_FUNCS = ("__interceptor_", "___interceptor_", "__asan", "__ubsan", "__sanitizer",
                  "__lsan", "__interception", "__libc_")
_STARTUP_FUNCS = frozenset({"_start", "__start", "start_thread", "clone", "clone3"})
_RUNTIME_PATHS = ("libsanitizer", "sanitizer_common", "compiler-rt", "/asan/", "/ubsan/",
                  "sysdeps/", "../csu/", "/glibc", "/libc.so", "/libasan", "/libubsan")

# UBSan's message -> its check name, for output cut before the SUMMARY line
_UBSAN_MESSAGES = (
    ("signed integer overflow", "signed-integer-overflow"),
    ("negation of", "signed-integer-overflow"),
    ("shift exponent", "invalid-shift-exponent"),
    ("left shift of", "invalid-shift-base"),
    ("division by zero", "integer-divide-by-zero"),
    ("out of bounds for type", "out-of-bounds-index"),
    ("applying non-zero offset", "nullptr-with-nonzero-offset"),
    ("pointer index expression", "pointer-overflow"),
    ("null pointer passed as argument", "invalid-null-argument"),
    ("null pointer", "null-pointer-use"),
    ("misaligned address", "misaligned-pointer-use"),
    ("not a valid value for type 'bool'", "invalid-bool-load"),
    ("not a valid value for type", "invalid-enum-load"),
    ("outside the range of representable values", "float-cast-overflow"),
    ("variable length array bound", "non-positive-vla-index"),
    ("unreachable program point", "unreachable-call"),
    ("end of a value-returning function", "missing-return"),
)


def _asan_type(header: str) -> str:
    """The error type from an ``ERROR: AddressSanitizer: ...`` header (SUMMARY line missing)."""
    words = header.split()
    if not words:
        return "unknown"
    if words[0] == "attempting" and len(words) > 1:
        return "bad-free" if words[1] == "free" else words[1].rstrip(":")
    if words[0] == "requested" and "exceeds" in header:
        return "allocation-size-too-big"
    return words[0].rstrip(":")


def _ubsan_type(message: str) -> str:
    for needle, name in _UBSAN_MESSAGES:
        if needle in message:
            return name
    return "undefined-behavior"


def _project_path(path: str, source_root: str) -> str | None:
    """``path`` as ``src/...`` when it lies under the project's source root, else None.

    ``source_root`` is either relative (``src/``: any path whose last ``/src/`` component or
    leading ``src/`` marks the tree, as debug info holds the path the compiler was given,
    absolute or relative to the build directory) or absolute (the copy that was built)."""
    if not path or path.startswith("(") or any(p in path for p in _RUNTIME_PATHS):
        return None
    norm = posixpath.normpath(path)
    root = source_root.rstrip("/")
    if not root:
        return None
    name = posixpath.basename(root)
    if root.startswith("/"):
        root = posixpath.normpath(root)
        if norm.startswith(root + "/"):
            return f"{name}/{norm[len(root) + 1:]}"
        return None
    marker = f"/{root}/"
    at = ("/" + norm).rfind(marker)
    if at < 0:
        return None
    return f"{name}/{('/' + norm)[at + len(marker):]}"


def _parse_loc(loc: str) -> tuple[str, int | None]:
    m = _LOC.match(loc)
    assert m is not None  # the pattern matches every string
    return m.group(1), int(m.group(2)) if m.group(2) else None


def _crash_frames(lines: list[str], start: int) -> list[tuple[str, str]]:
    """(function, location) of the first block of stack frames at or after line ``start``."""
    frames: list[tuple[str, str]] = []
    last = -1
    for line in lines[start:]:
        m = _FRAME.match(line)
        if m is None:
            if frames or _SECONDARY.search(line):
                break
            continue
        num = int(m.group(1))
        if frames and num <= last:
            break
        last = num
        frames.append((m.group(2) or "", m.group(3)))
    return frames


def parse_report(stderr: str, source_root: str = "src/") -> Report | None:
    """The sanitizer report in ``stderr``, or None when it holds none.

    ``source_root`` names the project's source tree (relative, ``src/``, or the absolute path
    of the built copy); the crash function is the first frame of the crash stack under it."""
    text = _ANSI.sub("", stderr or "").replace("\r", "")
    lines = text.split("\n")

    sanitizer = error_type = summary = None
    anchor = 0
    rt_path: str | None = None
    rt_line: int | None = None
    for i, line in enumerate(lines):
        m = _SUMMARY.search(line)
        if m:
            sanitizer, error_type, summary = m.group(1), m.group(2), line[m.start():].strip()
            if error_type.isdigit() and "leaked" in line:
                error_type = "memory-leak"
            break
    # the error header (ASan) or the runtime error line (UBSan) opens the report; its crash
    # stack follows it
    for i, line in enumerate(lines):
        m = _ERROR.search(line)
        if m and (sanitizer is None or m.group(1) == sanitizer):
            anchor = i
            if sanitizer is None:
                sanitizer, error_type = m.group(1), _asan_type(m.group(2))
                summary = line[m.start():].strip()
            break
        r = _RUNTIME.search(line)
        if r and sanitizer in (None, "UndefinedBehaviorSanitizer"):
            anchor = i
            rt_path, rt_line = r.group(1), int(r.group(2))
            if sanitizer is None:
                sanitizer, error_type = "UndefinedBehaviorSanitizer", _ubsan_type(r.group(4))
                summary = line[r.start():].strip()
            break
    if sanitizer is None or error_type is None or summary is None:
        return None

    for func, loc in _crash_frames(lines, anchor):
        if func.startswith(_RUNTIME_FUNCS) or func in _STARTUP_FUNCS:
            continue
        path, line_no = _parse_loc(loc)
        file = _project_path(path, source_root)
        if file is not None:
            return Report(sanitizer, error_type, func or None, file, line_no, summary)

    # no project frame in the stack (none printed, cut off, or the crash is elsewhere): the
    # SUMMARY line's own location, then UBSan's runtime error line
    m = _SUMMARY.search(summary)
    if m:
        tail = m.group(3).strip()
        at = re.match(r"^(\S+)\s+in\s+(\S+)\s*$", tail)
        if at:
            path, line_no = _parse_loc(at.group(1))
            file = _project_path(path, source_root)
            if file is not None and not at.group(2).startswith(_RUNTIME_FUNCS):
                return Report(sanitizer, error_type, at.group(2), file, line_no, summary)
    if rt_path is not None:
        file = _project_path(rt_path, source_root)
        if file is not None:
            return Report(sanitizer, error_type, None, file, rt_line, summary)
    return Report(sanitizer, error_type, None, None, None, summary)
