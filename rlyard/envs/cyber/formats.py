"""The input formats of generated cyber targets: each one a `main` that parses a file and hands one field to the bug.

Five formats, three binary and two text: a fixed `header` (magic, version, flags, a length field,
the field's bytes), tagged `records` (tag and length, in either order), a string table `strtab`
(a count, a table of lengths, the strings), `kv` (a magic line, then key=value lines) and
`fields` (a magic line, then one record of separated fields). Per task the constants differ:
magic, version, flag bit, the order of the header's fields, the width and byte order of length
fields, tags, indexes, keys, separators. A format gives the C text of its parser (which passes
the field, or NULL when it is missing, to the bug's function; for every kind but null_deref it
checks for NULL first), the file for a blob as parts (literal bytes and runs, so the oracle can
write them compactly) and a sentence describing the layout for the oracle's thought.
"""
from __future__ import annotations

import random
import string
from dataclasses import dataclass
from typing import Callable

from rlyard.envs.cyber.bugs import Runs

# ("lit", bytes), ("run", byte value, count), or ("uint", value, width, endian, role): a number field,
# its role "dec" (a count or version), "hex" (a flag or tag, written 0x.. in the source) or "len"
# (the field's length), so the oracle can write each field as the source names it.
Part = tuple

LOAD = """static unsigned char *load(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char *data = malloc(MAX_INPUT);
    *n = data ? fread(data, 1, MAX_INPUT, f) : 0;
    fclose(f);
    return data;
}"""
OPEN_BINARY = """    size_t n;
    unsigned char *data = argc > 1 ? load(argv[1], &n) : NULL;
    if (!data) {
        fprintf(stderr, "usage: target FILE\\n");
        return 1;
    }"""
OPEN_TEXT = """    FILE *f = argc > 1 ? fopen(argv[1], "r") : NULL;
    char line[256];
    if (!f) {
        fprintf(stderr, "usage: target FILE\\n");
        return 1;
    }"""


def part_bytes(part: Part) -> bytes:
    if part[0] == "lit":
        return part[1]
    if part[0] == "run":
        return bytes([part[1]]) * part[2]
    return _encode_uint(part[1], part[2], part[3])


def parts_bytes(parts: list[Part]) -> bytes:
    return b"".join(part_bytes(p) for p in parts)


def _runs_parts(runs: Runs) -> list[Part]:
    return [("run", value, count) for value, count in runs]


def _magic(rng: random.Random, title: str) -> str:
    letters = string.ascii_uppercase + string.digits
    stem = title.upper().replace(" ", "")[: rng.randint(1, 2)]
    return (stem + "".join(rng.choice(letters) for _ in range(4)))[: rng.choice([3, 4])]


def _uint(expr_at: Callable[[int], str], offset: int, width: int, endian: str) -> str:
    if width == 1:
        return expr_at(offset)
    lo, hi = expr_at(offset), expr_at(offset + 1)
    return f"({lo} | {hi} << 8)" if endian == "little" else f"({lo} << 8 | {hi})"


def _encode_uint(value: int, width: int, endian: str) -> bytes:
    return value.to_bytes(width, endian)


def _width_words(width: int, endian: str) -> str:
    return "1 byte" if width == 1 else f"2 bytes, {endian}-endian"


def _missing(check_null: bool, field: str, noun: str) -> str:
    return (f"""    if (!{field}) {{
        puts("no {noun}");
        return 0;
    }}
""" if check_null else "")


def _noun_macro(noun: str) -> str:
    return noun.upper().replace(" ", "_")


@dataclass(frozen=True)
class Format:
    name: str
    text: bool
    draw: Callable[[random.Random, str, str], dict]  # (rng, title, noun) -> the format's constants
    defines: Callable[[dict, str], list[str]]  # (constants, noun) -> #define lines
    main: Callable[[dict, str, str, str, bool], str]  # (constants, noun, title, function, check NULL) -> C
    parts: Callable[[dict, Runs | None, bool], list[Part]]  # (constants, blob or None = missing, seed?) -> file parts
    explain: Callable[[dict, str], str]  # (constants, noun) -> the layout in words


# ---------------------------------------------------------------- header: magic, fixed fields, the field's bytes

def _draw_header(rng: random.Random, title: str, noun: str) -> dict:
    order = ["version", "flags", "length"]
    rng.shuffle(order)
    return {"magic": _magic(rng, title), "version": rng.randint(1, 9), "flag": 1 << rng.randrange(8),
            "order": order, "width": rng.choice([1, 2]), "endian": rng.choice(["little", "big"]),
            "pad": rng.randint(0, 2), "other_flags": rng.randrange(256)}


def _header_offsets(c: dict) -> dict[str, int]:
    offsets, at = {}, len(c["magic"])
    for name in c["order"]:
        offsets[name] = at
        at += c["width"] if name == "length" else 1
    offsets["size"] = at + c["pad"]
    return offsets


def _header_main(c: dict, noun: str, title: str, function: str, check_null: bool) -> str:
    o, m, macro = _header_offsets(c), len(c["magic"]), _noun_macro(noun)
    length = _uint(lambda k: f"data[{k}]", o["length"], c["width"], c["endian"])
    return f"""int main(int argc, char **argv) {{
{OPEN_BINARY}
    if (n < HEADER_SIZE || memcmp(data, MAGIC, {m}) != 0) {{
        puts("not a {title} file");
        return 1;
    }}
    if (data[{o['version']}] != VERSION) {{
        puts("unsupported version");
        return 1;
    }}
    size_t len = {length};
    if (len > n - HEADER_SIZE) {{
        puts("truncated");
        return 1;
    }}
    const unsigned char *{noun} = (data[{o['flags']}] & HAS_{macro}) ? data + HEADER_SIZE : NULL;
{_missing(check_null, noun, noun)}    {function}({noun}, len);
    free(data);
    return 0;
}}"""


def _header_parts(c: dict, blob: Runs | None, seed: bool) -> list[Part]:
    length = sum(count for _, count in blob) if blob is not None else 0
    flags = (c["other_flags"] | c["flag"]) if blob is not None else (c["other_flags"] & ~c["flag"] if seed else 0)
    values = {"version": ("uint", c["version"], 1, "big", "dec"), "flags": ("uint", flags, 1, "big", "hex"),
              "length": ("uint", length, c["width"], c["endian"], "len")}
    pad = [("run", 0, c["pad"])] if c["pad"] else []
    return [("lit", c["magic"].encode())] + [values[name] for name in c["order"]] + pad + (_runs_parts(blob) if blob else [])


def _header_explain(c: dict, noun: str) -> str:
    o = _header_offsets(c)
    words = {"version": f"version {c['version']} at offset {o['version']}",
             "flags": f"flags at offset {o['flags']} (0x{c['flag']:02x} = has {noun})",
             "length": f"the {noun} length at offset {o['length']} ({_width_words(c['width'], c['endian'])})"}
    return (f"The header is {o['size']} bytes: magic \"{c['magic']}\", " + ", ".join(words[k] for k in c["order"])
            + f"; the {noun} starts at offset {o['size']}.")


HEADER = Format(
    "header", False, _draw_header,
    lambda c, noun: [f'#define MAGIC "{c["magic"]}"', f"#define VERSION {c['version']}",
                     f"#define HAS_{_noun_macro(noun)} 0x{c['flag']:02x}", f"#define HEADER_SIZE {_header_offsets(c)['size']}"],
    _header_main, _header_parts, _header_explain)


# ---------------------------------------------------------------- records: magic, then tagged records

def _draw_records(rng: random.Random, title: str, noun: str) -> dict:
    tags = rng.sample(range(1, 250), 3)
    return {"magic": _magic(rng, title), "tag": tags[0], "decoys": tags[1:], "tag_first": rng.random() < 0.5,
            "width": rng.choice([1, 2]), "endian": rng.choice(["little", "big"])}


def _records_main(c: dict, noun: str, title: str, function: str, check_null: bool) -> str:
    m, w = len(c["magic"]), c["width"]
    length = _uint(lambda k: f"data[pos + {k}]" if k else "data[pos]", 1 if c["tag_first"] else 0, w, c["endian"])
    tag = "data[pos]" if c["tag_first"] else f"data[pos + {w}]"
    return f"""int main(int argc, char **argv) {{
{OPEN_BINARY}
    if (n < {m} || memcmp(data, MAGIC, {m}) != 0) {{
        puts("not a {title} file");
        return 1;
    }}
    const unsigned char *{noun} = NULL;
    size_t {noun}_len = 0, pos = {m};
    while (pos + {1 + w} <= n) {{  /* each record: {"tag, length" if c["tag_first"] else "length, tag"}, data */
        unsigned tag = {tag};
        size_t len = {length};
        pos += {1 + w};
        if (len > n - pos) {{
            puts("truncated record");
            return 1;
        }}
        if (tag == TAG_{_noun_macro(noun)}) {{
            {noun} = data + pos;
            {noun}_len = len;
        }}
        pos += len;
    }}
{_missing(check_null, noun, noun)}    {function}({noun}, {noun}_len);
    free(data);
    return 0;
}}"""


def _record(c: dict, tag: int, body: list[Part], length: int, role: str = "len") -> list[Part]:
    size, tag_part = ("uint", length, c["width"], c["endian"], role), ("uint", tag, 1, "big", "hex")
    return ([tag_part, size] if c["tag_first"] else [size, tag_part]) + body


def _records_parts(c: dict, blob: Runs | None, seed: bool) -> list[Part]:
    parts: list[Part] = [("lit", c["magic"].encode())]
    if seed or blob is None:  # a decoy record: any other tag is skipped
        parts += _record(c, c["decoys"][0], [("lit", b"v1")], 2, "dec")
    if blob is not None:
        parts += _record(c, c["tag"], _runs_parts(blob), sum(count for _, count in blob))
    return parts


def _records_explain(c: dict, noun: str) -> str:
    order = "a tag byte, then the length" if c["tag_first"] else "the length, then a tag byte"
    return (f"After the magic \"{c['magic']}\" come records: {order} ({_width_words(c['width'], c['endian'])}), "
            f"then the data; the {noun} is the record with tag 0x{c['tag']:02x}.")


RECORDS = Format(
    "records", False, _draw_records,
    lambda c, noun: [f'#define MAGIC "{c["magic"]}"', f"#define TAG_{_noun_macro(noun)} 0x{c['tag']:02x}",
                     f"#define TAG_VERSION 0x{c['decoys'][0]:02x}"],
    _records_main, _records_parts, _records_explain)


# ---------------------------------------------------------------- strtab: a count, a table of lengths, the strings

def _draw_strtab(rng: random.Random, title: str, noun: str) -> dict:
    return {"magic": _magic(rng, title), "index": rng.randint(0, 3), "width": rng.choice([1, 2]),
            "endian": rng.choice(["little", "big"]), "fillers": [rng.choice(["id", "ab", "x1", "v2", "ok"]) for _ in range(4)]}


def _strtab_main(c: dict, noun: str, title: str, function: str, check_null: bool) -> str:
    m, w = len(c["magic"]), c["width"]
    length = f"data[{m + 1} + i]"
    if w > 1:
        lo, hi = f"data[{m + 1} + 2 * i]", f"data[{m + 2} + 2 * i]"
        length = f"({lo} | {hi} << 8)" if c["endian"] == "little" else f"({lo} << 8 | {hi})"
    return f"""int main(int argc, char **argv) {{
{OPEN_BINARY}
    if (n < {m + 1} || memcmp(data, MAGIC, {m}) != 0) {{
        puts("not a {title} file");
        return 1;
    }}
    size_t count = data[{m}], pos = {m + 1} + {w} * count;  /* the strings follow the table of lengths */
    if (pos > n) {{
        puts("truncated table");
        return 1;
    }}
    const unsigned char *{noun} = NULL;
    size_t {noun}_len = 0;
    for (size_t i = 0; i < count; i++) {{
        size_t len = {length};
        if (len > n - pos) {{
            puts("truncated string");
            return 1;
        }}
        if (i == {_noun_macro(noun)}_INDEX) {{
            {noun} = data + pos;
            {noun}_len = len;
        }}
        pos += len;
    }}
{_missing(check_null, noun, noun)}    {function}({noun}, {noun}_len);
    free(data);
    return 0;
}}"""


def _strtab_parts(c: dict, blob: Runs | None, seed: bool) -> list[Part]:
    strings: list[list[Part]] = [[("lit", f.encode())] for f in c["fillers"][: c["index"]]]
    lengths = [len(f) for f in c["fillers"][: c["index"]]]
    if blob is not None:
        strings.append(_runs_parts(blob))
        lengths.append(sum(count for _, count in blob))
    table = [("uint", k, c["width"], c["endian"], "len" if blob is not None and i == c["index"] else "dec")
             for i, k in enumerate(lengths)]
    parts: list[Part] = [("lit", c["magic"].encode()), ("uint", len(strings), 1, "big", "dec")] + table
    for s in strings:
        parts += s
    return parts


def _strtab_explain(c: dict, noun: str) -> str:
    return (f"After the magic \"{c['magic']}\" come a count byte, one length per string "
            f"({_width_words(c['width'], c['endian'])}), then the strings; the {noun} is string number {c['index']}.")


STRTAB = Format(
    "strtab", False, _draw_strtab,
    lambda c, noun: [f'#define MAGIC "{c["magic"]}"', f"#define {_noun_macro(noun)}_INDEX {c['index']}"],
    _strtab_main, _strtab_parts, _strtab_explain)


# ---------------------------------------------------------------- kv: a magic line, then key=value lines

def _magic_line(rng: random.Random, title: str) -> str:
    word = title.upper().replace(" ", "")[:8]
    return rng.choice([f"#{word} v{rng.randint(1, 9)}", f"[{word} {rng.randint(1, 9)}]", f"{word}/{rng.randint(1, 9)}",
                       f"@{word}-{rng.choice(string.ascii_uppercase)}{rng.randint(1, 9)}"])


def _draw_kv(rng: random.Random, title: str, noun: str) -> dict:
    return {"magic": _magic_line(rng, title), "sep": rng.choice("=:"), "others": rng.sample(["mode", "size", "id", "kind", "ver"], 2)}


def _kv_main(c: dict, noun: str, title: str, function: str, check_null: bool) -> str:
    call = (f"{function}((const unsigned char *)value, strlen(value));" if check_null
            else f"{function}(found ? (const unsigned char *)value : NULL, strlen(value));")
    missing = (f"""    if (!found) {{
        puts("no {noun}");
        return 0;
    }}
""" if check_null else "")
    return f"""int main(int argc, char **argv) {{
{OPEN_TEXT}
    char value[256] = "";
    int found = 0;
    if (!fgets(line, sizeof line, f) || strncmp(line, MAGIC_LINE, strlen(MAGIC_LINE)) != 0) {{
        puts("not a {title} file");
        return 1;
    }}
    while (fgets(line, sizeof line, f)) {{  /* key{c['sep']}value */
        line[strcspn(line, "\\n")] = 0;
        char *sep = strchr(line, '{c['sep']}');
        if (!sep) continue;
        *sep = 0;
        if (strcmp(line, KEY) == 0) {{
            strcpy(value, sep + 1);
            found = 1;
        }}
    }}
    fclose(f);
{missing}    {call}
    return 0;
}}"""


def _kv_parts(c: dict, blob: Runs | None, seed: bool) -> list[Part]:
    parts: list[Part] = [("lit", (c["magic"] + "\n").encode())]
    if seed or blob is None:
        parts.append(("lit", f"{c['others'][0]}{c['sep']}1\n".encode()))
    if blob is not None:
        parts += [("lit", f"{c['key']}{c['sep']}".encode())] + _runs_parts(blob) + [("lit", b"\n")]  # key apart from the magic line
    return parts


def _kv_explain(c: dict, noun: str) -> str:
    return f"The first line must start with \"{c['magic']}\"; then lines key{c['sep']}value, and the {noun} is the value of key \"{c['key']}\"."


KV = Format(
    "kv", True, lambda rng, title, noun: {**_draw_kv(rng, title, noun), "key": noun},
    lambda c, noun: [f'#define MAGIC_LINE "{c["magic"]}"', f'#define KEY "{c["key"]}"'],
    _kv_main, _kv_parts, _kv_explain)


# ---------------------------------------------------------------- fields: a magic line, then one separated record

def _draw_fields(rng: random.Random, title: str, noun: str) -> dict:
    names = rng.sample([x for x in ("id", "size", "kind", "owner", "date", "mode", "zone") if x != noun], 3)
    index = rng.randint(1, 3)
    names.insert(index, noun)
    return {"magic": _magic_line(rng, title), "sep": rng.choice(",;|"), "names": names, "index": index,
            "fillers": [rng.choice(["7", "12", "x", "red", "a1", "on"]) for _ in range(4)]}


def _fields_main(c: dict, noun: str, title: str, function: str, check_null: bool) -> str:
    return f"""int main(int argc, char **argv) {{
{OPEN_TEXT}
    if (!fgets(line, sizeof line, f) || strncmp(line, MAGIC_LINE, strlen(MAGIC_LINE)) != 0) {{
        puts("not a {title} file");
        return 1;
    }}
    if (!fgets(line, sizeof line, f)) {{
        puts("no record");
        return 1;
    }}
    fclose(f);
    line[strcspn(line, "\\n")] = 0;
    const char *{noun} = NULL;
    char *start = line;
    for (int k = 0; start; k++) {{  /* fields: {c['sep'].join(c['names'])} */
        char *end = strchr(start, SEP);
        if (end) *end++ = 0;
        if (k == {_noun_macro(noun)}_FIELD) {{
            {noun} = start;
            break;
        }}
        start = end;
    }}
{_missing(check_null, noun, noun)}    {function}((const unsigned char *){noun}, {noun} ? strlen({noun}) : 0);
    return 0;
}}"""


def _fields_parts(c: dict, blob: Runs | None, seed: bool) -> list[Part]:
    sep = c["sep"].encode()
    before = sep.join(f.encode() for f in c["fillers"][: c["index"]])
    parts: list[Part] = [("lit", (c["magic"] + "\n").encode())]
    if blob is not None:
        parts += [("lit", before + sep)] + _runs_parts(blob)
        if seed:
            parts.append(("lit", sep + c["fillers"][-1].encode()))
    else:
        parts.append(("lit", before))
    return parts + [("lit", b"\n")]


def _fields_explain(c: dict, noun: str) -> str:
    return (f"The first line must start with \"{c['magic']}\"; the second is one record of fields separated by "
            f"'{c['sep']}' ({c['sep'].join(c['names'])}), and the {noun} is field {c['index']} (counting from 0).")


FIELDS = Format(
    "fields", True, _draw_fields,
    lambda c, noun: [f'#define MAGIC_LINE "{c["magic"]}"', f"#define SEP '{c['sep']}'",
                     f"#define {_noun_macro(noun)}_FIELD {c['index']}"],
    _fields_main, _fields_parts, _fields_explain)

FORMATS: dict[str, Format] = {f.name: f for f in (HEADER, RECORDS, STRTAB, KV, FIELDS)}
