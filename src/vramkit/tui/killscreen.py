"""The kill dialog: what would be signalled and whether the checks allow it, a confirmation,
then the outcome (exited, still running, or refused and why), as `vram kill` reports it."""

from __future__ import annotations

import asyncio
import signal

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from ..killing import EXITED, REFUSED, STILL_RUNNING, KillReport, Plan, Target
from ..units import format_duration, format_size
from .actions import KillActions
from .screens import _Modal


def target_text(t: Target) -> Text:
    out = Text()
    out.append(f"pid {t.pid}", style="bold")
    out.append(f"   user {t.user or '?'}")
    if t.elapsed is not None:
        out.append(f"   age {format_duration(t.elapsed)}")
    out.append("\n" + (t.command or "?") + "\n")  # commands were sanitized by the snapshot/procs
    if t.gpus:
        held = ", ".join(f"GPU {g}: {format_size(m)}" for g, m in sorted(t.gpus.items()))
        out.append(f"holds {held}\n")
    for note in t.notes:
        out.append(f"note: {note}\n", style="yellow")
    return out


def outcome_text(report: KillReport) -> Text:
    out = Text()
    for t in report.targets:
        if t.status == EXITED:
            took = "" if t.seconds is None else f" after {t.seconds:.1f}s"
            out.append(f"pid {t.pid} exited{took} ({', '.join(t.signals) or 'no signal needed'})\n",
                       style="bold green")
        elif t.status == REFUSED and t.refusal is not None:
            out.append(f"pid {t.pid}: refused ({t.refusal.rule}): {t.refusal.reason}\n", style="bold red")
        elif t.status == STILL_RUNNING:
            out.append(f"pid {t.pid} is still running after {', '.join(t.signals)}\n", style="bold yellow")
        else:
            out.append(f"pid {t.pid}: {t.status}\n")
        for note in t.notes:
            out.append(f"  {note}\n", style="dim")
    for change in report.gpus:
        if change.freed is not None:
            out.append(f"GPU {change.index}: {format_size(change.freed)} freed "
                       f"({format_size(change.used_before)} -> {format_size(change.used_after)} used)\n")
    if report.audit_log:
        out.append(f"logged to {report.audit_log}\n", style="dim")
    return out


class KillScreen(_Modal):
    """checking -> refused | confirm -> running -> done (or error)."""

    BINDINGS = [Binding("escape,n,q", "close", "Close"), Binding("y", "confirm(False)", "Yes, SIGTERM"),
                Binding("f", "confirm(True)", "SIGTERM, then SIGKILL"),
                Binding("i", "confirm(False, 'SIGINT')", "SIGINT")]

    def __init__(self, pid: int, actions: KillActions, lock: asyncio.Lock):
        super().__init__()
        self.pid = pid
        self.actions = actions
        self.machine_lock = lock  # not `lock`: Textual's own widget lock has that name
        self.state = "checking"
        self.plan: Plan | None = None
        self.report: KillReport | None = None

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(Text(f"Kill pid {self.pid}\n\nchecking…"), id="kill-text")

    def _show(self, body: Text, footer: str) -> None:
        text = Text.assemble((f"Kill pid {self.pid}\n\n", "bold"), body, ("\n" + footer, "dim"))
        self.query_one("#kill-text", Static).update(text)

    def on_mount(self) -> None:
        self.run_worker(self._check(), exclusive=True)

    async def _check(self) -> None:
        try:
            async with self.machine_lock:
                plan = await asyncio.to_thread(self.actions.plan, self.pid)
            self.plan = plan
        except Exception as e:  # a bad protect.conf, an unknown pid: say so, signal nothing
            self.state = "error"
            self._show(Text(f"cannot check pid {self.pid}: {e}", style="bold red"), "Esc closes")
            return
        t = next((x for x in plan.targets if x.pid == self.pid), None)
        if t is None:
            self.state = "error"
            self._show(Text("nothing selected", style="bold red"), "Esc closes")
        elif t.refusal is not None:
            self.state = "refused"
            self._show(Text.assemble(target_text(t), (f"\nrefused ({t.refusal.rule}): {t.refusal.reason}\n",
                                                      "bold red")), "nothing was signalled  ·  Esc closes")
        else:
            self.state = "confirm"
            self._show(Text.assemble(target_text(t), ("\nSend SIGTERM and wait up to "
                                                      f"{self.actions.timeout:g}s for it to exit?\n", "bold")),
                       "y: yes   f: yes, and SIGKILL if it is still running   i: SIGINT instead (Ctrl-C: a Python "
                       "job can save and exit)   n/Esc: no")

    def action_confirm(self, force: bool, name: str = "SIGTERM") -> None:
        if self.state != "confirm":
            return
        self.state = "running"
        self._show(Text(f"{name} sent to pid {self.pid}; waiting for it to exit…"), "")
        self.run_worker(self._execute(force, signal.Signals[name]), exclusive=True)

    async def _execute(self, force: bool, sig: signal.Signals = signal.SIGTERM) -> None:
        assert self.plan is not None  # "confirm" is only reached with a plan
        try:
            async with self.machine_lock:
                report = await asyncio.to_thread(self.actions.execute, self.plan, force, sig)
            self.report = report
        except Exception as e:  # AuditError: the log cannot be written, so nothing was signalled
            self.state = "error"
            self._show(Text(str(e), style="bold red"), "Esc closes")
            return
        self.state = "done"
        self._show(outcome_text(report), "Esc closes")
        first = report.targets[0] if report.targets else None
        if first is not None:
            summary = f"pid {first.pid}: {first.status}" + (f" ({first.refusal.reason})" if first.refusal else "")
            self.app.notify(summary, markup=False, severity="information" if report.ok else "warning")

    def action_close(self) -> None:
        if self.state in ("checking", "running"):
            return  # the outcome must be seen; a kill in flight is not cancelled by a key
        self.dismiss(self.state)
