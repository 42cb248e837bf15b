"""The lease directory's errors."""

from __future__ import annotations

from ..errors import VramkitError


class LeaseError(VramkitError):
    """The lease directory cannot be used. The message is one line."""


class LeaseSettingError(LeaseError):
    """A lease setting's value makes no sense (a relative or overlong VRAM_LEASE_DIR): bad input, exit 2."""

    exit_code = 2


class LeaseConflict(LeaseError):
    """Another launcher reserved a chosen GPU while this one was choosing (possible only while the
    directory lock is gone around: for a GPU not locked from the look's start, or whose lock file
    its owner swapped): nothing was reserved; choosing again gives a right answer."""
