"""`vram estimate` as text: a header, the breakdown table with bars, and the formulas (--explain)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..i18n import N_, _, pgettext
from ..units import format_size
from .style import Style, clip
from .text_width import cells, pad

if TYPE_CHECKING:
    from ..estimator.analytic import Estimate
    from ..estimator.trace import TraceResult

_KIND_COLOR = {"weights": "blue", "gradients": "magenta", "optimizer": "yellow", "activations": "green",
               "transient": "cyan", "overhead": "dim", "kv": "green"}


# The moments of a step as the estimator names them (keys of Estimate.moments, kept in JSON), in words
_MOMENTS = {"forward end": N_("forward end"), "backward start": N_("backward start"),
            "backward end": N_("backward end"), "optimizer step": N_("optimizer step"),
            "recompute": N_("recompute"), "forward": N_("forward"), "encoder forward": N_("encoder forward"),
            "logits": N_("logits"), "last decode step": N_("last decode step"),
            "first decode step": N_("first decode step"), "traced forward": N_("traced forward"),
            "traced backward/step": N_("traced backward/step")}


def _setup_line(e: Estimate) -> str:
    return e.setup.describe(e.seq, e.family)


def moment_name(moment: str) -> str:
    """A moment of a step (a JSON key) in the reader's words."""
    return _(_MOMENTS[moment]) if moment in _MOMENTS else moment


def term_name(name: str) -> str:
    """A term's name (a key of the breakdown, kept in English in JSON) in the reader's words: the
    names are marked where the terms are made (formulas.TERM_NAMES)."""
    from ..estimator.formulas import term_name as translated

    return translated(name)


def render_estimate(e: Estimate, style: Style, width: int = 100, explain: bool = False,
                    host: tuple[int, str] | None = None) -> str:
    """`host`: (bytes, how counted) of host RAM an offloaded run needs (estimator/host.py)."""
    kinds = {t.name: t.kind for t in e.terms}
    params = _("{params:,} parameters").format(params=e.params)
    if e.trainable and e.trainable != e.params:
        params = _("{params:,} parameters ({trainable:,} trainable per GPU)").format(params=e.params,
                                                                                   trainable=e.trainable)
    lines = [style.paint(f"{e.model}", "bold") + f"  ·  {params}  ·  " + _("ESTIMATE"), _setup_line(e), ""]
    total = e.total_bytes
    names = {k: term_name(k) for k in e.breakdown}
    heading = _("at the peak ({moment})").format(moment=moment_name(e.peak_moment))
    name_w = max(cells(k) for k in names.values()) + 2
    bar_w = max(10, min(40, width - name_w - 20))
    # Translators: the breakdown table's headings: the memory each term takes, and its share of the total
    lines.append(pad(heading, name_w) + pad(pgettext("column", "memory"), 9, right=True) + "  "
                 + pgettext("column", "share"))
    for name, value in sorted(e.breakdown.items(), key=lambda kv: -kv[1]):
        color = _KIND_COLOR.get(kinds.get(name, "transient"), "cyan")
        lines.append(f"{pad(clip(names[name], name_w - 2), name_w)}{format_size(value):>9}  "
                     f"{style.bar(value / total if total else 0, bar_w, color)} {value / total:4.0%}")
    lines.append("")
    # Translators: the summary under the table: a label padded to 17 columns, a size, what it is
    summary = [(_("peak allocated"), e.peak_bytes, "(torch.cuda.max_memory_allocated)"),
               (_("steady state"), e.steady_bytes, _("(second step)") if e.steady_bytes != e.peak_bytes
                else _("(second step = the peak)")),
               (_("reserved"), e.reserved_bytes, _("(caching allocator)"))]
    shows, host_label = _("nvidia-smi shows"), _("host memory")
    label_w = max(17, *(cells(label) + 1 for label in (*(row[0] for row in summary), shows, host_label)))
    for label, value, words in summary:
        lines.append(f"{pad(label, label_w)}{format_size(value):>9}   {words}")
    lines.append(style.paint(f"{pad(shows, label_w)}{format_size(total):>9}", "bold") + "   "
                 + (_("(reserved + {context} CUDA context + {outside} cuBLAS's own workspaces)")
                    if e.outside_allocator else _("(reserved + {context} CUDA context)")).format(
                     context=format_size(e.context_bytes), outside=format_size(e.outside_allocator)))
    if host is not None:
        lines.append(f"{pad(host_label, label_w)}{format_size(host[0]):>9}   "
                     + _("(CPU RAM: {how})").format(how=host[1]))
    for note in e.notes:
        lines.append(style.paint(_("note: {note}").format(note=note), "dim"))
    if explain:
        lines.append("")
        lines.append(style.paint(_("how each term is computed"), "bold"))
        for t in e.terms:
            # Translators: one line of --explain: a term, its size, how it is computed
            lines.append("  " + _("{term}: {size} = {formula}").format(term=term_name(t.name),
                                                                       size=format_size(t.bytes), formula=t.formula))
        lines.append("")
        train = e.setup.mode == "train"
        lines.append(style.paint(_("memory at each moment of the second step (first step in brackets)") if train
                                 else _("memory at each moment"), "bold"))
        width = max([15, *(cells(moment_name(k)) for k in e.moments)])
        for k, v in e.moments.items():
            mark = "  " + _("<- peak") if k == e.peak_moment else ""
            first = f"  [{format_size(e.first_step.get(k))}]" if train else ""
            lines.append(f"  {pad(moment_name(k), width)} {format_size(v):>9}{first}{mark}")
        detail = getattr(e, "activation_detail", None)
        if detail:
            lines.append("")
            lines.append(style.paint(_("activations saved per layer"), "bold"))
            for name, value in detail:
                lines.append(f"  {format_size(value):>9}  {name}")
    return "\n".join(lines)


def estimate_json(e: Estimate, extra: dict[str, Any] | None = None) -> str:
    data = e.to_dict()
    out = {"model": e.model, "family": e.family, "estimate": True, "total_bytes": e.total_bytes,
           "context_bytes": e.context_bytes, "peak_bytes": e.peak_bytes, "steady_bytes": e.steady_bytes,
           "reserved_bytes": e.reserved_bytes, "peak_moment": e.peak_moment, "breakdown": e.breakdown,
           "params": e.params, "trainable": e.trainable, "seq": e.seq, "moments": e.moments,
           "first_step": e.first_step, "setup": data["setup"], "terms": data["terms"], "notes": e.notes}
    if extra:
        out.update(extra)
    return json.dumps(out, indent=2)


# the categories a traced step's storages are counted in (estimator/trace.py), and its phases: shown in words
_TRACED = (N_("parameters"), N_("buffers"), N_("optimizer state"), N_("temporaries"), N_("autocast weight copies"))
_PHASES = {"setup": N_("setup"), "forward": N_("forward"), "backward/step": N_("backward/step")}


def render_trace(t: TraceResult, style: Style) -> str:
    """The traced result beside the analytic one."""
    lines = [style.paint(_("traced (fake tensors, CUDA allocator rounding)"), "bold")]
    rows = [(term_name(name), format_size(value)) for name, value in sorted(t.breakdown.items(), key=lambda kv: -kv[1])]
    phase = _(_PHASES[t.peak_phase]) if t.peak_phase in _PHASES else str(t.peak_phase)
    rows += [(_("peak allocated"), f"{format_size(t.peak_bytes)}   " + _("(step {step}, {phase})").format(
                 step=t.peak_step, phase=phase)),
             (_("steady state (step 2)"), format_size(t.steady_bytes)),
             (_("traced in"), _("{seconds:.1f}s").format(seconds=t.seconds))]
    name_w = max(28, *(cells(name) + 1 for name, _value in rows))
    for name, value in rows:
        size, _sep, rest = value.partition("   ")
        lines.append(f"  {pad(name, name_w)}{size:>9}" + (f"   {rest}" if rest else ""))
    for note in t.notes:
        lines.append(style.paint("  " + _("note: {note}").format(note=note), "dim"))
    return "\n".join(lines)


def render_precisions(rows: list[tuple[str, Estimate]], style: Style) -> str:
    """One setup at several precisions, a row each: the weights, the peak, what nvidia-smi would show."""
    first = rows[0][1]
    # Translators: the headings of the table comparing precisions (each right-aligned over its sizes)
    heads = [pgettext("column", "precision"), pgettext("column", "weights"), pgettext("column", "peak allocated"),
             pgettext("column", "reserved"), pgettext("column", "nvidia-smi shows")]
    label_w = max(12, *(cells(label) for label, _e in rows), cells(heads[0])) + 2
    widths = [max(minimum, cells(head) + 2) for minimum, head in zip((10, 16, 10, 18), heads[1:])]
    params = _("{params:,} parameters").format(params=first.params)
    lines = [style.paint(first.model, "bold") + f"  ·  {params}  ·  " + _("ESTIMATE by precision"), "",
             pad(heads[0], label_w) + "".join(pad(h, w, right=True) for h, w in zip(heads[1:], widths))]
    for label, e in rows:
        kinds = {t.name: t.kind for t in e.terms}
        weights = sum(v for k, v in e.breakdown.items() if kinds.get(k) == "weights")
        lines.append(pad(label, label_w) + pad(format_size(weights), widths[0], right=True)
                     + pad(format_size(e.peak_bytes), widths[1], right=True)
                     + pad(format_size(e.reserved_bytes), widths[2], right=True)
                     + style.paint(pad(format_size(e.total_bytes), widths[3], right=True), "bold"))
    lines.append("")
    lines += [style.paint(f"{label}: {_setup_line(e)}", "dim") for label, e in rows]
    return "\n".join(lines)
