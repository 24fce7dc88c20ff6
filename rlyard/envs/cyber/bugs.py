"""The bug catalogue of generated cyber targets: one C function per kind, and the inputs that reach it.

Every generated program hands one field of its input (a "blob": pointer and length, or NULL
when the field is missing) to one function, `F(const unsigned char *p, size_t len)`, and that
function holds the bug. A kind gives: the function's C text for drawn constants (buffer size,
minimum length, reserved byte, multiplier, table size), the blob that triggers the bug (a list
of runs `(byte, count)`; None = the field left out), a benign blob, the sanitizer report it must
produce (checked by validate against the measured one) and one sentence that explains the bug
for the oracle's thought. Text formats (`text=True`) only ever get printable blobs without the
format's separators, so every kind plays in every format.

The constants are drawn per task, so the trigger (a length above 24, exactly 16 bytes, a first
byte 0x7e ...) can only come from reading the function.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

Runs = list[tuple[int, int]]  # (byte value, count): b"#" + b"A" * 40 is [(35, 1), (65, 40)]
INT_MAX = 2**31 - 1
RESERVED_TEXT = "#@*+~"  # printable, never a separator of a text format (= : , ; |)


def run_bytes(runs: Runs | None) -> bytes | None:
    return None if runs is None else b"".join(bytes([value]) * count for value, count in runs)


def _filler(rng: random.Random, text: bool) -> int:
    return ord(rng.choice("ABCDEFGHKMNPQRSTXYZ")) if text else rng.choice([0x41, 0x42, 0x58, 0x5A, 0x61, 0x7A])


def _word(rng: random.Random, length: int, alphabet: str = "abcdefghijklmnopqrstuvwxyz") -> Runs:
    return [(ord(rng.choice(alphabet)), 1) for _ in range(length)]


@dataclass(frozen=True)
class BugKind:
    name: str
    sanitizer: str
    error_type: str
    draw: Callable[[random.Random, bool], dict]  # (rng, text) -> the kind's constants
    function: Callable[[str, str, dict], str]  # (function name, field noun, constants) -> C text
    trigger: Callable[[dict, random.Random, bool], Runs | None]  # a blob that crashes (rng varies it)
    benign: Callable[[dict, random.Random, bool], Runs]  # a blob that does not
    explain: Callable[[str, dict], str]  # (function name, constants) -> why the trigger crashes

    @property
    def expected(self) -> tuple[str, str]:
        return self.sanitizer, self.error_type


# ---------------------------------------------------------------- the eight kinds

def _stack_function(f: str, noun: str, c: dict) -> str:
    return f"""/* copies the {noun} into a fixed buffer and prints it */
static int {f}(const unsigned char *p, size_t len) {{
    char buf[{c['size']}];
    memcpy(buf, p, len);
    buf[len < {c['size']} ? len : {c['size'] - 1}] = '\\0';
    printf("{noun}: %s\\n", buf);
    return 0;
}}"""


def _heap_function(f: str, noun: str, c: dict) -> str:
    return f"""/* keeps a copy of the {noun} */
static int {f}(const unsigned char *p, size_t len) {{
    unsigned char *copy = malloc({c['size']});
    if (!copy) return -1;
    memcpy(copy, p, len);
    printf("{noun}: %zu bytes, first %d\\n", len, len ? copy[0] : 0);
    free(copy);
    return 0;
}}"""


def _off_by_one_function(f: str, noun: str, c: dict) -> str:
    return f"""/* copies the {noun} and its terminating zero */
static int {f}(const unsigned char *p, size_t len) {{
    if (len > {c['size']}) return -1;
    unsigned char *out = malloc({c['size']});
    if (!out) return -1;
    for (size_t i = 0; i <= len; i++)
        out[i] = i < len ? p[i] : 0;
    printf("{noun}: %s\\n", (char *)out);
    free(out);
    return 0;
}}"""


def _uaf_function(f: str, noun: str, c: dict) -> str:
    return f"""/* checks the {noun}; a short one is dropped */
static int {f}(const unsigned char *p, size_t len) {{
    unsigned char *copy = malloc(len + 1);
    int bad = 0;
    if (!copy) return -1;
    memcpy(copy, p, len);
    copy[len] = 0;
    if (len < {c['min_len']}) {{
        free(copy);
        bad = 1;
    }}
    printf("{noun} starts with %d\\n", copy[0]);
    if (!bad) free(copy);
    return bad ? -1 : 0;
}}"""


def _byte_literal(value: int, text: bool) -> str:
    return f"'{chr(value)}'" if text else f"0x{value:02x}"


def _double_free_function(f: str, noun: str, c: dict) -> str:
    return f"""/* stores the {noun}; a reserved one is released early */
static int {f}(const unsigned char *p, size_t len) {{
    unsigned char *copy = malloc(len + 1);
    int status = 0;
    if (!copy) return -1;
    memcpy(copy, p, len);
    copy[len] = 0;
    if (len > 0 && copy[0] == {c['reserved_literal']}) {{
        free(copy);
        status = -1;
    }}
    printf("{noun}: %zu bytes\\n", len);
    free(copy);
    return status;
}}"""


def _overflow_function(f: str, noun: str, c: dict) -> str:
    return f"""/* hashes the {noun} */
static int {f}(const unsigned char *p, size_t len) {{
    int h = {c['init']};
    for (size_t i = 0; i < len; i++)
        h = h * {c['factor']} + p[i];
    printf("{noun} hash: %d\\n", h);
    return 0;
}}"""


def _null_function(f: str, noun: str, c: dict) -> str:
    return f"""/* sums the {noun}: every file has one */
static int {f}(const unsigned char *p, size_t len) {{
    int total = p[0] * {c['weight']};
    for (size_t i = 1; i < len; i++)
        total += p[i];
    printf("{noun} sum: %d\\n", total);
    return 0;
}}"""


def _oob_function(f: str, noun: str, c: dict) -> str:
    index = f"p[i] - {_byte_literal(c['base'], True)}" if c["base"] else "p[i]"
    return f"""/* counts the symbols of the {noun} */
static int {f}(const unsigned char *p, size_t len) {{
    int counts[{c['slots']}] = {{0}};
    for (size_t i = 0; i < len; i++)
        counts[{index}]++;
    printf("{noun}: %d of the first symbol\\n", counts[0]);
    return 0;
}}"""


def _hash_overflows(init: int, factor: int, data: bytes) -> bool:
    h = init
    for b in data:
        h = h * factor + b
        if h > INT_MAX:
            return True
    return False


def _draw_overflow(rng: random.Random, text: bool) -> dict:
    return {"init": rng.choice([1, 3, 5, 7, 11, 17]), "factor": rng.choice([31, 33, 37, 61, 101, 131, 257])}


def _overflow_trigger(c: dict, rng: random.Random, text: bool) -> Runs:
    filler = _filler(rng, text)
    length = next(k for k in range(1, 64) if _hash_overflows(c["init"], c["factor"], bytes([filler]) * k))
    return [(filler, length + rng.randrange(0, 12))]


def _overflow_benign(c: dict, rng: random.Random, text: bool) -> Runs:
    for length in (4, 3, 2, 1):
        runs = _word(rng, length)
        if not _hash_overflows(c["init"], c["factor"], run_bytes(runs)):
            return runs
    raise AssertionError("a one-letter blob always fits")


def _draw_oob(rng: random.Random, text: bool) -> dict:
    if text:
        base, slots = rng.choice([("a", 26), ("A", 26), ("0", 10), ("a", 16)])
        return {"base": ord(base), "slots": slots}
    return {"base": 0, "slots": rng.choice([8, 16, 32, 64, 100])}


def _oob_trigger(c: dict, rng: random.Random, text: bool) -> Runs:
    if text:
        outside = [ch for ch in "ABCDEFGHKMNPQRSTXYZabcdefghkmnpqrstxyz0123456789"
                   if not c["base"] <= ord(ch) < c["base"] + c["slots"]]
        return [(c["base"], 1), (ord(rng.choice(outside)), 1)]
    return [(0, 1), (rng.randrange(c["slots"], 256), 1)]


def _oob_benign(c: dict, rng: random.Random, text: bool) -> Runs:
    return [(c["base"] + rng.randrange(c["slots"]), 1) for _ in range(rng.randint(3, 6))]


def _reserved(rng: random.Random, text: bool) -> dict:
    value = ord(rng.choice(RESERVED_TEXT)) if text else rng.choice([0x00, 0x7E, 0xFE, 0xFF, 0x2A, 0x01])
    return {"reserved": value, "reserved_literal": _byte_literal(value, text)}


KINDS: dict[str, BugKind] = {kind.name: kind for kind in [
    BugKind("stack_overflow", "AddressSanitizer", "stack-buffer-overflow",
            lambda rng, text: {"size": rng.choice([8, 12, 16, 20, 24, 32, 40, 48])}, _stack_function,
            lambda c, rng, text: [(_filler(rng, text), c["size"] + rng.randint(4, 40))],
            lambda c, rng, text: _word(rng, rng.randint(3, min(8, c["size"] - 1))),
            lambda f, c: f"`{f}` copies len bytes into a {c['size']}-byte stack buffer without checking len, "
                         f"so more than {c['size']} bytes overflow it."),
    BugKind("heap_overflow", "AddressSanitizer", "heap-buffer-overflow",
            lambda rng, text: {"size": rng.choice([8, 12, 16, 20, 24, 32, 40, 48])}, _heap_function,
            lambda c, rng, text: [(_filler(rng, text), c["size"] + rng.randint(4, 40))],
            lambda c, rng, text: _word(rng, rng.randint(3, min(8, c["size"]))),
            lambda f, c: f"`{f}` copies len bytes into a {c['size']}-byte heap buffer without checking len, "
                         f"so more than {c['size']} bytes overflow it."),
    BugKind("off_by_one", "AddressSanitizer", "heap-buffer-overflow",
            lambda rng, text: {"size": rng.choice([8, 10, 12, 16, 20, 24, 32])}, _off_by_one_function,
            lambda c, rng, text: [(_filler(rng, text), c["size"])],
            lambda c, rng, text: _word(rng, rng.randint(2, min(8, c["size"] - 1))),
            lambda f, c: f"`{f}` accepts len up to {c['size']}, but its loop runs to i <= len and writes the "
                         f"terminator at out[len]: exactly {c['size']} bytes write one past the {c['size']}-byte buffer."),
    BugKind("use_after_free", "AddressSanitizer", "heap-use-after-free",
            lambda rng, text: {"min_len": rng.randint(2, 6)}, _uaf_function,
            lambda c, rng, text: [(_filler(rng, text), rng.randint(1, c["min_len"] - 1))],
            lambda c, rng, text: _word(rng, c["min_len"] + rng.randint(0, 4)),
            lambda f, c: f"`{f}` frees the copy on its error path (len < {c['min_len']}) and then still reads "
                         f"copy[0], so a value shorter than {c['min_len']} bytes is used after free."),
    BugKind("double_free", "AddressSanitizer", "double-free", _reserved, _double_free_function,
            lambda c, rng, text: [(c["reserved"], 1), (_filler(rng, text), rng.randint(0, 6))],
            lambda c, rng, text: _word(rng, rng.randint(3, 7)),
            lambda f, c: f"`{f}` frees the copy when its first byte is {c['reserved_literal']} and frees it "
                         f"again at the end."),
    BugKind("signed_overflow", "UndefinedBehaviorSanitizer", "signed-integer-overflow", _draw_overflow, _overflow_function,
            _overflow_trigger, _overflow_benign,
            lambda f, c: f"`{f}` computes h = h * {c['factor']} + byte in a signed int, so a long value "
                         f"overflows it."),
    BugKind("null_deref", "UndefinedBehaviorSanitizer", "null-pointer-use",
            lambda rng, text: {"weight": rng.choice([2, 3, 10, 16, 100, 256])}, _null_function,
            lambda c, rng, text: None, lambda c, rng, text: _word(rng, rng.randint(2, 6)),
            lambda f, c: f"`{f}` reads p[0] without checking p, and the program passes NULL when the field "
                         f"is missing."),
    BugKind("oob_index", "UndefinedBehaviorSanitizer", "out-of-bounds-index", _draw_oob, _oob_function,
            _oob_trigger, _oob_benign,
            lambda f, c: f"`{f}` indexes a {c['slots']}-entry table with "
                         + (f"p[i] - '{chr(c['base'])}'" if c["base"] else "p[i]")
                         + " without a range check, so a symbol outside the table's range indexes out of bounds."),
]}


# ---------------------------------------------------------------- the oracle's trigger: one rule per kind

def canonical_trigger(bug: str, c: dict, text: bool) -> tuple[Runs | None, str | None]:
    """The trigger the oracle teaches, and its length as an expression of the source's constants.

    `trigger` draws lengths at random above the bound (a buffer of 20 gets 24 to 60 bytes), which
    a policy cannot learn from demonstrations: taught so, the SFT policy wrote the bound itself
    (20 bytes for a 20-byte buffer) on held-out targets. This one is a rule to copy: the bound
    read in the source plus 8 (written `20 + 8`, python does the sum), one byte under a minimum,
    the reserved byte first, 32 bytes of hashing, the byte 0xff (or '~') as an index. Always
    within the formats' limits (a one-byte length field, a 256-byte text line).
    """
    fill = ord("A")
    if bug in ("stack_overflow", "heap_overflow"):
        return [(fill, c["size"] + 8)], f"{c['size']} + 8"
    if bug == "off_by_one":
        return [(fill, c["size"])], None
    if bug == "use_after_free":
        return [(fill, 1)], None
    if bug == "double_free":
        return [(c["reserved"], 1), (fill, 3)], None
    if bug == "signed_overflow":
        assert _hash_overflows(c["init"], c["factor"], bytes([fill]) * 32)
        return [(fill, 32)], None
    if bug == "null_deref":
        return None, None
    if bug == "oob_index":
        outside = ord("~") if text else 0xFF  # past every table: 'a' + 26 is '{', binary tables hold at most 100
        return [(c["base"], 1), (outside, 1)], None
    raise KeyError(f"no canonical trigger for bug kind {bug!r}")
