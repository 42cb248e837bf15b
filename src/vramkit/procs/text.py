"""Text that comes from other users (process names, command lines, environments): the one
sanitizer. Stripped of control characters here, once, before anything prints it."""

from __future__ import annotations

from ..i18n import N_, _

# Characters that reorder or hide text: Unicode format characters (Cf: U+202E right-to-left
# override, the bidi isolates, zero-width space/joiners, the BOM, soft hyphen, tag characters ...),
# the line separator (Zl, U+2028) and the paragraph separator (Zp, U+2029). Literal ranges,
# because scanning every code point with unicodedata at import costs ~120 ms. Generated with
# Python 3.11 (Unicode 14.0):
#   [c for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) in ("Cf", "Zl", "Zp")]
# merged into ranges; Unicode 15.0 extends the Egyptian hieroglyph format controls to U+1343F.
_FORMAT_RANGES = (
    (0x00AD, 0x00AD), (0x0600, 0x0605), (0x061C, 0x061C), (0x06DD, 0x06DD), (0x070F, 0x070F),
    (0x0890, 0x0891), (0x08E2, 0x08E2), (0x180E, 0x180E), (0x200B, 0x200F), (0x2028, 0x202E),
    (0x2060, 0x2064), (0x2066, 0x206F), (0xFEFF, 0xFEFF), (0xFFF9, 0xFFFB), (0x110BD, 0x110BD),
    (0x110CD, 0x110CD), (0x13430, 0x1343F), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
    (0xD800, 0xDFFF),  # lone surrogates (text decoded with surrogateescape, JSON \ud800): not printable
)
NOT_VISIBLE = N_("not visible in /proc: the process exited, or runs in another PID namespace")
# The driver numbers processes in another PID namespace (the host's) than this /proc (a container's):
# its pid names another process here, or none, and is never read as this /proc's.
OTHER_NAMESPACE = N_("a pid of another PID namespace (the host's): this /proc numbers processes differently")
_control: dict[int, str] = {}  # the str.translate table, built on first use (~0.4 ms): see _control_table


def _control_table() -> dict[int, str]:
    """Control characters (C0, DEL, C1) and the ranges above -> '?'."""
    if not _control:
        _control.update(dict.fromkeys([*range(0x00, 0x20), *range(0x7F, 0xA0),
                                       *(c for low, high in _FORMAT_RANGES for c in range(low, high + 1))], "?"))
    return _control


def sanitize(text: str) -> str:
    """Replace control characters (terminal escapes, newlines, tabs...) and the characters that
    reorder or hide text (Unicode categories Cf, Zl, Zp: U+202E, zero-width spaces, U+2028...)
    with '?'."""
    # Printable ASCII (0x20-0x7E) holds none of them: most command lines need no table at all.
    if text.isascii() and text.isprintable():
        return text
    return text.translate(_control_table())


def excerpt(text: str, keep: int = 60) -> str:
    """A value from the environment or another user (CUDA_VISIBLE_DEVICES, a command line) as a
    line shows it: sanitized, and a 20 kB one cut after `keep` characters, saying so."""
    text = sanitize(text)
    if len(text) <= keep:
        return text
    return _("{start}… ({count:,} characters)").format(start=text[:keep], count=len(text))
