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
from ..i18n import N_, _
from ..process_view import EnvReader, ProcessGpus, process_gpus
from ..procs import Environ, read_environ
from ..procs.workload import describe
from ..render import fmt
from ..render.env_view import DIM, WARN, env_lines
from ..render.info_view import health_lines
from ..render.sparkline import buckets, spark
from ..render.style import Style
from ..render.text_width import cells, pad, wrap
from ..units import format_duration, format_size
from .bindings import translate
from .look import PLAIN, Look
from .panels import alerts_text

# The keys, by section: laid out for the width the help gets (help_text), never hand-wrapped.
# Marked only (N_): translated when the help is drawn. Key names stay as the keyboard spells them.
KEYS: list[tuple[str, list[tuple[str, str]]]] = [
    (N_("Process table"), [
        ("↑ ↓ PgUp PgDn Home End", N_("move")), ("Enter", N_("details of the process")),
        ("s", N_("next sort key")), ("r", N_("reverse order")),
        ("t", N_("tree (parents and children)")), ("/", N_("search pid, user, command")),
        ("u", N_("filter by user (a,b)")), ("g", N_("filter by GPU (0,2 or 0-3)")),
        ("Esc", N_("clear search and filters")),
        # Translators: a mouse click (on a column header), shown where a key is named
        (N_("click"), N_("a header: sort by it")),
    ]),
    (N_("Actions"), [("k", N_("kill: SIGTERM, SIGINT or TERM+KILL (asks; not --readonly)"))]),
    (N_("View"), [
        ("a", N_("all alerts")), ("p", N_("pause / resume refresh")), ("?", N_("this help")), ("q", N_("quit")),
        ("h", N_("history range: 5m, 1h, 24h, 7d (the top line names its source)")),
    ]),
]
# One paragraph, one line: the Static wraps it at words to whatever width it has.
ABOUT = N_("Memory is how much of a GPU's RAM is allocated; utilization is the share of recent time a kernel "
           "ran. A history line shows the highest value in each slice of the range: what 'vram record' "
           "recorded (when its database exists), then what this view has seen; blank where nothing was "
           "recorded. \"full in ~\" is an estimate from the recent trend.")
TITLE = N_("vram top: the live view of this machine's GPUs")
MODAL_MAX_WIDTH = 110  # the pop-up's width: 90% of the screen, at most this (and its CSS below)


def help_text(width: int) -> Text:
    """The help for `width` columns: two keys to a line where both fit in half of it, else one,
    a longer one folded under its words; at 80x24 all of it fits without scrolling."""
    out = Text()
    half = (width - 1) // 2
    for title, keys in KEYS:
        out.append(f"{_(title)}\n", style="bold")
        names = [(_(key) if key == "click" else key, _(what)) for key, what in keys]
        entries = [(f"  {pad(key, 3 if cells(key) <= 3 else cells(key) + 1)} ", what) for key, what in names]
        i = 0
        while i < len(entries):
            pair = ["".join(e) for e in entries[i:i + 2]]
            if len(pair) == 2 and all(cells(e) <= half for e in pair):
                out.append(pad(pair[0], half + 1) + pair[1] + "\n")
                i += 2
            else:
                key, what = entries[i]
                lines = wrap(what, width - cells(key)) or [""]
                out.append(key + f"\n{' ' * cells(key)}".join(lines) + "\n")
                i += 1
    about = _(ABOUT)
    # English wraps at its spaces where the Static is drawn; text without spaces between its words
    # (Chinese) is folded here, by display width
    out.append("\n" + (about if about.isascii() else "\n".join(wrap(about, width))))
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
    BINDINGS = [Binding("escape,q", "close", N_("Close"))]

    def __init__(self) -> None:
        super().__init__()
        translate(self)

    def on_mount(self) -> None:
        if _look(self).ascii:
            self.add_class("ascii")

    def action_close(self) -> None:
        self.dismiss(None)


class HelpScreen(_Modal):
    BINDINGS = [Binding("escape,q,question_mark", "close", N_("Close"))]

    def compose(self) -> ComposeResult:
        with VerticalScroll() as scroll:
            scroll.border_title = _(TITLE)  # on the border: one line less to scroll at 80x24
            yield Static(_look(self).text(help_text(help_width(self.app.size.width))), id="help-text")

    def on_resize(self) -> None:
        self.query_one("#help-text", Static).update(_look(self).text(help_text(help_width(self.app.size.width))))


class AlertsScreen(_Modal):
    def __init__(self, alerts: list[Alert]):
        super().__init__()
        self.alerts = alerts

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(Text(_("Alerts") + "\n", style="bold"))
            yield Static(_look(self).text(alerts_text(self.alerts, 200, 10_000, _look(self))), id="alerts-all")


# The process's state in the details dialog, in words (procs/stat.py's names of /proc's state letters).
_STATE_WORDS = {
    # Translators: a process's state (from /proc), shown after "state"
    "running": N_("running"), "sleeping": N_("sleeping"), "disk-sleep": N_("waiting on disk"),
    "zombie": N_("zombie"), "stopped": N_("stopped"), "tracing-stop": N_("stopped by a debugger"),
    "dead": N_("dead"), "idle": N_("idle"), "paging": N_("paging"), "parked": N_("parked")}
_SPARK_INDENT = 11  # the sparkline under its GPU's line, past "  GPU 0/12 "


def detail_text(rows: list[GpuProcess], snap: Snapshot, history: History, width: int, span: float,
                own: ProcessGpus | None = None, look: Look = PLAIN,
                health: dict[int, Device] | None = None) -> Text:
    """Everything known about one pid: identity, full command, the GPUs it was told to use beside
    the ones it holds (`own`), its utilization and its memory on each GPU over time, and the
    health of those GPUs (`health`: copies of them with their health read, by GPU index)."""
    p = rows[0]
    out = Text()
    out.append(_("pid {pid}").format(pid=p.pid), style="bold")
    if p.host_missing:
        out.append(f"\n{fmt.missing(p)}\n", style="yellow")
    else:
        state = _(_STATE_WORDS[p.state]) if p.state in _STATE_WORDS else p.state
        out.append(_("   user {user} (uid {uid})   state {state}   age {age}   ppid {ppid}").format(
            user=p.user, uid=p.uid, state=state, age=format_duration(p.elapsed), ppid=p.ppid) + "\n")
        cpu = "N/A" if p.cpu_percent is None else f"{p.cpu_percent:.0f}%"
        out.append(_("CPU {cpu}   RSS {rss}").format(cpu=cpu, rss=format_size(p.rss)))
        owner = describe(p.workload)  # its container, pod or Slurm job, in words
        if owner or p.container:
            out.append("   " + (owner or _("container {id}").format(id=p.container)))
        out.append("\n")
    flags = sorted({f for r in rows for f in fmt.flags(r)})
    if flags:
        words = fmt.flag_words()
        out.append(_("flags: {flags}").format(flags=", ".join(words.get(f, f) for f in flags)) + "\n",
                   style="yellow")
    out.append("\n" + _("command") + "\n", style="bold")
    out.append((p.command if p.command is not None else "N/A") + "\n")  # sanitized by the snapshot
    if own is not None:
        out.append("\n" + _("GPUs: told (its environment) and held") + "\n", style="bold")
        kinds = {WARN: f"bold {look.palette.warn}", DIM: "dim", "": ""}
        for line, kind in env_lines(own):
            out.append(f"  {line}\n", style=kinds[kind])
    out.append("\n" + _("its own utilization (NVML's samples for this process)") + "\n", style="bold")
    for r in rows:
        where = f"GPU {r.gpu}" + ("" if r.mig_gi is None else f"/{r.mig_gi}")
        own_util = _("SM {sm}  memory bandwidth {bw}  encoder {enc}  decoder {dec}").format(
            sm=fmt.pct(r.sm_utilization), bw=fmt.pct(r.memory_utilization), enc=fmt.pct(r.encoder_utilization),
            dec=fmt.pct(r.decoder_utilization))
        out.append(f"  {where:<8} {own_util}")
        out.append(f"  ({fmt.reason(r.utilization_na)})\n" if r.utilization_na else "\n", style="dim")
    out.append("\n" + _("GPU memory, last {span}").format(span=format_duration(span)) + "\n", style="bold")
    by_index = {g.index: g for g in snap.gpus}
    for r in rows:
        dev = by_index.get(r.gpu)
        total = dev.memory_total if dev and dev.memory_total else None
        series = history.process(r.pid_key, r.gpu, r.mig_gi)
        values = [v for __, v in series if v is not None]
        hi = max(values) if values else 1
        low = format_size(min(values)) if values else "N/A"
        span_text = _("min {low} max {high}").format(low=low, high=format_size(max(values)) if values else "N/A")
        spark_w = max(10, width - _SPARK_INDENT - 2 - cells(span_text))  # the line and its min/max on one line
        line = spark(buckets([(t, v) for t, v in series], snap.time, span, spark_w, step=True), 0, hi or 1)
        where = f"GPU {r.gpu}" + ("" if r.mig_gi is None else f"/{r.mig_gi}")
        share = "" if total is None or r.memory is None else _(" ({percent}% of the GPU)").format(
            percent=f"{100 * r.memory / total:.0f}")
        out.append(f"  {where:<8} {format_size(r.memory):>8}{share}\n")
        out.append(" " * _SPARK_INDENT + line + "  ", style=look.palette.ok)
        out.append(span_text + "\n", style="dim")
    for index in sorted({r.gpu for r in rows}):
        checked = (health or {}).get(index)
        if checked is None or checked.health is None:
            continue
        out.append("\n" + _("GPU {index} health").format(index=index) + "\n", style="bold")
        lines = health_lines(checked, Style(color=True, unicode=True), width)
        out.append_text(Text.from_ansi("\n".join(lines) + "\n"))  # its worrying lines painted as vram info does
    return out


class DetailScreen(_Modal):
    """One process; the app calls `update` on every refresh while it is open."""

    BINDINGS = [Binding("escape,q,enter", "close", N_("Close")), Binding("k", "kill", N_("Kill"))]

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
            widget.update(Text(_("pid {pid} holds no GPU memory any more (exited, or its GPU was lost).").format(
                pid=self.pid), style="yellow"))
            return
        own = process_gpus(snap, self.pid, self._environ_once, self._pids_visible)
        look = _look(self)
        # the pop-up's own text width, less its scrollbar (Textual's 2 columns: the details scroll): nothing wraps
        width = help_width(self.app.size.width) - 2
        widget.update(look.text(detail_text(rows, snap, history, width, span, own, look, health)))

    def action_kill(self) -> None:
        self.app.action_kill(self.pid)  # type: ignore[attr-defined]
