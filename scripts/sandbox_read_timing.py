"""The residual channel of issue 36: page-cache residency read back by timing plain reads.

With posix_fadvise, mincore, cachestat and preadv2(RWF_NOWAIT) refused in the sandbox, a sender can
still set bits (read a cold chunk of a big system file: it enters the page cache) and a receiver
can still read them (time a one-byte read of each chunk: cached ~µs, cold ~0.1 ms), but no sandbox
can clear one: each chunk carries one bit once, until memory pressure evicts it. This script
measures that channel between two sandboxes, one run after the other and both at once: the file is
made cold from the host first (what an unused system file is), the sender reads the chunks of its
1 bits, the receiver times every chunk.

    PATH=$PWD/.venv/bin:$PATH python scripts/sandbox_read_timing.py [--bits 256] [--repeats 3]
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import secrets
import statistics
import tempfile
import threading
import time
from pathlib import Path

from rlyard.sandbox import Limits, Sandbox

SPACING = 256 << 10  # chunks far enough apart that the kernel's readahead of one never reaches the next
LIMITS = Limits(wall_s=60, cpu_s=60, memory_bytes=512 << 20)
SENDER = r"""
import os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
start = float(sys.argv[4])
while time.time() < start:
    time.sleep(0.001)
t = time.perf_counter()
for i, bit in enumerate(sys.argv[2]):
    if bit == "1":
        os.pread(fd, 1, i * int(sys.argv[3]))
print("SENT", time.perf_counter() - t, flush=True)
time.sleep(max(0.0, start + float(sys.argv[5]) - time.time()))  # at once: alive while the receiver reads
"""
RECEIVER = r"""
import os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
start = float(sys.argv[4])
while time.time() < start:
    time.sleep(0.001)
times = []
t = time.perf_counter()
for i in range(int(sys.argv[2])):
    a = time.perf_counter_ns()
    os.pread(fd, 1, i * int(sys.argv[3]))
    times.append(time.perf_counter_ns() - a)
print("TOOK", time.perf_counter() - t)
print("NS", *times)
"""


def big_files(need: int) -> list[str]:
    found = sorted(((os.path.getsize(p), p) for p in glob.glob("/usr/lib/*-linux-gnu/lib*.so*")
                    if os.path.isfile(p) and not os.path.islink(p)), reverse=True)
    return [p for size, p in found if size >= need]


def evict(path: str) -> None:
    """From the host: the state of a system file nobody has read lately."""
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)


def decode(times: list[int]) -> str:
    """Cold reads go to the disk, an order of magnitude slower: split the log-times in two
    groups where they differ most (Otsu), so a few scheduling hiccups do not move the cut."""
    logs = sorted(math.log(max(t, 1)) for t in times)
    best, cut = -1.0, logs[0]
    for k in range(1, len(logs)):
        low, high = logs[:k], logs[k:]
        spread = len(low) * len(high) * (statistics.fmean(high) - statistics.fmean(low)) ** 2
        if spread > best:
            best, cut = spread, (logs[k - 1] + logs[k]) / 2
    return "".join("1" if math.log(max(t, 1)) < cut else "0" for t in times)


def one(path: str, bits: int, concurrent: bool, workdir: Path) -> dict:
    sent = "".join(secrets.choice("01") for _ in range(bits))
    evict(path)
    boxes = {}
    for name in ("sender", "receiver"):
        (workdir / name).mkdir()
        boxes[name] = Sandbox(workdir / name, LIMITS, isolation="bwrap")
        (workdir / name / "p.py").write_text(SENDER if name == "sender" else RECEIVER)
    start = time.time() + 1.5
    out: dict[str, str] = {}
    send = lambda: out.setdefault("s", boxes["sender"].run(["python3", "p.py", path, sent, str(SPACING), str(start), str(2.0 if concurrent else 0.0)]).text)
    if concurrent:  # the receiver starts reading 0.3 s after the sender, while both sandboxes run
        thread = threading.Thread(target=send)
        thread.start()
        out["r"] = boxes["receiver"].run(["python3", "p.py", path, str(bits), str(SPACING), str(start + 0.3)]).text
        thread.join()
    else:
        send()
        out["r"] = boxes["receiver"].run(["python3", "p.py", path, str(bits), str(SPACING), str(time.time())]).text
    for box in boxes.values():
        box.close()
    times = [int(x) for x in next(line for line in out["r"].splitlines() if line.startswith("NS ")).split()[1:]]
    took = float(next(line for line in out["r"].splitlines() if line.startswith("TOOK ")).split()[1])
    sent_s = float(next(line for line in out["s"].splitlines() if line.startswith("SENT ")).split()[1])
    got = decode(times)
    right = sum(a == b for a, b in zip(sent, got))
    return {"bits": bits, "right": right, "error_rate": round(1 - right / bits, 4), "sender_s": round(sent_s, 4),
            "receiver_s": round(took, 4), "warm_median_us": round(statistics.median(t for t, b in zip(times, sent) if b == "1") / 1e3, 1),
            "cold_median_us": round(statistics.median(t for t, b in zip(times, sent) if b == "0") / 1e3, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bits", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    files = big_files(args.bits * SPACING)
    if not files:
        raise SystemExit(f"no shared library of {args.bits * SPACING >> 20} MiB under /usr/lib/*-linux-gnu")
    for concurrent in (False, True):
        rows = []
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as tmp:
                rows.append(one(files[0], args.bits, concurrent, Path(tmp)))
        errors = [r["error_rate"] for r in rows]
        rate = [r["bits"] / (r["sender_s"] + r["receiver_s"]) for r in rows]
        print(json.dumps({"mode": "at once" if concurrent else "one after another", "file": files[0],
                          "error_rate_median": statistics.median(errors), "raw_bits_per_s_median": round(statistics.median(rate)),
                          "runs": rows}))


if __name__ == "__main__":
    main()
