"""The live view's pop-up screens: keyboard help, all alerts, one process in detail."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from ..alerts import Alert, History
from ..gpu_state import Device, GpuProcess, Snapshot
from ..process_view import EnvReader, ProcessGpus, process_gpus
from ..procs import Environ, read_environ
from ..procs.workload import describe
from ..render import fmt
from ..render.env_view import DIM, WARN, env_lines
from ..render.info_view import health_lines
from ..render.sparkline import buckets, spark
from ..render.style import Style
from ..render.text_width import cells, pad
from ..units import format_duration, format_size
from .look import PLAIN, Look
from .panels import alerts_text

# The keys, by section: laid out for the width the help gets (help_text), never hand-wrapped.
KEYS: list[tuple[str, list[tuple[str, str]]]] = [
    ("Process table", [
        ("↑ ↓ PgUp PgDn Home End", "move"), ("Enter", "details of the process"),
        ("s", "next sort key"), ("r", "reverse order"),
        ("t", "tree (parents and children)"), ("/", "search pid, user, command"),
        ("u", "filter by user (a,b)"), ("g", "filter by GPU (0,2 or 0-3)"),
        ("Esc", "clear search and filters"), ("click", "a header: sort by it"),
    ]),
    ("Actions", [("k", "kill: SIGTERM, SIGINT or TERM+KILL (asks; not --readonly)")]),
    ("View", [
        ("a", "all alerts"), ("p", "pause / resume refresh"), ("?", "this help"), ("q", "quit"),
        ("h", "history range: 5m, 1h, 24h, 7d (the top line names its source)"),
    ]),
]
# One paragraph, one line: the Static wraps it at words to whatever width it has.
ABOUT = ("Memory is how much of a GPU's RAM is allocated; utilization is the share of recent time a kernel "
         "ran. A history line shows the highest value in each slice of the range: what 'vram record' "
         "recorded (when its database exists), then what this view has seen; blank where nothing was "
         "recorded. \"full in ~\" is an estimate from the recent trend.")
TITLE = "vram top: the live view of this machine's GPUs"
MODAL_MAX_WIDTH = 110  # the pop-up's width: 90% of the screen, at most this (and its CSS below)


def help_text(width: int) -> Text:
    """The help for `width` columns: two keys to a line where both fit in half of it, else one;
    at 80x24 all of it fits without scrolling."""
    out = Text()
    half = (width - 1) // 2
    for title, keys in KEYS:
        out.append(f"{title}\n", style="bold")
        entries = [f"  {pad(key, 3 if cells(key) <= 3 else cells(key) + 1)} {what}" for key, what in keys]
        i = 0
        while i < len(entries):
            pair = entries[i:i + 2]
            if len(pair) == 2 and all(cells(e) <= half for e in pair):
                out.append(pad(pair[0], half + 1) + pair[1] + "\n")
                i += 2
            else:
                out.append(entries[i] + "\n")
                i += 1
    out.append("\n" + ABOUT)
    return out


def help_width(screen_width: int) -> int:
    """The columns of text inside the pop-up on a screen this wide (border and padding taken off)."""
    return min(screen_width * 9 // 10, MODAL_MAX_WIDTH) - 4


def _look(screen: ModalScreen[str | None]) -> Look:
    """The app's look (a plain Look where the app is not the live view: a test's own app)."""
    look = getattr(screen.app, "look", None)
    return look if isinstance(look, Look) else PLAIN


class _Modal(ModalScreen[str | None]):
    DEFAULT_CSS = """
    _Modal { align: center middle; }
    _Modal > VerticalScroll { width: 90%; max-width: 110; height: auto; max-height: 90%;  /* MODAL_MAX_WIDTH */
                              border: round $accent; padding: 0 1; background: $surface; }
    _Modal.ascii > VerticalScroll { border: ascii $accent; }
    """
    BINDINGS = [Binding("escape,q", "close", "Close")]

    def on_mount(self) -> None:
        if _look(self).ascii:
            self.add_class("ascii")

    def action_close(self) -> None:
        self.dismiss(None)


class HelpScreen(_Modal):
    BINDINGS = [Binding("escape,q,question_mark", "close", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll() as scroll:
            scroll.border_title = TITLE  # on the border: one line less to scroll at 80x24
            yield Static(_look(self).text(help_text(help_width(self.app.size.width))), id="help-text")

    def on_resize(self) -> None:
        self.query_one("#help-text", Static).update(_look(self).text(help_text(help_width(self.app.size.width))))


class AlertsScreen(_Modal):
    def __init__(self, alerts: list[Alert]):
        super().__init__()
        self.alerts = alerts

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(Text("Alerts\n", style="bold"))
            yield Static(_look(self).text(alerts_text(self.alerts, 200, 10_000, _look(self))), id="alerts-all")


def detail_text(rows: list[GpuProcess], snap: Snapshot, history: History, width: int, span: float,
                own: ProcessGpus | None = None, look: Look = PLAIN,
                health: dict[int, Device] | None = None) -> Text:
    """Everything known about one pid: identity, full command, the GPUs it was told to use beside
    the ones it holds (`own`), its utilization and its memory on each GPU over time, and the
    health of those GPUs (`health`: copies of them with their health read, by GPU index)."""
    p = rows[0]
    out = Text()
    out.append(f"pid {p.pid}", style="bold")
    if p.host_missing:
        out.append(f"\n{p.host_missing}\n", style="yellow")
    else:
        out.append(f"   user {p.user} (uid {p.uid})   state {p.state}   age {format_duration(p.elapsed)}"
                   f"   ppid {p.ppid}\n")
        cpu = "N/A" if p.cpu_percent is None else f"{p.cpu_percent:.0f}%"
        out.append(f"CPU {cpu}   RSS {format_size(p.rss)}")
        owner = describe(p.workload)  # its container, pod or Slurm job, in words
        if owner or p.container:
            out.append(f"   {owner or 'container ' + str(p.container)}")
        out.append("\n")
    flags = sorted({f for r in rows for f in fmt.flags(r)})
    if flags:
        out.append("flags: " + ", ".join(flags) + "\n", style="yellow")
    out.append("\ncommand\n", style="bold")
    out.append((p.command if p.command is not None else "N/A") + "\n")  # sanitized by the snapshot
    if own is not None:
        out.append("\nGPUs: told (its environment) and held\n", style="bold")
        kinds = {WARN: f"bold {look.palette.warn}", DIM: "dim", "": ""}
        for line, kind in env_lines(own):
            out.append(f"  {line}\n", style=kinds[kind])
    out.append("\nits own utilization (NVML's samples for this process)\n", style="bold")
    for r in rows:
        where = f"GPU {r.gpu}" + ("" if r.mig_gi is None else f"/{r.mig_gi}")
        own_util = (f"SM {fmt.pct(r.sm_utilization)}  memory bandwidth {fmt.pct(r.memory_utilization)}  "
                  f"encoder {fmt.pct(r.encoder_utilization)}  decoder {fmt.pct(r.decoder_utilization)}")
        out.append(f"  {where:<8} {own_util}")
        out.append(f"  ({r.utilization_na})\n" if r.utilization_na else "\n", style="dim")
    out.append(f"\nGPU memory, last {format_duration(span)}\n", style="bold")
    spark_w = max(10, width - 40)
    by_index = {g.index: g for g in snap.gpus}
    for r in rows:
        dev = by_index.get(r.gpu)
        total = dev.memory_total if dev and dev.memory_total else None
        series = history.process(r.pid, r.gpu, r.mig_gi)
        values = [v for _, v in series if v is not None]
        hi = max(values) if values else 1
        line = spark(buckets([(t, v) for t, v in series], snap.time, span, spark_w, step=True), 0, hi or 1)
        where = f"GPU {r.gpu}" + ("" if r.mig_gi is None else f"/{r.mig_gi}")
        share = "" if total is None or r.memory is None else f" ({100 * r.memory / total:.0f}% of the GPU)"
        out.append(f"  {where:<8} {format_size(r.memory):>8}{share}\n")
        low = format_size(min(values)) if values else "N/A"
        out.append(f"           {line}  ", style=look.palette.ok)
        out.append(f"min {low} max {format_size(max(values)) if values else 'N/A'}\n", style="dim")
    for index in sorted({r.gpu for r in rows}):
        checked = (health or {}).get(index)
        if checked is None or checked.health is None:
            continue
        out.append(f"\nGPU {index} health\n", style="bold")
        lines = health_lines(checked, Style(color=True, unicode=True), width)
        out.append_text(Text.from_ansi("\n".join(lines) + "\n"))  # its worrying lines painted as vram info does
    return out


class DetailScreen(_Modal):
    """One process; the app calls `update` on every refresh while it is open."""

    BINDINGS = [Binding("escape,q,enter", "close", "Close"), Binding("k", "kill", "Kill")]

    def __init__(self, pid: int, read_env: EnvReader = read_environ, pids_visible: bool = True):
        super().__init__()
        self.pid = pid
        self._read_env = read_env
        self._pids_visible = pids_visible  # Backend.pids_visible(): NVML's pids are this /proc's
        self._environ: Environ | None = None  # read once: /proc shows the environment it started with

    def _environ_once(self, pid: int, names: tuple[str, ...]) -> Environ:
        if self._environ is None:
            self._environ = self._read_env(pid, names)
        return self._environ

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static("", id="detail")

    def update(self, snap: Snapshot, history: History, span: float, health: dict[int, Device] | None = None) -> None:
        rows = [p for p in snap.processes if p.pid_here == self.pid]  # not another namespace's pid of that number
        widget = self.query_one("#detail", Static)
        if not rows:
            widget.update(Text(f"pid {self.pid} holds no GPU memory any more (exited, or its GPU was lost).",
                               style="yellow"))
            return
        own = process_gpus(snap, self.pid, self._environ_once, self._pids_visible)
        look = _look(self)
        width = min(self.app.size.width - 6, 104)
        widget.update(look.text(detail_text(rows, snap, history, width, span, own, look, health)))

    def action_kill(self) -> None:
        self.app.action_kill(self.pid)  # type: ignore[attr-defined]
