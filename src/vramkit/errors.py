"""One base for every error vramkit raises on purpose, so callers and the CLI catch one class.

A library error speaks in the library's terms: `param` names the argument of the call it is
about (`select_gpus(count=0)` -> param "count"), never a command-line flag; the CLI maps
parameters to its flags (cli/main.py). The message does not repeat the parameter: `str(e)` is
"count: must be ..." for a library caller, and `vram` prints "--count: must be ..." instead.
`exit_code` is what `vram` exits with: 2 when the caller asked for something that makes no
sense, 1 when the machine could not do it.
"""

from __future__ import annotations

from .i18n import _


class VramkitError(Exception):
    """An error with a one-line message meant for the person who made the call."""

    exit_code = 1

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param

    def __str__(self) -> str:
        return f"{self.param}: {self.message}" if self.param else self.message


class RequestError(VramkitError, ValueError):
    """The request cannot be carried out as asked (a bad value, an unknown GPU, nothing selected)."""

    exit_code = 2


def no_such_gpu(index: int | str, have: list[int], param: str = "gpu",
                kind: type[RequestError] = RequestError) -> RequestError:
    """The one wording for a GPU index this machine does not have (raise what it returns)."""
    if not have:
        return kind(_("no GPU {index} (this machine has no GPUs)").format(index=index), param=param)
    if sorted(have) == list(range(max(have) + 1)):
        return kind(_("no GPU {index} (this machine has GPUs 0-{last})").format(index=index, last=max(have)),
                    param=param)
    return kind(_("no GPU {index} (this machine has GPUs {indices})").format(
        index=index, indices=",".join(map(str, sorted(have)))), param=param)
