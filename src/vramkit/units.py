"""Sizes, percentages and durations: parse what people type, format what they read.

Bytes are ints everywhere inside vramkit; human units exist only at the edges.
Binary units (KiB, MiB, GiB) are what we print. Both binary and decimal units
(KB, MB, GB) are accepted when parsing, and they mean different things.
"""

from __future__ import annotations

import math
import re

from .i18n import _

_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)\s*$")
_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 1024, "kib": 1024, "kb": 1000,
    "m": 1024**2, "mib": 1024**2, "mb": 1000**2,
    "g": 1024**3, "gib": 1024**3, "gb": 1000**3,
    "t": 1024**4, "tib": 1024**4, "tb": 1000**4,
    "p": 1024**5, "pib": 1024**5, "pb": 1000**5,
    "e": 1024**6, "eib": 1024**6, "eb": 1000**6,  # up to MAX_SIZE, which a refusal names in EiB
}
_DURATION_UNITS = {"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
_DURATION_RE = re.compile(r"([0-9]+(?:\.[0-9]*)?)\s*([a-z]*)")


# The largest size or duration anything here means (1 EiB; about 317 years): a larger one is a
# typo, and would overflow a float (a 400-digit size) or sleep forever.
MAX_SIZE = 1024**6
MAX_DURATION = 1e10


def parse_size(text: str | int | float) -> int:
    """'20GiB' -> 21474836480 bytes; '1.5 GB' -> 1500000000; a bare number is bytes."""
    size = _parse_size(text)
    if size > MAX_SIZE:
        raise ValueError(_("size too large: {value} (at most 1EiB)").format(value=repr(_short(str(text)))))
    return size


def _parse_size(text: str | int | float) -> int:
    if isinstance(text, bool):
        raise ValueError(_("not a size: {value}").format(value=_short(repr(text))))
    if isinstance(text, (int, float)):
        if isinstance(text, float) and not math.isfinite(text):  # json.loads reads Infinity, NaN
            raise ValueError(_("not a size: {value}").format(value=_short(repr(text))))
        if text < 0:
            raise ValueError(_("size must not be negative: {value}").format(value=_short(repr(text))))
        return int(text) if text <= MAX_SIZE else MAX_SIZE + 1
    if not isinstance(text, str):
        raise ValueError(_("not a size: {value}").format(value=_short(repr(text))))
    if text.strip().startswith("-"):
        raise ValueError(_("size must not be negative: {value}").format(value=_short(repr(text))))
    match = _SIZE_RE.match(text)
    if not match or match.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(_("not a size: {value} (try e.g. 20GiB, 512MiB, 30GB)").format(value=repr(_short(text))))
    value = float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]  # inf for 400 digits
    return int(round(value)) if value <= MAX_SIZE else MAX_SIZE + 1


def format_size(n: int | None, unit: str | None = None) -> str:
    """Bytes -> '12.3GiB' / '512MiB'. None -> 'N/A'. `unit` forces MiB or GiB."""
    if n is None:
        return "N/A"
    if unit is None:
        unit = "GiB" if abs(n) >= 1024**3 else "MiB"
    if unit == "GiB":
        value = n / 1024**3
        return f"{value:.1f}GiB" if abs(value) < 100 else f"{value:.0f}GiB"
    if unit == "MiB":
        return f"{n / 1024**2:.0f}MiB"
    raise ValueError(f"unknown unit {unit!r}")


def format_size_any(n: int | None) -> str:
    """format_size, for any size an error message gives: under 1 MiB in KiB or bytes (where
    format_size would say 0MiB), a tenth of a MiB under 10 MiB (not 2MiB for 1.50 MiB), from 1,024 GiB
    on in TiB, PiB or EiB."""
    if n is not None and 1024**2 <= abs(n) < 10 * 1024**2:
        return f"{n / 1024**2:.1f}MiB"
    if n is None or 1024**2 <= abs(n) < 1024**4:
        return format_size(n)
    if abs(n) < 1024:
        return f"{n}B"
    if abs(n) < 1024**2:
        return f"{n / 1024:.1f}KiB" if abs(n) < 100 * 1024 else f"{n / 1024:.0f}KiB"
    for unit, size in (("TiB", 1024**4), ("PiB", 1024**5)):
        if abs(n) < 1024 * size:
            value = n / size
            return f"{value:.1f}{unit}" if abs(value) < 100 else f"{value:.0f}{unit}"
    return f"{n / 1024**6:.1f}EiB"


def format_size_as_logged(n: int | None) -> str:
    """A size an error message gave, to the figure it printed: two decimals in KiB, MiB or GiB
    (PyTorch's allocator, vLLM and TensorFlow print so), from 1,024 GiB on in TiB, PiB or EiB;
    under 1 KiB in bytes. '23.65GiB' where format_size_any says 23.7GiB. A size of exactly 1 MiB
    or 1 GiB is 1.00MiB or 1.00GiB (c10 prints it 1024.00 KiB or MiB; the same bytes either way)."""
    if n is None:
        return "N/A"
    if abs(n) < 1024:
        return f"{n}B"
    for unit, size in (("KiB", 1024), ("MiB", 1024**2), ("GiB", 1024**3), ("TiB", 1024**4), ("PiB", 1024**5)):
        if round(abs(n) / size, 2) < 1024:  # not 1024.00MiB for a size that rounds up to a GiB
            return f"{n / size:.2f}{unit}"
    return f"{n / 1024**6:.2f}EiB"


def parse_percent(text: str | int | float) -> float:
    """'80%' or '80' -> 80.0, within 0..100."""
    raw = text.strip().rstrip("%") if isinstance(text, str) else text
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ValueError(_("not a percentage: {value}").format(value=_short(repr(text)))) from None
    if not 0 <= value <= 100:
        raise ValueError(_("percentage out of range 0..100: {value}").format(value=_short(repr(text))))
    return value


def parse_duration(text: str | int | float) -> float:
    """'90s', '5m', '2h', '1h30m', '1d', or a bare number of seconds -> seconds."""
    if isinstance(text, bool):
        raise ValueError(_("not a duration: {value}").format(value=_short(repr(text))))
    if isinstance(text, (int, float)):
        if isinstance(text, float) and not math.isfinite(text):  # json.loads reads Infinity, NaN
            raise ValueError(_("not a duration: {value}").format(value=_short(repr(text))))
        if text < 0:
            raise ValueError(_("duration must not be negative: {value}").format(value=_short(repr(text))))
        if text > MAX_DURATION:
            raise ValueError(_("duration too long: {value} (at most {limit:g} seconds)").format(
                value=_short(repr(text)), limit=MAX_DURATION))
        return float(text)
    cleaned = str(text).strip().lower().replace(" ", "")
    if not cleaned or cleaned.startswith("-"):
        raise ValueError(_("not a duration: {value} (try e.g. 90s, 5m, 2h)").format(value=repr(_short(str(text)))))
    total, pos, last_unit = 0.0, 0, math.inf
    for match in _DURATION_RE.finditer(cleaned):
        unit = _DURATION_UNITS.get(match.group(2))
        # each part a smaller unit than the one before (1h30m): 1h1h or 30m1h is a typo, not a sum
        if match.start() != pos or unit is None or unit >= last_unit:
            raise ValueError(_("not a duration: {value} (try e.g. 90s, 5m, 2h)").format(value=repr(_short(str(text)))))
        total += float(match.group(1)) * unit
        pos, last_unit = match.end(), unit
    if pos != len(cleaned):
        raise ValueError(_("not a duration: {value} (try e.g. 90s, 5m, 2h)").format(value=repr(_short(str(text)))))
    if not total <= MAX_DURATION:  # inf from 400 digits too
        raise ValueError(_("duration too long: {value} (at most {limit:g} seconds)").format(
            value=repr(_short(str(text))), limit=MAX_DURATION))
    return total


def format_duration(seconds: float | None) -> str:
    """Seconds -> '45s', '12m05s', '3h05m', '2d04h'. None -> 'N/A'."""
    if seconds is None:
        return "N/A"
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


# No machine has more GPUs than this (NVML numbers a node's GPUs from 0; the largest nodes have
# tens). A range is checked against it before it is expanded: '0-999999999999' is one line of
# error, not a list of a trillion indices.
MAX_GPU_INDEX = 1023


def parse_gpu_list(text: str) -> list[int]:
    """'0,2,5' or '0-3' or '1,4-6' -> sorted GPU indices; ValueError with a one-line message.
    A range past MAX_GPU_INDEX is refused before it is expanded."""
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        try:
            if not re.fullmatch(r"[0-9]{1,4000}(?:-[0-9]{1,4000})?", part, re.ASCII):  # int() takes "\u0661", "1_0"
                raise ValueError
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if lo > hi or lo < 0:
                    raise ValueError
            else:
                lo = hi = int(part)
        except ValueError:
            raise ValueError(_("{value} is not a GPU list (try 0 or 0,2 or 0-3)").format(
                value=repr(_short(text)))) from None
        if lo != hi and hi > MAX_GPU_INDEX:
            raise ValueError(_("GPU range {range} is too large: no machine has GPU {index} (GPU indices stop at "
                               "{last})").format(range=_short(part), index=_short(str(hi)), last=MAX_GPU_INDEX))
        out.update(range(lo, hi + 1))
    return sorted(out)


def _short(text: str, limit: int = 40) -> str:
    """`text` cut to `limit` characters for an error message (a 4,000-digit number is one line)."""
    return text if len(text) <= limit else f"{text[:limit - 3]}..."


_TIME_FORMATS = ("%Y-%m-%d", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S")
# A time with its zone, as vram's JSON writes one (since_time: 2026-11-01T13:00:00+00:00), or Z for UTC
_ZONED = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?([zZ]|[+-]\d{2}:?\d{2})")


def parse_time_point(text: str, now: float) -> float:
    """A point in time -> unix seconds: 'now'; a duration meaning that long before `now` ('7d',
    '24h', '90m', '1h30m'); a local date or time ('2026-11-01', '2026-11-01 13:00[:SS]',
    '2026-11-01T13:00[:SS]'), or one with its zone ('2026-11-01T13:00:00+00:00', '...Z', as the
    JSON writes them); or '@UNIX' (unix seconds). ValueError with a one-line message."""
    from datetime import datetime

    cleaned = text.strip()
    hint = _("(try 7d, 24h, now, 2026-11-01, '2026-11-01 13:00' or @1767225600)")
    if cleaned.lower() == "now":
        return now
    if cleaned.startswith("@"):
        try:
            value = float(cleaned[1:])
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or not 0 <= value <= 1e11:  # 1e11: the year 5138
            raise ValueError(_("not a unix time: {value} {hint}").format(value=repr(_short(text)), hint=hint))
        return value
    zoned = _ZONED.fullmatch(cleaned)
    if zoned or len(cleaned) <= 19 and cleaned[:4].isdigit() and cleaned[4:5] == "-":
        for layout in (None,) if zoned else _TIME_FORMATS:
            try:
                if layout is None:  # (Python 3.10's fromisoformat takes no Z)
                    return datetime.fromisoformat(cleaned[:-1] + "+00:00" if cleaned[-1] in "zZ" else cleaned
                                                  ).timestamp()
                return datetime.strptime(cleaned, layout).timestamp()  # naive: local time
            except (ValueError, OverflowError, OSError):
                continue
        raise ValueError(_("not a date or time: {value} {hint}").format(value=repr(_short(text)), hint=hint))
    try:
        return now - parse_duration(cleaned)
    except ValueError:
        raise ValueError(_("not a time: {value} {hint}").format(value=repr(_short(text)), hint=hint)) from None
