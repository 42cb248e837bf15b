"""Display width: how many terminal columns text takes, and cutting or padding text to a width.

len() counts code points, a terminal counts columns. The rules here are those of wcwidth(3), kept
simple:
- East Asian wide and full-width characters (CJK, kana, hangul, most emoji: east_asian_width "W"
  or "F") take two columns;
- combining and enclosing marks (categories Mn, Me: "e" + U+0301 is one "é"), the variation
  selectors (U+FE0F "show as emoji" among them) and the zero-width joiner U+200D take none; a
  ZWJ sequence ("👩‍💻") is measured as the sum of its parts (4), which is what most terminals draw;
- everything else takes one (ambiguous-width characters such as "…" included).
Control characters are not measured: text from other users is sanitized (procs.sanitize) first.

ASCII text (nearly all of it) is measured with len() and never loads unicodedata, so that
`vram status` costs no more than before.
"""

from __future__ import annotations

ELLIPSIS = "…"  # marks cut text; one column wide
# the marks vram itself draws outside Latin-1 and the box-drawing and block characters (a cut, the
# alerts' bullets, arrows: the live view's --ascii table, tui/look.py): measured without unicodedata
_OWN_MARKS = frozenset(ELLIPSIS + "▲●←↑→↓")
# One column each by the rules above, measured without unicodedata (a look-up touches ~0.1 MiB of
# its tables, in every view): Latin-1 (the degree sign) and the box-drawing and block characters of
# the bars and charts (no mark, none wide; test_text_width checks every one against unicodedata)
_LATIN_1_END = "\u00ff"
_BOXES_FIRST, _BOXES_LAST = "\u2500", "\u259f"
_ZERO_WIDTH = frozenset("\u200b\u200c\u200d\u2060\ufeff") | frozenset(map(chr, range(0xFE00, 0xFE10)))


def char_cells(char: str) -> int:
    """Columns one character (code point) takes: 0, 1 or 2."""
    if char <= _LATIN_1_END or _BOXES_FIRST <= char <= _BOXES_LAST or char in _OWN_MARKS:
        return 1
    import unicodedata  # here, not at the top: only text that is not ASCII needs it

    if char in _ZERO_WIDTH or unicodedata.category(char) in ("Mn", "Me"):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def cells(text: str) -> int:
    """Display width of `text` in terminal columns."""
    if text.isascii():
        return len(text)
    return sum(map(char_cells, text))


def fit(text: str, width: int) -> str:
    """`text` cut to at most `width` columns, with … as its last column when cut. A wide character
    that would straddle the limit is left out whole (the result may then be a column short: pad()
    fills it), and marks that combine with the last character kept stay with it."""
    if text.isascii():  # the fast path for most text: a column per character
        if len(text) <= width:
            return text
        return text[: width - 1] + ELLIPSIS if width > 0 else ""
    if cells(text) <= width:
        return text
    if width <= 0:
        return ""
    out, used = [], 0
    for c in text:
        w = char_cells(c)
        if used + w > width - 1:
            break
        out.append(c)
        used += w
    return "".join(out) + ELLIPSIS


def pad(text: str, width: int, right: bool = False) -> str:
    """`text` padded with spaces to `width` columns: on the left when `right` (numbers), else on the
    right. Text wider than `width` is returned whole: cut it with fit() first where it must fit."""
    if text.isascii():  # the fast path, as in cells()
        return text.rjust(width) if right else text.ljust(width)
    room = " " * max(0, width - cells(text))
    return room + text if right else text + room


# Closing punctuation stays with the character before it (a line never starts with it), opening
# brackets with the one after (a line never ends with one).
_NO_LINE_START = frozenset("，。、；：！？）」』】》〉,.;:!?)")
_NO_LINE_END = frozenset("（「『【《〈")


def wrap(text: str, width: int) -> list[str]:
    """`text` folded into lines of at most `width` columns (textwrap.wrap counts code points, and
    breaks only at spaces): between words, and between any two wide characters (CJK text has no
    spaces). A word wider than a line is cut. ASCII text folds as textwrap does."""
    import textwrap

    if text.isascii():
        return textwrap.wrap(text, width)
    pieces: list[str] = []  # words (with the spaces before them), and each wide character alone
    for c in text:
        last = pieces[-1][-1] if pieces else ""
        starts = not last or char_cells(c) == 2 or char_cells(last) == 2 or (c == " " and last != " ")
        if not pieces or (starts and c not in _NO_LINE_START and last not in _NO_LINE_END):
            pieces.append(c)
        else:
            pieces[-1] += c
    lines: list[str] = []
    line = ""
    for piece in pieces:
        if cells(line + piece) <= width or not line.strip():
            line += piece
        else:
            lines.append(line.rstrip())
            line = piece.lstrip()
        while cells(line) > width:  # a single piece wider than the line
            cut = fit(line, width + 1)[:-1] or line[:1]
            lines.append(cut)
            line = line[len(cut):]
    if line.strip():
        lines.append(line.rstrip())
    return lines
