"""Evidence units of real text: paragraphs joined across soft line breaks, structure kept apart.

Documents arrive hard-wrapped (licences, RFCs, e-mail bodies, PDF extraction, markdown source),
so a line is rarely a sentence. :func:`split_sentences` cuts the text in three steps, every
offset exact into the original string (nothing is rewritten):

1. **Blocks**, line by line. Line breaks are ``\\n``, ``\\r\\n``, ``\\r``, NEL (U+0085) and
   U+2028; a blank line, a form feed (a page break), a vertical tab and U+2029 end a block.

   - *Hard* lines are units of their own, never joined to a neighbour: markdown headings, setext
     headings (the line over ``===``/``---``), short ALL-CAPS headings (``TERMS AND CONDITIONS``;
     not the lines of a wrapped ALL-CAPS disclaimer), lines without letters or digits (``{``,
     ``---``), table rows (``|``, inner tabs, column gaps of 3+ spaces), fenced code (every line),
     quoted e-mail lines (``>``), JSON keys (``"key":``), log records (a date or time in the first
     40 characters, ``[INFO]``, ``ERROR:``; adjacent lines that begin with the same identifier),
     ``Copyright (C) ...`` lines.
   - *Start* lines begin a block that the lines continuing them join: list items (``-``, ``*``,
     ``•``, ``1.``, ``1.1.``, ``1)``, ``(a)``, ``(iii)``, ``a.``, ``[1]``), ``Section 4.``,
     ``Article 2:``, ``key: value``. A start line joins the line above only when that line runs
     on (ends on a comma, a hyphen or a function word: "... under section" + "7. This", "or" +
     "(ii) ..."), and never when it is a bullet or the next marker of the same list.
   - Other lines join the line above (a *soft* break) when it does not end a sentence (``.!?:;``
     and CJK/Arabic stops, possibly followed by a closing quote or bracket) and the new line
     starts lowercase (``"control" means``, ``(50%) or more``), or the line above runs on, or is
     *full*: the new line's first word would not have fitted after it at the document's wrap
     width (the 75th percentile of its line widths; documents under 6 lines or 30 columns have
     none). A lowercase word also continues a full stop (``e.g.`` + ``the``), a number continues
     an abbreviation (``48 C.F.R.`` + ``2.101``). After a list item or ``key: value`` line a
     lowercase line must be indented, full or follow a running-on line to continue it.
   - A box framed by ``*`` (three or more ``*  text  *`` lines, MPL-2.0's disclaimers) is read
     inside its frame: the frame characters at the lines' edges belong to no unit.

2. **Sentences**: sentencex splits each block (``language`` as given), line breaks read as
   spaces; a piece that is only a list marker or a label ("2.", "1.1.", "Section 4.", "Day 31.",
   "Step 2.", "Chapter IV.") joins the next piece of its block, so ``2. Grant of Copyright
   License.`` and ``Day 31. The Albatross left Bergen ...`` are one unit each (a label carries no
   evidence of its own; a unit of its own it would only draw attention by its position).
3. **Length**: a piece over ``max_chars`` is cut at the last clause boundary that leaves a
   quarter of ``max_chars`` on both sides: ``;``, ``:``, ``, and``/``, or``/``, but``, an
   ``(ii)`` enumeration, a comma, else whitespace, else after punctuation; only a run with none
   of these (a long token) is cut mid-word.

4. **Headings**: :func:`segment` gives each unit the units heading its section, the innermost
   two: titles by level (markdown ``#``, a line underlined with ``===``/``---`` or reST's ``***``,
   ``~~~``, ``^^^``, short ALL-CAPS lines) and *outline heads*, a short line or a lead-in ending on
   ``:`` whose next block is indented deeper (a Debian changelog entry's ``apt (2.5.2) unstable;
   urgency=medium``, a list item over its sub-items); an outline section ends at a block indented
   no deeper than its head. ReContext replays them with a picked unit, since "which version fixed
   this" is answered by the entry's first line, not by the sentence that matches the question.

Text with one complete sentence (or one log or key-value record) per line keeps one unit per line.
The patterns are anchored to one line with bounded repetitions; the work is linear in the text.
:func:`replay_text` gives a span's text on one line for replay.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass

import sentencex

# Line and paragraph breaks (str.splitlines' set). \r\n is one break.
_BREAK = re.compile(r"\r\n|[\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")
_BREAK_SPLIT = re.compile(f"({_BREAK.pattern})")
_PARAGRAPH_BREAKS = frozenset("\x0b\x0c\x1c\x1d\x1e\u2029")
_ALNUM = re.compile(r"[^\W_]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_TO_SPACE = {ord(c): " " for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"}

_TERMINAL = frozenset(".!?:;…。！？：；؟۔।")
_OPENING = "\"'(“‘[<«¿¡*_`"
_CLOSING = "\"'”’»)]}>*_`"
# Words a sentence does not end on: a line ending on one runs on (also the nouns that precede
# a number: "under section" + "7. This ...", "see" + "Section 10.2)").
_FUNCTION_WORDS = frozenset(
    re.findall(
        r"\S+",
        """a all also an and and/or any are as at be been between both but by can could each either
        for from has have if in including into is its may must nor not of on or other per shall
        should so such than that the their then these this those to under upon via was were when
        where whether which while who will with within without would you your
        appendix article chapter clause exhibit figure item no page paragraph part schedule section
        sections see step subsection table version""",
    )
)

_FENCE = re.compile(r"(?:`{3,}|~{3,})")
_ATX = re.compile(r"#{1,6}(?:\s|$)")
_UNDERLINE = re.compile(r"(?:={2,}|-{2,})[ \t]*$")
# reStructuredText's other title underlines (Python's docs: ``*****``, ``~~~~``, ``^^^^``): at least
# three characters and about as wide as the title, so a ``***`` rule under a paragraph is none.
_RST_UNDERLINE = re.compile(r"(?:\*{3,}|~{3,}|\^{3,}|\+{3,}|#{3,})[ \t]*$")
_MARKER = re.compile(
    r"(?:[-*+•◦▪‣·–—]"
    r"|\d{1,3}(?:\.\d{1,3}){0,6}[.)]"
    r"|\(\d{1,3}\)"
    r"|\(?[A-Za-z][.)]"
    r"|\(?(?:[ivxlcdm]{1,7}|[IVXLCDM]{1,7})[.)]"
    r"|\[\d{1,3}\])"
    r"(?=\s|$)"
)
_BULLET = re.compile(r"[-*+•◦▪‣·–—](?=\s|$)")
_SECTION = re.compile(
    r"(?:(?:Section|SECTION|Article|ARTICLE|Chapter|CHAPTER|Clause|CLAUSE|Part|PART|Appendix|APPENDIX)"
    r"[ \t]+(?:\d{1,4}|[IVXLC]{1,6}|[A-Z])|§[ \t]*\d{1,4})"
    r"(?:\.\d{1,4}){0,6}(?:[.:)]|[ \t]+[-–—][ \t]|[ \t]*$)"
)
# A label of the text that follows it: one capitalised word and an ordinal ("Day 31.", "Step 2:",
# "Chapter IV.", "Part B)"). As a sentencex piece of its own it joins the next piece of its block.
_LABEL = re.compile(r"[A-Z][^\W\d_]{0,19}[ \t]+(?:\d{1,4}(?:\.\d{1,4}){0,3}|[IVXLC]{1,6}|[A-Z])[.:)]")
# One token ("key-1:", "Reply-To:", "/usr/lib/x:") or up to three words, capitalised ("Due date:").
_KEY_VALUE = re.compile(r"(?:[A-Za-z/~][\w\-./~@]{0,60}|[A-Z][\w\-]{0,30}(?: [\w\-]{1,30}){1,2}):(?:\s|$)")
_QUOTED_KEY = re.compile(r"(?:\"[^\"\n]{0,200}\"|'[^'\n]{0,200}')[ \t]*:")
# Log records: a timestamp near the start of the line, or a level word first.
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d|\d{1,2}:\d{2}:\d{2}|\d{1,2}/[A-Z][a-z]{2}/\d{4}")
_TIMESTAMP_WITHIN = 40
_RECORD = re.compile(
    r"(?:\[?\d{4}-\d{2}-\d{2}"
    r"|\[?\d{1,2}/\d{1,2}/\d{2,4}[ T]"
    r"|\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b"
    r"|\[(?:TRACE|DEBUG|INFO|NOTICE|WARN|WARNING|ERROR|CRITICAL|FATAL|SEVERE)\]"
    r"|(?:TRACE|DEBUG|INFO|NOTICE|WARN|WARNING|ERROR|CRITICAL|FATAL|SEVERE)(?::|[ \t]+\[))"
)
# A line ending on an abbreviation: dotted initials ("C.F.R.", "U.S.") or a short one ("No.").
_ABBREVIATION = re.compile(
    r"(?:(?<![^\W\d_])(?:[A-Za-z]\.){2,}|\b(?:[Nn]o|[Nn]os|[Ss]ec|[Aa]rt|[Pp]ara|[Vv]ol|[Pp]p?|[Ff]ig|[Cc]f|[Vv]s|"
    r"[Ee]q|[Cc]h|[Aa]pp|[Ee]d|[Ee]x|[Ss]t|[Dd]r|[Mm]rs?|[Mm]s)\.)$"
)
_ABBREVIATION_WITHIN = 24
# The keys a listing's lines begin with (see _record_shape): "22642", "-1.5", "12:30", "1997-2005", "0x1F"; a
# short commit hash "8774f5c".
_NUMBER_KEY = re.compile(r"[+-]?(?:\d[\d.,:/-]*%?|0x[0-9A-Fa-f]+)")
_HASH_KEY = re.compile(r"[0-9a-f]{7,40}")
_EXTENSION = re.compile(r"[\w-]\.[A-Za-z]\w{0,9}\b")
_COLUMN_GAP = re.compile(r"\S(?: {3,}|\t)\S")
_COPYRIGHT = re.compile(r"(?:Copyright|COPYRIGHT)[ \t]+(?:\([Cc]\)|©|\d)|©[ \t]*\d")

# Line kinds: hard lines are units of their own; start lines begin a block that may continue; rows
# (records of a listing) begin a block that only an indented or running-on line continues.
_TEXT, _HARD, _START, _ROW = 0, 1, 2, 3
_CAPS_HEADING_CHARS = 60
_WIDTH_QUANTILE = 0.75
_FILLED = 0.5
_WRAP_MIN_LINES, _WRAP_MIN_WIDTH = 6, 30
_BOX_MIN_CHARS, _BOX_MIN_LINES = 20, 3


@dataclass(slots=True)
class _Line:
    start: int  # first non-space character
    end: int  # after the last non-space character (== start: blank line)
    begin: int  # where the line begins
    kind: int = _TEXT
    width: int = 0  # display width from the line start to ``end``
    first_word: int = 0  # display width of the first word
    # start lines: the marker's kind ("-", "1", "(", "a", "[") or ":" (key, section); rows: "#"
    marker: str = ""
    heading: int = 0  # a heading's level (markdown ``#`` count; 1 or 2 for an underlined title), else 0


def _display_width(text: str) -> int:
    if text.isascii():
        return len(text.expandtabs(8)) if "\t" in text else len(text)
    text = text.expandtabs(8)
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _lines(text: str) -> list[_Line]:
    """The non-blank lines, with one blank line (start == end) wherever a paragraph ends between
    two of them: a blank line, a form feed, a vertical tab or U+2029."""
    lines: list[_Line] = []
    parts = _BREAK_SPLIT.split(text)  # line, break, line, break, ..., line
    begin = breaks = 0
    for i in range(0, len(parts), 2):
        part = parts[i]
        stripped = part.lstrip()
        if stripped:
            if lines and breaks > 1:
                lines.append(_Line(begin, begin, begin))
            start = begin + len(part) - len(stripped)
            end = start + len(stripped.rstrip())
            lines.append(_Line(start, end, begin, width=_display_width(text[begin:end])))
            breaks = 0
        begin += len(part)
        if i + 1 < len(parts):
            brk = parts[i + 1]
            begin += len(brk)
            breaks += 2 if brk in _PARAGRAPH_BREAKS else 1
    return lines


def _terminal(content: str) -> bool:
    content = content.rstrip(_CLOSING + " \t")
    return bool(content) and content[-1] in _TERMINAL


def _first_letter_lower(content: str) -> bool:
    """Whether the line's first word with letters starts lowercase, after opening quotes or
    brackets (``"control" means``, ``(50%) or more``; not ``/usr/lib``)."""
    for token in content[:200].split():
        if any(c.isalpha() for c in token):
            return token.lstrip(_OPENING)[:1].islower()
    return False


def _runs_on(content: str) -> bool:
    """The line ends mid-clause: a comma, an open bracket, a word hyphen or a function word."""
    if content[-1] in ",([{/&" or (content[-1] == "-" and len(content) > 1 and content[-2].isalpha()):
        return True
    word = content.rsplit(None, 1)[-1].lstrip(_OPENING)
    return word.lower() in _FUNCTION_WORDS


def _unbox(text: str, lines: list[_Line]) -> list[int]:
    """Lines of a ``*``-framed box (``*  text  *``, three or more in a row) keep only their inner
    text; the frame characters are returned (they belong to no unit, like whitespace)."""
    framed = [
        line.end - line.start >= _BOX_MIN_CHARS
        and text[line.start] == text[line.end - 1] == "*"
        and text[line.start + 1].isspace()
        and text[line.end - 2].isspace()
        for line in lines
    ]
    frames: list[int] = []
    i = 0
    while i < len(lines):
        j = i
        while j < len(lines) and framed[j]:
            j += 1
        if j - i >= _BOX_MIN_LINES:
            for line in lines[i:j]:
                frames += [line.start, line.end - 1]
                line.start, line.end = _strip_range(text, line.start + 1, line.end - 1)
        i = max(j, i + 1)
    return frames


def _strip_range(text: str, start: int, end: int) -> tuple[int, int]:
    segment = text[start:end]
    stripped = segment.lstrip()
    start += len(segment) - len(stripped)
    return start, start + len(stripped.rstrip())


def _classify(text: str, lines: list[_Line]) -> None:
    in_fence = False
    for line in lines:
        if line.end == line.start:
            continue
        content = text[line.start : line.end]
        first = content.split(None, 1)[0]
        line.first_word = _display_width(first)
        if _FENCE.match(content):
            line.kind, in_fence = _HARD, not in_fence
        elif not in_fence and _ATX.match(content):
            line.kind, line.heading = _HARD, len(content) - len(content.lstrip("#"))
        elif in_fence or (
            not _ALNUM.search(content)
            or content[0] in ">|"
            or content.count("|") >= 2
            or _COLUMN_GAP.search(content)
            or _QUOTED_KEY.match(content)
            or _RECORD.match(content)
            or _TIMESTAMP.search(content, 0, _TIMESTAMP_WITHIN)
            or _COPYRIGHT.match(content)
        ):
            line.kind = _HARD
        elif _MARKER.match(content) or _SECTION.match(content) or _KEY_VALUE.match(content):
            line.kind, line.marker = _START, _marker_kind(content)
    _mark_records(text, lines)


def _mark_records(text: str, lines: list[_Line]) -> None:
    """Adjacent lines that begin with the same identifier ("update-alternatives 2025-...",
    "dpkg: ...", "/usr/lib/x: ...") or with a key of the same shape (a number, a path, a commit
    hash, a JSON value: "22642  db/migrations/0268_add.sql", "tests/x.py::test_y PASSED") are
    records of a log, listing or tool output, never a hard-wrapped sentence: the former are hard,
    the latter rows (an indented or running-on line still continues a row: "434296  s390x: vector
    string" + "        instructions")."""
    previous, previous_shape = "", ""
    for i, line in enumerate(lines):
        if line.end == line.start:
            previous = previous_shape = ""
            continue
        word = text[line.start : min(line.end, line.start + 100)].split(None, 1)[0]
        identifier = _ALNUM.search(word) and any(c in "/_=\\-:" or c.isdigit() for c in word)
        key = _record_key(text, line, word)
        shape = _record_shape(key) if key else ""
        if not line.marker and word == previous and identifier:
            line.kind = lines[i - 1].kind = _HARD
        elif shape and shape == previous_shape and not _runs_on(text[lines[i - 1].start : lines[i - 1].end]):
            for row in (lines[i - 1], line):
                if row.kind == _TEXT:
                    row.kind, row.marker = _ROW, "#"
        previous, previous_shape = word, shape


def _record_key(text: str, line: _Line, first_word: str) -> str:
    """The word a record's shape is read from: the line's ``first_word``, or after a "key: " label the
    value's (a transcript's "tool: 22642  db/..."); none for a list item, nor for a line ending on ":",
    which introduces what follows ("dc/string.c doc/dc.texi:" + "update ...")."""
    if text[line.end - 1] == ":":
        return ""
    if not line.marker:
        return first_word
    label = _KEY_VALUE.match(text, line.start, line.end) if line.marker == ":" else None
    if label is None:
        return ""
    words = text[label.end() : min(line.end, label.end() + 100)].split(None, 1)
    return words[0] if words else ""


def _record_shape(word: str) -> str:
    """The kind of key a listing's line begins with ("number", "path", "hash", "value": a JSON
    object or array), or "" for a word of prose."""
    if _NUMBER_KEY.fullmatch(word):
        return "number"
    if _HASH_KEY.fullmatch(word) and any(c.isdigit() for c in word):
        return "hash"
    if word[0] in "{[" and _ALNUM.search(word):
        return "value"
    slashes = word.count("/") + word.count("\\")
    if word[0] in "<\"'`(" or not (
        "::" in word or (slashes and (slashes > 1 or word[0] in "/\\~." or _EXTENSION.search(word)))
    ):
        return ""  # not "and/or", "HTTP/1.1", a link or a quoted path inside a sentence
    return "path"  # "db/migrations/0268_x.sql", "src/main.rs", "./run", "tests/x.py::test_y"


def _wrap_width(lines: list[_Line]) -> float:
    """The document's wrap width: a high quantile of its line widths. Under ``_WRAP_MIN_LINES``
    lines or ``_WRAP_MIN_WIDTH`` columns there is no telling: no line counts as full."""
    widths = sorted(line.width for line in lines if line.end > line.start)
    if len(widths) < _WRAP_MIN_LINES:
        return float("inf")
    width = widths[int(_WIDTH_QUANTILE * (len(widths) - 1))]
    return width if width >= _WRAP_MIN_WIDTH else float("inf")


def _full(prev: _Line, line: _Line, width: float) -> bool:
    """Whether ``prev`` is a filled line: ``line``'s first word would not have fitted after it at
    the wrap width, and its text spans most of that width (not a short centred title before a URL)."""
    return prev.width + 1 + line.first_word > width and prev.end - prev.start >= _FILLED * width


def _mark_headings(text: str, lines: list[_Line], width: float) -> None:
    """Setext headings (a line over ``===``/``---``) and short ALL-CAPS lines become hard."""
    for i, line in enumerate(lines):
        if line.kind in (_HARD, _ROW) or line.end == line.start:
            continue
        prev = lines[i - 1] if i else None
        after = lines[i + 1] if i + 1 < len(lines) else None
        if after is not None and _UNDERLINE.match(text, after.start, after.end):
            line.kind, line.heading = _HARD, 1 if text[after.start] == "=" else 2
            continue
        if (
            after is not None
            and _RST_UNDERLINE.match(text, after.start, after.end)
            and after.end - after.start >= line.end - line.start - 2
        ):
            line.kind, line.heading = _HARD, 1 if text[after.start] in "*#" else 2
            continue
        content = text[line.start : line.end]
        if not content.isupper() or line.width - (line.start - line.begin) > _CAPS_HEADING_CHARS:
            continue
        # Not a heading but a line of a running sentence (a wrapped ALL-CAPS disclaimer, or
        # "... on an \"AS IS\" BASIS," + "WITHOUT WARRANTIES OR CONDITIONS OF ANY"):
        if after is not None and _runs_into(text, line, after, width):
            continue
        if prev is not None and _runs_into(text, prev, line, width):
            continue
        line.kind, line.heading = _HARD, 1


def _runs_into(text: str, line: _Line, after: _Line, width: float) -> bool:
    """Whether ``line``'s sentence runs on into ``after`` (both non-structural, non-blank)."""
    if line.end == line.start or after.end == after.start or _HARD in (line.kind, after.kind):
        return False
    content = text[line.start : line.end]
    return not _terminal(content) and (_runs_on(content) or _full(line, after, width))


def _marker_kind(content: str) -> str:
    if not _MARKER.match(content):
        return ":"
    first = content[0]
    return "1" if first.isdigit() else "a" if first.isalpha() else first if first in "([" else "-"


def _joins(text: str, prev: _Line, line: _Line, width: float, item: str) -> bool:
    """Whether the break between ``prev`` and ``line`` (adjacent, both non-blank) is soft."""
    if prev.kind == _HARD or line.kind == _HARD:
        return False
    before = text[prev.start : prev.end]
    if line.kind in (_START, _ROW):
        # A marker-like start ("(ii)", "Section 4", "reasons:") continues a line that runs on
        # (ends on a comma or a function word; or is full, before a lowercase word), unless the
        # block is itself an item of a list or a key-value line.
        if _terminal(before) or _BULLET.match(text, line.start, line.end):
            return False
        marker = _MARKER.match(text, line.start, line.end)
        if item:
            # The next item of the list (a marker of the block's kind) or the next "key: value"
            # line; another kind of marker ends a wrapped line: "5.1. ... and" + "(b) on ...".
            return _runs_on(before) and not (marker and line.marker == item)
        if _runs_on(before):
            return True
        if not _first_letter_lower(text[line.start : line.end]):
            return False
        # "... intellectual property" + "claims: (a) under ...": a lowercase key continues prose.
        return (not marker and prev.kind == _TEXT) or _full(prev, line, width)
    content = text[line.start : line.end]
    if _terminal(before):
        # A lowercase word continues even a full stop ("e.g." + "the"), a number continues
        # an abbreviation ("48 C.F.R." + "2.101", "No." + "5").
        if content[0].isdigit() and _ABBREVIATION.search(before[-_ABBREVIATION_WITHIN:]):
            return True
        return content[0].islower() and _continues_item(text, prev, line, width)
    if _first_letter_lower(content):
        return _continues_item(text, prev, line, width)
    return _full(prev, line, width) or _runs_on(before)


def _continues_item(text: str, prev: _Line, line: _Line, width: float) -> bool:
    """After a list item or "key: value" line, only an indented, full or running-on line continues
    it ("1.1. \"Contributor\"" + "    means ..."; not "key-2: 55" + "word ...")."""
    return prev.kind not in (_START, _ROW) or (
        line.start - line.begin > prev.start - prev.begin
        or _full(prev, line, width)
        or _runs_on(text[prev.start : prev.end])
    )


def blocks(text: str) -> list[tuple[int, int]]:
    """The text's blocks: ``(start, end)`` of each paragraph or structural line, trimmed."""
    return [(block.start, block.end) for block in _blocks(text)[0]]


@dataclass(slots=True)
class _Block:
    start: int
    end: int
    indent: int  # display width before the first line's text
    heading: int  # the first line's heading level, else 0
    kind: int  # the first line's kind
    lines: int


def _blocks(text: str) -> tuple[list[_Block], str]:
    """The blocks, and the text with box frames blanked (same length) for the sentence steps."""
    lines = _lines(text)
    frames = _unbox(text, lines)
    _classify(text, lines)
    width = _wrap_width(lines)
    _mark_headings(text, lines, width)
    found: list[_Block] = []
    first: _Line | None = None  # the first and the last line of the open block
    last: _Line | None = None
    count = 0
    for line in lines:
        if (
            first is not None
            and last is not None
            and line.end > line.start
            and _joins(text, last, line, width, first.marker)
        ):
            last, count = line, count + 1
            continue
        if last is not None and first is not None:
            found.append(_block(text, first, last, count))
        first = last = line if line.end > line.start else None
        count = 1
    if last is not None and first is not None:
        found.append(_block(text, first, last, count))
    if frames:
        chars = list(text)
        for i in frames:
            chars[i] = " "
        text = "".join(chars)
    return found, text


def _block(text: str, first: _Line, last: _Line, lines: int) -> _Block:
    indent = _display_width(text[first.begin : first.start]) if first.start > first.begin else 0
    return _Block(first.start, last.end, indent, first.heading, first.kind, lines)


# A heading (a title, or an outline head: a changelog entry's "apt (2.5.2) unstable; urgency=medium",
# a list item over its sub-items, "OpenSSH 9.0 includes a number of changes ...:") is at most this
# long: a few units, which every unit of its section carries.
_HEAD_CHARS = 200
HEADING_DEPTH = 2  # the innermost headings a unit carries


def _section_heads(text: str, found: list[_Block]) -> list[tuple[int, ...]]:
    """For each block, the blocks heading the section it sits in, outermost first (at most
    ``HEADING_DEPTH``): titles (markdown ``#``, underlined, ALL-CAPS) by level, and *outline heads*,
    prose lines or items (one line, or a lead-in ending on ``:``) whose next block is indented
    deeper; a block ends the outline sections at its indent or deeper. Headings are short
    (``_HEAD_CHARS``)."""
    titles: list[tuple[int, int]] = []  # (level, block index), open titles outermost first
    outline: list[tuple[int, int]] = []  # (indent, block index)
    heads: list[tuple[int, ...]] = []
    for i, block in enumerate(found):
        short = block.end - block.start <= _HEAD_CHARS
        if block.heading and short:
            while titles and titles[-1][0] >= block.heading:
                titles.pop()
            outline.clear()  # a title starts a new outline
            heads.append(tuple(b for _, b in titles)[-HEADING_DEPTH:])
            titles.append((block.heading, i))
            continue
        while outline and outline[-1][0] >= block.indent:
            outline.pop()
        heads.append(tuple(b for _, b in [*titles, *outline])[-HEADING_DEPTH:])
        after = found[i + 1] if i + 1 < len(found) else None
        if (
            after is not None
            and after.indent > block.indent
            and block.kind not in (_HARD, _ROW)
            and short
            and (block.lines == 1 or text[block.end - 1] == ":")
        ):
            outline.append((block.indent, i))
    return heads


def _stripped(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


# Cut candidates for an over-long sentence, best first: (pattern, offset of the cut in the match).
_CLAUSE_CUTS = (
    re.compile(r";\s"),
    re.compile(r":\s"),
    re.compile(r",\s+(?:and|or|but|nor|and/or)\s"),
    re.compile(r"\s\((?:[ivx]{1,5}|[a-z]|\d{1,2})\)\s"),
    re.compile(r",\s"),
    re.compile(r"\s"),
    re.compile(r"[^\w\s]"),
)


def _cut(text: str, start: int, limit: int, lowest: int) -> int:
    """Where to end a piece starting at ``start``: a clause boundary in ``(lowest, limit]``."""
    window = text[lowest:limit]
    for pattern in _CLAUSE_CUTS:
        last = None
        for last in pattern.finditer(window):  # noqa: B007
            pass
        if last is not None:
            # Cut after the punctuation (or inside the whitespace): the piece keeps its comma.
            cut = lowest + last.start() + 1
            if cut > start:
                return cut
    return limit


def cap(text: str, start: int, end: int, max_chars: int) -> list[tuple[int, int]]:
    """Split an over-long span into pieces of at most ``max_chars``, at clause boundaries first."""
    pieces = []
    while end - start > max_chars:
        # Pieces of at least a quarter of max_chars on both sides of the cut.
        cut = _cut(text, start, min(start + max_chars, end - max_chars // 4), start + max_chars // 4)
        piece = _stripped(text, start, cut)
        if piece[1] > piece[0]:
            pieces.append(piece)
        start = _stripped(text, cut, end)[0]
    if end > start:
        pieces.append((start, end))
    return pieces


def _is_marker(piece: str) -> bool:
    return bool(_MARKER.fullmatch(piece) or _SECTION.fullmatch(piece) or _LABEL.fullmatch(piece))


def _sentences(text: str, start: int, end: int, language: str) -> Iterator[tuple[int, int]]:
    """sentencex's sentences of one block, cut at its ends so every character stays covered."""
    block = text[start:end].translate(_TO_SPACE)
    try:
        found = sentencex.get_sentence_boundaries(language, block)
    except UnicodeEncodeError:  # a lone surrogate: one replacement character, same length
        found = sentencex.get_sentence_boundaries(language, _SURROGATE.sub("\ufffd", block))
    cuts = sorted({b["end_index"] for b in found if 0 < b["end_index"] < len(block)})
    pending = None
    for a, b in zip([0, *cuts], [*cuts, len(block)]):
        a, b = _stripped(text, start + a, start + b)
        if b <= a:
            continue
        if pending is not None:
            a, pending = pending, None
        if _is_marker(text[a:b]):
            pending = a
            continue
        yield a, b
    if pending is not None:
        yield _stripped(text, pending, end)


def split_sentences(text: str, max_chars: int = 400, language: str = "en") -> list[tuple[int, int]]:
    """Sentence ``(start, end)`` character offsets in ``text``, whitespace trimmed.

    Paragraphs are joined across soft line breaks and structural lines (headings, list items,
    table rows, code, key-value and log lines, quotes) kept apart (see the module docstring);
    sentencex splits each block in ``language``; spans longer than ``max_chars`` are cut at clause
    boundaries, else at whitespace.
    """
    return [(unit.start, unit.end) for unit in segment(text, max_chars, language)]


@dataclass(frozen=True, slots=True)
class Unit:
    """One evidence unit, ``text[start:end]``, and the units of the headings over it: indices into
    :func:`segment`'s list, outermost heading first."""

    start: int
    end: int
    headings: tuple[int, ...] = ()


def segment(text: str, max_chars: int = 400, language: str = "en") -> list[Unit]:
    """:func:`split_sentences`'s units, each with the headings of the section it sits in: the
    titles and outline heads (``apt (2.5.2) unstable; urgency=medium`` over its entry) whose text
    tells which part of the document a sentence belongs to (see :func:`_section_heads`)."""
    found, masked = _blocks(text)
    heads = _section_heads(text, found)
    units: list[Unit] = []
    block_units: list[range] = []
    for block, over in zip(found, heads, strict=True):
        first = len(units)
        headings = tuple(u for b in over for u in block_units[b])
        for start, end in _sentences(masked, block.start, block.end, language):
            units.extend(Unit(a, b, headings) for a, b in cap(masked, start, end, max_chars))
        block_units.append(range(first, len(units)))
    return units


def _unframed(parts: list[str]) -> list[str]:
    """Box frames between joined lines (``text  *`` then ``*  text``) removed."""
    parts = list(parts)
    for i in range(len(parts) - 1):
        left, right = parts[i].rstrip(), parts[i + 1].lstrip()
        if left[-2:-1].isspace() and left[-1] == "*" == right[:1] and right[1:2].isspace():
            parts[i], parts[i + 1] = left[:-1], right[1:]
    return parts


def replay_text(text: str) -> str:
    """A span's text on one line, for the replayed evidence: each line break, with the spaces and
    tabs around it (and a box's ``*`` frame), becomes one space, and a word hyphenated at a line
    end is rejoined (``inter-\\nnational`` -> ``international``; before a capital the hyphen
    stays: ``Non-\\nProfit`` -> ``Non-Profit``). Text without line breaks is returned unchanged.
    The result has no offsets; the span (``Evidence.text``) stays the exact document slice."""
    parts = _BREAK.split(text)
    if len(parts) == 1:
        return text
    parts = _unframed(parts)
    pieces = [parts[0].rstrip(" \t"), *(p.strip(" \t") for p in parts[1:-1]), parts[-1].lstrip(" \t")]
    out = [pieces[0]]
    for piece in pieces[1:]:
        if not piece:
            continue
        last = out[-1]
        if len(last) > 1 and last[-1] == "-" and last[-2].isalpha() and piece[0].isalpha():
            out[-1] = (last[:-1] if piece[0].islower() else last) + piece
        else:
            out.append(piece)
    return " ".join(p for p in out if p)
