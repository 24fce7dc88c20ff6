"""ABC text: find the tune in a reply, read its header, and turn it into MIDI with abc2midi.

The tune is policy output, so it is only ever data: written to a file in a fresh folder and
given to `abc2midi` by path (an argv list, no shell), with a wall-clock timeout, CPU, memory
and file-size limits, and its console output cut. Nothing of the tune is evaluated here.
abc2midi exits 0 even on errors, so its verdict is read from what it prints.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field

ABC2MIDI = "abc2midi"
INSTALL_HINT = "the music family needs abc2midi: apt-get install abcmidi (or ./scripts/setup.sh)"
TIMEOUT_S = 60.0
MAX_ABC_CHARS = 64_000  # far above any reply; a bigger "tune" is refused before abc2midi sees it
MAX_MIDI_BYTES = 4 << 20  # RLIMIT_FSIZE of the abc2midi process: the MIDI it may write
MAX_CONSOLE_CHARS = 64_000

_FENCE = re.compile(r"```[^\n]*\n(.*?)(?:```|\Z)", re.S)
_X_LINE = re.compile(r"^[ \t]*X:", re.M)
_FIELD = re.compile(r"^([A-Za-z]):(.*)$")
_INLINE_FIELD = re.compile(r"\[([KMLQV]):([^\]]*)\]")
_BAR_WARNING = re.compile(r"Bar \d+ has")
_ERROR = re.compile(r"^Error", re.M)


class Abc2MidiMissing(RuntimeError):
    """abc2midi is not on PATH: the message names the package to install."""


def require_abc2midi() -> str:
    """The abc2midi path; raises `Abc2MidiMissing` naming the Debian package if there is none."""
    found = shutil.which(ABC2MIDI)
    if found is None:
        raise Abc2MidiMissing(INSTALL_HINT)
    return found


def extract_tune(reply: str) -> str | None:
    """The first fenced block with an `X:` line (from that line on), else the reply from its last `X:` line."""
    for match in _FENCE.finditer(reply):
        block = match.group(1)
        start = _X_LINE.search(block)
        if start:
            return block[start.start():].strip("\n").rstrip()
    starts = list(_X_LINE.finditer(reply))
    if not starts:
        return None
    return reply[starts[-1].start():].strip("\n").rstrip()


def has_blank_line(tune: str) -> bool:
    """A blank line ends an ABC tune, so one inside means the rest would be silently dropped."""
    return any(not line.strip() for line in tune.strip("\n").split("\n"))


@dataclass
class Header:
    """The fields before the body (up to and including the first K:), and the body's changes."""

    fields: dict[str, list[str]] = field(default_factory=dict)  # letter -> values in order, header only
    body_changes: dict[str, list[str]] = field(default_factory=dict)  # K/M/L/Q set again in the body
    voices: list[str] = field(default_factory=list)  # V: ids, header and body, first-seen order
    body: str = ""

    def first(self, letter: str) -> str | None:
        values = self.fields.get(letter)
        return values[0] if values else None

    def count(self, letter: str) -> int:
        """How often a field is set, header and body together."""
        return len(self.fields.get(letter, [])) + len(self.body_changes.get(letter, []))


def parse_header(tune: str) -> Header:
    header, body_lines, in_body = Header(), [], False
    for raw in tune.split("\n"):
        line = raw.strip()
        if line.startswith("%"):
            continue
        match = _FIELD.match(line)
        if match and not in_body:
            letter, value = match.group(1), match.group(2).split("%")[0].strip()
            header.fields.setdefault(letter, []).append(value)
            if letter == "V":
                _add_voice(header, value)
            if letter == "K":
                in_body = True
            continue
        if match and match.group(1) in "KMLQV":
            letter, value = match.group(1), match.group(2).split("%")[0].strip()
            if letter == "V":
                _add_voice(header, value)
            else:
                header.body_changes.setdefault(letter, []).append(value)
            continue
        if in_body:
            body_lines.append(raw)
            for letter, value in _INLINE_FIELD.findall(raw):
                if letter == "V":
                    _add_voice(header, value)
                else:
                    header.body_changes.setdefault(letter, []).append(value.strip())
    header.body = "\n".join(body_lines)
    return header


def _add_voice(header: Header, value: str) -> None:
    voice = value.split()[0] if value.split() else ""
    if voice and voice not in header.voices:
        header.voices.append(voice)


@dataclass(frozen=True)
class Conversion:
    """What abc2midi made of a tune."""

    midi: bytes | None  # None when it wrote no MIDI file
    console: str  # its stdout and stderr, cut
    errors: list[str]  # its "Error ..." lines
    bar_warnings: int  # its "Bar N has ..." warnings (a bar whose length does not fit the meter)
    timed_out: bool = False


def to_midi(tune: str, timeout_s: float = TIMEOUT_S) -> Conversion:
    """Run abc2midi on `tune` in a fresh folder; never raises for anything in the tune."""
    binary = require_abc2midi()
    with tempfile.TemporaryDirectory(prefix="rlyard-music-") as folder:
        source, target = os.path.join(folder, "tune.abc"), os.path.join(folder, "tune.mid")
        with open(source, "w", encoding="utf-8", errors="replace") as handle:
            handle.write(tune + "\n")
        try:
            done = subprocess.run([*_limits(), binary, source, "-o", target], cwd=folder, capture_output=True,
                                  timeout=timeout_s, stdin=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"})
        except subprocess.TimeoutExpired:
            return Conversion(None, "", [f"abc2midi ran past {timeout_s:.0f} s"], 0, timed_out=True)
        console = (done.stdout + done.stderr).decode("utf-8", "replace")[:MAX_CONSOLE_CHARS]
        errors = [line for line in console.splitlines() if _ERROR.match(line)]
        if done.returncode < 0:  # killed by a limit (SIGXFSZ, SIGXCPU, SIGSEGV ...)
            errors.append(f"abc2midi was killed by signal {-done.returncode}")
        midi = None
        if os.path.isfile(target) and os.path.getsize(target) > 0:
            with open(target, "rb") as handle:
                midi = handle.read(MAX_MIDI_BYTES + 1)
        return Conversion(midi, console, errors, len(_BAR_WARNING.findall(console)))


def _limits() -> list[str]:
    """prlimit in front of abc2midi (util-linux, as the sandbox uses it; no preexec_fn, which threads make unsafe)."""
    prlimit = shutil.which("prlimit")
    if prlimit is None:
        return []
    cpu = int(TIMEOUT_S)
    return [prlimit, f"--cpu={cpu}:{cpu + 1}", f"--as={512 << 20}", f"--fsize={MAX_MIDI_BYTES}", "--nofile=32", "--"]


_TONICS = {"C": 0, "D": 2, "E": 4, "F": 5, "G": 7, "A": 9, "B": 11}
_MODES = {"": "major", "maj": "major", "major": "major", "ion": "major", "m": "minor", "min": "minor",
          "minor": "minor", "aeo": "minor", "dor": "dorian", "phr": "phrygian", "lyd": "lydian",
          "mix": "mixolydian", "loc": "locrian"}
SCALES = {"major": (0, 2, 4, 5, 7, 9, 11), "minor": (0, 2, 3, 5, 7, 8, 10), "dorian": (0, 2, 3, 5, 7, 9, 10),
          "phrygian": (0, 1, 3, 5, 7, 8, 10), "lydian": (0, 2, 4, 6, 7, 9, 11),
          "mixolydian": (0, 2, 4, 5, 7, 9, 10), "locrian": (0, 1, 3, 5, 6, 8, 10)}
_KEY = re.compile(r"^([A-G])([#b]?)([A-Za-z]*)$")


def _mode(word: str) -> str | None:
    word = word.lower()
    return _MODES.get(word if len(word) <= 1 else word[:3])


def parse_key(value: str | None) -> tuple[int, str] | None:
    """(tonic pitch class, mode) of a K: value such as "G", "Em", "F#min", "A Dorian", "D clef=bass";
    None when it names no key (K:none, K:HP, nonsense)."""
    words = (value or "").split()
    match = _KEY.match(words[0]) if words else None
    if not match:
        return None
    letter, accidental, rest = match.groups()
    mode = _mode(rest)
    if not rest and len(words) > 1 and "=" not in words[1]:
        mode = _mode(words[1])
    if mode is None:
        return None
    return (_TONICS[letter] + {"#": 1, "b": -1, "": 0}[accidental]) % 12, mode


def parse_meter(value: str | None) -> tuple[int, int] | None:
    """(numerator, denominator) of an M: value; C is 4/4 and C| is 2/2; None for "none" or nonsense."""
    if value is None:
        return None
    text = value.strip()
    if text in ("C", "C|"):
        return (4, 4) if text == "C" else (2, 2)
    match = re.fullmatch(r"(\d{1,2})\s*/\s*(\d{1,2})", text)
    if not match or int(match.group(1)) == 0 or int(match.group(2)) not in (1, 2, 4, 8, 16, 32):
        return None
    return int(match.group(1)), int(match.group(2))


def parse_fraction(value: str | None) -> float | None:
    match = re.fullmatch(r"\s*(\d{1,3})\s*/\s*(\d{1,3})\s*", value or "")
    if not match or int(match.group(2)) == 0:
        return None
    return int(match.group(1)) / int(match.group(2))


_NOISE = re.compile(r'"[^"]*"|![^!\n]*!|\{[^}]*\}|\+[^+\n]*\+|\[[A-Za-z]:[^\]]*\]')
_TOKEN = re.compile(r"\((\d)|(\[)|\](\d*)(/*)(\d*)|[\^_=]*[A-Ga-gzx][,']*(\d*)(/*)(\d*)")
_LEADING_BARS = re.compile(r"^(?:\s|\[\||\|\]|\|\||\|:|:\||\||:|\[\d)*")
_TUPLET = {2: 3 / 2, 3: 2 / 3, 4: 3 / 4, 6: 2 / 3}
_COMMENT = re.compile(r"%[^\n]*")
_BAR_LINE = re.compile(r"[:\[\]|]*\|[:\[\]|0-9]*|::")


def written_bar_lines(body: str) -> int:
    """Bar lines in an ABC body (`|`, `||`, `|]`, `[|`, `:|`, `|:`, `::`, `|1` each count once);
    those inside comments, chord symbols, decorations and inline fields are not bar lines."""
    return len(_BAR_LINE.findall(_NOISE.sub(" ", _COMMENT.sub(" ", body))))


def pickup_quarters(body: str, unit: float, bar_quarters: float) -> float:
    """Length in quarter notes of the anacrusis (the notes before the first bar line), 0 if none.

    abc2midi starts the MIDI at the first note, pickup or not, so the bar grid needs it. Only
    that first segment is read: notes, rests, chords and tuplets; grace notes, decorations and
    chord symbols take no time, and broken rhythm (a>b) keeps the pair's total.
    """
    first = _LEADING_BARS.sub("", _NOISE.sub("", body))
    segment = re.split(r"[|:]", first, maxsplit=1)[0]
    total, tuplet_left, tuplet, chord = 0.0, 0, 1.0, None
    for m in _TOKEN.finditer(segment):
        if m.group(1):
            tuplet_left, tuplet = int(m.group(1)), _TUPLET.get(int(m.group(1)), 1.0)
        elif m.group(2):
            chord = 0.0
        elif m.group(0).startswith("]"):
            if chord is not None:  # [CE]2: the chord's length times its own multiplier
                total, chord = total + chord * _multiplier(m.group(3), m.group(4), m.group(5)), None
        else:
            length = unit * 4 * _multiplier(m.group(6), m.group(7), m.group(8))
            if tuplet_left:
                length, tuplet_left = length * tuplet, tuplet_left - 1
            if chord is not None:
                chord = chord or length  # a chord lasts as long as its first note
            else:
                total += length
    return total if 0 < total < bar_quarters - 1e-9 else 0.0


def _multiplier(numerator: str, slashes: str, denominator: str) -> float:
    """An ABC length: "3" is 3, "/" is 1/2, "//" is 1/4, "3/2" is 3/2."""
    num = int(numerator) if numerator else 1
    den = (int(denominator) if denominator else 2 ** len(slashes)) if slashes else 1
    return num / den
