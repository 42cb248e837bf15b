"""Each vendor's own words for what runs a GPU program, for messages: doctor and kill say what holds
a GPU's memory in the terms of the GPU they are about (a CUDA context on NVIDIA's, the HIP runtime
on AMD's), asking by Device.vendor; no module above the seam spells a vendor's terms itself.
Imports only i18n: `vram doctor LOG` loads it without the machine. The words a reader's language has
(context, libraries, "the driver") are marked here and translated where a sentence uses them:
_(runtime(v).context); names (CUDA, NVML) stay as they are."""

from __future__ import annotations

from dataclasses import dataclass

from .i18n import N_, _

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable


@dataclass(frozen=True)
class Runtime:
    name: str  # the runtime a program's GPU calls go through
    context: str  # what a process holds on a GPU before its first tensor (marked: _() it where shown)
    libraries: str  # the math and communication libraries' memory outside PyTorch's cache (marked)
    lister: str  # what lists the processes holding a GPU's memory


NVIDIA = Runtime("CUDA", N_("CUDA context"), N_("cuBLAS/cuDNN workspaces, NCCL buffers"), "NVML")
# KFD lists the processes on both AMD read paths (amdsmi reads its proc directory too)
AMD = Runtime("HIP", N_("HIP runtime"), N_("hipBLAS/rocBLAS/MIOpen workspaces, RCCL buffers"), "KFD")


def runtime(vendor: str | None) -> Runtime:
    """The vendor's words (NVIDIA's where the vendor is unknown: vram's first and most common)."""
    return AMD if vendor == "amd" else NVIDIA



def lister(vendors: Iterable[str | None]) -> str:
    """Who lists GPU processes on GPUs of these vendors (Device.vendor each): its name where they are
    one vendor's, else "the driver" (in the reader's language)."""
    found = set(vendors)
    return runtime(found.pop()).lister if len(found) == 1 else _("the driver")
