"""`vram report --plot`: memory per GPU over time, coloured by user, one panel per GPU.

SVG is written here without any library (every piece of text escaped: user names are other
users' choice); PNG needs matplotlib (the `plot` extra), imported only when asked for.
"""

from __future__ import annotations

import io
from datetime import datetime
from xml.sax.saxutils import escape

from ..errors import RequestError
from ..history.query import MemorySeries
from ..i18n import _
from ..procs import sanitize

GIB = 1024**3
# Distinguishable colours (Tableau 10), then grey for the users past them ("others").
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#bab0ac")
OTHERS = "others"
MAX_USERS = len(PALETTE) - 1  # the last colour is for "others"


class PlotError(RequestError):
    """The picture cannot be made as asked (PNG without matplotlib): exit 2, about --plot."""


def pick_step(seconds: float, most: int = 360) -> float:
    """A bucket length that gives at most `most` buckets over `seconds`, from a list of round ones."""
    for step in (5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400):
        if seconds / step <= most:
            return float(step)
    return float(-(-seconds // most))


def stacks(series: MemorySeries) -> tuple[list[str], dict[int, list[tuple[str, list[float]]]]]:
    """The users in legend order (most memory-time first; past MAX_USERS merged into "others"),
    and per GPU the stacked layers: (user, bytes per bucket; a gap is 0)."""
    weight: dict[str, float] = {}
    for users in series.memory.values():
        for user, values in users.items():
            weight[user] = weight.get(user, 0.0) + sum(v for v in values if v is not None)
    order = sorted(weight, key=lambda u: (-weight[u], u))
    named = order if len(order) <= MAX_USERS + 1 else order[:MAX_USERS]
    legend = named + ([OTHERS] if len(order) > len(named) else [])
    layers: dict[int, list[tuple[str, list[float]]]] = {}
    for gpu in sorted(series.memory):
        merged: dict[str, list[float]] = {}
        for user, values in series.memory[gpu].items():
            name = user if user in named else OTHERS
            acc = merged.setdefault(name, [0.0] * series.count)
            for i, v in enumerate(values):
                acc[i] += v or 0.0
        layers[gpu] = [(u, merged[u]) for u in legend if u in merged]
    return legend, layers


def _color(legend: list[str], user: str) -> str:
    return PALETTE[-1] if user == OTHERS else PALETTE[legend.index(user) % (len(PALETTE) - 1)]


def _gaps(series: MemorySeries, gpu: int) -> list[bool]:
    """Per bucket: True where the GPU was not recorded."""
    users = series.memory.get(gpu, {})
    if not users:
        return [False] * series.count
    return [all(values[i] is None for values in users.values()) for i in range(series.count)]


def _runs(flags: list[bool]) -> list[tuple[int, int]]:
    """[start, end) of each run of True."""
    out, start = [], None
    for i, flag in enumerate([*flags, False]):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            out.append((start, i))
            start = None
    return out


def _levels(values: list[float]) -> list[tuple[int, int]]:
    """[start, end) of each run of equal values."""
    out, start = [], 0
    for i in range(1, len(values) + 1):
        if i == len(values) or values[i] != values[start]:
            out.append((start, i))
            start = i
    return out


def _time_label(t: float, span: float) -> str:
    return datetime.fromtimestamp(t).strftime("%m-%d %H:%M" if span > 86400 else "%H:%M")


def render_svg(series: MemorySeries, title: str) -> str:
    legend, layers = stacks(series)
    gpus = sorted(series.memory) or sorted(series.totals)
    left, right, top, panel, gap = 64, 150, 40, 90, 26
    width = 960
    plot_w = width - left - right
    height = top + max(1, len(gpus)) * (panel + gap) + 20
    span = series.step * series.count
    dx = plot_w / series.count
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="22" font-size="14" font-weight="bold">{escape(sanitize(title))}</text>']
    if not gpus:
        out.append(f'<text x="{left}" y="{top + 40}">no data recorded in this window</text>')
    for row, gpu in enumerate(gpus):
        y0 = top + row * (panel + gap)
        total = series.totals.get(gpu)
        peak = max((sum(v[i] for _user, v in layers.get(gpu, [])) for i in range(series.count)), default=0.0)
        scale_max = float(total) if total else max(peak, 1.0)

        def y(value: float) -> float:
            return y0 + panel - panel * min(value, scale_max) / scale_max  # noqa: B023 (used at once)

        out.append(f'<rect x="{left}" y="{y0}" width="{plot_w}" height="{panel}" fill="#f7f7f7" stroke="#ccc"/>')
        for a, b in _runs(_gaps(series, gpu)):
            out.append(f'<rect x="{left + a * dx:.1f}" y="{y0}" width="{(b - a) * dx:.1f}" height="{panel}" '
                       'fill="#e0e0e0"/>')
        base = [0.0] * series.count
        for user, values in layers.get(gpu, []):
            upper = [b + v for b, v in zip(base, values)]
            # A step outline: one corner pair per run of equal height, along the top, then back.
            pts = []
            for a, b in _levels(upper):
                pts += [f"{left + a * dx:.1f},{y(upper[a]):.1f}", f"{left + b * dx:.1f},{y(upper[a]):.1f}"]
            for a, b in reversed(_levels(base)):
                pts += [f"{left + b * dx:.1f},{y(base[a]):.1f}", f"{left + a * dx:.1f},{y(base[a]):.1f}"]
            out.append(f'<polygon points="{" ".join(pts)}" fill="{_color(legend, user)}">'
                       f'<title>{escape(sanitize(user))}</title></polygon>')
            base = upper
        label = f"GPU {gpu}"
        out.append(f'<text x="{left - 8}" y="{y0 + 12}" text-anchor="end" font-weight="bold">{label}</text>')
        out.append(f'<text x="{left - 8}" y="{y0 + panel}" text-anchor="end">0</text>')
        out.append(f'<text x="{left - 8}" y="{y0 + 26}" text-anchor="end">{scale_max / GIB:.0f} GiB</text>')
        for frac in (0.0, 0.5, 1.0):
            anchor = "start" if frac == 0 else "end" if frac == 1 else "middle"
            t = series.start + frac * span
            out.append(f'<text x="{left + frac * plot_w:.1f}" y="{y0 + panel + 13}" text-anchor="{anchor}" '
                       f'fill="#555">{escape(_time_label(t, span))}</text>')
    for i, user in enumerate(legend):
        ly = top + i * 18
        out.append(f'<rect x="{width - right + 14}" y="{ly}" width="12" height="12" fill="{_color(legend, user)}"/>')
        name = sanitize(user)
        name = name if len(name) <= 16 else name[:15] + "…"
        out.append(f'<text x="{width - right + 32}" y="{ly + 10}">{escape(name)}</text>')
    if any(any(_gaps(series, g)) for g in gpus):
        ly = top + len(legend) * 18
        out.append(f'<rect x="{width - right + 14}" y="{ly}" width="12" height="12" fill="#e0e0e0"/>')
        out.append(f'<text x="{width - right + 32}" y="{ly + 10}">not recorded</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def render_png(series: MemorySeries, title: str) -> bytes:
    """Draw with matplotlib (the `plot` extra); PlotError when it is not installed."""
    try:
        import matplotlib
    except ImportError:
        from ..install_hint import install_hint

        raise PlotError(_("a PNG needs matplotlib: {hint} (or write an .svg, which needs nothing)").format(
            hint=install_hint("plot")), param="plot") from None
    matplotlib.use("Agg")  # no display: a file only
    import matplotlib.pyplot as plt

    legend, layers = stacks(series)
    gpus = sorted(series.memory) or [0]
    fig, axes = plt.subplots(len(gpus), 1, figsize=(10, 1.1 * len(gpus) + 1.0), sharex=True, squeeze=False,
                             layout="constrained")
    times = [datetime.fromtimestamp(series.start + i * series.step) for i in range(series.count + 1)]
    try:
        for ax, gpu in zip(axes[:, 0], gpus):
            gpu_layers = layers.get(gpu, [])
            if gpu_layers:
                # A step per bucket: repeat the last value so the final bucket is drawn too.
                ys = [[v / GIB for v in values] + [values[-1] / GIB] for _user, values in gpu_layers]
                ax.stackplot(times, ys, colors=[_color(legend, u) for u, _values in gpu_layers], step="post")
            for i, missing in enumerate(_gaps(series, gpu)):
                if missing:
                    ax.axvspan(times[i], times[i + 1], color="#e0e0e0", linewidth=0)
            total = series.totals.get(gpu)
            if total:
                ax.set_ylim(0, total / GIB)
            ax.set_ylabel(f"GPU {gpu}\nGiB", rotation=0, ha="right", va="center")
            ax.margins(x=0)
        from matplotlib.patches import Patch

        handles = [Patch(color=_color(legend, u), label=sanitize(u)) for u in legend]
        if any(any(_gaps(series, g)) for g in gpus):
            handles.append(Patch(color="#e0e0e0", label="not recorded"))
        if handles:
            fig.legend(handles=handles, loc="outside right upper", fontsize="small")
        fig.suptitle(sanitize(title), x=0.02, ha="left", fontsize="medium")
        fig.autofmt_xdate()
        out = io.BytesIO()  # the caller writes it (output_files: never through a planted symlink)
        fig.savefig(out, dpi=110, format="png")
        return out.getvalue()
    finally:
        plt.close(fig)
