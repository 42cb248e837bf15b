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

from ..i18n import N_, _, join_words
from ..killing import EXITED, REFUSED, STILL_RUNNING, KillReport, Plan, Target
from ..render.kill_view import status_words
from ..render.text_width import wrap
from ..units import format_duration, format_size
from .actions import KillActions
from .bindings import translate
from .screens import _Modal, help_width


def target_text(t: Target) -> Text:
    out = Text()
    out.append(_("pid {pid}").format(pid=t.pid), style="bold")
    out.append("   " + _("user {user}").format(user=t.user or "?"))
    if t.elapsed is not None:
        out.append("   " + _("age {age}").format(age=format_duration(t.elapsed)))
    out.append("\n" + (t.command or "?") + "\n")  # commands were sanitized by the snapshot/procs
    if t.gpus:
        # Translators: what one process holds on one GPU, in the kill dialog ("holds {memory}")
        held = join_words([_("GPU {index}: {size}").format(index=g, size=format_size(m))
                           for g, m in sorted(t.gpus.items())])
        out.append(_("holds {memory}").format(memory=held) + "\n")
    for note in t.notes:
        out.append(_("note: {note}").format(note=note) + "\n", style="yellow")
    return out


def outcome_text(report: KillReport) -> Text:
    out = Text()
    for t in report.targets:
        if t.status == EXITED:
            signals = ", ".join(t.signals) or _("no signal needed")
            exited = (_("pid {pid} exited ({signals})") if t.seconds is None
                      else _("pid {pid} exited after {seconds}s ({signals})"))
            out.append(exited.format(pid=t.pid, seconds=f"{t.seconds:.1f}" if t.seconds is not None else "",
                                     signals=signals) + "\n", style="bold green")
        elif t.status == REFUSED and t.refusal is not None:
            out.append(_("pid {pid}: refused ({rule}): {reason}").format(
                pid=t.pid, rule=t.refusal.rule, reason=t.refusal.text) + "\n", style="bold red")
        elif t.status == STILL_RUNNING:
            out.append(_("pid {pid} is still running after {signals}").format(
                pid=t.pid, signals=", ".join(t.signals)) + "\n", style="bold yellow")
        else:
            out.append(_("pid {pid}: {status}").format(pid=t.pid, status=status_words(t.status)) + "\n")
        for note in t.notes:
            out.append(f"  {note}\n", style="dim")
    for change in report.gpus:
        if change.freed is not None:
            out.append(_("GPU {index}: {freed} freed ({before} -> {after} used)").format(
                index=change.index, freed=format_size(change.freed), before=format_size(change.used_before),
                after=format_size(change.used_after)) + "\n")
    if report.audit_log:
        out.append(_("logged to {path}").format(path=report.audit_log) + "\n", style="dim")
    return out


class KillScreen(_Modal):
    """checking -> refused | confirm -> running -> done (or error)."""

    BINDINGS = [Binding("escape,n,q", "close", N_("Close")), Binding("y", "confirm(False)", N_("Yes, SIGTERM")),
                Binding("f", "confirm(True)", N_("SIGTERM, then SIGKILL")),
                Binding("i", "confirm(False, 'SIGINT')", "SIGINT")]

    def __init__(self, pid: int, actions: KillActions, lock: asyncio.Lock):
        super().__init__()
        translate(self)
        self.pid = pid
        self.actions = actions
        self.machine_lock = lock  # not `lock`: Textual's own widget lock has that name
        self.state = "checking"
        self.plan: Plan | None = None
        self.report: KillReport | None = None

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(Text(self._title() + "\n\n" + _("checking…")), id="kill-text")

    def _title(self) -> str:
        return _("Kill pid {pid}").format(pid=self.pid)

    def _show(self, body: Text, footer: str) -> None:
        text = Text.assemble((self._title() + "\n\n", "bold"), body, ("\n" + self._fold(footer), "dim"))
        self.query_one("#kill-text", Static).update(text)

    def _fold(self, line: str) -> str:
        """A line of text without spaces between its words (Chinese) folded by display width: the
        dialog would fold it only at spaces, leaving a short line before each run of characters."""
        return line if line.isascii() else "\n".join(wrap(line, help_width(self.app.size.width)))

    def on_mount(self) -> None:
        self.run_worker(self._check(), exclusive=True)

    async def _check(self) -> None:
        try:
            async with self.machine_lock:
                plan = await asyncio.to_thread(self.actions.plan, self.pid)
            self.plan = plan
        except Exception as e:  # a bad protect.conf, an unknown pid: say so, signal nothing
            self.state = "error"
            self._show(Text(_("cannot check pid {pid}: {error}").format(pid=self.pid, error=e), style="bold red"),
                       _("Esc closes"))
            return
        t = next((x for x in plan.targets if x.pid == self.pid), None)
        if t is None:
            self.state = "error"
            self._show(Text(_("nothing selected"), style="bold red"), _("Esc closes"))
        elif t.refusal is not None:
            self.state = "refused"
            refused = _("refused ({rule}): {reason}").format(rule=t.refusal.rule, reason=t.refusal.text)
            self._show(Text.assemble(target_text(t), ("\n" + self._fold(refused) + "\n", "bold red")),
                       _("nothing was signalled  ·  Esc closes"))
        else:
            self.state = "confirm"
            question = _("Send SIGTERM and wait up to {seconds}s for it to exit?").format(
                seconds=f"{self.actions.timeout:g}")
            self._show(Text.assemble(target_text(t), ("\n" + self._fold(question) + "\n", "bold")),
                       _("y: yes   f: yes, and SIGKILL if it is still running   i: SIGINT instead (Ctrl-C: a "
                         "Python job can save and exit)   n/Esc: no"))

    def action_confirm(self, force: bool, name: str = "SIGTERM") -> None:
        if self.state != "confirm":
            return
        self.state = "running"
        self._show(Text(_("{signal} sent to pid {pid}; waiting for it to exit…").format(signal=name, pid=self.pid)),
                   "")
        self.run_worker(self._execute(force, signal.Signals[name]), exclusive=True)

    async def _execute(self, force: bool, sig: signal.Signals = signal.SIGTERM) -> None:
        assert self.plan is not None  # "confirm" is only reached with a plan
        try:
            async with self.machine_lock:
                report = await asyncio.to_thread(self.actions.execute, self.plan, force, sig)
            self.report = report
        except Exception as e:  # AuditError: the log cannot be written, so nothing was signalled
            self.state = "error"
            self._show(Text(str(e), style="bold red"), _("Esc closes"))
            return
        self.state = "done"
        self._show(outcome_text(report), _("Esc closes"))
        first = report.targets[0] if report.targets else None
        if first is not None:
            summary = (_("pid {pid}: {status} ({reason})").format(
                pid=first.pid, status=status_words(first.status), reason=first.refusal.text) if first.refusal
                else _("pid {pid}: {status}").format(pid=first.pid, status=status_words(first.status)))
            self.app.notify(summary, markup=False, severity="information" if report.ok else "warning")

    def action_close(self) -> None:
        if self.state in ("checking", "running"):
            return  # the outcome must be seen; a kill in flight is not cancelled by a key
        self.dismiss(self.state)
