"""cyber built-in targets and the sanitizer report parser.

Every folder in rlyard/envs/cyber/builtin is checked the way the grader will use it: its
target.json is complete, build.sh builds ./target with the fixed CC/CFLAGS in a copy of the
folder, the reference PoC crashes with exactly the expected (sanitizer, error type, function,
file), and the benign seed and an empty file run without a sanitizer report. parse_report is
also tested on reports captured from gcc 12's ASan/UBSan (the project's toolchain), with the
binaries built from absolute paths so that path normalisation is exercised.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import rlyard
from rlyard.envs.cyber.report import (
    ASAN_OPTIONS,
    CC,
    CFLAGS,
    UBSAN_OPTIONS,
    Report,
    parse_report,
    sanitizer_env,
)

BUILTIN = Path(rlyard.__file__).parent / "envs" / "cyber" / "builtin"
TARGETS = sorted(p.name for p in BUILTIN.iterdir() if p.is_dir()) if BUILTIN.is_dir() else []
FIELDS = {"id", "title", "sanitizer", "error_type", "function", "file", "difficulty", "hint"}
SANITIZERS = {"AddressSanitizer", "UndefinedBehaviorSanitizer"}
DIFFICULTIES = {"easy", "medium", "hard"}
RUN_TIMEOUT = 60

needs_gcc = pytest.mark.skipif(shutil.which(CC) is None, reason=f"{CC} is not installed")


def _run_env() -> dict[str, str]:
    # a clean environment: PATH (for the symbolizer) and the fixed sanitizer options only
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", **sanitizer_env()}


def _build(name: str, root: Path) -> tuple[Path, subprocess.CompletedProcess]:
    work = root / name
    shutil.copytree(BUILTIN / name, work)
    (work / "target").unlink(missing_ok=True)
    env = {**_run_env(), "CC": CC, "CFLAGS": CFLAGS}
    proc = subprocess.run(["sh", "build.sh"], check=False, cwd=work, env=env,
                          capture_output=True, text=True, timeout=300)
    return work, proc


def _run(work: Path, data: bytes | None, name: str) -> subprocess.CompletedProcess:
    path = work / name
    if data is not None:
        path.write_bytes(data)
    return subprocess.run(["./target", name], check=False, cwd=work, env=_run_env(),
                          capture_output=True, timeout=RUN_TIMEOUT)


def _meta(name: str) -> dict:
    return json.loads((BUILTIN / name / "target.json").read_text())


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> dict[str, Path]:
    """Every target built once per process, two builds at a time (each gcc -fsanitize build takes
    ~0.5 s). Session-scoped: the suite spreads this module's tests among other modules' on each
    worker, and a module-scoped fixture is torn down whenever the next test is another module's;
    it was built again 23 times (106 s of a run at 002f951, against 9 s for the module alone)."""
    if shutil.which(CC) is None:
        pytest.skip(f"{CC} is not installed")
    root = tmp_path_factory.mktemp("cyber_targets")
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(TARGETS, pool.map(lambda n: _build(n, root), TARGETS)))
    out = {}
    for name, (work, proc) in results.items():
        assert proc.returncode == 0 and (work / "target").is_file(), (
            f"{name}: build.sh failed\n{proc.stdout}\n{proc.stderr}")
        out[name] = work
    return out


def test_there_are_targets():
    assert len(TARGETS) >= 12, TARGETS


@pytest.mark.parametrize("name", TARGETS)
def test_target_folder_and_metadata(name):
    folder = BUILTIN / name
    meta = _meta(name)
    assert set(meta) >= FIELDS, FIELDS - set(meta)
    assert meta["id"] == name and re.fullmatch(r"[a-z][a-z0-9_]{1,31}", name)
    for key in FIELDS:
        assert isinstance(meta[key], str) and meta[key].strip(), key
        assert "\n" not in meta[key], key
    assert meta["sanitizer"] in SANITIZERS
    assert re.fullmatch(r"[A-Za-z][A-Za-z0-9-]*", meta["error_type"]), meta["error_type"]
    assert meta["difficulty"] in DIFFICULTIES
    assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", meta["function"]) and meta["function"] != "main"
    assert re.fullmatch(r"src/[A-Za-z0-9_./-]+\.c", meta["file"]) and ".." not in meta["file"]
    source = folder / meta["file"]
    assert source.is_file(), meta["file"]
    # the crash function is defined in that file
    assert re.search(rf"\b{re.escape(meta['function'])}\s*\([^;]*\)\s*\{{", source.read_text())
    sources = [p for p in (folder / "src").rglob("*") if p.is_file()]
    assert sources and all(p.suffix in (".c", ".h") for p in sources), sources
    lines = sum(len(p.read_text().splitlines()) for p in sources)
    assert 40 <= lines <= 150, lines
    assert (folder / "build.sh").is_file()
    for f in ("seed.bin", "poc.bin"):
        assert (folder / f).is_file() and (folder / f).stat().st_size <= 1 << 20, f
    assert (folder / "poc.bin").stat().st_size > 0


@needs_gcc
@pytest.mark.parametrize("name", TARGETS)
def test_poc_crashes_exactly_as_expected(built, name):
    meta = _meta(name)
    proc = _run(built[name], None, "poc.bin")
    stderr = proc.stderr.decode(errors="replace")
    report = parse_report(stderr)
    assert proc.returncode != 0 and report is not None, stderr[-3000:]
    expected = (meta["sanitizer"], meta["error_type"], meta["function"], meta["file"])
    assert report.key() == expected, stderr[-3000:]
    assert report.line is not None and report.line > 0


@needs_gcc
@pytest.mark.parametrize("name", TARGETS)
def test_seed_and_empty_input_do_not_crash(built, name):
    proc = _run(built[name], None, "seed.bin")
    stderr = proc.stderr.decode(errors="replace")
    assert parse_report(stderr) is None, stderr[-3000:]
    assert proc.returncode == 0, (proc.returncode, stderr[-2000:])
    proc = _run(built[name], b"", "empty.bin")
    stderr = proc.stderr.decode(errors="replace")
    assert parse_report(stderr) is None, stderr[-3000:]
    assert 0 <= proc.returncode < 126, (proc.returncode, stderr[-2000:])  # no signal, no abort


def test_set_covers_error_types_and_difficulties():
    metas = [_meta(n) for n in TARGETS]
    types = {(m["sanitizer"], m["error_type"]) for m in metas}
    assert len(types) >= 8, sorted(types)
    assert {m["difficulty"] for m in metas} == DIFFICULTIES
    assert {m["sanitizer"] for m in metas} == SANITIZERS


def test_fixed_settings():
    assert "-fsanitize=address,undefined" in CFLAGS and "-fno-sanitize-recover=all" in CFLAGS
    assert "halt_on_error=1" in ASAN_OPTIONS and "detect_leaks=0" in ASAN_OPTIONS
    assert "print_stacktrace=1" in UBSAN_OPTIONS and "report_error_type=1" in UBSAN_OPTIONS
    assert sanitizer_env() == {"ASAN_OPTIONS": ASAN_OPTIONS, "UBSAN_OPTIONS": UBSAN_OPTIONS}


# ---- parse_report on captured reports (gcc 12.2, the flags above; programs built from
# /tmp/cyb/cap/proj/src/chunk.c and /tmp/cyb/cap/lib/strdup.c; ASan's shadow-byte dump removed)

HBO_MEMSET = """\
=================================================================
==20908==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x602000000020 at pc 0x7f1ff4647681 bp 0x7ffd00fc0c00 sp 0x7ffd00fc03b0
WRITE of size 24 at 0x602000000020 thread T0
    #0 0x7f1ff4647680 in __interceptor_memset ../../../../src/libsanitizer/sanitizer_common/sanitizer_common_interceptors.inc:799
    #1 0x557101eb12a8 in read_chunk /tmp/cyb/cap/proj/src/chunk.c:5
    #2 0x557101eb159f in main /tmp/cyb/cap/proj/src/chunk.c:12
    #3 0x7f1ff4cdf249 in __libc_start_call_main ../sysdeps/nptl/libc_start_call_main.h:58
    #4 0x7f1ff4cdf304 in __libc_start_main_impl ../csu/libc-start.c:360
    #5 0x557101eb11a0 in _start (/tmp/cyb/cap/chunk+0x21a0)

0x602000000020 is located 0 bytes to the right of 16-byte region [0x602000000010,0x602000000020)
allocated by thread T0 here:
    #0 0x7f1ff46b89cf in __interceptor_malloc ../../../../src/libsanitizer/asan/asan_malloc_linux.cpp:69
    #1 0x557101eb1584 in main /tmp/cyb/cap/proj/src/chunk.c:11
    #2 0x7f1ff4cdf249 in __libc_start_call_main ../sysdeps/nptl/libc_start_call_main.h:58

SUMMARY: AddressSanitizer: heap-buffer-overflow ../../../../src/libsanitizer/sanitizer_common/sanitizer_common_interceptors.inc:799 in __interceptor_memset
==20908==ABORTING
"""

UBSAN_STACK = """\
/tmp/cyb/cap/proj/src/chunk.c:6:41: runtime error: shift exponent 37 is too large for 32-bit type 'int'
    #0 0x56387c69c360 in shift_bits /tmp/cyb/cap/proj/src/chunk.c:6
    #1 0x56387c69c5da in main /tmp/cyb/cap/proj/src/chunk.c:13
    #2 0x7fc124045249 in __libc_start_call_main ../sysdeps/nptl/libc_start_call_main.h:58
    #3 0x7fc124045304 in __libc_start_main_impl ../csu/libc-start.c:360
    #4 0x56387c69c1a0 in _start (/tmp/cyb/cap/chunk+0x21a0)

SUMMARY: UndefinedBehaviorSanitizer: invalid-shift-exponent /tmp/cyb/cap/proj/src/chunk.c:6:41 in 
"""

UBSAN_NO_STACK = """\
/tmp/cyb/cap/proj/src/chunk.c:6:41: runtime error: shift exponent 37 is too large for 32-bit type 'int'
SUMMARY: UndefinedBehaviorSanitizer: invalid-shift-exponent /tmp/cyb/cap/proj/src/chunk.c:6:41 in 
"""

SEGV_READ = """\
AddressSanitizer:DEADLYSIGNAL
=================================================================
==20953==ERROR: AddressSanitizer: SEGV on unknown address 0x000000000010 (pc 0x55b01ea9744b bp 0x7ffccac10fb0 sp 0x7ffccac10fa0 T0)
==20953==The signal is caused by a READ memory access.
==20953==Hint: address points to the zero page.
    #0 0x55b01ea9744b in walk /tmp/cyb/cap/proj/src/chunk.c:7
    #1 0x55b01ea9765a in main /tmp/cyb/cap/proj/src/chunk.c:14
    #2 0x7f33e0e45249 in __libc_start_call_main ../sysdeps/nptl/libc_start_call_main.h:58
    #3 0x7f33e0e45304 in __libc_start_main_impl ../csu/libc-start.c:360
    #4 0x55b01ea971a0 in _start (/tmp/cyb/cap/chunk+0x21a0)

AddressSanitizer can not provide additional info.
SUMMARY: AddressSanitizer: SEGV /tmp/cyb/cap/proj/src/chunk.c:7 in walk
==20953==ABORTING
"""

DOUBLE_FREE = """\
=================================================================
==20997==ERROR: AddressSanitizer: attempting double-free on 0x602000000010 in thread T0:
    #0 0x7f1d046b76a8 in __interceptor_free ../../../../src/libsanitizer/asan/asan_malloc_linux.cpp:52
    #1 0x561f45268466 in release /tmp/cyb/cap/proj/src/chunk.c:8
    #2 0x561f4526867a in main /tmp/cyb/cap/proj/src/chunk.c:15
    #3 0x7f1d03c45249 in __libc_start_call_main ../sysdeps/nptl/libc_start_call_main.h:58
    #4 0x7f1d03c45304 in __libc_start_main_impl ../csu/libc-start.c:360
    #5 0x561f452681a0 in _start (/tmp/cyb/cap/chunk+0x21a0)

0x602000000010 is located 0 bytes inside of 16-byte region [0x602000000010,0x602000000020)
freed by thread T0 here:
    #0 0x7f1d046b76a8 in __interceptor_free ../../../../src/libsanitizer/asan/asan_malloc_linux.cpp:52
    #1 0x561f45268466 in release /tmp/cyb/cap/proj/src/chunk.c:8
    #2 0x561f4526866e in main /tmp/cyb/cap/proj/src/chunk.c:15
    #3 0x7f1d03c45249 in __libc_start_call_main ../sysdeps/nptl/libc_start_call_main.h:58

previously allocated by thread T0 here:
    #0 0x7f1d046b89cf in __interceptor_malloc ../../../../src/libsanitizer/asan/asan_malloc_linux.cpp:69
    #1 0x561f45268584 in main /tmp/cyb/cap/proj/src/chunk.c:11
    #2 0x7f1d03c45249 in __libc_start_call_main ../sysdeps/nptl/libc_start_call_main.h:58

SUMMARY: AddressSanitizer: double-free ../../../../src/libsanitizer/asan/asan_malloc_linux.cpp:52 in __interceptor_free
==20997==ABORTING
"""

NO_PROJECT_FRAME = """\
=================================================================
==21048==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x602000000014 at pc 0x7f3551a4a731 bp 0x7ffd3f5c42e0 sp 0x7ffd3f5c3a90
READ of size 5 at 0x602000000014 thread T0
    #0 0x7f3551a4a730 in __interceptor_strlen ../../../../src/libsanitizer/sanitizer_common/sanitizer_common_interceptors.inc:389
    #1 0x559dc78ad22b in main /tmp/cyb/cap/lib/strdup.c:3
    #2 0x7f3551045249 in __libc_start_call_main ../sysdeps/nptl/libc_start_call_main.h:58
    #3 0x7f3551045304 in __libc_start_main_impl ../csu/libc-start.c:360
    #4 0x559dc78ad0f0 in _start (/tmp/cyb/cap/nolib+0x10f0)

0x602000000014 is located 0 bytes to the right of 4-byte region [0x602000000010,0x602000000014)
allocated by thread T0 here:
    #0 0x7f3551ab89cf in __interceptor_malloc ../../../../src/libsanitizer/asan/asan_malloc_linux.cpp:69
    #1 0x559dc78ad1ca in main /tmp/cyb/cap/lib/strdup.c:3
    #2 0x7f3551045249 in __libc_start_call_main ../sysdeps/nptl/libc_start_call_main.h:58

SUMMARY: AddressSanitizer: heap-buffer-overflow ../../../../src/libsanitizer/sanitizer_common/sanitizer_common_interceptors.inc:389 in __interceptor_strlen
==21048==ABORTING
"""

HBO_COLOURED = """\
=================================================================
\x1b[1m\x1b[31m==21091==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x602000000020 at pc 0x7f1475e47681 bp 0x7ffc899401f0 sp 0x7ffc8993f9a0
\x1b[1m\x1b[0m\x1b[1m\x1b[34mWRITE of size 24 at 0x602000000020 thread T0\x1b[1m\x1b[0m
    #0 0x7f1475e47680 in __interceptor_memset ../../../../src/libsanitizer/sanitizer_common/sanitizer_common_interceptors.inc:799
    #1 0x558bf55592a8 in read_chunk /tmp/cyb/cap/proj/src/chunk.c:5
    #2 0x558bf555959f in main /tmp/cyb/cap/proj/src/chunk.c:12
    #3 0x7f14764c7249 in __libc_start_call_main ../sysdeps/nptl/libc_start_call_main.h:58
    #4 0x7f14764c7304 in __libc_start_main_impl ../csu/libc-start.c:360
    #5 0x558bf55591a0 in _start (/tmp/cyb/cap/chunk+0x21a0)

\x1b[1m\x1b[32m0x602000000020 is located 0 bytes to the right of 16-byte region [0x602000000010,0x602000000020)
\x1b[1m\x1b[0m\x1b[1m\x1b[35mallocated by thread T0 here:\x1b[1m\x1b[0m
    #0 0x7f1475eb89cf in __interceptor_malloc ../../../../src/libsanitizer/asan/asan_malloc_linux.cpp:69
    #1 0x558bf5559584 in main /tmp/cyb/cap/proj/src/chunk.c:11
    #2 0x7f14764c7249 in __libc_start_call_main ../sysdeps/nptl/libc_start_call_main.h:58

SUMMARY: AddressSanitizer: heap-buffer-overflow ../../../../src/libsanitizer/sanitizer_common/sanitizer_common_interceptors.inc:799 in __interceptor_memset
==21091==ABORTING
"""

def test_heap_overflow_through_an_interceptor_frame():
    r = parse_report(HBO_MEMSET)
    assert r == Report("AddressSanitizer", "heap-buffer-overflow", "read_chunk", "src/chunk.c", 5,
                       r.summary)
    assert r.summary.startswith("SUMMARY: AddressSanitizer: heap-buffer-overflow")
    assert "__interceptor_memset" in r.summary  # the SUMMARY names the interceptor, not the bug


def test_ubsan_with_and_without_stack_trace():
    r = parse_report(UBSAN_STACK)
    assert r is not None and r.key() == ("UndefinedBehaviorSanitizer", "invalid-shift-exponent",
                                         "shift_bits", "src/chunk.c")
    assert r.line == 6
    r = parse_report(UBSAN_NO_STACK)
    assert r is not None and r.key() == ("UndefinedBehaviorSanitizer", "invalid-shift-exponent",
                                         None, "src/chunk.c")
    assert r.line == 6


def test_segv_and_double_free():
    r = parse_report(SEGV_READ)
    assert r is not None and r.key() == ("AddressSanitizer", "SEGV", "walk", "src/chunk.c")
    r = parse_report(DOUBLE_FREE)
    # the crash stack (the second free), not the "freed by" stack
    assert r is not None and r.key() == ("AddressSanitizer", "double-free", "release", "src/chunk.c")
    assert r.line == 8


def test_report_without_project_frame():
    r = parse_report(NO_PROJECT_FRAME)  # built from lib/, not src/
    assert r is not None and r.key() == ("AddressSanitizer", "heap-buffer-overflow", None, None)
    assert parse_report(NO_PROJECT_FRAME, source_root="lib/").key()[2:] == ("main", "lib/strdup.c")


def test_source_root_absolute_and_relative_paths():
    assert parse_report(HBO_MEMSET, "/tmp/cyb/cap/proj/src/").key()[2:] == ("read_chunk",
                                                                           "src/chunk.c")
    assert parse_report(HBO_MEMSET, "/elsewhere/src").key()[2:] == (None, None)
    rel = HBO_MEMSET.replace("/tmp/cyb/cap/proj/src/", "src/")
    assert parse_report(rel).key()[2:] == ("read_chunk", "src/chunk.c")
    dotted = HBO_MEMSET.replace("/tmp/cyb/cap/proj/src/", "./src/../src/")
    assert parse_report(dotted).key()[2:] == ("read_chunk", "src/chunk.c")


def test_ansi_colours():
    r = parse_report(HBO_COLOURED)
    assert r is not None and r.key() == parse_report(HBO_MEMSET).key()
    loud = "\n".join(f"\x1b[1m\x1b[31m{line}\x1b[0m" for line in HBO_MEMSET.splitlines())
    assert parse_report(loud).key() == parse_report(HBO_MEMSET).key()


def test_truncated_output():
    lines = HBO_MEMSET.splitlines()
    cut = "\n".join(lines[:5])  # the header and the crash stack down to read_chunk, no SUMMARY
    r = parse_report(cut)
    assert r is not None and r.key() == ("AddressSanitizer", "heap-buffer-overflow", "read_chunk",
                                         "src/chunk.c")
    r = parse_report("\n".join(lines[:3]))  # no frame of the project yet
    assert r is not None and r.key() == ("AddressSanitizer", "heap-buffer-overflow", None, None)
    r = parse_report(UBSAN_STACK.splitlines()[0] + "\n    #0 0x56387c69c360 in shift_b")
    assert r is not None and r.key() == ("UndefinedBehaviorSanitizer", "invalid-shift-exponent",
                                         None, "src/chunk.c")
    r = parse_report(DOUBLE_FREE[:DOUBLE_FREE.index("freed by")])
    assert r is not None and r.key() == ("AddressSanitizer", "double-free", "release", "src/chunk.c")
    assert parse_report(HBO_MEMSET[:80]) is None  # cut inside the ERROR header
    assert parse_report("") is None and parse_report("AddressSanitizer:DEADLYSIGNAL\n") is None


def test_ordinary_stderr_is_not_a_report():
    assert parse_report("invalid configuration record\n") is None
    assert parse_report("error: SUMMARY: something went wrong\n#0 0x1 in f src/a.c:1\n") is None


FAKE = r"""
#include <stdio.h>
int main(void)
{
    puts("==1==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x602000000020");
    puts("    #0 0x55 in read_chunk /src/chunk.c:5");
    puts("SUMMARY: AddressSanitizer: heap-buffer-overflow /src/chunk.c:5 in read_chunk");
    fputs("bad input\n", stderr);
    return 1;
}
"""


@needs_gcc
def test_fake_report_on_stdout_is_ignored(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "fake.c").write_text(FAKE)
    subprocess.run([CC, *CFLAGS.split(), "-o", "fake", "src/fake.c"], cwd=tmp_path, check=True,
                   timeout=120)
    proc = subprocess.run(["./fake"], check=False, cwd=tmp_path, env=_run_env(), capture_output=True, text=True,
                          timeout=RUN_TIMEOUT)
    assert proc.returncode == 1 and "SUMMARY: AddressSanitizer" in proc.stdout
    assert parse_report(proc.stderr) is None
    assert parse_report(proc.stdout) is not None  # the same text on stderr would parse
