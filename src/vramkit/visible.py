"""Which GPUs a process may use, from its environment: each vendor's rule, asked for the GPUs of
that vendor (cuda_env.py: CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER, as CUDA reads them;
hip_env.py: ROCR_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES, GPU_DEVICE_ORDINAL, as ROCm reads them).

Everything above (pick, run, ps --env, top --only-visible, doctor) asks this module and names no
variable itself; a third vendor is one more rule here. On a host with both vendors a process may
use the NVIDIA GPUs its CUDA rule lets through and the AMD ones its ROCm rule lets through; vram
run sets one vendor's variable for one vendor's pick, never both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from . import cuda_env, hip_env
from .cuda_env import CERTAIN, CudaDevice, Numbering, Visible
from .errors import RequestError
from .i18n import _

# every variable a rule reads: what vram reads of another process's environment (ps --env)
VARIABLES = tuple(dict.fromkeys(cuda_env.VARIABLES + hip_env.VARIABLES + (hip_env.HIP_FALLBACK,)))


def vendors(devices: list[CudaDevice]) -> list[str]:
    """The vendors of these devices, in the machine's order."""
    return list(dict.fromkeys(d.vendor for d in devices if not d.is_mig))


def read(env: Mapping[str, str], devices: list[CudaDevice]) -> Visible:
    """What a program started with `env` may use of these devices: each vendor's rule, together."""
    parts = [cuda_env.parse_env(env, devices) if v == "nvidia" else hip_env.parse_env(env, devices)
             for v in vendors(devices) or ["nvidia"]]
    if len(parts) == 1:
        return parts[0]
    given = [p for p in parts if p.is_set]
    merged = Visible(value=" ".join(p.described or "" for p in given) or None,
                     order=parts[0].order if parts[0].is_set else Numbering("", [], CERTAIN),
                     variable=_either(p.variable for p in parts), vendor="mixed",
                     described=" ".join(p.described or "" for p in given) or None)
    for p in parts:
        merged.entries += p.entries
        merged.devices += p.devices
        merged.pitfalls += p.pitfalls
        merged.error = merged.error or p.error
    return merged


def _either(variables: Iterable[str]) -> str:
    """'CUDA_VISIBLE_DEVICES or HIP_VISIBLE_DEVICES', in the reader's language (doctor: '... not set')."""
    first, *rest = variables
    for second in rest:
        # Translators: two variables, either of which chooses GPUs ("{variable} not set" says it of both)
        first = _("{first} or {second}").format(first=first, second=second)
    return first


def allowed_keys(vis: Visible, devices: list[CudaDevice]) -> set[str] | None:
    """The units `vis` allows (None: no restriction). RequestError when a runtime would refuse it."""
    return cuda_env.allowed_keys(vis, devices)


def child_env(units: list[CudaDevice], devices: list[CudaDevice], env: Mapping[str, str],
              ids: str = "auto") -> dict[str, str]:
    """The variables that give a launched program exactly `units`: its vendor's, never another's."""
    picked = {u.vendor for u in units}
    if len(picked) > 1:
        raise RequestError(_("the GPUs chosen are of two vendors ({vendors}): one program runs on one vendor's GPUs; "
                             "ask for them apart (--only)").format(vendors=", ".join(sorted(picked))))
    if picked == {"amd"}:
        return hip_env.child_env(units, devices, env, ids)
    return cuda_env.child_env(units, devices, ids)


def variable_of(units: list[CudaDevice]) -> str:
    """The variable that names these units for a program (CUDA_VISIBLE_DEVICES or HIP_VISIBLE_DEVICES)."""
    return variable_for(units[0].vendor if units else "nvidia")


def variable_for(vendor: str) -> str:
    return hip_env.HIP if vendor == "amd" else cuda_env.VISIBLE


def example(dev: CudaDevice, devices: list[CudaDevice]) -> str:
    """How a program is told to use `dev` alone, for a message: 'CUDA_VISIBLE_DEVICES=3' (vram's
    index, which is CUDA's under CUDA_DEVICE_ORDER=PCI_BUS_ID), 'HIP_VISIBLE_DEVICES=7' (ROCm's)."""
    if dev.vendor == "amd":
        return f"{hip_env.HIP}={hip_env.child_env([dev], devices, {})[hip_env.HIP]}"
    return f"{cuda_env.VISIBLE}={dev.index}"
