"""Sizes, durations and percentages: what people type and what they read."""

from __future__ import annotations

import math

import pytest

from vramkit.units import format_duration, format_size, parse_duration, parse_percent, parse_size

KiB, MiB, GiB, TiB = 1024, 1024**2, 1024**3, 1024**4


@pytest.mark.parametrize("text, expected", [
    ("20GiB", 20 * GiB),
    ("20GB", 20 * 10**9),  # decimal: not the same thing
    ("20G", 20 * GiB),  # a bare letter is binary, as nvidia-smi and most tools read it
    ("512MiB", 512 * MiB),
    ("512MB", 512 * 10**6),
    ("4KiB", 4 * KiB),
    ("4kb", 4000),
    ("2TiB", 2 * TiB),
    ("2TB", 2 * 10**12),
    ("1.5GB", 1_500_000_000),
    ("1.5 GiB", 3 * GiB // 2),
    (".5GiB", GiB // 2),
    ("1.GiB", GiB),
    ("  80gib  ", 80 * GiB),  # units are case-insensitive, spaces are fine
    ("1024", 1024),  # a bare number is bytes
    ("100B", 100),
    ("0", 0),
    (1024, 1024),
    (2.0, 2),
    ("81920MiB", 80 * GiB),
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected
    assert isinstance(parse_size(text), int)


def test_gib_and_gb_differ():
    assert parse_size("80GiB") - parse_size("80GB") == 80 * (GiB - 10**9)


@pytest.mark.parametrize("text", ["", "GiB", "abc", "20XB", "20 GiB extra", "1e3", "1,000", "20GiBs",
                                  "0x10", "1.2.3GB", None, [], {}, True, False])
def test_parse_size_rejects_garbage(text):
    with pytest.raises(ValueError, match="not a size"):
        parse_size(text)


@pytest.mark.parametrize("text", ["-1GiB", " -5", "-0.5MB", -1, -0.5])
def test_parse_size_rejects_negative(text):
    with pytest.raises(ValueError, match="negative"):
        parse_size(text)


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_parse_size_rejects_non_finite_numbers(value):
    # json.loads accepts Infinity and NaN, so a scenario can hand them in.
    with pytest.raises(ValueError):
        parse_size(value)


def test_parse_size_error_suggests_the_format():
    with pytest.raises(ValueError, match="20GiB"):
        parse_size("lots")


@pytest.mark.parametrize("n, expected", [
    (None, "N/A"),
    (0, "0MiB"),
    (512 * MiB, "512MiB"),
    (1023 * MiB, "1023MiB"),
    (GiB, "1.0GiB"),
    (int(12.34 * GiB), "12.3GiB"),
    (80 * GiB, "80.0GiB"),
    (99 * GiB, "99.0GiB"),
    (100 * GiB, "100GiB"),
    (640 * GiB, "640GiB"),
    (-2 * GiB, "-2.0GiB"),
])
def test_format_size(n, expected):
    assert format_size(n) == expected


def test_format_size_forced_unit():
    assert format_size(2 * GiB, "MiB") == "2048MiB"
    assert format_size(512 * MiB, "GiB") == "0.5GiB"
    assert format_size(None, "GiB") == "N/A"
    with pytest.raises(ValueError):
        format_size(GiB, "GB")


@pytest.mark.parametrize("size", ["20GiB", "512MiB", "1.5GiB"])
def test_format_parses_back(size):
    assert parse_size(format_size(parse_size(size))) == parse_size(size)


@pytest.mark.parametrize("text, seconds", [
    ("1h30m", 5400),
    ("90s", 90),
    ("5m", 300),
    ("2h", 7200),
    ("1d", 86400),
    ("5h12m", 5 * 3600 + 12 * 60),
    ("2d03h", 2 * 86400 + 3 * 3600),
    ("1h 30m", 5400),
    ("1.5h", 5400),
    ("10sec", 10),
    ("5min", 300),
    ("90", 90),
    ("0s", 0),
    (90, 90),
    (1.5, 1.5),
])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "   ", "abc", "5x", "h", "m5", "1hh", "-5s", "1h-30m", "5 parsecs",
                                  "1h30m!", True, -1, math.inf, math.nan])
def test_parse_duration_rejects(text):
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize("seconds, text", [
    (None, "N/A"),
    (0, "0s"),
    (45, "45s"),
    (59.9, "59s"),
    (60, "1m00s"),
    (754, "12m34s"),
    (3600, "1h00m"),
    (3 * 3600 + 5 * 60 + 59, "3h05m"),
    (86400, "1d00h"),
    (2 * 86400 + 4 * 3600, "2d04h"),
    (-5, "0s"),
])
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


@pytest.mark.parametrize("text", ["45s", "1h30m", "2d04h", "12m34s"])
def test_format_duration_parses_back(text):
    assert format_duration(parse_duration(text)) == text


@pytest.mark.parametrize("text, value", [("80%", 80.0), ("80", 80.0), (" 50 % ", 50.0), ("0", 0.0),
                                         ("100%", 100.0), ("12.5%", 12.5), (80, 80.0), (0.5, 0.5)])
def test_parse_percent(text, value):
    assert parse_percent(text) == value


@pytest.mark.parametrize("text", ["101%", "-1", 100.5, "abc", "", "%", None, "nan"])
def test_parse_percent_rejects(text):
    with pytest.raises(ValueError):
        parse_percent(text)


def test_a_size_as_logged_reads_back_as_the_message_printed_it():
    """doctor's facts: every figure PyTorch's allocator prints ("%.2f" in KiB up to 1 MiB, MiB up to
    1 GiB, else GiB) shows as printed, so it can be found in the log (23.65 GiB was shown 23.7GiB)."""
    import random

    from vramkit.units import format_size_as_logged, parse_size

    rng = random.Random(5)
    for unit in ("KiB", "MiB", "GiB"):
        for _ in range(2000):
            printed = f"{rng.randrange(100, 1024 * 100) / 100:.2f}"
            assert format_size_as_logged(parse_size(f"{printed} {unit}")) == f"{printed}{unit}", (printed, unit)
    # c10's 1024.00 MiB is the same bytes as 1.00 GiB: shown the way a person writes it
    assert [format_size_as_logged(parse_size(t)) for t in ("1024.00 MiB", "1023.999 MiB", "1024.00 KiB")] == [
        "1.00GiB", "1.00GiB", "1.00MiB"]
    assert [format_size_as_logged(n) for n in (None, 0, 1023, 1024, 3 * 2**40, 2**60)] == [
        "N/A", "0B", "1023B", "1.00KiB", "3.00TiB", "1.00EiB"]
