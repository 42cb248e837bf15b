"""`vram top`: the Textual app.

Snapshots are taken through the collector (vramkit.collector, shared with the kill actions, so
they never split the machine's per-process samples) in one daemon thread (Sampler), one at a
time, so a slow driver or a /proc walk over hundreds of processes never freezes the keyboard,
and quitting never waits for it. Each refresh feeds the History (sparklines, alerts), keeps the
table's rows as data and builds only the rows on screen (ProcTable).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import gc
import math
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from rich.cells import cached_cell_len
from rich.text import Text
from textual import events
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.command import CommandPalette
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.theme import ThemeProvider
from textual.widgets import Input

from ..alerts import Alert, History, Thresholds, evaluate
from ..errors import VramkitError
from ..gpu_state import Device, GpuProcess, Snapshot
from ..i18n import N_, _, ngettext
from ..procs import HostLoad, read_host_load, sanitize
from ..render import fmt
from ..render.banner import banner
from ..render.status_view import extras_fit
from ..render.style import Style
from ..render.text_width import cells, pad
from ..units import parse_gpu_list
from . import rows as R
from .bindings import KeysFooter, key_display, quiet_key_names, translate
from .compositor import TopScreen
from .lines import Lines
from .look import Look
from .panels import alerts_text, gpu_panel, host_text, name_cells, users_text
from .strips import lazy_strip_caches
from .table import ProcTable
from .timeline import SLOTS, Charts, RangeChart, range_label

if TYPE_CHECKING:  # the kill path is imported only when it is used: a read-only view never needs it
    from ..collector import Collector
    from ..history.series import GpuSeries
    from .actions import KillActions
    from .screens import DetailScreen  # the screens, when one is first opened (~0.3 MiB of modules)


# The prompt's placeholder for each of its modes (action_prompt)
PROMPTS = {"search": N_("search pid, user or command (Enter keeps it, Esc clears)"),
           "user": N_("only these users, comma-separated (empty: everyone)"),
           "gpu": N_("only these GPUs: 0 | 0,2 | 0-3 (empty: every GPU)")}
RIGHT = {"gpu", "pid", "memory", "share", "sm", "bw", "enc", "dec", "util", "cpu", "rss", "elapsed"}
HEADER_SORT = {"gpu": "gpu", "pid": "pid", "user": "user", "memory": "memory", "share": "memory",
               "cpu": "cpu", "rss": "rss", "elapsed": "elapsed"}


T = TypeVar("T")


def _settle(done: asyncio.Future[T], result: T | None, error: BaseException | None) -> None:
    if done.cancelled():
        return
    if error is not None:
        done.set_exception(error)
    else:
        done.set_result(result)  # type: ignore[arg-type]


# Cell lengths rich may keep (see bound_cell_lengths): about what one refresh measures (100-270 at
# 120x40 and 8 GPUs, drawn as rich draws them: lines.py). 1,024 held ~0.2 MiB more at 8 x 500;
# a text measured again costs a len() for ASCII.
CELL_LENGTHS = 256


def bound_cell_lengths() -> None:
    """rich keeps the cell length of every text it measures (shorter than 512) in one cache of
    4,096, which Textual shares: the clock, ELAPSED and CPU% bring new texts every second, so it
    grew for the first five minutes of a view (~1 MiB, past the first minute). Emptied once it
    holds more than CELL_LENGTHS, it stays within what the first minute filled; measuring a text
    again costs a len() for ASCII."""
    if cached_cell_len.cache_info().currsize > CELL_LENGTHS:
        cached_cell_len.cache_clear()


def _run_and_settle(fn: Callable[[], T], loop: asyncio.AbstractEventLoop, done: asyncio.Future[T]) -> None:
    try:
        result, error = fn(), None
    except BaseException as e:  # handed to the awaiting task
        result, error = None, e
    try:
        loop.call_soon_threadsafe(_settle, done, result, error)
    except RuntimeError:  # the loop is closed: the app has quit meanwhile
        pass


async def in_daemon_thread(fn: Callable[[], T]) -> T:
    """fn() in a daemon thread. Unlike asyncio.to_thread, quitting does not wait for it: a
    snapshot stuck in a slow driver call must not keep `q` from quitting at once."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()
    threading.Thread(target=_run_and_settle, args=(fn, loop, done), name="vram-top-read", daemon=True).start()
    return await done


class Sampler:
    """Runs functions one after another in one daemon thread, as in_daemon_thread does (quitting
    does not wait for it), without starting a thread for each: the view samples every second."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], asyncio.AbstractEventLoop, asyncio.Future[Any]]] = (
            queue.SimpleQueue())
        self._thread: threading.Thread | None = None

    async def run(self, fn: Callable[[], T]) -> T:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[T] = loop.create_future()
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="vram-top-sample", daemon=True)
            self._thread.start()
        self._jobs.put((fn, loop, done))
        return await done

    def _work(self) -> None:
        while True:
            _run_and_settle(*self._jobs.get())


# Textual's own commands in the Ctrl-P palette (App.get_system_commands): their titles and help, word
# for word, so each is shown in the reader's language; one Textual adds later stays English until listed.
_SYSTEM_WORDS = frozenset((
    N_("Theme"), N_("Change the current theme"), N_("Quit"), N_("Quit the application as soon as possible"),
    N_("Keys"), N_("Hide the keys and widget help panel"),
    N_("Show help for the focused widget and a summary of available keys"),
    N_("Minimize"), N_("Minimize the widget and restore to normal size"),
    N_("Maximize"), N_("Maximize the focused widget"),
    N_("Screenshot"), N_("Save an SVG 'screenshot' of the current screen")))


def _shape(plain: str) -> tuple[int, int]:
    """A text's lines and its widest line's cells: what its height in a Static depends on."""
    lines = plain.split("\n")
    return len(lines), max(map(cells, lines))


TABLE_MIN_ROWS = 2  # the process table's rows kept on a short terminal, under its header (_fit_gpu_area)


class GpuArea(VerticalScroll):
    """The GPU panels' scrolling area. BLANK, as Textual's screen below (compositor.TopScreen): its
    own lines lie under its panels, and Textual draws a blank widget as one shared blank line,
    where it kept each line, its filtered copy and its pieces per line (~40 KiB at 16 lines)."""

    BLANK = True

    def __init__(self, on_resize: Callable[[], None], id: str) -> None:
        super().__init__(id=id)
        self._on_resize = on_resize  # the GPU lines drawn again for their new room

    def on_resize(self) -> None:
        self._on_resize()


class TopApp(App[None]):
    TITLE = "vram top"
    CSS = """
    Screen { layout: vertical; }
    #banner { height: auto; padding: 0 1; }
    #gpu-area { height: auto; max-height: 60%; }
    #gpus { height: auto; padding: 0 1; }
    #users { height: 1; padding: 0 1; }
    #alerts { height: auto; padding: 0 1; }
    #viewline { height: 1; padding: 0 1; background: $boost; }
    #procs { height: 1fr; }
    #prompt { display: none; height: 3; }
    #prompt.shown { display: block; }
    TopApp.ascii KeysFooter .keys-footer--edge { display: none; }  /* --ascii: no block character */
    """
    # Descriptions marked only: each instance translates its own (bindings.translate).
    BINDINGS = [
        Binding("q", "quit", N_("Quit")),
        # Ctrl-C quits, as it stops every other long-running vram command (Textual's default shows
        # a toast; priority: it quits from the prompt too, where it would copy text).
        Binding("ctrl+c", "quit", N_("Quit"), show=False, priority=True),
        Binding("question_mark", "help", N_("Help")),
        Binding("slash", "prompt('search')", N_("Search")),
        Binding("s", "cycle_sort", N_("Sort")),
        Binding("r", "reverse", N_("Reverse"), show=False),
        Binding("u", "prompt('user')", N_("User")),
        Binding("g", "prompt('gpu')", "GPU"),
        Binding("t", "tree", N_("Tree")),
        Binding("k", "kill", N_("Kill")),
        Binding("a", "alerts", N_("Alerts"), show=False),
        Binding("p", "pause", N_("Pause"), show=False),
        Binding("h", "cycle_range", N_("Range")),
        Binding("escape", "clear", N_("Clear"), show=False),
    ]

    def __init__(self, collect: Callable[[], Snapshot], interval: float = 2.0, readonly: bool = True,
                 gpus: list[int] | None = None, thresholds: Thresholds | None = None,
                 history_span: float = 300.0, actions: KillActions | None = None,
                 history_db: str | Path | None = None, look: Look | None = None,
                 columns: tuple[str, ...] | None = None, view: R.View | None = None,
                 read_host: Callable[[], HostLoad | None] | None = read_host_load,
                 read_health: Callable[[Snapshot], None] | None = None, pids_visible: bool = True,
                 usage: Collector | None = None):
        """`history_db`: the recorded history to draw before the first live sample (None: live
        only). It is read only if it exists, so SQLite is not even imported without one.
        `look`: theme, memory thresholds, ASCII; `columns`: the process columns wanted (config);
        `view`: the table's starting view, with the command line's fixed filters; `read_host`:
        the host's CPU/RAM/swap (None: no host line); `read_health`: Machine.read_health, for the
        detail screen's GPUs (some twenty driver calls a GPU: only while it is open); `pids_visible`:
        the backend's word that NVML's pids are this /proc's (else a pid's environment is another's);
        `usage`: the collector behind `collect`, told before each reading whose state, CPU and RSS
        to read (the rows near the screen, or all), and asked for those of a row drawn without
        them (one that came onto the screen: a new order, a scroll). None: all are read."""
        super().__init__()
        translate(self)
        quiet_key_names()
        lazy_strip_caches()  # most of the ~600 lines on screen never use most of their caches
        self.look = look or Look()
        self.theme = self.look.palette.textual_theme
        if self.look.ascii:
            _ascii_scrollbars()
            self.add_class("ascii")
        self.wanted_columns = columns
        self.read_host = read_host
        self.read_health = read_health
        self.pids_visible = pids_visible
        self.health: dict[int, Device] | None = None  # the detail screen's GPUs, their health read
        # GPU -> (what its health showed that doctor flags, when read): kept from the last reading
        # of each GPU (the detail screen's), a '!' on its panel and a line among the alerts
        self.health_flags: dict[int, tuple[list[str], float]] = {}
        self.host: tuple[HostLoad | None, float | None] | None = None  # the last reading, its CPU %
        self.collect = collect
        self.usage = usage
        self.interval = interval
        self.readonly = readonly or actions is None
        self.only_gpus = set(gpus) if gpus else None
        self.thresholds = thresholds or Thresholds()
        self.span = history_span
        self.actions = actions
        self._lock = asyncio.Lock()  # one user of the machine at a time: a snapshot or a kill
        self.sampler = Sampler()  # the thread that samples (a slow driver never freezes the keys)
        # Alerts and details. Of each GPU, alerts read only the trend window (growth): keep about
        # twice its samples, not 15 minutes' (7,200 samples, 1.6 MiB, at 1 s on 8 GPUs). The
        # processes' memory (change points) is kept for the detail screen's span.
        trend_samples = math.ceil(self.thresholds.trend_window / interval)
        self.history = History(keep_seconds=max(900.0, 2 * history_span), max_samples=2 * trend_samples + 10)
        self.charts = Charts(history_span)  # the GPU panels' history lines, every range
        self.history_db = Path(history_db) if history_db is not None else None
        self.history_problem: str | None = None  # why the database is not drawn, one line
        self._first_read = asyncio.Event()
        self._first_frame = asyncio.Event()  # the other ranges are read after it, not against it
        self.first_read_wait = 1.0  # seconds the first frame waits for it (a locked database)
        self.view = view or R.View()
        self.snap: Snapshot | None = None
        self.alerts: list[Alert] = []
        self.paused = False
        self.error: str | None = None
        self.refreshes = 0
        self._prompt_mode: str | None = None
        self._prompt: Input | None = None  # mounted at the first prompt: most sessions never open one
        self._columns: list[str] = []
        self._owners = False  # the OWNER column is shown: some process has one (R.owned)
        self._command_width = 0
        self._rows: list[R.Row] = []  # every row of the view, in its order (the table builds those drawn)
        self._counts = (0, 0)  # the snapshot's processes, and the rows of them the view shows
        self._texts: dict[str, Text] = {}  # what each Static shows (_show)
        self._shapes: dict[str, tuple[int, int]] = {}  # and its _shape, measured once a text
        self._gpu_area_cap: int | str = "60%"  # the GPU area's max-height (CSS), as _fit_gpu_area set it
        self._headers, self._widths = R.headers()  # the columns' headers and widths, in the reader's language
        self._flag_words = fmt.flag_words()  # the FLAGS column's words, in the reader's language
        self._detail: weakref.ref[DetailScreen] | None = None  # the detail screen opened last

    def get_key_display(self, binding: Binding) -> str:
        return key_display(binding, super().get_key_display)  # without unicodedata's name tables

    # ------------------------------------------------------------ layout
    def get_default_screen(self) -> Screen[Any]:
        return TopScreen(id="_default")  # Textual's, drawing for a refresh only the widgets under its changes

    def compose(self) -> ComposeResult:
        # The GPU area's height depends on the heights of the lines around it (_fit_gpu_area): fitted
        # again when a layout changes one of them, which may come after the fit a redraw asked for
        yield Lines(id="banner", resized=self._fit_after_layout)
        with GpuArea(self._draw_after_layout, id="gpu-area"):
            yield Lines(id="gpus")
        yield Lines(id="users", resized=self._fit_after_layout)
        yield Lines(id="alerts", resized=self._fit_after_layout)
        yield Lines(id="viewline", resized=self._fit_after_layout)
        table = ProcTable(self._cell_text, id="procs")
        yield table
        yield KeysFooter()  # the prompt (an Input) comes before it when first asked for (action_prompt)

    async def on_mount(self) -> None:
        self._setup_columns()
        area = self.query_one("#gpu-area", GpuArea)
        self.watch(area, "show_vertical_scrollbar", self._draw_after_layout, init=False)
        table = self.query_one("#procs", ProcTable)
        # The table's sideways scrollbar takes a line from the GPU area on a short terminal: fitted
        # again when it comes or goes, which a resize's layout may settle after the fit it asked for
        self.watch(table, "show_horizontal_scrollbar", self._fit_after_layout, init=False)
        table.focus()
        if self.history_db is not None:
            self.run_worker(self._read_history(), exclusive=True, group="history")
            try:  # drawn before the first live sample, unless the database keeps us waiting
                await asyncio.wait_for(self._first_read.wait(), self.first_read_wait)
            except asyncio.TimeoutError:
                pass
        await self.refresh_data()
        self.call_after_refresh(self._first_frame.set)
        # Starting leaves ~4,000 objects in reference cycles (Textual's start, the early frame's
        # rendering, the first readings): collected once the first frame is drawn, so that their
        # memory serves the refreshes, not left to the next full collection (~0.25 MiB of RSS).
        self.call_after_refresh(gc.collect)
        self.set_interval(self.interval, self.refresh_data)

    def on_resize(self) -> None:
        selected = self.selected_key()  # new columns clear the table, its cursor too
        if self._setup_columns():
            self._fill_table(selected)
        self._draw()

    def _setup_columns(self) -> bool:
        """(Re)build the table's columns when the width calls for another set. True if it did."""
        columns, command_width = R.columns_for(self.size.width, self.wanted_columns, self._owners, self._widths)
        if columns == self._columns and command_width == self._command_width:
            return False
        table = self.query_one("#procs", ProcTable)
        table.set_columns((key, self.look.text(Text(self._headers[key], justify="right" if key in RIGHT else "left")),
                           command_width if key == "command" else self._widths[key]) for key in columns)
        self._columns, self._command_width = columns, command_width
        return True

    # ------------------------------------------------------------ data
    async def _read_history(self) -> None:
        """Read the recorded history into the charts: the range shown first, before the first
        live sample; the others once the first frame is on screen (in a thread: SQLite releases
        the GIL while it reads, so the view stays responsive)."""
        shown = self.charts.shown
        order = [shown] + [c for c in self.charts.ranges if c is not shown]
        try:
            for i, chart in enumerate(order):
                until = time.time()
                series = await in_daemon_thread(functools.partial(self._read_series, chart.span, until))
                _merge(chart, series)
                self._draw()
                if i == 0:
                    self._first_read.set()
                    await self._first_frame.wait()
        except VramkitError as e:  # missing, locked, corrupt, newer schema: the view goes on live
            self.history_problem = sanitize(e.message)
        except Exception as e:  # noqa: BLE001  anything else the file does to SQLite: one line too
            self.history_problem = sanitize(_("cannot read {path}: {error}").format(
                path=self.history_db, error=f"{type(e).__name__}: {e}"))
        finally:
            self._first_read.set()
        self._draw()

    def _read_series(self, span: float, until: float) -> GpuSeries:
        from ..history.series import gpu_series  # imports sqlite3: only with a database
        from ..history.store import Store

        store = Store.open(self.history_db)
        try:
            return gpu_series(store, until, span, SLOTS)
        finally:
            store.close()

    async def refresh_data(self) -> None:
        """Take one snapshot (off the UI thread) and show it. Skipped while one is in flight."""
        if self._lock.locked() or self.paused:
            return
        try:
            async with self._lock:
                self._name_usage_rows()
                snap = await self.sampler.run(self.collect)
                # health is read only for an open detail screen: no thread for it otherwise
                reads_health = self.read_health is not None and self.detail_screen() is not None
                self.health = await self.sampler.run(functools.partial(self._detail_health, snap)) if (
                    reads_health) else None
                self._note_health(snap.time)
        except Exception as e:  # the view goes on with the last good data
            self.error = _("refresh failed at {time}: {error}").format(time=time.strftime("%H:%M:%S"),
                                                                       error=f"{type(e).__name__}: {e}")
            self._draw()
            return
        self.error = None
        self._read_host()
        self.apply(snap)

    def _name_usage_rows(self) -> None:
        """Tell the reader whose state, CPU and RSS the next reading reads: the processes of the rows
        on screen and a page above and below (paging shows them read) and the detail screen's; every
        one when the rows are sorted by CPU or RSS, or before there are rows. The others are read
        only to know who they are (no /proc read while they run)."""
        if self.usage is None:
            return
        if self.view.sort in ("cpu", "rss") or not self._rows:
            self.usage.read_usage_of(None)
            return
        table = self.query_one("#procs", ProcTable)
        page, top = max(1, table.size.height), table.scroll_offset.y
        pids = {r.proc.pid for r in self._rows[max(0, top - page):top + 2 * page] if r.proc is not None}
        detail = self.detail_screen()
        if detail is not None:
            pids.add(detail.pid)
        self.usage.read_usage_of(pids)

    def _with_usage(self, row: R.Row) -> R.Row:
        """The row, its process's state, CPU and RSS read now if its reading left them unread
        (drawn: it came onto the screen since); as it is while a sample is being read."""
        p = row.proc
        if self.usage is not None and p is not None and p.state is None and p.cpu_percent is None \
                and p.host_missing is None:
            read = self.usage.read_usage([p])
            if read is not None:
                row.proc = read[0]
        return row

    def _detail_health(self, snap: Snapshot) -> dict[int, Device] | None:
        """The detail screen's GPUs with their health read, on copies (the collector's other
        consumers share the snapshot); None when no detail screen is open or nothing reads health."""
        screen = self.detail_screen()
        if self.read_health is None or screen is None:
            return None
        held = {p.gpu for p in snap.processes if p.pid_here == screen.pid}
        copies = [dataclasses.replace(g) for g in snap.gpus if g.index in held]
        self.read_health(dataclasses.replace(snap, gpus=copies))
        return {g.index: g for g in copies}

    def _note_health(self, when: float) -> None:
        if not self.health:
            return
        from ..render.info_view import health_problems  # only with a detail screen open (~50 KiB)

        for index, dev in self.health.items():
            problems = health_problems(dev)
            if problems:
                self.health_flags[index] = (problems, when)
            else:
                self.health_flags.pop(index, None)

    def _health_alerts(self, gpus: list[Device]) -> list[Alert]:
        """A line per shown GPU whose health, when last read, showed what doctor flags."""
        shown = {g.index for g in gpus}
        out = []
        for index, (problems, when) in sorted(self.health_flags.items()):
            if index in shown:
                read = time.strftime("%H:%M:%S", time.localtime(when))
                message = _("GPU {index} health: {problems} (read {time}; vram info {index})").format(
                    index=index, problems=", ".join(problems), time=read)
                out.append(Alert("health", "warning", message, gpu=index))
        return out

    def _read_host(self) -> None:
        """The host line's reading: CPU % over the time since the last one (two small /proc reads)."""
        if self.read_host is None:
            return
        load = self.read_host()
        before = self.host[0] if self.host is not None else None
        self.host = (load, None if load is None else load.busy_percent(before))

    def apply(self, snap: Snapshot) -> None:
        if self.only_gpus is not None:  # a copy: the collector's other consumers see every GPU
            snap = dataclasses.replace(snap, gpus=[g for g in snap.gpus if g.index in self.only_gpus])
        self.snap = snap
        self.refreshes += 1
        self.history.add(snap)
        self.charts.add(snap)
        self.alerts = evaluate(self.history, self.thresholds)
        self._draw()
        self._fill_table()
        bound_cell_lengths()
        detail = self.detail_screen()
        if detail is not None:
            detail.update(snap, self.history, self.span, self.health)

    # ------------------------------------------------------------ drawing
    def _draw(self) -> None:
        width = max(20, self.size.width - 2)
        snap = self.snap
        head = Text()
        if snap is not None:
            plain = banner(snap, Style(color=False, unicode=True), width)
            head = Text(plain)
            # Translators: the words the banner's "SIMULATED machine (scenario ...), not real GPUs" begins with
            head.highlight_words([_("SIMULATED machine")], style=self.look.palette.banner_mark)
        extra = [_("refresh {interval}s").format(interval=f"{self.interval:g}")]
        source = self._history_source(wide=width >= 100)
        if source:
            extra.append(source)
        if self.readonly:
            extra.append(_("read-only"))
        if self.paused:
            extra.append(_("PAUSED (p resumes)"))
        head.append("  ·  " + "  ·  ".join(extra), style="dim")
        if self.host is not None:
            head.append("\n")
            head.append_text(host_text(*self.host, width, self.look))
        if self.error:
            head.append("\n" + self.error, style=f"bold {self.look.palette.critical}")
        if self.history_problem:
            problem = Text(_("history database not used: {problem}").format(problem=self.history_problem),
                           style=self.look.palette.warn)
            problem.truncate(width, overflow="ellipsis")
            head.append("\n")
            head.append_text(problem)
        self._show("#banner", head)
        if snap is None:
            return
        two_lines = self.size.height >= 2 * len(snap.gpus) + 20
        alerting = {a.gpu for a in self.alerts if a.severity == "critical"}
        chart = self.charts.shown
        names = name_cells(snap.gpus)
        # The lines' room as laid out: less than the screen's beside the GPU area's scrollbar (more
        # GPUs than its 60% of the height shows) or the screen's own, where a line as wide as the
        # screen would wrap. Redrawn when it changes (_draw_after_layout); the screen's width before the
        # first layout.
        area = self.query_one("#gpu-area", GpuArea)
        gpu_width = width if not area.size.width else (
            area.size.width - 2 - (area.scrollbar_size_vertical if area.show_vertical_scrollbar else 0))
        extras, taken = extras_fit(snap.gpus, gpu_width)  # fan, video engines: where and as vram status shows them
        panels = [gpu_panel(g, functools.partial(chart.peaks, g.index, snap.time, total=g.memory_total), snap.time,
                            gpu_width, two_lines, chart.span, g.index in alerting, names, self.look,
                            g.index in self.health_flags, pad(extras.get(g.index, ""), taken)) for g in snap.gpus]
        if not panels:
            panels = [Text(_("no GPUs"), style="dim")]
        self._show("#gpus", Text("\n").join(panels))
        self._show("#users", users_text(snap.processes, width))
        max_alerts = 2 if self.size.height < 30 else 4
        alerts = self.alerts + self._health_alerts(snap.gpus)
        self._show("#alerts", alerts_text(alerts, width, max_alerts, self.look))
        self._draw_viewline()
        self.call_after_refresh(self._fit_gpu_area)  # once the lines drawn are laid out

    def _draw_after_layout(self, _shown: bool = False) -> None:
        """_draw once the layout under way is done, for the GPU area resized or its scrollbar come
        or gone (both while Textual lays it out): a text drawn meanwhile asks for a layout Textual
        then drops (the banner kept a blank third line after 100x30 -> 200x55)."""
        self.call_after_refresh(self._draw)

    def _fit_after_layout(self, _shown: bool = False) -> None:
        self.call_after_refresh(self._fit_gpu_area)

    def _fit_gpu_area(self) -> None:
        """The GPU area's height: at most 60% of the screen, and less on a terminal too short for it
        and the rest, so that the table keeps its header and TABLE_MIN_ROWS rows and the GPU area
        scrolls, not the whole screen (at 60x15 the table was off the screen, the banner scrolled)."""
        area = self.query_one("#gpu-area", GpuArea)
        others = sum(w.outer_size.height for w in area.screen.children  # the view's, under a detail screen too
                     if w.display and w is not area and w.id != "procs")
        table = self.query_one("#procs", ProcTable)
        under = table.scrollbar_size_horizontal if table.show_horizontal_scrollbar else 0  # columns wider than it
        room = self.size.height - others - 1 - TABLE_MIN_ROWS - under
        cap: int | str = "60%" if room >= self.size.height * 3 // 5 else max(1, room)
        if cap != self._gpu_area_cap:
            self._gpu_area_cap = cap
            area.styles.max_height = cap

    def _fill_table(self, selected: str | None = None) -> None:
        """The rows in the view's order, as data; the table builds the ones it draws. The cursor
        stays on its process (`selected`, default the one under it now) wherever that moved, and
        goes to the top if it is gone."""
        if self.snap is None:
            return
        table = self.query_one("#procs", ProcTable)
        selected = selected or self.selected_key()
        owners = R.owned(self.snap.processes)
        if owners != self._owners:  # OWNER comes with the first process that has one, goes with the last
            self._owners = owners
            self._setup_columns()
        self._rows = R.ordered(self.snap, self.view)
        self._counts = (len(self.snap.processes), sum(1 for r in self._rows if r.proc is not None))
        by_index = {g.index: g for g in self.snap.gpus}
        rows, columns, command_width, plain = self._rows, self._columns, self._command_width, self.look.plain
        words = self._flag_words
        fill = self._with_usage
        table.show(len(rows), lambda i: [plain(v) for v in R.cells(fill(rows[i]), by_index, columns, command_width,
                                                                    words)])
        if selected is not None:
            index = next((i for i, r in enumerate(self._rows) if r.key == selected), None)
            if index is None:  # its process is gone
                table.move_cursor(row=0, animate=False)
                table.scroll_to(y=0, animate=False)
            elif index != table.cursor_row:
                table.move_cursor(row=index, animate=False)
        self._draw_viewline()

    def _draw_viewline(self) -> None:
        if self.snap is None:
            return
        total, shown = self._counts
        count = (ngettext("{shown} of {total} GPU process", "{shown} of {total} GPU processes", total)
                 if shown != total else ngettext("{total} GPU process", "{total} GPU processes", total))
        line = _("{count}  ·  {view}  ·  ? help").format(count=count.format(shown=shown, total=total),
                                                        view=self.view.describe())
        self._show("#viewline", Text(line, style="bold"))

    def _show(self, selector: str, text: Text) -> None:
        """Put text in a Static, unless it already shows it; the layout is redone only when the
        number of lines or the widest line's cells change: a line wider than the Static wraps (the
        banner's do; a GPU line cut to a room since found narrower did), so either may change its
        height. Kept at a wrapped height, the banner and GPU lines held blank lines after resizes."""
        text = self.look.text(text)
        old = self._texts.get(selector)
        if old is not None and old == text and old.style == text.style:
            return
        shape = _shape(text.plain)
        self.query_one(selector, Lines).update(text, layout=self._shapes.get(selector) != shape)
        self._texts[selector], self._shapes[selector] = text, shape

    def _cell_text(self, column: str, value: str) -> Text:
        """A process cell as drawn (the table stores its text already through look.plain: --ascii
        turns the tree's branches and the … of a cut text into ASCII). Always Text: a plain str
        would be parsed as markup, and commands are other users' text."""
        if column in RIGHT:
            return Text(value, justify="right")
        if column == "flags" and value != "-":
            return Text(value, style=self.look.palette.flag)
        return Text(value)

    def detail_screen(self) -> DetailScreen | None:
        """The detail screen, when it is the one shown."""
        detail = self._detail() if self._detail is not None else None
        return detail if detail is not None and detail is self.screen else None

    def selected_key(self) -> str | None:
        """The key of the row under the cursor (R.row_key), None on an empty table."""
        row = self.selected_row()
        return None if row is None else row.key

    def selected_row(self) -> R.Row | None:
        row = self.query_one("#procs", ProcTable).cursor_row
        return self._rows[row] if 0 <= row < len(self._rows) else None

    # ------------------------------------------------------------ actions
    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """Textual's palette commands, as Textual offers them (the same conditions and actions), in words
        the reader reads."""
        for command in super().get_system_commands(screen):
            yield command._replace(title=_(command.title) if command.title in _SYSTEM_WORDS else command.title,
                                   help=_(command.help) if command.help in _SYSTEM_WORDS else command.help)

    def action_command_palette(self) -> None:
        # Textual's, with its placeholder in the reader's language
        if self.use_command_palette and not CommandPalette.is_open(self):  # type: ignore[arg-type]  # App[None]
            self.push_screen(CommandPalette(placeholder=_("Search for commands…"), id="--command-palette"))

    def search_themes(self) -> None:
        # Textual's (the palette's Theme command), with its placeholder in the reader's language
        self.push_screen(CommandPalette(providers=[ThemeProvider], placeholder=_("Search for themes…")))

    def action_help(self) -> None:
        from .screens import HelpScreen

        self.push_screen(HelpScreen())

    def action_alerts(self) -> None:
        from .screens import AlertsScreen

        shown = self.snap.gpus if self.snap is not None else []
        self.push_screen(AlertsScreen(self.alerts + self._health_alerts(shown)))

    def action_cycle_sort(self) -> None:
        order = R.SORT_ORDER
        self.view.sort = order[(order.index(self.view.sort) + 1) % len(order)]
        self._fill_table()

    def action_reverse(self) -> None:
        self.view.reverse = not self.view.reverse
        self._fill_table()

    def action_tree(self) -> None:
        self.view.tree = not self.view.tree
        self._fill_table()

    def _history_source(self, wide: bool = True) -> str:
        """Where the history lines come from, in a few words: the range, then the database.
        Narrow terminals get it shorter (no path; nothing without a database: the panels name
        the range), so the banner does not take a line from the table."""
        chart = self.charts.shown
        span = range_label(chart.span)
        if self.history_db is None or self.history_problem is not None:
            return _("history {span} live only").format(span=span) if wide or self.history_problem else ""
        where = sanitize(_home_short(self.history_db))
        if not chart.loaded:
            return (_("history {span}: reading {path}…") if wide else _("history {span}: reading…")).format(
                span=span, path=where)
        first = chart.recorded_first
        if first is None:
            return (_("history {span} live, nothing recorded in it ({path})") if wide
                    else _("history {span} live, nothing recorded in it")).format(span=span, path=where)
        now = self.snap.time if self.snap is not None else time.time()
        if first > now - chart.span + 2 * chart.width + 60:  # recorded less than the range
            return (_("history {span}: {recorded} recorded, from {path}") if wide
                    else _("history {span}: {recorded} recorded")).format(
                        span=span, recorded=range_label(_round(now - first)), path=where)
        return (_("history {span} from {path}") if wide else _("history {span} recorded")).format(
            span=span, path=where)

    def action_cycle_range(self) -> None:
        self.charts.cycle()
        self._draw()

    def action_pause(self) -> None:
        self.paused = not self.paused
        self._draw()

    def action_clear(self) -> None:
        self.view.users.clear()
        self.view.gpus.clear()
        self.view.search = ""
        self._hide_prompt()
        self._fill_table()

    async def action_prompt(self, mode: str) -> None:
        prompt = self._prompt
        if prompt is None:  # a widget less for the whole session until then (~150 KiB)
            prompt = self._prompt = Input(id="prompt")
            await self.mount(prompt, before=self.query_one(KeysFooter))
        self._prompt_mode = mode
        prompt.placeholder = _(PROMPTS[mode])
        prompt.value = {"search": self.view.search, "user": ",".join(sorted(self.view.users)),
                        "gpu": ",".join(map(str, sorted(self.view.gpus)))}[mode]
        prompt.add_class("shown")
        prompt.focus()
        self.call_after_refresh(self._fit_gpu_area)  # three lines fewer for the rest

    def _hide_prompt(self) -> None:
        if self._prompt is not None:
            self._prompt.remove_class("shown")
            self.call_after_refresh(self._fit_gpu_area)
        self._prompt_mode = None
        self.query_one("#procs", ProcTable).focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if self._prompt_mode == "search":
            self.view.search = event.value.strip()
            self._fill_table()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        mode, text = self._prompt_mode, event.value.strip()
        if mode == "user":
            self.view.users = {u.strip() for u in text.split(",") if u.strip()}
        elif mode == "gpu":
            try:
                self.view.gpus = set(parse_gpu_list(text)) if text else set()
            except ValueError as e:
                self.notify(str(e), severity="error")
                return
        elif mode == "search":
            self.view.search = text
        self._hide_prompt()
        self._fill_table()

    def on_key(self, event: events.Key) -> None:
        if event.key == "escape" and self._prompt_mode is not None:
            if self._prompt_mode == "search":
                self.view.search = ""
            self._hide_prompt()
            self._fill_table()
            event.stop()

    def on_proc_table_row_selected(self, event: ProcTable.RowSelected) -> None:
        row = self.selected_row()
        if row is None or row.proc is None or self.snap is None:
            return
        if row.proc.pid_here is None:  # its number is another namespace's: /proc here knows another process by it
            self.notify(_("no details: {why}").format(why=_not_here(row.proc)), severity="warning")
            return
        from .screens import DetailScreen

        screen = DetailScreen(row.proc.pid, pids_visible=self.pids_visible)
        self._detail = weakref.ref(screen)
        self.push_screen(screen)
        screen.call_after_refresh(screen.update, self.snap, self.history, self.span)
        if self.read_health is not None:  # its GPUs' health now, not at the next refresh
            screen.call_after_refresh(self.run_worker, self.refresh_data())

    def on_proc_table_header_selected(self, event: ProcTable.HeaderSelected) -> None:
        key = HEADER_SORT.get(str(event.column_key.value))
        if key is None:
            return
        if key == self.view.sort:
            self.view.reverse = not self.view.reverse
        else:
            self.view.sort, self.view.reverse = key, False
        self._fill_table()

    def action_kill(self, pid: int | None = None) -> None:
        if self.readonly or self.actions is None:
            self.notify(_("read-only view: actions are off (started with --readonly)"), severity="warning")
            return
        if pid is None:
            row = self.selected_row()
            if row is None or row.proc is None:
                self.notify(_("select a process first"), severity="warning")
                return
            if row.proc.pid_here is None:  # never a host pid signalled as if it were this namespace's
                self.notify(_("not signalled: {why}; no pid here to signal (vram kill refuses it too)").format(
                    why=_not_here(row.proc)), severity="error")
                return
            pid = row.proc.pid

        from .killscreen import KillScreen

        async def after(_result: str | None) -> None:
            await self.refresh_data()
        self.push_screen(KillScreen(pid, self.actions, self._lock), after)



def _not_here(p: GpuProcess) -> str:
    """One line on a row whose NVML pid is a host pid no process in this PID namespace could be
    told to be (inside a container): there is no pid here to look at or signal."""
    return fmt.missing(p) if p.host_missing else _("host pid {pid}, of another PID namespace").format(pid=p.nvml_pid)


def _merge(chart: RangeChart, series: GpuSeries) -> None:
    for gpu, slots in series.gpus.items():
        for slot, (used, util) in slots.items():
            chart.put(gpu, slot, used, util)
    chart.recorded_first = series.first
    chart.loaded = True


def _home_short(path: Path) -> str:
    home = os.path.expanduser("~")
    text = str(path)
    return "~" + text[len(home):] if home not in ("", "/") and text.startswith(home + "/") else text


def _round(seconds: float) -> float:
    """A recorded length as people say it: whole minutes, hours past 2h, days past 2d."""
    for unit in (86400, 3600, 60):
        if seconds >= 2 * unit:
            return seconds // unit * unit
    return max(60.0, seconds // 60 * 60)


def _ascii_scrollbars() -> None:
    """Scrollbars without the block characters Textual draws a thumb's ends with (--ascii): the
    thumb is its colour alone."""
    from textual.scrollbar import ScrollBar, ScrollBarRender

    class AsciiScrollBarRender(ScrollBarRender):
        VERTICAL_BARS = [" "] * 8
        HORIZONTAL_BARS = [" "] * 8

    ScrollBar.renderer = AsciiScrollBarRender
