"""The catalogue the code generator draws from: helper functions by family, and the bugs each can carry.

A `Template` is one small helper written correctly, with `$name` placeholders (string.Template,
so the code's own braces stay as they are) for the function and parameter names, a few calls to
test it with, and the bugs it can carry: for each bug kind one (correct fragment, buggy
fragment) pair, both with the same placeholders; the buggy one replaces the correct one (which
occurs exactly once in the function) to make the task's base. The calls decide which tests
fail: a call whose result the bug changes is a FAIL_TO_PASS test, one it leaves alone a
PASS_TO_PASS test (`generate.py` runs both versions to know which).

Bug kinds: `off_by_one` (a range or slice bound), `comparison` (`<` for `<=` and the like),
`boolean` (`and` for `or`), `swapped_args` (a call's or expression's arguments in the wrong
order), `edge_case` (a missing guard for empty input or a boundary value), `constant` (a
wrong constant or default).
"""
from __future__ import annotations

from dataclasses import dataclass, field

KINDS = ("off_by_one", "comparison", "boolean", "swapped_args", "edge_case", "constant")
FAMILIES = ("string", "list", "dict", "number", "date", "interval")


@dataclass(frozen=True)
class Template:
    key: str  # "<family>.<helper>", unique
    names: tuple[str, ...]  # function name choices
    params: dict[str, tuple[str, ...]]  # placeholder -> parameter name choices
    source: str  # the correct function, `$f` its name
    calls: tuple[str, ...]  # argument lists (Python source) the tests call it with
    bugs: dict[str, tuple[str, str]] = field(default_factory=dict)  # kind -> (correct fragment, buggy fragment)

    @property
    def family(self) -> str:
        return self.key.split(".")[0]


T = Template
TEMPLATES: tuple[Template, ...] = (
    # ---- string helpers
    T("string.truncate", ("truncate", "shorten", "clip_text", "ellipsize"), {"s": ("text", "s", "value"), "w": ("width", "limit", "size")},
      '''def $f($s, $w, suffix="..."):
    """$s cut to at most $w characters, ending with suffix when it was cut."""
    if len($s) <= $w:
        return $s
    return $s[:$w - len(suffix)] + suffix
''', ("'hello', 10", "'hello', 5", "'hello world', 8", "'abcdefghij', 6", "'', 3", "'abc', 3"),
      {"comparison": ("len($s) <= $w", "len($s) < $w"), "off_by_one": ("$s[:$w - len(suffix)]", "$s[:$w - len(suffix) - 1]"),
       "constant": ('suffix="..."', 'suffix=".."')}),
    T("string.initials", ("initials", "monogram", "name_initials"), {"s": ("name", "full_name", "text")},
      '''def $f($s, sep="."):
    """The initials of a name: 'ada king lovelace' -> 'A.K.L.'."""
    words = $s.split()
    if not words:
        return ""
    return sep.join(w[0].upper() for w in words) + sep
''', ("'ada king lovelace'", "'grace hopper'", "''", "'   '", "'alan'"),
      {"edge_case": ('    if not words:\n        return ""\n', ""), "constant": ('sep="."', 'sep=""')}),
    T("string.strip_prefix", ("strip_prefix", "remove_prefix", "drop_prefix", "without_prefix"),
      {"s": ("text", "s", "word"), "p": ("prefix", "head", "start")},
      '''def $f($s, $p):
    """$s without $p at its start; unchanged when it does not start with it."""
    if $s.startswith($p):
        return $s[len($p):]
    return $s
''', ("'unhappy', 'un'", "'happy', 'un'", "'un', 'un'", "'prefix_name', 'prefix_'", "'abc', 'x'"),
      {"swapped_args": ("$s.startswith($p)", "$p.startswith($s)"), "off_by_one": ("$s[len($p):]", "$s[len($p) + 1:]")}),
    T("string.replace_word", ("replace_word", "swap_word", "substitute"), {"s": ("text", "sentence", "line"), "o": ("old", "before", "target")},
      '''def $f($s, $o, new):
    """$s with every whole word equal to $o replaced by new."""
    return " ".join(new if w == $o else w for w in $s.split(" "))
''', ("'the cat sat', 'cat', 'dog'", "'a b a', 'a', 'c'", "'cat', 'cat', 'dog'", "'x y', 'z', 'w'"),
      {"swapped_args": ("new if w == $o else w", "w if w == $o else new")}),
    T("string.mask", ("mask", "redact", "hide_digits", "mask_tail"), {"s": ("text", "number", "card")},
      '''def $f($s, keep=4, char="*"):
    """$s with all but its last `keep` characters replaced by char."""
    if len($s) <= keep:
        return $s
    return char * (len($s) - keep) + $s[-keep:]
''', ("'1234567890'", "'12345'", "'1234'", "'abc'", "'secretcode'"),
      {"constant": ("keep=4", "keep=3"), "off_by_one": ("char * (len($s) - keep)", "char * (len($s) - keep - 1)")}),
    T("string.skip_line", ("is_skippable", "skip_line", "is_comment_or_blank", "ignorable"), {"s": ("line", "row", "text")},
      '''def $f($s):
    """True for a line to skip: blank, or a comment starting with #."""
    stripped = $s.strip()
    return not stripped or stripped.startswith("#")
''', ("''", "'# note'", "'x = 1'", "'   '", "'  # indented'", "'a # b'"),
      {"boolean": ("not stripped or stripped", "not stripped and stripped"), "constant": ('startswith("#")', 'startswith("//")')}),
    T("string.count_words", ("count_words", "word_count", "n_words"), {"s": ("text", "sentence", "s"), "m": ("min_len", "shortest", "at_least")},
      '''def $f($s, $m=1):
    """How many words of $s have at least $m characters."""
    return sum(1 for word in $s.split() if len(word) >= $m)
''', ("'a bb ccc'", "'a bb ccc', 2", "'', 1", "'one two', 3", "'hi there', 5", "'x y zz'", "'i am here'"),
      {"comparison": ("len(word) >= $m", "len(word) > $m"), "constant": ("$m=1", "$m=2")}),
    # ---- list helpers
    T("list.chunk", ("chunk", "chunked", "batches", "split_every"), {"xs": ("items", "values", "xs", "seq"), "n": ("size", "n", "width")},
      '''def $f($xs, $n):
    """$xs cut into consecutive lists of $n items (the last may be shorter)."""
    return [$xs[i:i + $n] for i in range(0, len($xs), $n)]
''', ("[1, 2, 3, 4], 2", "[1, 2, 3], 2", "[1, 2, 3, 4, 5], 3", "[], 2", "[1, 2], 2", "[7], 3"),
      {"off_by_one": ("range(0, len($xs), $n)", "range(0, len($xs) - 1, $n)"), "swapped_args": ("range(0, len($xs), $n)", "range(0, $n, len($xs))")}),
    T("list.take_last", ("take_last", "last_n", "tail", "newest"), {"xs": ("items", "values", "xs", "seq"), "n": ("n", "count", "k")},
      '''def $f($xs, $n):
    """The last $n items of $xs ($xs itself when it has fewer)."""
    if $n <= 0:
        return []
    return $xs[-$n:]
''', ("[1, 2, 3, 4], 2", "[1, 2, 3], 0", "[1, 2], 5", "[5, 6, 7], 1", "[], 3", "[4, 5], 0", "[9], 0"),
      {"edge_case": ("    if $n <= 0:\n        return []\n", ""), "comparison": ("$n <= 0", "$n < 0"), "off_by_one": ("$xs[-$n:]", "$xs[-$n + 1:]")}),
    T("list.pairs", ("pairs", "pairwise", "neighbours", "adjacent_pairs"), {"xs": ("items", "values", "xs", "seq")},
      '''def $f($xs):
    """Each item with the next one: [1, 2, 3] -> [(1, 2), (2, 3)]."""
    return list(zip($xs, $xs[1:]))
''', ("[1, 2, 3]", "[4, 5]", "[]", "[1]", "['a', 'b', 'c', 'd']"),
      {"swapped_args": ("zip($xs, $xs[1:])", "zip($xs[1:], $xs)"), "off_by_one": ("$xs[1:]", "$xs[2:]")}),
    T("list.argmax", ("argmax", "index_of_max", "best_index", "max_position"), {"xs": ("items", "values", "scores", "xs")},
      '''def $f($xs):
    """The index of the largest item (the first one on ties); None for an empty list."""
    if not $xs:
        return None
    best = 0
    for i in range(1, len($xs)):
        if $xs[i] > $xs[best]:
            best = i
    return best
''', ("[3, 9, 2]", "[1, 5, 5]", "[]", "[4]", "[1, 2, 8]", "[7, 1, 7]", "[0, 1, 5]", "[2, 3]"),
      {"edge_case": ("    if not $xs:\n        return None\n", ""), "comparison": ("$xs[i] > $xs[best]", "$xs[i] >= $xs[best]"),
       "off_by_one": ("range(1, len($xs))", "range(1, len($xs) - 1)")}),
    T("list.count_between", ("count_between", "count_in_range", "how_many_within"), {"xs": ("items", "values", "xs"), "lo": ("lo", "low", "start"), "hi": ("hi", "high", "stop")},
      '''def $f($xs, $lo, $hi):
    """How many items lie in [$lo, $hi], both ends included."""
    return sum(1 for x in $xs if $lo <= x and x <= $hi)
''', ("[1, 5, 10], 2, 8", "[1, 5, 10], 1, 10", "[], 0, 1", "[3, 4], 0, 9", "[0, 20], 5, 6", "[2, 4, 6], 0, 6", "[3, 3], 1, 3"),
      {"boolean": ("$lo <= x and x <= $hi", "$lo <= x or x <= $hi"), "comparison": ("x <= $hi", "x < $hi")}),
    T("list.sum_top", ("sum_top", "top_total", "sum_largest", "best_sum"), {"xs": ("items", "values", "scores", "xs")},
      '''def $f($xs, k=3):
    """The sum of the k largest items of $xs."""
    return sum(sorted($xs, reverse=True)[:k])
''', ("[5, 1, 4, 2, 3]", "[1, 2]", "[]", "[10, 20, 30, 40], 2", "[9, 9, 9, 9]"),
      {"constant": ("k=3", "k=2"), "off_by_one": ("[:k]", "[:k - 1]")}),
    # ---- dict helpers
    T("dict.invert", ("invert", "inverted", "flip", "reverse_map"), {"d": ("mapping", "table", "d")},
      '''def $f($d):
    """$d with keys and values swapped."""
    return dict(zip($d.values(), $d.keys()))
''', ("{'a': 1, 'b': 2}", "{}", "{'x': 'y'}", "{1: 1}"),
      {"swapped_args": ("zip($d.values(), $d.keys())", "zip($d.keys(), $d.values())")}),
    T("dict.get_path", ("get_path", "dig", "lookup", "deep_get"), {"d": ("data", "tree", "config"), "p": ("path", "dotted", "key_path")},
      '''def $f($d, $p, default=None):
    """The value at a dotted path ('a.b') in nested dicts, or default when a key is missing."""
    current = $d
    for key in $p.split("."):
        if not isinstance(current, dict) or key not in current:
            return default
        current = current[key]
    return current
''', ("{'a': {'b': 1}}, 'a.b'", "{'a': {'b': 1}}, 'a.c'", "{'a': 2}, 'a'", "{'a': 2}, 'a.b'", "{}, 'x', 0",
       "{'x': {'y': {'z': 3}}}, 'x.y.z'", "{'k': {'v': 0}}, 'k.v'"),
      {"boolean": ("isinstance(current, dict) or key", "isinstance(current, dict) and key"), "constant": ('split(".")', 'split("/")')}),
    T("dict.word_counts", ("word_counts", "tally", "count_each", "frequencies"), {"xs": ("words", "items", "tokens")},
      '''def $f($xs):
    """How many times each item occurs in $xs."""
    counts = {}
    for item in $xs:
        counts[item] = counts.get(item, 0) + 1
    return counts
''', ("['a', 'b', 'a']", "[]", "['x']", "[1, 1, 1]"),
      {"constant": ("counts.get(item, 0)", "counts.get(item, 1)")}),
    T("dict.merged", ("merged", "merge_settings", "overlay", "with_overrides"), {"a": ("base", "defaults", "first"), "b": ("override", "extra", "second")},
      '''def $f($a, $b):
    """$a updated with $b: the keys of $b win."""
    return {**$a, **$b}
''', ("{'x': 1}, {'x': 2}", "{'x': 1}, {'y': 2}", "{}, {}", "{'a': 1, 'b': 2}, {'b': 3}"),
      {"swapped_args": ("{**$a, **$b}", "{**$b, **$a}")}),
    T("dict.top_key", ("top_key", "best_key", "key_of_max", "leader"), {"d": ("scores", "counts", "votes")},
      '''def $f($d):
    """The key with the highest value; None for an empty dict."""
    if not $d:
        return None
    return max($d, key=$d.get)
''', ("{'a': 1, 'b': 3}", "{}", "{'x': 5}", "{'p': 2, 'q': 1}"),
      {"edge_case": ("    if not $d:\n        return None\n", "")}),
    T("dict.at_least", ("at_least", "keep_min", "filter_min", "above_threshold"), {"d": ("scores", "counts", "stock"), "m": ("minimum", "floor", "threshold")},
      '''def $f($d, $m):
    """The entries of $d whose value is $m or more."""
    return {k: v for k, v in $d.items() if v >= $m}
''', ("{'a': 1, 'b': 5}, 3", "{'a': 3, 'b': 2}, 3", "{}, 1", "{'x': 10}, 10", "{'y': 0}, 1"),
      {"comparison": ("v >= $m", "v > $m")}),
    T("dict.group_by_initial", ("group_by_initial", "by_first_letter", "index_words"), {"xs": ("words", "names", "items")},
      '''def $f($xs):
    """$xs grouped by their lower-case first letter; empty strings are skipped."""
    groups = {}
    for word in $xs:
        if not word:
            continue
        groups.setdefault(word[0].lower(), []).append(word)
    return groups
''', ("['apple', 'Avocado', 'bean']", "['', 'x']", "[]", "['kiwi']", "['a', '', 'b']"),
      {"edge_case": ("        if not word:\n            continue\n", "")}),
    # ---- number helpers
    T("number.clamp", ("clamp", "bound", "limit", "clip"), {"x": ("value", "x", "n"), "lo": ("lo", "low", "minimum"), "hi": ("hi", "high", "maximum")},
      '''def $f($x, $lo, $hi):
    """$x moved into [$lo, $hi]."""
    return max($lo, min($x, $hi))
''', ("5, 0, 10", "-3, 0, 10", "15, 0, 10", "0, 0, 10", "10, 0, 10"),
      {"swapped_args": ("max($lo, min($x, $hi))", "max($hi, min($x, $lo))")}),
    T("number.percent", ("percent", "percentage", "share", "ratio_pct"), {"a": ("part", "done", "count"), "b": ("total", "whole", "size")},
      '''def $f($a, $b, digits=1):
    """$a as a percentage of $b, rounded to digits; 0.0 when $b is 0."""
    if $b == 0:
        return 0.0
    return round(100 * $a / $b, digits)
''', ("1, 3", "1, 4", "0, 0", "5, 0", "2, 8", "1, 7"),
      {"edge_case": ("    if $b == 0:\n        return 0.0\n", ""), "constant": ("digits=1", "digits=2"),
       "swapped_args": ("100 * $a / $b", "100 * $b / $a")}),
    T("number.sign", ("sign", "signum", "sign_of"), {"x": ("n", "x", "value")},
      '''def $f($x):
    """-1, 0 or 1: the sign of $x."""
    if $x > 0:
        return 1
    if $x < 0:
        return -1
    return 0
''', ("5", "-2", "0", "100", "-1"),
      {"comparison": ("$x > 0", "$x >= 0")}),
    T("number.digit_sum", ("digit_sum", "sum_digits", "cross_sum"), {"x": ("n", "number", "value")},
      '''def $f($x):
    """The sum of the decimal digits of $x (its sign ignored)."""
    total = 0
    for digit in str(abs($x)):
        total += int(digit)
    return total
''', ("123", "0", "-45", "9", "-7"),
      {"edge_case": ("str(abs($x))", "str($x)")}),
    T("number.sum_between", ("sum_between", "sum_range", "total_from_to", "series_sum"), {"a": ("start", "a", "first"), "b": ("stop", "b", "last")},
      '''def $f($a, $b):
    """The sum of the integers from $a to $b, both included."""
    return sum(range($a, $b + 1))
''', ("1, 4", "3, 3", "5, 2", "0, 10", "-2, 2"),
      {"off_by_one": ("range($a, $b + 1)", "range($a, $b)"), "swapped_args": ("range($a, $b + 1)", "range($b, $a + 1)")}),
    T("number.in_range", ("in_range", "within", "is_between", "between"), {"x": ("value", "x", "n"), "lo": ("lo", "low", "minimum"), "hi": ("hi", "high", "maximum")},
      '''def $f($x, $lo, $hi):
    """True when $x lies between $lo and $hi, both included."""
    return $lo <= $x and $x <= $hi
''', ("5, 1, 10", "0, 1, 10", "11, 1, 10", "1, 1, 10", "10, 1, 10", "3, 1, 3", "0, -5, 0"),
      {"boolean": ("$lo <= $x and $x <= $hi", "$lo <= $x or $x <= $hi"), "comparison": ("$x <= $hi", "$x < $hi")}),
    T("number.round_to", ("round_to", "snap", "nearest_multiple", "quantize"), {"x": ("value", "x", "n")},
      '''def $f($x, step=5):
    """$x rounded to the nearest multiple of step."""
    return step * round($x / step)
''', ("12", "13", "0", "7, 2", "24"),
      {"constant": ("step=5", "step=10")}),
    # ---- date helpers (ints and ISO strings)
    T("date.is_leap", ("is_leap", "leap_year", "is_leap_year"), {"y": ("year", "y", "yr")},
      '''def $f($y):
    """True for a leap year of the Gregorian calendar."""
    return $y % 4 == 0 and ($y % 100 != 0 or $y % 400 == 0)
''', ("2024", "2023", "1900", "2000", "2100", "1996", "1800", "2200", "1400"),
      {"boolean": ("$y % 4 == 0 and (", "$y % 4 == 0 or ("), "constant": ("$y % 400 == 0", "$y % 200 == 0"),
       "comparison": ("$y % 100 != 0", "$y % 100 == 0")}),
    T("date.days_in_month", ("days_in_month", "month_length", "month_days"), {"y": ("year", "y"), "m": ("month", "m", "mon")},
      '''def $f($y, $m):
    """The number of days of month $m (1-12) of year $y."""
    lengths = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
    if $m == 2 and $y % 4 == 0 and ($y % 100 != 0 or $y % 400 == 0):
        return 29
    return lengths[$m - 1]
''', ("2023, 1", "2024, 2", "2023, 2", "2023, 12", "1900, 2", "2023, 4"),
      {"off_by_one": ("lengths[$m - 1]", "lengths[$m]"), "boolean": ("$m == 2 and $y", "$m == 2 or $y")}),
    T("date.quarter", ("quarter", "quarter_of", "fiscal_quarter"), {"m": ("month", "m", "mon")},
      '''def $f($m):
    """The quarter (1-4) of month $m (1-12)."""
    return ($m - 1) // 3 + 1
''', ("1", "3", "4", "12", "6", "7"),
      {"off_by_one": ("($m - 1) // 3", "$m // 3"), "constant": ("// 3 + 1", "// 4 + 1")}),
    T("date.duration", ("format_duration", "hms", "as_clock", "duration_text"), {"x": ("seconds", "total", "n_seconds")},
      '''def $f($x):
    """'H:MM:SS' for a number of seconds."""
    minutes, secs = divmod($x, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"
''', ("59", "61", "3600", "3725", "0", "86399"),
      {"constant": ("divmod(minutes, 60)", "divmod(minutes, 100)"), "swapped_args": ("divmod($x, 60)", "divmod(60, $x)")}),
    T("date.days_between", ("days_between", "day_span", "days_until"), {"a": ("start", "first", "since"), "b": ("end", "second", "until")},
      '''def $f($a, $b):
    """Days from ISO date $a to ISO date $b (negative when $b is earlier)."""
    from datetime import date
    return (date.fromisoformat($b) - date.fromisoformat($a)).days
''', ("'2024-01-01', '2024-01-31'", "'2024-03-01', '2024-03-01'", "'2023-12-31', '2024-01-02'", "'2024-02-10', '2024-02-01'"),
      {"swapped_args": ("date.fromisoformat($b) - date.fromisoformat($a)", "date.fromisoformat($a) - date.fromisoformat($b)")}),
    T("date.is_weekend", ("is_weekend", "weekend", "is_day_off"), {"s": ("day", "iso", "date_text")},
      '''def $f($s):
    """True when ISO date $s falls on a Saturday or Sunday."""
    from datetime import date
    return date.fromisoformat($s).weekday() >= 5
''', ("'2024-06-01'", "'2024-06-02'", "'2024-06-03'", "'2024-06-07'", "'2024-06-08'", "'2023-12-30'"),
      {"comparison": ("weekday() >= 5", "weekday() > 5"), "constant": ("weekday() >= 5", "weekday() >= 6")}),
    T("date.age", ("age", "age_at", "years_old", "full_years"), {"by": ("born_year", "birth_year"), "bm": ("born_month", "birth_month"),
                                                               "y": ("year", "on_year"), "m": ("month", "on_month")},
      '''def $f($by, $bm, $y, $m):
    """Full years of age in month $m of year $y for someone born in month $bm of $by."""
    years = $y - $by
    if $m < $bm:
        years -= 1
    return years
''', ("2000, 5, 2024, 4", "2000, 5, 2024, 5", "2000, 5, 2024, 6", "1990, 1, 2020, 1", "2010, 12, 2020, 11"),
      {"comparison": ("$m < $bm", "$m <= $bm"), "edge_case": ("    if $m < $bm:\n        years -= 1\n", "")}),
    # ---- interval helpers: (start, end) tuples
    T("interval.overlaps", ("overlaps", "intersects", "clashes", "collides"), {"a": ("a", "first", "left"), "b": ("b", "second", "right")},
      '''def $f($a, $b):
    """True when half-open spans $a and $b, (start, end), share a point."""
    return $a[0] < $b[1] and $b[0] < $a[1]
''', ("(1, 5), (4, 8)", "(1, 3), (3, 6)", "(3, 6), (1, 3)", "(0, 2), (5, 9)", "(2, 4), (0, 10)", "(6, 9), (1, 2)", "(5, 9), (2, 5)"),
      {"comparison": ("$a[0] < $b[1]", "$a[0] <= $b[1]"), "boolean": ("$b[1] and $b[0]", "$b[1] or $b[0]")}),
    T("interval.contains", ("contains", "covers", "in_span", "inside")
      , {"iv": ("span", "interval", "window"), "x": ("x", "point", "value")},
      '''def $f($iv, $x):
    """True when $x lies in the half-open span $iv = (start, end)."""
    start, end = $iv
    return start <= $x < end
''', ("(1, 5), 3", "(1, 5), 5", "(1, 5), 1", "(1, 5), 0", "(2, 3), 2", "(0, 3), 3", "(-2, 2), 2"),
      {"comparison": ("start <= $x < end", "start <= $x <= end"), "swapped_args": ("start, end = $iv", "end, start = $iv")}),
    T("interval.length", ("length", "span_length", "width", "size_of")
      , {"iv": ("span", "interval", "window")},
      '''def $f($iv):
    """The length of span $iv = (start, end); 0 for an empty or reversed span."""
    return max(0, $iv[1] - $iv[0])
''', ("(1, 5)", "(5, 1)", "(3, 3)", "(0, 10)", "(7, 2)"),
      {"edge_case": ("max(0, $iv[1] - $iv[0])", "$iv[1] - $iv[0]"), "swapped_args": ("$iv[1] - $iv[0]", "$iv[0] - $iv[1]")}),
    T("interval.merge", ("merge", "merge_spans", "union_all", "coalesce")
      , {"xs": ("spans", "intervals", "ranges")},
      '''def $f($xs):
    """Overlapping or touching (start, end) spans merged, sorted by start."""
    merged = []
    for start, end in sorted($xs):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged
''', ("[(1, 3), (2, 5)]", "[(1, 2), (2, 4)]", "[]", "[(5, 6), (1, 2)]", "[(1, 10), (2, 3)]", "[(3, 5), (5, 8)]", "[(7, 9), (0, 7)]"),
      {"comparison": ("start <= merged[-1][1]", "start < merged[-1][1]"), "edge_case": ("if merged and start", "if start")}),
    T("interval.intersect", ("intersect", "intersection", "common_span", "overlap_of")
      , {"a": ("a", "first", "left"), "b": ("b", "second", "right")},
      '''def $f($a, $b):
    """The common part of spans $a and $b, or None when they do not overlap."""
    start, end = max($a[0], $b[0]), min($a[1], $b[1])
    if start >= end:
        return None
    return (start, end)
''', ("(1, 5), (3, 8)", "(1, 3), (3, 6)", "(0, 2), (5, 9)", "(2, 4), (0, 10)", "(0, 4), (4, 9)", "(5, 8), (2, 5)"),
      {"comparison": ("start >= end", "start > end"), "edge_case": ("    if start >= end:\n        return None\n", "")}),
    T("interval.integers", ("integers", "points", "each_int", "int_range")
      , {"iv": ("span", "interval", "bounds")},
      '''def $f($iv, step=1):
    """The integers of the closed span $iv = (start, end), every step-th one."""
    return list(range($iv[0], $iv[1] + 1, step))
''', ("(1, 4)", "(3, 3)", "(0, 6), 2", "(5, 2)", "(2, 5)"),
      {"off_by_one": ("$iv[1] + 1, step", "$iv[1], step"), "swapped_args": ("range($iv[0], $iv[1] + 1", "range($iv[1], $iv[0] + 1"),
       "constant": ("step=1", "step=2")}),
    T("interval.expand", ("expand", "pad_span", "widen", "grow")
      , {"iv": ("span", "interval", "window")},
      '''def $f($iv, margin=1):
    """Span $iv = (start, end) grown by margin on both sides."""
    return ($iv[0] - margin, $iv[1] + margin)
''', ("(5, 8)", "(0, 0)", "(2, 3), 4", "(-1, 1)"),
      {"constant": ("margin=1", "margin=2"), "swapped_args": ("($iv[0] - margin, $iv[1] + margin)", "($iv[1] - margin, $iv[0] + margin)")}),
)

# The held-out (eval) combinations: one per family and one per bug kind, so every family and every
# kind is still seen in training, only never together. Of such sets this one holds the most
# (template, kind) units, 21 of 76: a template's tasks differ only in names and calls, so a policy
# fixes nearly all of them or none, and held-out success is a mean over units, not over tasks. The
# first split held 11 (60 tasks, 15 of them one template's), and one SFT seed fixed 26 where
# another fixed 17 (docs/code.md, "Split").
HELD_OUT = frozenset({("string", "constant"), ("list", "off_by_one"), ("dict", "edge_case"),
                      ("number", "swapped_args"), ("date", "boolean"), ("interval", "comparison")})

PACKAGES = ("toolbox", "utilkit", "helpers", "common", "core", "mylib", "kit", "pyutil", "basics", "extras")
MODULES = {"string": ("text", "strings", "textutil", "words"), "list": ("lists", "seqs", "listutil", "sequences"),
           "dict": ("dicts", "mappings", "dictutil", "tables"), "number": ("numeric", "mathutil", "nums", "arith"),
           "date": ("dates", "calendar_util", "timeutil", "clock"), "interval": ("intervals", "spans", "ranges_util", "windows")}
