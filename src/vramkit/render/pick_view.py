"""What `vram pick` and `vram run` print: the chosen ids, the JSON, the --explain table with the
CUDA numbering, the line that says what a waiter waits for."""

from __future__ import annotations

import json
from dataclasses import asdict

from ..allocate import Selection, WaitStatus
from ..cuda_env import CudaDevice, Visible, cuda_index, short_pci
from ..gpu_choice import Decision, Unit, verdict_text
from ..gpu_state import Snapshot
from ..i18n import _, join_words, pgettext
from ..units import format_duration, format_size
from . import fmt
from .banner import banner
from .style import Style, clip
from .text_width import cells, pad, wrap


def device_words(d: CudaDevice) -> str:
    return _("{gpu} (PCI {pci})").format(gpu=d.label, pci=short_pci(d.pci_bus_id))


def mapping_text(described: str, visible: list[CudaDevice]) -> str:
    """'CUDA_VISIBLE_DEVICES=2,3 → your cuda:0 is GPU 2 (PCI 0000:41:00.0), cuda:1 is GPU 3 (...)'
    (`described`: what is set, NAME=value; PyTorch calls an AMD GPU cuda:N too)."""
    if not visible:
        return _("{variable} → a program sees no GPU").format(variable=described)
    parts = [(_("your cuda:{n} is {gpu}") if i == 0 else _("cuda:{n} is {gpu}")).format(n=i, gpu=device_words(d))
             for i, d in enumerate(visible)]
    return f"{described} → " + join_words(parts)


def ids_output(selection: Selection, form: str) -> str:
    """What `vram pick` prints on stdout."""
    if form == "env":
        return " ".join(f"{k}={v}" for k, v in selection.env.items())
    if form == "uuid":
        return ",".join(g.uuid or "N/A" for g in selection.gpus)
    if form == "auto" or any(u.dev.vendor != "nvidia" for u in selection.units):
        return selection.cuda_visible_devices  # (an AMD pick: HIP's indices are the only ones)
    # index: the CUDA index under PCI_BUS_ID order; a MIG instance has none and is named by UUID
    return ",".join(str(cuda_index(u.dev, selection.devices)) if not u.dev.is_mig else (u.dev.uuid or "N/A")
                    for u in selection.units)


def pick_json(selection: Selection, snap: Snapshot) -> str:
    lease = selection.lease.lease if selection.lease is not None else None
    return json.dumps({
        "schema": 1,
        "simulated": snap.simulated,
        "scenario": snap.scenario,
        "cuda_visible_devices": selection.cuda_visible_devices,
        "variable": selection.variable,
        "env": selection.env,
        "gpus": [asdict(g) for g in selection.gpus],
        "policy": {k: v for k, v in selection.decision.policy.to_dict().items() if k != "uid"},
        "connection": selection.decision.connection,  # how the chosen GPUs connect, when that chose them
        "lease": None if lease is None else {"id": lease.id, "units": lease.units, "expires": lease.expires},
        "waited": round(selection.waited, 3),
    }, indent=2)


def _env_lines(env_visible: Visible) -> list[str]:
    if not env_visible.is_set:
        return [_("allowed: every GPU ({variable} is not set in your environment)").format(
            variable=env_visible.variable)]
    order = env_visible.order
    mapping = mapping_text(env_visible.described or "", env_visible.devices)
    if env_visible.vendor == "nvidia" and env_visible.value is not None and order.order != "PCI_BUS_ID":
        return [_("allowed: what your environment's {mapping} (CUDA_DEVICE_ORDER is not PCI_BUS_ID)").format(
            mapping=mapping)]
    return [_("allowed: what your environment's {mapping}").format(mapping=mapping)]


def _wrap(text: str, width: int | None, indent: int, *styles: str, style: Style) -> list[str]:
    """`text` painted, folded to `width` columns (None: one line) with `indent` spaces after the first."""
    if width is None or cells(text) + indent <= width or width - indent < 20:
        return [style.paint(text, *styles)]
    return [style.paint(part, *styles) for part in wrap(text, width - indent)]


def explain(snap: Snapshot, decision: Decision, env_visible: Visible, selection: Selection | None,
            lease_note: str, style: Style, width: int | None) -> str:
    """The --explain view: every unit's verdict, the numbering the job will see, the pitfalls.
    `width`: fold long lines to fit a terminal; None keeps each on one line (logs, pipes)."""
    policy = decision.policy
    lines = [banner(snap, style, width or 200)]
    if policy.prefer == "spread":
        request = _("request: {wanted} · spread: the emptiest first")
    elif policy.prefer == "pack":
        request = _("request: {wanted} · pack: the fullest that fits")
    else:
        request = _("request: {wanted}")
    lines.append(request.format(wanted=policy.describe()))
    for line in _env_lines(env_visible):
        lines.extend(("  " if i else "") + part for i, part in enumerate(_wrap(line, width, 2, style=style)))
    chosen = {u.key: i for i, u in enumerate(decision.chosen)}
    show_model = width is None or width >= 100  # a narrow terminal keeps room for the verdict
    heads = {"GPU": pgettext("column", "GPU"), "PCI": pgettext("column", "PCI"),
             # Translators: MODEL here is the GPU's model (A100-SXM4-80GB), not a neural network's
             "MODEL": pgettext("GPU model column", "MODEL"),
             "FREE/TOTAL": pgettext("column", "FREE/TOTAL"), "UTIL": pgettext("column", "UTIL")}
    # column widths by display width: the English ones, or a translated heading's where it is wider
    w = {key: max(least, cells(heads[key])) for key, least in
         (("GPU", 5), ("PCI", 12), ("MODEL", 16), ("FREE/TOTAL", 13), ("UTIL", 5))}
    header = (f"{pad(heads['GPU'], w['GPU'], right=True)}  {pad(heads['PCI'], w['PCI'])}  "
              + (f"{pad(heads['MODEL'], w['MODEL'])} " if show_model else "")
              + f"{pad(heads['FREE/TOTAL'], w['FREE/TOTAL'], right=True)} {pad(heads['UTIL'], w['UTIL'], right=True)}"
              + "  " + pgettext("column", "VERDICT"))
    lines.append(style.paint(header, "bold"))
    for v in decision.verdicts:
        u = v.unit
        if u.dev.is_mig:  # its name is the parent's model plus the profile: the profile says more
            model = ("MIG " if u.dev.vendor == "nvidia" else "part ") + (u.dev.name or "").rsplit(" ", 1)[-1]
        else:
            model = fmt.short_gpu_name(u.dev.name)
        model = f"{pad(clip(model, 16), w['MODEL'])} " if show_model else ""
        free = fmt.memory_pair(u.memory_free, u.memory_total)
        util = fmt.pct(u.utilization)
        paint: tuple[str, ...]
        if u.key in chosen:
            verdict, paint = _("chosen: cuda:{n}").format(n=chosen[u.key]), ("green", "bold")
        elif v.fits:
            verdict, paint = _("fits (not needed)"), ()
        else:
            verdict, paint = verdict_text(v, policy), ("dim",) if v.never else ("yellow",)
        if v.notes and v.fits:
            verdict += f"  [{'; '.join(v.notes)}]"
        row = (f"{pad(u.dev.short_id, w['GPU'], right=True)}  {pad(short_pci(u.dev.pci_bus_id), w['PCI'])}  {model}"
               f"{pad(free, w['FREE/TOTAL'], right=True)} {pad(util, w['UTIL'], right=True)}  ")
        parts = _wrap(verdict, width, cells(row), *paint, style=style)
        lines.append(row + parts[0])
        lines.extend(" " * cells(row) + part for part in parts[1:])
    if decision.connection:
        why = _("connected GPUs first: {connection}").format(connection=decision.connection)
        lines.extend(("  " if i else "") + part for i, part in enumerate(_wrap(why, width, 2, style=style)))
    elif len(decision.chosen) > 1 and snap.topology is not None and (
            refused := {k: v for k, v in snap.topology.na.items() if v != "not supported"}):
        # (a machine that does not report its topology at all chooses as before, without a word)
        why = "; ".join(f"{k}: {v}" for k, v in sorted(refused.items()))
        lines.extend(("  " if i else "") + part for i, part in enumerate(
            _wrap(_("topology N/A ({why}): chosen by free memory alone").format(why=why), width, 2, "dim",
                  style=style)))
    if selection is not None:
        named = f"{selection.variable}={selection.cuda_visible_devices}"
        for i, part in enumerate(_wrap(mapping_text(named, [u.dev for u in selection.units]), width, 2, style=style)):
            lines.append(("  " if i else "") + part)
        if selection.units[0].dev.vendor == "nvidia":  # ROCm numbers in KFD's order: no variable changes it
            lines.extend("  " + part for part in _wrap(
                _("with CUDA_DEVICE_ORDER=PCI_BUS_ID, which vram run sets (set it too when you use these ids "
                  "yourself), so cuda numbers follow nvidia-smi's order"), width, 2, style=style))
    for pitfall in env_visible.pitfalls:
        for i, part in enumerate(_wrap(f"! {pitfall}", width, 2, "yellow", style=style)):
            lines.append(("  " if i else "") + part)
    lines.extend(("  " if i else "") + part for i, part in enumerate(_wrap(lease_note, width, 2, "dim", style=style)))
    return "\n".join(lines)


def wait_line(status: WaitStatus) -> str:
    return f"vram: {status.text()}"


def _unit_words(u: Unit) -> str:
    model = None if u.dev.is_mig else fmt.short_gpu_name(u.dev.name)  # a MIG label names its profile
    if model and model != fmt.NA:
        return _("{gpu} ({model}, {size} free)").format(gpu=u.dev.label, model=model, size=format_size(u.memory_free))
    return _("{gpu} ({size} free)").format(gpu=u.dev.label, size=format_size(u.memory_free))


def started_line(selection: Selection, snap: Snapshot, command: str | None = None) -> str:
    """'vram: GPU 7 (A100-SXM4-80GB, 77.3GiB free) → CUDA_VISIBLE_DEVICES=7 · python train.py'."""
    gpus = join_words([_unit_words(u) for u in selection.units])
    if selection.waited >= 1:
        gpus = _("{gpus} after waiting {duration}").format(gpus=gpus, duration=format_duration(selection.waited))
    sim = " " + _("[SIMULATED machine '{scenario}']").format(scenario=snap.scenario) if snap.simulated else ""
    return f"vram: {gpus} → {selection.variable}={selection.cuda_visible_devices}{sim}"
