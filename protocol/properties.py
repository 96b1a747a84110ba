"""Java ``.properties`` text, read as ``java.util.Properties.load`` reads it: Kafka's
``server.properties`` and its tools' ``--command-config`` files are written in it.

Here, not in config/, because both the broker's configuration loader (config/) and the client's
``--command-config`` (client/, which may not import config/) read it: one parser, one set of
escape rules. Pure text in, dict out; the callers read the files.

The one deliberate difference from Java: the text is Unicode (callers read files as UTF-8),
where ``Properties.load(InputStream)`` reads ISO-8859-1 and needs ``\\uXXXX`` for anything else.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

__all__ = ["format_properties", "parse_properties"]

#: java.util.Properties' whitespace (not str.isspace(): no \v, no Unicode spaces).
_WHITESPACE = " \t\f"
_SEPARATORS = "=:"
#: Java's line terminators only (not str.splitlines(), which also splits on \v, \x1c, \u2028...).
_NEWLINE = re.compile(r"\r\n|\r|\n")
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_HEX = frozenset("0123456789abcdefABCDEF")
_ESCAPED = {char: "\\" + letter for letter, char in _ESCAPES.items()}


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, logical line) for each line that is not blank or a comment, continuations
    joined: a port of Java 17's ``Properties.LineReader.readLine``, quirks included, so that a
    file means here what it means to Kafka.

    Leading whitespace of a line (and of a continued line) is dropped; ``#`` or ``!`` as the
    first character of a logical line makes a comment, up to the line's end (a backslash does not
    continue it); a line ending in an odd number of backslashes continues on the next, and an
    empty next line ends it; at the end of the text a pending backslash is dropped."""
    buf: list[str] = []
    skip_whitespace, appended_line_begin, preceding_backslash, skip_lf = True, False, False, False
    start = 0  # where the logical line's first character is, for its line number
    i, n = 0, len(text)
    while True:
        if i >= n:  # the end of the text
            if buf:
                yield _line_number(text, start), "".join(buf[:-1] if preceding_backslash else buf)
            return
        c = text[i]
        i += 1
        if skip_lf:
            skip_lf = False
            if c == "\n":
                continue
        if skip_whitespace:
            if c in _WHITESPACE or (not appended_line_begin and c in "\r\n"):
                continue
            skip_whitespace = appended_line_begin = False
        if not buf:
            start = i - 1
            if c in "#!":  # a comment: its whole line, terminator included
                while i < n and text[i] not in "\r\n":
                    i += 1
                if i >= n:
                    return
                i += 1
                skip_whitespace = True
                continue
        if c != "\n" and c != "\r":
            buf.append(c)
            preceding_backslash = not preceding_backslash if c == "\\" else False
            continue
        if not buf:  # a blank line (or continuations of nothing)
            skip_whitespace = True
            continue
        if i >= n:  # a line terminator ends the text
            yield _line_number(text, start), "".join(buf[:-1] if preceding_backslash else buf)
            return
        if preceding_backslash:  # continued: the backslash goes, the next line's indent too
            buf.pop()
            skip_whitespace = appended_line_begin = True
            preceding_backslash = False
            skip_lf = c == "\r"
        else:
            yield _line_number(text, start), "".join(buf)
            buf = []
            skip_whitespace, appended_line_begin, preceding_backslash = True, False, False


def _line_number(text: str, position: int) -> int:
    return 1 + len(_NEWLINE.findall(text, 0, position))


def _unescape(line: str, line_no: int) -> list[tuple[str, bool]]:
    """The characters of a logical line, each flagged True if it was written escaped (an escaped
    separator or whitespace is part of the key or value, as in Java's load0)."""
    chars: list[tuple[str, bool]] = []
    i = 0
    while i < len(line):
        ch = line[i]
        if ch != "\\":
            chars.append((ch, False))
            i += 1
            continue
        nxt = line[i + 1] if i + 1 < len(line) else ""
        if nxt == "u":
            digits = line[i + 2 : i + 6]
            if len(digits) != 4 or not _HEX.issuperset(digits):
                raise ValueError(f"line {line_no}: malformed \\uXXXX escape {line[i : i + 6]!r}")
            chars.append((chr(int(digits, 16)), True))
            i += 6
        else:
            chars.append((_ESCAPES.get(nxt, nxt), True))  # any other escaped character is itself
            i += 2
    return chars


def _is(chars: list[tuple[str, bool]], i: int, kinds: str) -> bool:
    return i < len(chars) and not chars[i][1] and chars[i][0] in kinds


def parse_properties(text: str) -> dict[str, str]:
    """The key/value pairs of ``.properties`` text, as ``java.util.Properties.load`` reads them.

    ``#``/``!`` comment lines; the key ends at the first unescaped ``=``, ``:`` or whitespace
    (space, tab, form feed); whitespace around the separator is skipped, and one ``=`` or ``:``
    after whitespace is the separator too; the value is the rest of the line, trailing whitespace
    included (Kafka's config parsing trims values, as its ConfigDef does, not the file syntax);
    a line ending in an odd number of backslashes continues on the next; escapes ``\\t \\n \\r \\f
    \\uXXXX``, and ``\\`` before any other character is that character (``\\=``, ``\\:``, ``\\ ``,
    ``\\#``, ``\\\\``). The last of duplicate keys wins. Raises ValueError naming the line for a
    malformed ``\\uXXXX``, which Java refuses too.
    """
    props: dict[str, str] = {}
    for line_no, line in _logical_lines(text):
        chars = _unescape(line, line_no)
        i = 0
        while i < len(chars) and not _is(chars, i, _WHITESPACE + _SEPARATORS):
            i += 1
        key = _joined("".join(ch for ch, _ in chars[:i]))
        while _is(chars, i, _WHITESPACE):
            i += 1
        if _is(chars, i, _SEPARATORS):
            i += 1
            while _is(chars, i, _WHITESPACE):
                i += 1
        props[key] = _joined("".join(ch for ch, _ in chars[i:]))
    return props


def _joined(text: str) -> str:
    """``text`` with the UTF-16 surrogate pairs of ``\\uXXXX`` escapes joined into one character, as
    they are one character in Java's strings (a lone surrogate stays as it is)."""
    if not any("\ud800" <= ch <= "\udfff" for ch in text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def _escape(text: str, is_key: bool) -> str:
    out = []
    last = len(text) - 1
    for pos, ch in enumerate(text):
        if ch == "\\":
            out.append("\\\\")
        elif ch in _ESCAPED:
            out.append(_ESCAPED[ch])
        elif ord(ch) < 0x20 or ch == "\x7f" or ch in "\x85\u2028\u2029":
            # Control characters and the line separators other readers split on (str.splitlines)
            out.append(f"\\u{ord(ch):04x}")
        elif ch in "=:#!" or (ch == " " and (is_key or pos == 0 or pos == last)):
            # A trailing space is escaped too, though Java keeps it: it shows it is meant.
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def format_properties(props: Mapping[str, str]) -> str:
    """``key=value`` lines that :func:`parse_properties` (and Java) read back as ``props``."""
    return "".join(f"{_escape(key, True)}={_escape(value, False)}\n" for key, value in props.items())
