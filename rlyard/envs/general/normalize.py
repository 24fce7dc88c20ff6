"""The one form of an answer that every rule item, the injection screen and the judge see.

A rule item matches text, and the policy controls every code point of it: a zero-width space
inside a forbidden figure (`5\u200b2 minutes`), a Cyrillic `о` in `lost`, a fullwidth `＜/answer＞`
or a combining mark look the same to a reader and defeat a plain `in` or a regex. So an answer
is folded before anything reads it: NFKC (fullwidth and compatibility forms to their plain
ones), then NFKD to strip combining marks, every format character (Unicode category Cf:
zero-width spaces and joiners, bidi controls, the BOM, soft hyphens) and other invisible
controls removed, and the letters of other scripts that look like Latin ones folded to them
(`CONFUSABLES`, the Cyrillic, Greek and Armenian letters of Unicode's confusables list whose
Latin twin is a basic letter). Rubric texts go through the same fold, so a rule written with
accents or in another script still matches what it meant; the reader loses nothing that a rule
could have been written to see.

An answer that carried format characters is flagged (`Normalised.format_characters`): honest
text almost never holds them, and they are the tool of the hidden-text attacks above.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

# Letters of other scripts drawn like a basic Latin letter (after NFKC), from Unicode's
# confusables.txt (the single-letter entries whose target is a-z / A-Z).
CONFUSABLES = str.maketrans({
    # Cyrillic lower case
    "а": "a", "в": "b", "е": "e", "һ": "h", "і": "i", "ј": "j", "к": "k", "м": "m", "н": "h", "о": "o",
    "р": "p", "с": "c", "т": "t", "у": "y", "х": "x", "ѕ": "s", "ԁ": "d", "ԛ": "q", "ԝ": "w", "ӏ": "l",
    "ь": "b", "ɡ": "g", "ү": "y", "ѵ": "v", "ԍ": "g", "ո": "n", "ս": "u", "օ": "o", "հ": "h", "ց": "g",
    # Cyrillic upper case
    "А": "A", "В": "B", "Е": "E", "К": "K", "М": "M", "Н": "H", "О": "O", "Р": "P", "С": "C", "Т": "T",
    "Х": "X", "У": "Y", "І": "I", "Ј": "J", "Ѕ": "S", "Ԁ": "D", "Ԛ": "Q", "Ԝ": "W", "Ү": "Y", "Ӏ": "I",
    "Ζ": "Z", "Տ": "S", "Օ": "O", "Ս": "U",
    # Greek
    "α": "a", "ο": "o", "ρ": "p", "ν": "v", "ι": "i", "κ": "k", "υ": "u", "τ": "t", "γ": "y", "ϲ": "c",
    "ϳ": "j", "ω": "w", "Α": "A", "Β": "B", "Ε": "E", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M", "Ν": "N",
    "Ο": "O", "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X", "Ϲ": "C", "Ϳ": "J",
    # Latin look-alikes outside basic Latin that NFKC keeps
    "ı": "i", "ȷ": "j", "ɑ": "a", "ɩ": "i", "ɪ": "i", "ʏ": "y", "ᴄ": "c", "ᴏ": "o", "ᴠ": "v", "ᴡ": "w", "ᴢ": "z",
    "ℓ": "l",
    # punctuation drawn like the ASCII marks that rule items and the screen look for
    "‘": "'", "’": "'", "‚": "'", "‛": "'", "′": "'", "“": '"', "”": '"', "„": '"', "‟": '"', "″": '"',
    "‐": "-", "‑": "-", "‒": "-", "–": "-", "—": "-", "―": "-", "−": "-", "⁃": "-",
    "‹": "<", "›": ">", "〈": "<", "〉": ">", "⟨": "<", "⟩": ">", "˂": "<", "˃": ">", "ᐸ": "<", "ᐳ": ">",
    "\u00a0": " ", "\u2028": "\n", "\u2029": "\n",
})
_KEEP_CONTROLS = {"\n", "\t"}
_ASCII_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


@dataclass(frozen=True)
class Normalised:
    text: str  # the folded form: what rule items and the injection screen read
    visible: str  # NFKC with the invisible characters removed: what the judge is shown
    format_characters: int  # format (Cf) characters the answer carried: zero-width, bidi controls, BOM, soft hyphen


def _invisible(char: str) -> bool:
    """Format characters, controls but newline and tab, and lone surrogates (which no encoder
    takes: left in, they would make the judge's request fail as if the judge were down)."""
    category = unicodedata.category(char)
    return category in ("Cf", "Cs") or (category == "Cc" and char not in _KEEP_CONTROLS)


def normalise(text: str) -> Normalised:
    """`text` folded to the form rule items see (module docstring). Combining marks go by their
    category (Mn, Me), not their combining class: an enclosing keycap or a long-stroke overlay
    has class 0 and would otherwise stay between two letters."""
    if not isinstance(text, str):
        text = str(text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if text.isascii():  # the common case, and a 1 MiB answer in milliseconds: only controls to drop
        plain = _ASCII_CONTROLS.sub("", text)
        return Normalised(plain, plain, 0)
    hidden = sum(1 for c in text if unicodedata.category(c) == "Cf")
    visible = "".join(c for c in unicodedata.normalize("NFKC", text) if not _invisible(c))
    decomposed = unicodedata.normalize("NFKD", visible.translate(CONFUSABLES))
    kept = "".join(c for c in decomposed if unicodedata.category(c) not in ("Mn", "Me") and not _invisible(c))
    return Normalised(unicodedata.normalize("NFKC", kept).translate(CONFUSABLES), visible, hidden)


def fold(text: str) -> str:
    """The folded form alone (rubric texts go through it too, so both sides match alike)."""
    return normalise(text).text
